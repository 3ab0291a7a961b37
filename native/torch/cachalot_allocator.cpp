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
// Snapshots, memory history and CUDA graph private pools are PyTorch's pluggable defaults
// (unsupported, with PyTorch's message) until cachalot's core has private pools.
//
// Invariant: no C++ exception other than c10::Error crosses into PyTorch, and none reaches
// cachalot's C ABI (its functions return statuses and never unwind).

#include <torch/extension.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

extern "C" {
#include "cachalot.h"
}

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
namespace Pluggable = torch::cuda::CUDAPluggableAllocator;

// This thread's message for the last failed cachalot call.
std::string last_error() {
  size_t len = cachalot_last_error_message(nullptr, 0);
  std::string msg(len + 1, '\0');
  cachalot_last_error_message(msg.data(), msg.size());
  msg.resize(len);
  return msg;
}

// The process-wide allocator cachalot keeps for `device`, or NULL before the device's first
// allocation created it (readers then report an allocator that has served nothing).
cachalot_allocator* device_allocator(int device) {
  cachalot_allocator* a = nullptr;
  cachalot_status s = cachalot_torch_allocator(device, &a);
  TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: no allocator for CUDA device ", device, ": ", last_error());
  return a;
}

void copy_stat(const cachalot_stat& from, c10::CachingAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_array(const cachalot_stat_array& from, c10::CachingAllocator::StatArray& to) {
  copy_stat(from.all, to[0]);
  copy_stat(from.small_pool, to[1]);
  copy_stat(from.large_pool, to[2]);
}

class CachalotAllocator : public Pluggable::CUDAPluggableAllocator {
 public:
  CachalotAllocator()
      : Pluggable::CUDAPluggableAllocator(
            [this](size_t size, int device, cudaStream_t stream) { return allocate_or_throw(size, device, stream); },
            [](void* ptr, size_t size, int device, cudaStream_t stream) {
              cachalot_torch_free(ptr, static_cast<ptrdiff_t>(size), device, stream);
            }) {
    set_memory_fraction_fn([](double fraction, int device) { cachalot_torch_set_memory_fraction(fraction, device); });
    set_record_stream_fn([](void* ptr, cudaStream_t stream) { cachalot_torch_record_stream(ptr, stream); });
  }

  std::string name() override {
    return "cachalot";
  }

  void emptyCache(c10::cuda::MempoolId_t mempool_id) override {
    TORCH_CHECK(mempool_id.first == 0 && mempool_id.second == 0,
                "cachalot: emptying one memory pool's cache is not supported yet (private pools are not)");
    cachalot_torch_empty_cache();
  }

  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      *largest = 0;
      return;
    }
    cachalot_status s = cachalot_largest_cached_block(a, largest);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: cacheInfo: ", last_error());
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats d;
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      return d;
    }
    cachalot_stats s{};
    s.struct_size = sizeof(s);
    cachalot_status status = cachalot_get_stats(a, &s);
    TORCH_CHECK(status == CACHALOT_STATUS_OK, "cachalot: statistics: ", last_error());
    copy_array(s.allocation, d.allocation);
    copy_array(s.segment, d.segment);
    copy_array(s.active, d.active);
    copy_array(s.inactive_split, d.inactive_split);
    copy_array(s.allocated_bytes, d.allocated_bytes);
    copy_array(s.reserved_bytes, d.reserved_bytes);
    copy_array(s.active_bytes, d.active_bytes);
    copy_array(s.inactive_split_bytes, d.inactive_split_bytes);
    copy_array(s.requested_bytes, d.requested_bytes);
    d.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
    d.num_ooms = static_cast<int64_t>(s.num_ooms);
    copy_stat(s.oversize_allocations, d.oversize_allocations);
    copy_stat(s.oversize_segments, d.oversize_segments);
    d.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams);
    d.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
    d.num_device_free = static_cast<int64_t>(s.num_device_free);
    d.max_split_size = s.max_split_size;
    return d;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      return;
    }
    cachalot_status s = cachalot_reset_peak_stats(a);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: reset_peak_memory_stats: ", last_error());
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    cachalot_allocator* a = device_allocator(device);
    if (a == nullptr) {
      return;
    }
    cachalot_status s = cachalot_reset_accumulated_stats(a);
    TORCH_CHECK(s == CACHALOT_STATUS_OK, "cachalot: reset_accumulated_memory_stats: ", last_error());
  }

  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    observers_.push_back(std::move(observer));
  }

 private:
  void* allocate_or_throw(size_t size, int device, cudaStream_t stream) {
    if (size == 0) {
      return nullptr;  // PyTorch asks for no memory; cachalot refuses 0 bytes
    }
    void* ptr = nullptr;
    cachalot_status s = cachalot_torch_malloc_status(size, device, stream, &ptr);
    if (s == CACHALOT_STATUS_OK) {
      return ptr;
    }
    std::string why = last_error();
    if (s == CACHALOT_STATUS_OUT_OF_MEMORY) {
      notify_out_of_memory(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA ", why);  // "CUDA out of memory. Tried to allocate ..."
    }
    TORCH_CHECK(false, "cachalot: allocating ", size, " bytes on CUDA device ", device, " failed: ", why);
    return nullptr;  // not reached: TORCH_CHECK(false, ...) throws
  }

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

  std::mutex observers_mutex_;
  std::vector<CCA::OutOfMemoryObserver> observers_;
};

// Makes cachalot the current CUDA allocator; only before PyTorch's allocator has served
// anything (PyTorch refuses otherwise, with its own message).
void install() {
  Pluggable::changeCurrentAllocator(std::make_shared<CachalotAllocator>());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cachalot as PyTorch's CUDA allocator (CUDAAllocator over cachalot's C ABI)";
  m.def("install", &install, "Makes cachalot PyTorch's current CUDA allocator.");
}
