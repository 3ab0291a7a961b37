// The memory history of torch.cuda.memory._record_memory_history(): PyTorch's trace entries
// (alloc, free_requested, free_completed, oom) with the call stacks PyTorch's context
// recorder captures, kept by the extension because the stacks are Python's.
//
// What `when` records is PyTorch's rule: STATE keeps the stack of each live allocation (the
// snapshot's blocks show it), ALLOC adds it to the trace's alloc entries, ALL to its frees too;
// the trace itself is kept whenever history is on, at most `max_entries` entries, the oldest
// dropped first. A free is logged as requested and completed at once: cachalot completes a
// free that waits on another stream inside its C ABI, where the extension does not see it.
// Segment events are not in the trace (the segments are in the snapshot). Each entry carries
// the user metadata the calling thread set (torch.cuda.memory._set_memory_metadata, which
// PyTorch keeps per thread, for every device); from PyTorch 2.14 an "annotate" entry carries
// an annotation of a live allocation instead.
//
// Invariants: `live_` holds a context for exactly the live allocations made while STATE or
// more was on; the common case (history off) costs one relaxed atomic load per call.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/ApproximateClock.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cachalot_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;
using c10::GatheredContext;
using c10::CachingDeviceAllocator::TraceEntry;

class MemoryHistory {
 public:
  bool on() const {
    return on_.load(std::memory_order_relaxed) || trackers_on_.load(std::memory_order_relaxed);
  }

  void configure(bool enabled, CCA::CreateContextFn recorder, size_t max_entries, CCA::RecordContext when,
                 bool clear, const std::vector<std::string>& skip_actions) {
    std::lock_guard<std::mutex> lock(mutex_);
    recorder_ = enabled ? recorder : nullptr;
    when_ = enabled ? when : CCA::RecordContext::NEVER;
    max_entries_ = max_entries;
    skip_.clear();
    for (const auto& a : skip_actions) {
      skip_.insert(c10::CachingDeviceAllocator::parseTraceEntryAction(a));
    }
    if (!enabled || clear) {
      for (auto& t : traces_) {
        t.clear();
      }
    }
    if (!enabled) {
      live_.clear();
    }
    while (trace_size() > max_entries_) {
      drop_oldest();
    }
    on_.store(enabled, std::memory_order_relaxed);
  }

  bool enabled() const {
    return on_.load(std::memory_order_relaxed);
  }

  void attach(CCA::AllocatorTraceTracker tracker) {
    std::lock_guard<std::mutex> lock(mutex_);
    trackers_.push_back(std::move(tracker));
    trackers_on_.store(true, std::memory_order_relaxed);
  }

  // An allocation of `size` bytes at `ptr` was handed out (`pool`: the private pool, or {0, 0}).
  void allocated(int device, void* ptr, size_t size, cudaStream_t stream, c10::cuda::MempoolId_t pool) {
    std::shared_ptr<GatheredContext> context = gather(CCA::RecordContext::STATE);
    std::lock_guard<std::mutex> lock(mutex_);
    if (context) {
      live_[ptr] = context;
    }
    log(TraceEntry::ALLOC, device, reinterpret_cast<size_t>(ptr), size, stream, pool,
        when_ >= CCA::RecordContext::ALLOC ? context : nullptr);
  }

  // The allocation at `ptr` was freed.
  void freed(int device, void* ptr, size_t size, cudaStream_t stream, c10::cuda::MempoolId_t pool) {
    std::shared_ptr<GatheredContext> context = gather(CCA::RecordContext::ALL);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(ptr);
    auto addr = reinterpret_cast<size_t>(ptr);
    log(TraceEntry::FREE_REQUESTED, device, addr, size, stream, pool, context);
    log(TraceEntry::FREE_COMPLETED, device, addr, size, stream, pool, context);
  }

#if TORCH_VERSION_MINOR >= 14
  // `metadata` annotates the live allocation of `size` bytes at `ptr`.
  void annotated(int device, void* ptr, size_t size, cudaStream_t stream, const std::string& metadata) {
    std::lock_guard<std::mutex> lock(mutex_);
    log(TraceEntry::ANNOTATE, device, reinterpret_cast<size_t>(ptr), size, stream, {0, 0}, nullptr, &metadata);
  }
#endif

  // The calling thread's metadata, written on the entries its allocations and frees log.
  static void set_user_metadata(const std::string& metadata) {
    thread_metadata() = metadata;
  }

  static std::string user_metadata() {
    return thread_metadata();
  }

  // A request of `size` bytes ran out of memory with `device_free` bytes free on the device.
  void out_of_memory(int device, size_t size, size_t device_free, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    log(TraceEntry::OOM, device, device_free, size, stream, {0, 0}, nullptr);
  }

  // The stack recorded when the live allocation at `ptr` was made, or null.
  std::shared_ptr<GatheredContext> context_of(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    return it == live_.end() ? nullptr : it->second;
  }

  // Every device's trace, oldest entry first, for devices 0 .. `devices` - 1.
  std::vector<std::vector<TraceEntry>> traces(size_t devices) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::vector<TraceEntry>> out(devices);
    for (size_t d = 0; d < devices && d < traces_.size(); d++) {
      out[d].assign(traces_[d].begin(), traces_[d].end());
    }
    return out;
  }

 private:
  std::shared_ptr<GatheredContext> gather(CCA::RecordContext level) {
    CCA::CreateContextFn recorder = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (when_ >= level) {
        recorder = recorder_;
      }
    }
    // Outside the lock: the recorder walks Python's stack.
    return recorder != nullptr ? recorder() : nullptr;
  }

  // Called with the lock held. `payload`, when given, replaces the device's user metadata.
  void log(TraceEntry::Action action, int device, size_t addr, size_t size, cudaStream_t stream,
           c10::cuda::MempoolId_t pool, std::shared_ptr<GatheredContext> context,
           const std::string* payload = nullptr) {
    std::string metadata = payload != nullptr ? *payload : thread_metadata();
    TraceEntry entry(action, static_cast<c10::DeviceIndex>(device), addr, size, stream, pool,
                     c10::getApproximateTime(), std::move(context), "", std::move(metadata));
    for (auto& tracker : trackers_) {
      tracker(entry);
    }
    if (!on_.load(std::memory_order_relaxed) || skip_.count(action) || max_entries_ == 0 || device < 0) {
      return;
    }
    if (traces_.size() <= static_cast<size_t>(device)) {
      traces_.resize(device + 1);
    }
    traces_[device].push_back(std::move(entry));
    if (trace_size() > max_entries_) {
      drop_oldest();
    }
  }

  size_t trace_size() const {
    size_t n = 0;
    for (const auto& t : traces_) {
      n += t.size();
    }
    return n;
  }

  static std::string& thread_metadata() {
    thread_local std::string metadata;
    return metadata;
  }

  // Drops the oldest entry of all devices' traces.
  void drop_oldest() {
    std::deque<TraceEntry>* oldest = nullptr;
    for (auto& t : traces_) {
      if (!t.empty() && (oldest == nullptr || t.front().time_.approx_t_ < oldest->front().time_.approx_t_)) {
        oldest = &t;
      }
    }
    if (oldest != nullptr) {
      oldest->pop_front();
    }
  }

  std::atomic<bool> on_{false};
  std::atomic<bool> trackers_on_{false};
  std::mutex mutex_;
  CCA::CreateContextFn recorder_ = nullptr;
  CCA::RecordContext when_ = CCA::RecordContext::NEVER;
  size_t max_entries_ = 0;
  std::unordered_set<int> skip_;
  std::vector<std::deque<TraceEntry>> traces_;
  std::vector<CCA::AllocatorTraceTracker> trackers_;
  std::unordered_map<void*, std::shared_ptr<GatheredContext>> live_;
};

}  // namespace cachalot_torch
