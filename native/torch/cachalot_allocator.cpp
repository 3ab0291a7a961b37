// cachalot as PyTorch's CUDA allocator, through PyTorch's own allocator interface
// (c10::cuda::CUDACachingAllocator::CUDAAllocator), over cachalot's C ABI.
//
// It extends PyTorch's CUDAPluggableAllocator, which keeps the bookkeeping PyTorch needs
// (each pointer's size, device and stream; the DataPtr deleter), and gives it what the
// pluggable path lacks:
//   - out of memory throws c10::OutOfMemoryError with cachalot's explanation, after calling
//     the attached out-of-memory observers, so Python sees torch.OutOfMemoryError and can free
//     and retry (the pluggable path hands back a null pointer instead);
//   - getDeviceStats, resetPeakStats and resetAccumulatedStats read and reset cachalot's own
//     statistics, so torch.cuda.memory_stats(), memory_summary(), max_memory_reserved() and
//     reset_peak_memory_stats() work unchanged;
//   - cacheInfo gives the largest cached block (cuDNN's benchmark mode asks for it);
//   - emptyCache, the memory fraction and recordStream go to cachalot.
//   - private pools (CUDA graphs, torch.compile's CUDA graph trees, MemPool), held by cachalot's
//     core and counted in its statistics; PyTorch's routing filters stay here (private_pools.h);
//   - CUDA graph trees' checkpoint states: getCheckpointState and setCheckpointPoolState set a
//     private pool back to its live blocks at their own addresses;
//   - snapshot, recordHistory and trace trackers: torch.cuda.memory._snapshot(),
//     _record_memory_history() and _dump_snapshot() give PyTorch's schema with the recorded
//     stacks (memory_history.h), so pytorch.org/memory_viz opens them.
// IPC handles are PyTorch's pluggable defaults (unsupported, with PyTorch's message).
//
// Invariant: no C++ exception other than c10::Error crosses into PyTorch, and none reaches
// cachalot's C ABI (its functions return statuses and never unwind). Messages are built as
// one std::string before TORCH_CHECK: on the H200's PyTorch 2.11, a TORCH_CHECK given a number
// among its message arguments crashed the process when thrown from the allocation path.

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/headeronly/version.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "cachalot.h"
}

#include "memory_history.h"
#include "private_pools.h"

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
namespace Pluggable = torch::cuda::CUDAPluggableAllocator;

using cachalot_torch::error_message;

// The process-wide allocator cachalot keeps for `device`, or NULL before the device's first
// allocation created it (readers then report an allocator that has served nothing).
cachalot_allocator* device_allocator(int device) {
  cachalot_allocator* a = nullptr;
  cachalot_status s = cachalot_torch_allocator(device, &a);
  TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: no allocator for CUDA device " + std::to_string(device) + ": " +
                                           error_message());
  return a;
}

class CachalotAllocator : public Pluggable::CUDAPluggableAllocator {
 public:
  CachalotAllocator()
      : Pluggable::CUDAPluggableAllocator(
            [this](size_t size, int device, cudaStream_t stream) { return allocate_or_throw(size, device, stream); },
            [this](void* ptr, size_t size, int device, cudaStream_t stream) {
              if (history_.on()) {
                history_.freed(device, ptr, size, stream, {0, 0});
              }
              cachalot_torch_free(ptr, static_cast<ptrdiff_t>(size), device, stream);
            }) {
    set_memory_fraction_fn([](double fraction, int device) { cachalot_torch_set_memory_fraction(fraction, device); });
    set_record_stream_fn([](void* ptr, cudaStream_t stream) { cachalot_torch_record_stream(ptr, stream); });
  }

  std::string name() override {
    return "cachalot";
  }

  void emptyCache(c10::cuda::MempoolId_t mempool_id) override {
    if (mempool_id.first == 0 && mempool_id.second == 0) {
      cachalot_torch_empty_cache();
    } else {
      pools_.empty_cache(mempool_id);
    }
  }

  void beginAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    pools_.begin(device, id, std::move(filter));
#if TORCH_VERSION_MINOR < 13
    // PyTorch 2.11 and 2.12 count a capture underway from here to endAllocateToPool.
    capture_began(device);
#endif
  }

  void endAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    pools_.end(device, id);
#if TORCH_VERSION_MINOR < 13
    capture_ended(device);
#endif
  }

#if TORCH_VERSION_MINOR >= 13
  // PyTorch 2.13 on tells the allocator when a stream capture really begins and ends.
  void markCaptureBegin(c10::DeviceIndex device) override {
    capture_began(device);
  }

  void markCaptureEnd(c10::DeviceIndex device) override {
    capture_ended(device);
  }
#endif

  void releasePool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    pools_.release(device, id);
  }

  int getPoolUseCount(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    return pools_.use_count(device, id);
  }

  void createOrIncrefPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                          std::shared_ptr<CCA::CUDAAllocator> allocator) override {
    TORCH_CHECK(allocator == nullptr || allocator.get() == this,
                "cachalot: a memory pool served by another allocator is not supported");
    pools_.create_or_incref(device, id);
  }

  // A pool PyTorch may fall back on when the default pool runs out (MemPool's use_on_oom):
  // cachalot's default memory never borrows a pool's, so this changes nothing; accepted rather
  // than refused, because MemPool's destructor calls it, and a refusal there ends the process.
  void setUseOnOOM(c10::DeviceIndex, c10::cuda::MempoolId_t, bool) override {}

  // MemPool's no_split: cachalot's pools split blocks by PyTorch's rule; accepted, changing nothing.
  void setNoSplit(c10::DeviceIndex, c10::cuda::MempoolId_t) override {}

  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    return pools_.live_allocations_are(device, id, expected);
  }

  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      *largest = 0;
      return;
    }
    cachalot_status s = cachalot_largest_cached_block(a, largest);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: cacheInfo: ", error_message());
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats d;
    cachalot_allocator* a = device_allocator(device);
    if (a != nullptr) {
      cachalot_stats s{};
      s.struct_size = sizeof(s);
      cachalot_status status = cachalot_get_stats(a, &s);
      TORCH_CHECK(status == CACHALOT_STATUS_OK, "cachalot: statistics: ", error_message());
      add(d, s);
      d.max_split_size = s.max_split_size;
    }
    return d;  // private pools' memory included, as in PyTorch: the core counts it
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      return;
    }
    cachalot_status s = cachalot_reset_peak_stats(a);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: reset_peak_memory_stats: ", error_message());
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      return;
    }
    cachalot_status s = cachalot_reset_accumulated_stats(a);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: reset_accumulated_memory_stats: ", error_message());
  }

  // The blocks a checkpoint set back (setCheckpointPoolState) are not in the pluggable
  // allocator's bookkeeping, and CUDA graph trees free them through raw_delete: those are
  // freed here. Every other pointer takes the pluggable path, which checks `placed_count_`
  // only: no lock while nothing placed is live.
  void raw_delete(void* ptr) override {
    if (placed_count_.load(std::memory_order_acquire) > 0) {
      Placed placed;
      bool found = false;
      {
        std::lock_guard<std::mutex> lock(placed_mutex_);
        auto it = placed_.find(ptr);
        if (it != placed_.end()) {
          placed = it->second;
          found = true;
          placed_.erase(it);
          placed_count_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
      if (found) {
        if (history_.on()) {
          history_.freed(placed.device, ptr, placed.size, placed.stream, {0, 0});  // as the free hook logs the others
        }
        cachalot_torch_free(ptr, static_cast<ptrdiff_t>(placed.size), placed.device, placed.stream);
        return;
      }
    }
    Pluggable::CUDAPluggableAllocator::raw_delete(ptr);
  }

  std::shared_ptr<CCA::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::cuda::MempoolId_t id) override {
    auto state = std::make_shared<PoolCheckpoint>();
    state->device = device;
    state->id = id;
    state->live = pools_.live_blocks(device, id);
    return state;
  }

  // Frees what the pool holds now and allocates each checkpointed block again at its address;
  // the DataPtrs of the blocks placed again free through this allocator.
  CCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<CCA::AllocatorState> pps) override {
    auto state = std::dynamic_pointer_cast<PoolCheckpoint>(pps);
    TORCH_CHECK(state != nullptr, "cachalot: a checkpoint state taken by another allocator cannot be set");
    TORCH_CHECK(state->device == device, "cachalot: a checkpoint of CUDA device " + std::to_string(state->device) +
                                             " cannot be set on device " + std::to_string(device));
    CCA::CheckpointDelta delta;
    std::vector<cachalot_block_info> placed;
    // A freed pointer leaves the bookkeeping at once, so a throw half-way leaves none behind.
    auto forget = [&](void* ptr) {
      delta.ptrs_freed.push_back(ptr);
      {
        std::lock_guard<std::mutex> lock(allocator_mutex_);
        allocation_metadata_.erase(ptr);
      }
      std::lock_guard<std::mutex> lock(placed_mutex_);
      if (placed_.erase(ptr) > 0) {
        placed_count_.fetch_sub(1, std::memory_order_acq_rel);
      }
    };
    pools_.restore(device, state->id, state->live, forget, &placed);
    {
      std::lock_guard<std::mutex> lock(placed_mutex_);
      for (const auto& b : placed) {
        void* ptr = reinterpret_cast<void*>(b.address);
        Placed p{b.size, static_cast<int>(device), reinterpret_cast<cudaStream_t>(b.stream)};
        if (placed_.insert_or_assign(ptr, p).second) {
          placed_count_.fetch_add(1, std::memory_order_acq_rel);
        }
      }
    }
    for (const auto& b : placed) {
      void* ptr = reinterpret_cast<void*>(b.address);
      delta.dataptrs_allocd.emplace_back(ptr, ptr, raw_deleter(), c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }

  // PyTorch's snapshot (torch.cuda.memory._snapshot(), _dump_snapshot(), memory_viz): every
  // segment with its blocks, from cachalot's own state (the private pools' segments carry their
  // pool's PyTorch id; a pool's id asks for that pool's segments only), the stacks of live
  // allocations and the trace when history is on.
  CCA::SnapshotInfo snapshot(c10::cuda::MempoolId_t mempool, bool include_traces) override {
    CCA::SnapshotInfo info;
    bool any_pool = mempool.first == 0 && mempool.second == 0;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) {
      cudaGetLastError();
      devices = 0;
    }
    for (int d = 0; d < devices; d++) {
      cachalot_allocator* a = nullptr;
      if (cachalot_torch_allocator(d, &a) == CACHALOT_STATUS_OK && a != nullptr) {
        add_segments(info, d, a, any_pool, mempool);
      }
    }
    if (include_traces) {
      info.device_traces = history_.traces(static_cast<size_t>(devices));
    } else {
      info.device_traces.resize(devices);
    }
    info.config_metadata.garbage_collection_threshold = 0.0;
    info.config_metadata.max_split_size = std::numeric_limits<size_t>::max();
    info.config_metadata.pinned_num_register_threads = 1;
    info.config_metadata.expandable_segments = false;
    info.config_metadata.release_lock_on_malloc = false;
    info.config_metadata.pinned_use_host_register = false;
    info.config_metadata.graph_capture_record_stream_reuse = false;
    const char* conf = std::getenv("CACHALOT_ALLOC_CONF");
    info.config_metadata.last_allocator_settings = std::string("cachalot ") + (conf != nullptr ? conf : "");
    return info;
  }

  void recordHistory(bool enabled, CCA::CreateContextFn context_recorder, size_t alloc_trace_max_entries,
                     CCA::RecordContext when, bool clear_history, const std::vector<std::string>& skip_actions) override {
    TORCH_CHECK(when == CCA::RecordContext::NEVER || context_recorder != nullptr,
                "cachalot: recording stacks needs a context recorder");
    history_.configure(enabled, context_recorder, alloc_trace_max_entries, when, clear_history, skip_actions);
  }

  bool isHistoryEnabled() override {
    return history_.enabled();
  }

  void attachAllocatorTraceTracker(CCA::AllocatorTraceTracker tracker) override {
    history_.attach(std::move(tracker));
  }

  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    observers_.push_back(std::move(observer));
  }

  // What the calling thread's trace entries carry from now on, on every device, as PyTorch's
  // own allocator records it (torch.cuda.memory._set_memory_metadata).
  void setUserMetadata(const std::string& metadata) override {
    cachalot_torch::MemoryHistory::set_user_metadata(metadata);
  }

  std::string getUserMetadata() override {
    return cachalot_torch::MemoryHistory::user_metadata();
  }

#if TORCH_VERSION_MINOR >= 12
  // The stack recorded when the live allocation at `ptr` was made (history on), else null.
  std::shared_ptr<c10::GatheredContext> getContextForPointer(const void* ptr) override {
    return history_.context_of(const_cast<void*>(ptr));
  }

  // Observers of allocations rejected before the device is asked (throw_on_cudamalloc_oom
  // with a memory fraction, which cachalot simulates), called instead of the out-of-memory
  // observers for such a request; PyTorch's pluggable allocator refuses to attach them.
  void attachOomRejectionObserver(CCA::OomRejectionObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    rejection_observers_.push_back(std::move(observer));
  }
#endif

#if TORCH_VERSION_MINOR >= 14
  bool supportsUserMetadata() override {
    return true;
  }

  // An "annotate" entry for the live allocation at `ptr`, as PyTorch's allocator records it.
  void annotateMemory(const void* ptr, const std::string& metadata) override {
    size_t size = 0;
    int device = current_device();
    cudaStream_t stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(allocator_mutex_);
      auto it = allocation_metadata_.find(const_cast<void*>(ptr));
      if (it != allocation_metadata_.end()) {
        size = it->second.size;
        device = it->second.device_idx;
        stream = it->second.stream;
      }
    }
    history_.annotated(device, const_cast<void*>(ptr), size, stream, metadata);
  }
#endif

 private:
  void* allocate_or_throw(size_t size, int device, cudaStream_t stream) {
    if (size == 0) {
      return nullptr;  // PyTorch asks for no memory; cachalot refuses 0 bytes
    }
    void* ptr = nullptr;
    uint32_t pool = pools_.route(device, stream);
    cachalot_status s;
    {
      // Device memory may be obtained while a stream is being captured into a CUDA graph, as
      // PyTorch's own allocator does: relaxed capture mode allows it.
      c10::cuda::CUDAStreamCaptureModeGuard relaxed{cudaStreamCaptureModeRelaxed};
      s = pool != 0 ? cachalot_pool_malloc(cachalot_torch::allocator_of(device), pool, size, stream, &ptr)
                    : cachalot_torch_malloc_status(size, device, stream, &ptr);
    }
    if (s == CACHALOT_STATUS_OK) {
      if (history_.on()) {
        history_.allocated(device, ptr, size, stream, pools_.name_of(device, pool));
      }
      return ptr;
    }
    std::string why = error_message();
    if (s == CACHALOT_STATUS_OUT_OF_MEMORY) {
      if (history_.on()) {
        size_t device_free = 0, device_total = 0;
        cudaMemGetInfo(&device_free, &device_total);
        history_.out_of_memory(device, size, device_free, stream);
      }
#if TORCH_VERSION_MINOR >= 12
      if (!notify_rejection(device, size))
#endif
        notify_out_of_memory(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA ", why);  // "CUDA out of memory. Tried to allocate ..."
    }
    TORCH_CHECK(false, "cachalot: allocating " + std::to_string(size) + " bytes on CUDA device " +
                           std::to_string(device) + " failed: " + why);
    return nullptr;  // not reached: TORCH_CHECK(false, ...) throws
  }

  // While a capture is underway no event is processed, and a freed block used on other
  // streams records its events once no capture is (cachalot's capture.rs), as in PyTorch.
  static void capture_began(int device) {
    cachalot_status s = cachalot_capture_begin(cachalot_torch::allocator_of(device));
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: beginning a CUDA graph capture on device " + std::to_string(device) +
                                             ": " + error_message());
  }

  // An end with no capture underway (an endAllocateToPool PyTorch pairs with nothing) changes
  // nothing, as in PyTorch; an event that cannot be recorded is reported.
  static void capture_ended(int device) {
    cachalot_status s = cachalot_capture_end(cachalot_torch::allocator_of(device));
    TORCH_CHECK(s == CACHALOT_STATUS_OK || s == CACHALOT_STATUS_INVALID_ARGUMENT,
                "cachalot: ending a CUDA graph capture on device " + std::to_string(device) + ": " + error_message());
  }

  static int current_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      cudaGetLastError();
      device = 0;
    }
    return device;
  }

#if TORCH_VERSION_MINOR >= 12
  // After an out of memory: when cachalot refused the request before asking the device
  // (throw_on_cudamalloc_oom, its num_oom_rejections grew since the last look), the rejection
  // observers are told instead of the out-of-memory ones; true then.
  bool notify_rejection(int device, size_t size) {
    cachalot_stats s{};
    s.struct_size = sizeof(s);
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr || cachalot_get_stats(a, &s) != CACHALOT_STATUS_OK || s.num_oom_rejections <= 0) {
      return false;
    }
    std::vector<CCA::OomRejectionObserver> observers;
    {
      std::lock_guard<std::mutex> lock(observers_mutex_);
      int64_t& seen = rejections_seen_[device];
      if (s.num_oom_rejections <= seen) {
        return false;
      }
      seen = s.num_oom_rejections;
      observers = rejection_observers_;
    }
    size_t device_free = 0, device_total = 0;
    cudaMemGetInfo(&device_free, &device_total);
    for (auto& observer : observers) {
      observer(device, size, static_cast<size_t>(s.allocated_bytes.all.current), device_total);
    }
    return true;
  }
#endif

  void notify_out_of_memory(int device) {
    std::vector<CCA::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(observers_mutex_);
      observers = observers_;
    }
    if (observers.empty()) {
      return;
    }
    size_t device_free = 0, device_total = 0;
    cudaMemGetInfo(&device_free, &device_total);
    int64_t allocated = getDeviceStats(static_cast<c10::DeviceIndex>(device)).allocated_bytes[0].current;
    for (auto& observer : observers) {
      observer(device, static_cast<size_t>(allocated), device_total, device_free);
    }
  }

  // The segments of `alloc` (device `device`) in PyTorch's schema, every pool's (`any_pool`) or
  // those of PyTorch's pool `only`: blocks tile each segment in address order, as PyTorch's
  // snapshot reader assumes.
  void add_segments(CCA::SnapshotInfo& info, int device, const cachalot_allocator* alloc, bool any_pool,
                    c10::cuda::MempoolId_t only) {
    for (const auto& b : cachalot_torch::blocks_of(alloc)) {
      c10::cuda::MempoolId_t pool = pools_.name_of(device, b.pool);
      if (!any_pool && pool != only) {
        continue;
      }
      if (info.segments.empty() || info.segments.back().address != b.segment_address ||
          info.segments.back().device != device) {
        c10::CachingDeviceAllocator::SegmentInfo seg;
        seg.device = static_cast<c10::DeviceIndex>(device);
        seg.address = b.segment_address;
        seg.total_size = b.segment_size;
        seg.stream = reinterpret_cast<void*>(b.stream);
        seg.is_large = b.is_large != 0;
        seg.is_expandable = b.is_expandable != 0;
        seg.owner_private_pool_id = pool;
        info.segments.push_back(std::move(seg));
      }
      auto& seg = info.segments.back();
      c10::CachingDeviceAllocator::BlockInfo block;
      block.size = b.size;
      block.allocated = b.state == CACHALOT_BLOCK_ALLOCATED;
      block.active = b.state != CACHALOT_BLOCK_CACHED;
      block.requested_size = block.active ? b.requested_size : 0;
      if (block.allocated) {
        seg.allocated_size += b.size;
        block.context_when_allocated = history_.context_of(reinterpret_cast<void*>(b.address));
      }
      if (block.active) {
        seg.active_size += b.size;
        seg.requested_size += b.requested_size;
      }
      seg.blocks.push_back(std::move(block));
    }
  }

  static void add_stat(c10::CachingAllocator::Stat& to, const cachalot_stat& from) {
    to.current += from.current;
    to.peak += from.peak;
    to.allocated += from.allocated;
    to.freed += from.freed;
  }

  static void add_array(c10::CachingAllocator::StatArray& to, const cachalot_stat_array& from) {
    add_stat(to[0], from.all);
    add_stat(to[1], from.small_pool);
    add_stat(to[2], from.large_pool);
  }

  static void add(c10::CachingDeviceAllocator::DeviceStats& d, const cachalot_stats& s) {
    add_array(d.allocation, s.allocation);
    add_array(d.segment, s.segment);
    add_array(d.active, s.active);
    add_array(d.inactive_split, s.inactive_split);
    add_array(d.allocated_bytes, s.allocated_bytes);
    add_array(d.reserved_bytes, s.reserved_bytes);
    add_array(d.active_bytes, s.active_bytes);
    add_array(d.inactive_split_bytes, s.inactive_split_bytes);
    add_array(d.requested_bytes, s.requested_bytes);
    d.num_alloc_retries += static_cast<int64_t>(s.num_alloc_retries);
    d.num_ooms += static_cast<int64_t>(s.num_ooms);
    add_stat(d.oversize_allocations, s.oversize_allocations);
    add_stat(d.oversize_segments, s.oversize_segments);
    d.num_sync_all_streams += static_cast<int64_t>(s.num_sync_all_streams);
    d.num_device_alloc += static_cast<int64_t>(s.num_device_alloc);
    d.num_device_free += static_cast<int64_t>(s.num_device_free);
#if TORCH_VERSION_MINOR >= 12
    d.num_oom_rejections += s.num_oom_rejections > 0 ? s.num_oom_rejections : 0;  // -1: not counted
#endif
  }

  // A private pool's checkpoint: its live blocks (getCheckpointState).
  struct PoolCheckpoint : CCA::AllocatorState {
    c10::DeviceIndex device = 0;
    c10::cuda::MempoolId_t id{0, 0};
    std::vector<cachalot_block_info> live;
  };

  // A block a checkpoint set back, until freed: what the pluggable bookkeeping would hold.
  struct Placed {
    size_t size = 0;
    int device = 0;
    cudaStream_t stream = nullptr;
  };

  cachalot_torch::PrivatePools pools_;
  cachalot_torch::MemoryHistory history_;
  std::mutex placed_mutex_;
  std::unordered_map<void*, Placed> placed_;
  std::atomic<int> placed_count_{0};
  std::mutex observers_mutex_;
  std::vector<CCA::OutOfMemoryObserver> observers_;
#if TORCH_VERSION_MINOR >= 12
  std::vector<CCA::OomRejectionObserver> rejection_observers_;
  std::unordered_map<int, int64_t> rejections_seen_;  // per device, under observers_mutex_
#endif
};

// Writes `text` into the caller's buffer of `capacity` bytes, cut to fit, always terminated.
void copy_message(const std::string& text, char* out, size_t capacity) {
  if (out == nullptr || capacity == 0) {
    return;
  }
  size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

// The extension's C entry points, loaded by cachalot_torch with ctypes: no Python module, so
// one build serves every Python version of its PyTorch minor. No exception leaves them.
extern "C" {

// The PyTorch version this build compiled against, as MAJOR * 100 + MINOR (211 for 2.11):
// cachalot_torch checks it against the running PyTorch before installing.
__attribute__((visibility("default"))) int cachalot_torch_extension_torch_version() {
  return TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;
}

// Makes cachalot the current CUDA allocator; only before PyTorch's allocator has served
// anything (PyTorch refuses otherwise, with its own message). 0 on success; else 1, with
// PyTorch's or cachalot's message in `message` (`capacity` bytes, terminated).
__attribute__((visibility("default"))) int cachalot_torch_extension_install(char* message, size_t capacity) {
  try {
    Pluggable::changeCurrentAllocator(std::make_shared<CachalotAllocator>());
    return 0;
  } catch (const c10::Error& e) {
    copy_message(e.what_without_backtrace(), message, capacity);
  } catch (const std::exception& e) {
    copy_message(e.what(), message, capacity);
  } catch (...) {
    copy_message("an unknown C++ exception", message, capacity);
  }
  return 1;
}

// 1 when PyTorch's current CUDA allocator is cachalot's, else 0.
__attribute__((visibility("default"))) int cachalot_torch_extension_is_current() {
  try {
    auto* current = CCA::allocator.load();
    return current != nullptr && current->name() == "cachalot" ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
