// replay_timing: the CPU cost per operation of cachalot through the C ABI with real CUDA
// memory, measured as replay_torch.py measures PyTorch's allocator: a cold pass on a fresh
// allocator (device calls included), then warm passes with the cache the previous pass left.
//
//   replay_timing OPS_FILE [--config CONF] [--passes N] [--label NAME] [--simulated] [--leave BYTES]
//
// --simulated replays over a simulated device of 1 TiB instead of the GPU: the same C ABI and
// process, no CUDA context, so the two runs side by side separate the host's CPU cost from the
// device's. --leave fills the GPU (one cuMemAlloc in the primary context, which cachalot shares)
// until only BYTES are free before the allocator is made: a card of that size, where the driver
// itself refuses memory, unlike per_process_memory_fraction, which the allocator checks first.
// Each pass times the replay loop alone; what the trace leaves live is freed after the clock
// stops. Prints a readable line and `RESULT {json}` with the cold ns/op, the warm median,
// every warm pass, and the cold pass's peak reserved bytes and device calls from the stats.
// Exit 0 unless a call failed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda.h>

#include "cachalot.h"
#include "ops_file.h"

static std::string last_error() {
    std::string m(cachalot_last_error_message(nullptr, 0) + 1, '\0');
    cachalot_last_error_message(&m[0], m.size());
    m.pop_back();
    return m;
}

// One timed pass; returns ns/op, or a negative value on an error.
static double timed_pass(cachalot_allocator *a, const Ops &t, std::vector<void *> &ptrs) {
    auto t0 = std::chrono::steady_clock::now();
    for (const Op &op : t.ops) {
        if (op.alloc) {
            cachalot_status s = cachalot_malloc(a, op.size, reinterpret_cast<void *>(op.stream), &ptrs[op.slot]);
            if (s != CACHALOT_STATUS_OK) {
                std::fprintf(stderr, "replay_timing: cachalot_malloc(%llu): %s: %s\n",
                             (unsigned long long)op.size, cachalot_status_name(s), last_error().c_str());
                return -1;
            }
        } else if (ptrs[op.slot] != nullptr) {
            cachalot_free(a, ptrs[op.slot]);
            ptrs[op.slot] = nullptr;
        }
    }
    auto t1 = std::chrono::steady_clock::now();
    for (auto &p : ptrs) {
        if (p != nullptr) cachalot_free(a, p);
        p = nullptr;
    }
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / t.ops.size();
}

int main(int argc, char **argv) {
    std::string config = "policy:pytorch", label;
    int passes = 6;
    bool simulated = false;
    unsigned long long leave = 0;
    const char *path = nullptr;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        if (s == "--config" && i + 1 < argc) config = argv[++i];
        else if (s == "--passes" && i + 1 < argc) passes = std::max(0, std::atoi(argv[++i]));
        else if (s == "--label" && i + 1 < argc) label = argv[++i];
        else if (s == "--simulated") simulated = true;
        else if (s == "--leave" && i + 1 < argc) {
            char *end = nullptr;
            leave = std::strtoull(argv[++i], &end, 10);
            if (leave == 0 || *end != '\0') {
                std::fprintf(stderr, "replay_timing: --leave takes a number of bytes above 0, not '%s'\n", argv[i]);
                return 2;
            }
        }
        else if (path == nullptr) path = argv[i];
        else {
            std::fprintf(stderr, "usage: replay_timing OPS_FILE [--config CONF] [--passes N] [--label NAME] [--simulated] "
                                 "[--leave BYTES]\n");
            return 2;
        }
    }
    Ops t;
    if (leave > 0 && simulated) {
        std::fprintf(stderr, "replay_timing: --leave fills a GPU; it means nothing with --simulated\n");
        return 2;
    }
    if (path == nullptr || !load_ops(path, t)) return 2;
    if (label.empty()) label = path;
    CUdeviceptr filler = 0;
    if (leave > 0) {
        CUdevice dev;
        CUcontext ctx;
        size_t free_b = 0, total_b = 0;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
            cuMemGetInfo(&free_b, &total_b) != CUDA_SUCCESS || free_b <= leave ||
            cuMemAlloc(&filler, free_b - leave) != CUDA_SUCCESS) {
            std::fprintf(stderr, "replay_timing: could not leave %llu bytes free\n", leave);
            return 1;
        }
        cuMemGetInfo(&free_b, &total_b);
        std::printf("left free: %zu bytes of %zu\n", free_b, total_b);
    }
    cachalot_allocator *a = nullptr;
    cachalot_status s = simulated ? cachalot_allocator_new_simulated(1ull << 40, config.c_str(), &a)
                                  : cachalot_allocator_new_cuda(0, config.c_str(), &a);
    if (s != CACHALOT_STATUS_OK) {
        std::fprintf(stderr, "replay_timing: creating the allocator: %s: %s\n", cachalot_status_name(s), last_error().c_str());
        return 1;
    }
    std::vector<void *> ptrs(t.slots, nullptr);
    double cold = timed_pass(a, t, ptrs);
    cachalot_stats st{};
    st.struct_size = sizeof st;
    cachalot_get_stats(a, &st);
    std::vector<double> warm;
    for (int p = 0; p < passes && cold >= 0; p++) {
        double ns = timed_pass(a, t, ptrs);
        if (ns < 0) {
            cold = -1;
            break;
        }
        warm.push_back(ns);
    }
    cachalot_allocator_free(a);
    if (filler) cuMemFree(filler);
    if (cold < 0) return 1;
    std::vector<double> sorted = warm;
    std::sort(sorted.begin(), sorted.end());
    // With no warm pass (--passes 0: the cold pass alone, on a device too tight for the trace
    // to run twice) the warm median is reported as 0.
    double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    std::printf("%s [%s]: cold %.1f ns/op, warm median %.1f ns/op (%d passes); peak reserved %lld bytes, %llu device allocations, %llu device frees\n",
                label.c_str(), config.c_str(), cold, median, passes, (long long)st.reserved_bytes.all.peak,
                (unsigned long long)st.num_device_alloc, (unsigned long long)st.num_device_free);
    std::printf("RESULT {\"label\": \"%s\", \"config\": \"%s\", \"ops\": %zu, \"ns_per_op_cold\": %.1f, \"ns_per_op_warm_median\": %.1f, \"warm\": [",
                label.c_str(), config.c_str(), t.ops.size(), cold, median);
    for (size_t i = 0; i < warm.size(); i++) std::printf("%s%.1f", i ? ", " : "", warm[i]);
    std::printf("], \"peak_reserved\": %lld, \"num_device_alloc\": %llu, \"num_device_free\": %llu}\n",
                (long long)st.reserved_bytes.all.peak, (unsigned long long)st.num_device_alloc,
                (unsigned long long)st.num_device_free);
    return 0;
}
