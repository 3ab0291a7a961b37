// Private memory pools (CUDA graphs, torch.compile's CUDA graph trees, torch.cuda.MemPool),
// held by cachalot's core: each PyTorch pool id in use on a device names one cachalot pool of
// that device's allocator (cachalot_pool_create). The core keeps a pool's blocks apart, reuses
// them only for allocations made into it, counts them in the device's statistics, and gives its
// cached memory back once its last use has ended, at the next empty_cache or request that needs
// the memory, as PyTorch does.
//
// What stays here is what only PyTorch knows: the filter that says which streams allocate into
// a pool while it is being allocated to (a CUDA graph capture covers every stream it forks
// into), so the routing is decided here and the allocation goes to cachalot_pool_malloc. A free
// needs nothing from here: cachalot_free finds a block's pool from the block.
//
// A checkpoint (getCheckpointState) is the pool's live blocks; setting the pool back to it frees
// what is live in the pool now and allocates each checkpointed block again at its own address
// (cachalot_pool_allocate_at), as PyTorch's CUDA graph trees need.
//
// Invariants: `pools_` maps each PyTorch pool id with a use left to its cachalot pool, and
// `names_` every cachalot pool made to its PyTorch id; `routing_` counts the pools being
// allocated to, so the common case (no capture) costs one atomic load.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

extern "C" {
#include "cachalot.h"
}

namespace cachalot_torch {

// This thread's message for the last failed cachalot call.
inline std::string error_message() {
  size_t len = cachalot_last_error_message(nullptr, 0);
  std::string msg(len + 1, '\0');
  cachalot_last_error_message(msg.data(), msg.size());
  msg.resize(len);
  return msg;
}

inline std::string hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The process-wide allocator of CUDA device `device`, created on first use.
inline cachalot_allocator* allocator_of(int device) {
  cachalot_allocator* a = nullptr;
  cachalot_status s = cachalot_torch_device_allocator(device, &a);
  TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: no allocator for CUDA device " + std::to_string(device) + ": " +
                                           error_message());
  return a;
}

// Every block of `alloc` (cachalot_blocks), by address; empty if it cannot be read.
inline std::vector<cachalot_block_info> blocks_of(const cachalot_allocator* alloc) {
  std::vector<cachalot_block_info> rows;
  for (int attempt = 0; attempt < 4; attempt++) {  // another thread may add blocks in between
    size_t n = 0;
    if (cachalot_blocks(alloc, nullptr, 0, &n) != CACHALOT_STATUS_OK) {
      return {};
    }
    rows.resize(n + 16);
    if (cachalot_blocks(alloc, rows.data(), rows.size(), &n) == CACHALOT_STATUS_OK) {
      rows.resize(n);
      return rows;
    }
  }
  return {};
}

using PoolKey = std::tuple<int, unsigned long long, unsigned long long>;

inline PoolKey pool_key(int device, c10::cuda::MempoolId_t id) {
  return PoolKey(device, id.first, id.second);
}

class PrivatePools {
 public:
  // The cachalot pool that serves an allocation of `device` on `stream` now, or 0.
  uint32_t route(int device, cudaStream_t stream) {
    if (routing_.load(std::memory_order_acquire) == 0) {
      return 0;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [k, pool] : pools_) {
      if (std::get<0>(k) == device && pool.filter && pool.filter(stream)) {
        return pool.id;
      }
    }
    return 0;
  }

  // PyTorch's id of cachalot pool `pool` of `device` ({0, 0} for none).
  c10::cuda::MempoolId_t name_of(int device, uint32_t pool) {
    if (pool == 0) {
      return {0, 0};
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = names_.find({device, pool});
    return it == names_.end() ? c10::cuda::MempoolId_t{0, 0} : it->second;
  }

  void create_or_incref(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    use(device, id);
  }

  void begin(int device, c10::cuda::MempoolId_t id, std::function<bool(cudaStream_t)> filter) {
    std::lock_guard<std::mutex> lock(mutex_);
    // As in PyTorch, allocating to a pool is a use of it, which releasePool ends: a CUDA graph's
    // capture (its graph releases the pool when destroyed), a MemPool's use_mem_pool block, a
    // CUDA graph tree's warm-up.
    Pool& p = use(device, id);
    if (!p.filter) {
      routing_.fetch_add(1, std::memory_order_acq_rel);
    }
    p.filter = std::move(filter);
  }

  void end(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    if (it != pools_.end()) {
      stop_routing(it->second);
    }
  }

  // Ends a use; at the last, PyTorch's id takes no more allocations, and the core gives the
  // pool's memory back once its allocations are freed and the cache is next released (or at
  // emptyCache of the pool). Never throws: CUDA graphs and MemPool call it from destructors.
  void release(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    cachalot_allocator* a = nullptr;
    if (it == pools_.end() || cachalot_torch_device_allocator(device, &a) != CACHALOT_STATUS_OK) {
      return;
    }
    uint32_t uses = 0;
    if (cachalot_pool_release(a, it->second.id) != CACHALOT_STATUS_OK ||
        cachalot_pool_use_count(a, it->second.id, &uses) != CACHALOT_STATUS_OK || uses == 0) {
      stop_routing(it->second);
      pools_.erase(it);
    }
  }

  int use_count(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    uint32_t uses = 0;
    if (it == pools_.end() || cachalot_pool_use_count(allocator_of(device), it->second.id, &uses) != CACHALOT_STATUS_OK) {
      return 0;
    }
    return static_cast<int>(uses);
  }

  // The cachalot pool of PyTorch's `id` on `device`, or 0 when it has none.
  uint32_t id_of(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    return it == pools_.end() ? 0 : it->second.id;
  }

  bool live_allocations_are(int device, c10::cuda::MempoolId_t id, const std::unordered_set<void*>& expected) {
    std::unordered_set<void*> live;
    for (const auto& b : live_blocks(device, id)) {
      live.insert(reinterpret_cast<void*>(b.address));
    }
    return live == expected;
  }

  // The allocated blocks of pool `id` on `device`: its checkpoint (CUDA graph trees).
  std::vector<cachalot_block_info> live_blocks(int device, c10::cuda::MempoolId_t id) {
    uint32_t pool = id_of(device, id);
    std::vector<cachalot_block_info> live;
    if (pool == 0) {
      return live;
    }
    for (const auto& b : blocks_of(allocator_of(device))) {
      if (b.pool == pool && b.state == CACHALOT_BLOCK_ALLOCATED) {
        live.push_back(b);
      }
    }
    return live;
  }

  // Sets pool `id` of `device` back to the checkpoint `live`: frees every allocation live in it
  // now (calling `on_freed` with each pointer as soon as it is freed, so no bookkeeping keeps a
  // freed pointer) and allocates each checkpointed block again at its own address (into
  // `placed`). A block that cannot be placed again throws, naming it, after freeing the blocks
  // placed before it: the pool then holds no allocation its caller does not know of.
  void restore(int device, c10::cuda::MempoolId_t id, const std::vector<cachalot_block_info>& live,
               const std::function<void(void*)>& on_freed, std::vector<cachalot_block_info>* placed) {
    uint32_t pool = id_of(device, id);
    TORCH_CHECK(pool != 0, "cachalot: private pool (" + std::to_string(id.first) + ", " + std::to_string(id.second) +
                               ") has no use left to set back to a checkpoint");
    cachalot_allocator* a = allocator_of(device);
    for (const auto& b : live_blocks(device, id)) {
      void* ptr = reinterpret_cast<void*>(b.address);
      check(cachalot_free(a, ptr), "setCheckpointPoolState");
      on_freed(ptr);
    }
    for (const auto& b : live) {
      void* ptr = reinterpret_cast<void*>(b.address);
      cachalot_status s = cachalot_pool_allocate_at(a, pool, ptr, b.size, b.requested_size);
      if (s != CACHALOT_STATUS_OK) {
        std::string why = error_message();
        for (const auto& p : *placed) {
          cachalot_free(a, reinterpret_cast<void*>(p.address));
        }
        placed->clear();
        TORCH_CHECK(false, "cachalot: cannot set private pool (" + std::to_string(id.first) + ", " +
                               std::to_string(id.second) + ") back to its checkpoint: the block of " +
                               std::to_string(b.size) + " bytes at " + hex(b.address) + ": " + why);
      }
      placed->push_back(b);
    }
  }

  // Returns the cached memory of PyTorch's pool `id` to the device, on every device that has
  // one by that id, once its last use has ended (MemPool's destructor releases the pool, then
  // empties its cache); a pool in use keeps its cache (the core's rule). Never throws: a
  // failure is a warning.
  void empty_cache(c10::cuda::MempoolId_t id) {
    std::vector<std::pair<int, uint32_t>> named;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [k, name] : names_) {  // every cachalot pool PyTorch's id named
        if (name == id) {
          named.push_back(k);
        }
      }
    }
    for (const auto& [device, pool] : named) {
      cachalot_allocator* a = nullptr;
      if (cachalot_torch_device_allocator(device, &a) != CACHALOT_STATUS_OK) {
        continue;
      }
      cachalot_status s = cachalot_pool_empty_cache(a, pool);
      if (s != CACHALOT_STATUS_OK && s != CACHALOT_STATUS_INVALID_ARGUMENT) {  // gone: nothing was left
        TORCH_WARN("cachalot: emptying a private pool's cache: ", error_message());
      }
    }
  }

 private:
  struct Pool {
    uint32_t id = 0;
    // While set, the pool is being allocated to, from the streams it accepts.
    std::function<bool(cudaStream_t)> filter;
  };

  static void check(cachalot_status s, const char* call) {
    TORCH_CHECK(s == CACHALOT_STATUS_OK, std::string("cachalot: ") + call + ": " + error_message());
  }

  // Adds a use to PyTorch's pool `id` of `device`, making its cachalot pool if it has none.
  // Called with the lock held.
  Pool& use(int device, c10::cuda::MempoolId_t id) {
    cachalot_allocator* a = allocator_of(device);
    auto [it, fresh] = pools_.try_emplace(pool_key(device, id));
    if (fresh) {
      cachalot_status s = cachalot_pool_create(a, &it->second.id);
      if (s != CACHALOT_STATUS_OK) {
        pools_.erase(it);
        TORCH_CHECK(false, "cachalot: cannot make a private pool on CUDA device " + std::to_string(device) + ": " +
                               error_message());
      }
      names_[{device, it->second.id}] = id;
    } else {
      check(cachalot_pool_retain(a, it->second.id), "a pool's use");
    }
    return it->second;
  }

  void stop_routing(Pool& p) {
    if (p.filter) {
      p.filter = nullptr;
      routing_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex mutex_;
  std::map<PoolKey, Pool> pools_;
  std::map<std::pair<int, uint32_t>, c10::cuda::MempoolId_t> names_;
  std::atomic<int> routing_{0};
};

}  // namespace cachalot_torch
