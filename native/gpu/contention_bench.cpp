// contention_bench: many threads share one CUDA allocator through the C ABI; how much does
// its lock cost?
//
//   contention_bench OPS_FILE [--config CONF] [--threads 1,2,4,8,16] [--passes N] [--repeats R]
//                    [--separate]
//
// One allocator over device 0 (with --separate, one for each thread, so the threads share
// nothing: the host's own scaling for this work, the most a shared allocator could reach). For each thread count T, T threads each replay the trace on a
// stream of their own (created up front; the worker threads never touch a context themselves,
// so cachalot makes the primary context current on them, as for a plain C caller): one warm-up
// pass, then N timed passes, all threads released at once; that is done R times (default 3)
// with fresh threads, and the median wall time counts, since one window of a few
// milliseconds on a shared host can be slowed by a scheduler hiccup. Reported: wall time, aggregate
// operations per second, the time per operation each thread sees (wall time over its
// operations), and the slowdown against one thread.
// Prints a table and one `RESULT {json}` line per thread count. Exit 0 unless something failed.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cachalot.h"
#include "ops_file.h"

static std::string last_error() {
    std::string m(cachalot_last_error_message(nullptr, 0) + 1, '\0');
    cachalot_last_error_message(&m[0], m.size());
    m.pop_back();
    return m;
}

static std::atomic<int> failures{0};

static void fail(cachalot_status s, const char *what) {
    std::fprintf(stderr, "contention_bench: %s failed: %s: %s\n", what, cachalot_status_name(s), last_error().c_str());
    failures++;
}

// One pass of the trace on `stream`; returns false on an error.
static bool pass(cachalot_allocator *a, const Ops &t, void *stream, std::vector<void *> &ptrs) {
    for (const Op &op : t.ops) {
        if (op.alloc) {
            cachalot_status s = cachalot_malloc(a, op.size, stream, &ptrs[op.slot]);
            if (s != CACHALOT_STATUS_OK) {
                fail(s, "cachalot_malloc");
                return false;
            }
        } else if (ptrs[op.slot] != nullptr) {
            cachalot_free(a, ptrs[op.slot]);
            ptrs[op.slot] = nullptr;
        }
    }
    for (auto &p : ptrs) {
        if (p != nullptr) cachalot_free(a, p);
        p = nullptr;
    }
    return true;
}

int main(int argc, char **argv) {
    const char *path = nullptr;
    std::string config = "policy:pytorch", threads_arg = "1,2,4,8,16";
    int passes = 5, repeats = 3;
    bool separate = false;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        if (s == "--separate") separate = true;
        else if (s == "--config" && i + 1 < argc) config = argv[++i];
        else if (s == "--threads" && i + 1 < argc) threads_arg = argv[++i];
        else if (s == "--passes" && i + 1 < argc) passes = std::max(1, std::atoi(argv[++i]));
        else if (s == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
        else if (path == nullptr && s[0] != '-') path = argv[i];
        else path = nullptr, i = argc;
    }
    if (path == nullptr) {
        std::fprintf(stderr, "usage: contention_bench OPS_FILE [--config CONF] [--threads 1,2,4,8,16] [--passes N] [--repeats R] [--separate]\n");
        return 2;
    }
    Ops t;
    if (!load_ops(path, t)) return 2;
    std::vector<int> counts;
    std::stringstream ss(threads_arg);
    for (std::string item; std::getline(ss, item, ',');) counts.push_back(std::max(1, std::atoi(item.c_str())));
    int max_threads = *std::max_element(counts.begin(), counts.end());

    std::vector<cachalot_allocator *> allocators(separate ? max_threads : 1, nullptr);
    for (auto &a : allocators) {
        cachalot_status s = cachalot_allocator_new_cuda(0, config.c_str(), &a);
        if (s != CACHALOT_STATUS_OK) {
            fail(s, "cachalot_allocator_new_cuda");
            return 2;
        }
    }
    // Streams are made on this thread, with the primary context current (cachalot left it so).
    CUcontext ctx = nullptr;
    CUdevice dev = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        std::fprintf(stderr, "contention_bench: cannot make device 0's primary context current\n");
        return 2;
    }
    std::vector<CUstream> streams(max_threads);
    for (auto &st : streams) {
        if (cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            std::fprintf(stderr, "contention_bench: cuStreamCreate failed\n");
            return 2;
        }
    }

    std::printf("== contention: %zu ops per pass, %d timed passes per thread, median of %d runs, config '%s'%s\n",
                t.ops.size(), passes, repeats, config.c_str(), separate ? ", an allocator per thread" : "");
    std::printf("| threads | wall ms | total Mops/s | ns/op per thread | slowdown vs 1 thread |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
    double single_ns = 0;
    std::vector<std::string> results;
    for (int n : counts) {
        std::vector<double> walls;
        for (int r = 0; r < repeats; r++) {
            std::atomic<int> ready{0};
            std::atomic<bool> go{false};
            std::vector<std::thread> workers;
            for (int k = 0; k < n; k++) {
                workers.emplace_back([&, k] {
                    cachalot_allocator *a = allocators[separate ? k : 0];
                    std::vector<void *> ptrs(t.slots, nullptr);
                    bool ok = pass(a, t, streams[k], ptrs);  // warm-up: this stream's segments
                    ready++;
                    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
                    for (int p = 0; ok && p < passes; p++) ok = pass(a, t, streams[k], ptrs);
                });
            }
            while (ready.load() < n) std::this_thread::yield();
            auto t0 = std::chrono::steady_clock::now();
            go.store(true, std::memory_order_release);
            for (auto &w : workers) w.join();
            walls.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(walls.begin(), walls.end());
        double wall_ns = walls[walls.size() / 2];
        double ops_per_thread = (double)t.ops.size() * passes;
        double per_op = wall_ns / ops_per_thread;
        if (n == counts.front()) single_ns = per_op;
        double mops = ops_per_thread * n / wall_ns * 1e3;
        std::printf("| %d | %.1f | %.2f | %.1f | %.2fx |\n", n, wall_ns / 1e6, mops, per_op, per_op / single_ns);
        char line[256];
        std::snprintf(line, sizeof line,
                      "RESULT {\"threads\": %d, \"wall_ms\": %.1f, \"mops_per_s\": %.3f, \"ns_per_op_per_thread\": %.1f}",
                      n, wall_ns / 1e6, mops, per_op);
        results.push_back(line);
    }
    uint64_t device_allocs = 0;
    int64_t live = 0;
    for (auto a : allocators) {
        cachalot_stats st{};
        st.struct_size = sizeof st;
        cachalot_get_stats(a, &st);
        device_allocs += st.num_device_alloc;
        live += st.allocation.all.current;
        cachalot_allocator_free(a);
    }
    std::printf("device allocations: %llu (segments for %d streams); allocations live at the end: %lld\n",
                (unsigned long long)device_allocs, max_threads, (long long)live);
    for (const auto &r : results) std::printf("%s\n", r.c_str());
    for (auto &stream : streams) cuStreamDestroy(stream);
    cuDevicePrimaryCtxRelease(dev);
    return failures.load() == 0 && live == 0 ? 0 : 1;
}
