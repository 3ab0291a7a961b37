// Private memory pools (CUDA graphs, torch.compile's CUDA graph trees, torch.cuda.MemPool):
// each pool is a cachalot allocator of its own on the pool's device, so a pool's blocks are
// reused only within it and its memory goes back to the device when the pool is released.
//
// While a pool is being allocated to (beginAllocateToPool .. endAllocateToPool), an allocation
// on a stream its filter accepts (the capturing stream) is served by the pool; a free goes to
// the pool that served the pointer. A pool lives while its use count (createOrIncrefPool,
// beginAllocateToPool; each ended by releasePool) is above zero or it still holds a live allocation, and is never given
// back before releasePool: a CUDA graph replays into its pool's memory after the capture freed
// every block in it.
//
// Pools decide by PyTorch's rules (policy:pytorch, classic segments): what PyTorch's own
// allocator does inside a capture.
//
// A checkpoint (getCheckpointState) is the pool's live blocks; setting the pool back to it frees
// what is live now and allocates each checkpointed block again at its own address
// (cachalot_allocate_at), as PyTorch's CUDA graph trees need.
//
// Invariants: `owner_` maps exactly the live pointers of every pool; `routing_` counts the
// pools being allocated to, so the common case (no capture) costs one atomic load.
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
#include <unordered_map>
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
  // The pool that serves an allocation of `device` on `stream` now, or null (and `key` left).
  cachalot_allocator* route(int device, cudaStream_t stream, PoolKey* key) {
    if (routing_.load(std::memory_order_acquire) == 0) {
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [k, pool] : pools_) {
      if (std::get<0>(k) == device && pool.routing && pool.filter && pool.filter(stream)) {
        *key = k;
        return pool.alloc;
      }
    }
    return nullptr;
  }

  // `ptr` was allocated from pool `key`.
  void allocated(const PoolKey& key, void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    owner_[ptr] = key;
    pools_[key].live.insert(ptr);
  }

  // Frees `ptr` if a pool served it; false when none did (the caller frees it elsewhere).
  bool free(void* ptr) {
    if (any_pool_.load(std::memory_order_acquire) == 0) {
      return false;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = owner_.find(ptr);
    if (it == owner_.end()) {
      return false;
    }
    PoolKey key = it->second;
    owner_.erase(it);
    Pool& pool = pools_[key];
    pool.live.erase(ptr);
    cachalot_free(pool.alloc, ptr);
    drop_if_done(key);  // a released pool goes once its last block does
    return true;
  }

  void create_or_incref(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& p = pool(device, id);
    p.use_count += 1;
    p.released = false;
  }

  void begin(int device, c10::cuda::MempoolId_t id, std::function<bool(cudaStream_t)> filter) {
    std::lock_guard<std::mutex> lock(mutex_);
    Pool& p = pool(device, id);
    // As in PyTorch, allocating to a pool is a use of it, which releasePool ends: a CUDA graph's
    // capture (its graph releases the pool when destroyed), a MemPool's use_mem_pool block, a
    // CUDA graph tree's warm-up.
    p.use_count += 1;
    p.released = false;
    if (!p.routing) {
      routing_.fetch_add(1, std::memory_order_acq_rel);
    }
    p.routing = true;
    p.filter = std::move(filter);
  }

  void end(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    if (it != pools_.end() && it->second.routing) {
      it->second.routing = false;
      it->second.filter = nullptr;
      routing_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void release(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolKey key = pool_key(device, id);
    auto it = pools_.find(key);
    if (it == pools_.end()) {
      return;
    }
    if (it->second.use_count > 0) {
      it->second.use_count -= 1;
    }
    if (it->second.use_count == 0) {
      it->second.released = true;
    }
    drop_if_done(key);
  }

  int use_count(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    return it == pools_.end() ? 0 : it->second.use_count;
  }

  bool live_allocations_are(int device, c10::cuda::MempoolId_t id, const std::unordered_set<void*>& expected) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    if (it == pools_.end()) {
      return expected.empty();
    }
    return it->second.live == expected;
  }

  // The allocated blocks of pool `id` on `device`: its checkpoint (CUDA graph trees).
  std::vector<cachalot_block_info> live_blocks(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<cachalot_block_info> live;
    auto it = pools_.find(pool_key(device, id));
    if (it != pools_.end()) {
      for (const auto& b : blocks_of(it->second.alloc)) {
        if (b.state == CACHALOT_BLOCK_ALLOCATED) {
          live.push_back(b);
        }
      }
    }
    return live;
  }

  // Sets pool `id` of `device` back to the checkpoint `live`: frees every allocation live in it
  // now (their pointers go into `freed`) and allocates each checkpointed block again at its own
  // address (into `placed`). A block that cannot be placed again throws, naming it.
  void restore(int device, c10::cuda::MempoolId_t id, const std::vector<cachalot_block_info>& live,
               std::vector<void*>* freed, std::vector<cachalot_block_info>* placed) {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolKey key = pool_key(device, id);
    Pool& p = pool(device, id);
    for (void* ptr : p.live) {
      owner_.erase(ptr);
      cachalot_free(p.alloc, ptr);
      freed->push_back(ptr);
    }
    p.live.clear();
    for (const auto& b : live) {
      void* ptr = reinterpret_cast<void*>(b.address);
      cachalot_status s = cachalot_allocate_at(p.alloc, ptr, b.size, b.requested_size);
      TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: cannot set private pool (" + std::to_string(id.first) + ", " +
                                               std::to_string(id.second) + ") back to its checkpoint: the block of " +
                                               std::to_string(b.size) + " bytes at " + hex(b.address) + ": " +
                                               error_message());
      owner_[ptr] = key;
      p.live.insert(ptr);
      placed->push_back(b);
    }
  }

  // Calls `f` with each pool of `device` and its allocator.
  void each_pool(int device, const std::function<void(c10::cuda::MempoolId_t, cachalot_allocator*)>& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [k, pool] : pools_) {
      if (std::get<0>(k) == device) {
        f(c10::cuda::MempoolId_t(std::get<1>(k), std::get<2>(k)), pool.alloc);
      }
    }
  }

  // Returns the cached memory of pool `id` on `device` to the device.
  void empty_cache(int device, c10::cuda::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool_key(device, id));
    if (it != pools_.end()) {
      cachalot_empty_cache(it->second.alloc);
    }
  }

  // Calls `f` with each pool allocator of `device`.
  void each(int device, const std::function<void(cachalot_allocator*)>& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [k, pool] : pools_) {
      if (std::get<0>(k) == device) {
        f(pool.alloc);
      }
    }
  }

 private:
  struct Pool {
    cachalot_allocator* alloc = nullptr;
    int use_count = 0;
    bool routing = false;
    std::function<bool(cudaStream_t)> filter;
    std::unordered_set<void*> live;
    // releasePool brought the use count to zero: the pool goes once it is empty.
    bool released = false;
  };

  // The pool `id` of `device`, made with its allocator if new. Called with the lock held.
  Pool& pool(int device, c10::cuda::MempoolId_t id) {
    Pool& p = pools_[pool_key(device, id)];
    if (p.alloc == nullptr) {
      cachalot_status s = cachalot_allocator_new_cuda(device, "policy:pytorch", &p.alloc);
      if (s != CACHALOT_STATUS_OK) {
        pools_.erase(pool_key(device, id));
        TORCH_CHECK(false, "cachalot: cannot make a private pool on CUDA device " + std::to_string(device) + ": " +
                               error_message());
      }
    }
    any_pool_.store(1, std::memory_order_release);
    return p;
  }

  // Destroys pool `key` once it was released, is not being allocated to and holds no live
  // allocation: its cached segments go back to the device. Called with the lock held.
  void drop_if_done(const PoolKey& key) {
    auto it = pools_.find(key);
    if (it == pools_.end() || !it->second.released || it->second.use_count > 0 || it->second.routing ||
        !it->second.live.empty()) {
      return;
    }
    cachalot_empty_cache(it->second.alloc);
    cachalot_allocator_free(it->second.alloc);
    pools_.erase(it);
  }

  std::mutex mutex_;
  std::map<PoolKey, Pool> pools_;
  std::unordered_map<void*, PoolKey> owner_;
  std::atomic<int> routing_{0};
  // 1 once any pool was made: until then, frees skip the lock.
  std::atomic<int> any_pool_{0};
};

}  // namespace cachalot_torch
