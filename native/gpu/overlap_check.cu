// overlap_check: replays a trace through cachalot's C ABI with real CUDA memory and checks it.
//
//   overlap_check OPS_FILE [--config CONF] [--passes N] [--checked-passes K] [--label NAME] [--no-verify]
//
// 1. Cold pass (and K - 1 more on the same allocators, default K = 1: cachalot's policy
//    follows a learned layout from the third), checked, in lockstep with a simulated allocator (same ops, same config, the
//    GPU's capacity): every allocation's address range is checked against every live one
//    (exact, on the host), then filled with its own tag byte (cuMemsetD8Async); before each
//    free a kernel counts the bytes of the allocation that no longer hold its tag (an overlap
//    in real memory, or memory given back while live). After each operation the GPU
//    allocator's reserved bytes and device allocation count are compared with the simulated
//    one's; the first divergence is reported.
// 2. Warm passes, timed: the same operations, nothing else in the loop (as replay_torch.py
//    times PyTorch's allocator); the median ns/op over the passes. The same passes over the
//    simulated allocator give the CPU cost without a GPU, for reference.
// 3. empty_cache must return every segment.
//
// Prints a readable report and a last line `RESULT {json}`. Exit 0: every check passed;
// 1: a check failed; 2: the run could not be made.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cachalot.h"
#include "ops_file.h"

static void fatal_cu(CUresult r, const char *what) {
    const char *name = "?";
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "overlap_check: %s failed: %s\n", what, name);
    std::exit(2);
}
#define CU(call)                               \
    do {                                       \
        CUresult r_ = (call);                  \
        if (r_ != CUDA_SUCCESS) fatal_cu(r_, #call); \
    } while (0)
#define RT(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "overlap_check: %s failed: %s\n", #call, cudaGetErrorString(e_));      \
            std::exit(2);                                                                               \
        }                                                                                               \
    } while (0)

static std::string last_error() {
    std::string m(cachalot_last_error_message(nullptr, 0) + 1, '\0');
    cachalot_last_error_message(&m[0], m.size());
    m.pop_back();
    return m;
}

static void must(cachalot_status s, const char *what) {
    if (s != CACHALOT_STATUS_OK) {
        std::fprintf(stderr, "overlap_check: %s failed: %s: %s\n", what, cachalot_status_name(s), last_error().c_str());
        std::exit(2);
    }
}

static cachalot_stats stats_of(cachalot_allocator *a) {
    cachalot_stats s{};
    s.struct_size = sizeof s;
    must(cachalot_get_stats(a, &s), "cachalot_get_stats");
    return s;
}

// Adds to *bad the number of 16-byte words (and tail bytes) of [p, p + n) that are not `tag`.
__global__ void count_mismatches(const unsigned char *p, unsigned long long n, unsigned char tag, unsigned int *bad) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int word = tag * 0x01010101u, local = 0;
    unsigned long long words = ((unsigned long long)p % 16 == 0) ? n / 16 : 0;
    const uint4 *v = reinterpret_cast<const uint4 *>(p);
    for (unsigned long long k = i; k < words; k += stride) {
        uint4 x = v[k];
        local += (x.x != word) + (x.y != word) + (x.z != word) + (x.w != word);
    }
    for (unsigned long long k = words * 16 + i; k < n; k += stride) {
        local += p[k] != tag;
    }
    if (local != 0) atomicAdd(bad, local);
}

struct Args {
    const char *ops = nullptr;
    std::string config = "policy:pytorch";
    std::string label;
    int passes = 7;
    int checked_passes = 1;
    bool verify = true;
};

static Args parse_args(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        if (s == "--config" && i + 1 < argc) a.config = argv[++i];
        else if (s == "--passes" && i + 1 < argc) a.passes = std::max(1, std::atoi(argv[++i]));
        else if (s == "--checked-passes" && i + 1 < argc) a.checked_passes = std::max(1, std::atoi(argv[++i]));
        else if (s == "--label" && i + 1 < argc) a.label = argv[++i];
        else if (s == "--no-verify") a.verify = false;
        else if (a.ops == nullptr && s[0] != '-') a.ops = argv[i];
        else {
            std::fprintf(stderr, "usage: overlap_check OPS_FILE [--config CONF] [--passes N] [--checked-passes K] [--label NAME] [--no-verify]\n");
            std::exit(2);
        }
    }
    if (a.ops == nullptr) {
        std::fprintf(stderr, "usage: overlap_check OPS_FILE [--config CONF] [--passes N] [--checked-passes K] [--label NAME] [--no-verify]\n");
        std::exit(2);
    }
    if (a.label.empty()) a.label = a.ops;
    return a;
}

// The trace's stream ids as CUstreams: 0 is the legacy default stream, others get a stream each.
struct Streams {
    std::map<uint64_t, CUstream> map;
    CUstream get(uint64_t id) {
        if (id == 0) return nullptr;
        auto it = map.find(id);
        if (it != map.end()) return it->second;
        CUstream s = nullptr;
        CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
        map[id] = s;
        return s;
    }
    ~Streams() {
        for (auto &kv : map) cuStreamDestroy(kv.second);
    }
};

// Replays ops on `a`, timed (nothing but the allocator calls in the loop); returns ns/op.
static double timed_pass(cachalot_allocator *a, const Ops &t, const std::vector<void *> &streams,
                         std::vector<void *> &ptrs, uint64_t &ooms) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < t.ops.size(); i++) {
        const Op &op = t.ops[i];
        if (op.alloc) {
            cachalot_status s = cachalot_malloc(a, op.size, streams[i], &ptrs[op.slot]);
            if (s != CACHALOT_STATUS_OK) {
                if (s != CACHALOT_STATUS_OUT_OF_MEMORY) must(s, "cachalot_malloc");
                ptrs[op.slot] = nullptr;
                ooms++;
            }
        } else if (ptrs[op.slot] != nullptr) {
            cachalot_free(a, ptrs[op.slot]);
            ptrs[op.slot] = nullptr;
        }
    }
    auto t1 = std::chrono::steady_clock::now();
    for (auto &p : ptrs) {
        if (p != nullptr) must(cachalot_free(a, p), "cachalot_free");
        p = nullptr;
    }
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / (double)t.ops.size();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

int main(int argc, char **argv) {
    Args args = parse_args(argc, argv);
    Ops t;
    if (!load_ops(args.ops, t)) return 2;

    // The runtime makes the primary context current here; cachalot uses the same context.
    RT(cudaSetDevice(0));
    RT(cudaFree(nullptr));
    size_t free_bytes = 0, total_bytes = 0;
    CU(cuMemGetInfo(&free_bytes, &total_bytes));

    cachalot_allocator *gpu = nullptr, *sim = nullptr;
    must(cachalot_allocator_new_cuda(0, args.config.c_str(), &gpu), "cachalot_allocator_new_cuda");
    must(cachalot_allocator_new_simulated(total_bytes, args.config.c_str(), &sim), "cachalot_allocator_new_simulated");
    std::printf("== %s: %zu ops, %u slots, config '%s', cachalot %s, device memory %.1f GiB (%.1f GiB free)\n",
                args.label.c_str(), t.ops.size(), t.slots, args.config.c_str(), cachalot_version(),
                total_bytes / 1073741824.0, free_bytes / 1073741824.0);

    Streams streams;
    std::vector<void *> gpu_stream(t.ops.size()), sim_stream(t.ops.size());
    for (size_t i = 0; i < t.ops.size(); i++) {
        gpu_stream[i] = t.ops[i].alloc ? (void *)streams.get(t.ops[i].stream) : nullptr;
        sim_stream[i] = (void *)(uintptr_t)t.ops[i].stream;
    }

    // ---- 1. cold pass, checked, in lockstep with the simulated allocator ----
    std::vector<void *> gp(t.slots, nullptr), sp(t.slots, nullptr);
    std::vector<uint64_t> size_of(t.slots, 0);
    std::vector<unsigned char> tag_of(t.slots, 0);
    std::vector<CUstream> stream_of(t.slots, nullptr);
    std::map<uint64_t, uint64_t> live;  // address -> end, of live GPU allocations
    unsigned int *bad = nullptr;
    size_t checks = 0, max_checks = (t.ops.size() + t.slots + 1) * (size_t)args.checked_passes;
    std::vector<size_t> check_op(max_checks);
    if (args.verify) {
        RT(cudaMalloc(&bad, max_checks * sizeof(unsigned int)));
        RT(cudaMemset(bad, 0, max_checks * sizeof(unsigned int)));
    }
    uint64_t overlaps = 0, gpu_ooms = 0, sim_ooms = 0, allocs = 0;
    long long diverged_at = -1;
    cachalot_stats diverged_gpu{}, diverged_sim{};
    uint64_t gpu_new_segments = 0, gpu_descending = 0, sim_new_segments = 0, sim_descending = 0;
    uint64_t gpu_last_segment = 0, sim_last_segment = 0, gpu_allocs_seen = 0, sim_allocs_seen = 0;

    auto verify_and_free = [&](uint32_t slot, size_t op_index) {
        void *p = gp[slot];
        CUstream stream = stream_of[slot];
        if (args.verify) {
            unsigned long long n = size_of[slot];
            unsigned int blocks = (unsigned int)std::min<unsigned long long>(1024, (n / 16 + 255) / 256 + 1);
            count_mismatches<<<blocks, 256, 0, (cudaStream_t)stream>>>((const unsigned char *)p, n, tag_of[slot],
                                                                       bad + checks);
            check_op[checks++] = op_index;
        }
        live.erase((uint64_t)(uintptr_t)p);
        must(cachalot_free(gpu, p), "cachalot_free (gpu)");
        gp[slot] = nullptr;
    };

    auto cold_start = std::chrono::steady_clock::now();
    cachalot_stats gpu_cold{}, sim_cold{};
    for (int checked_pass = 0; checked_pass < args.checked_passes; checked_pass++) {
    for (size_t i = 0; i < t.ops.size(); i++) {
        const Op &op = t.ops[i];
        if (op.alloc) {
            cachalot_status s = cachalot_malloc(sim, op.size, sim_stream[i], &sp[op.slot]);
            if (s == CACHALOT_STATUS_OUT_OF_MEMORY) sp[op.slot] = nullptr, sim_ooms++;
            else must(s, "cachalot_malloc (simulated)");
            s = cachalot_malloc(gpu, op.size, gpu_stream[i], &gp[op.slot]);
            if (s == CACHALOT_STATUS_OUT_OF_MEMORY) {
                std::printf("  op %zu: out of memory on the GPU: %s\n", i, last_error().c_str());
                gp[op.slot] = nullptr;
                gpu_ooms++;
            } else {
                must(s, "cachalot_malloc (gpu)");
                uint64_t a = (uint64_t)(uintptr_t)gp[op.slot], end = a + op.size;
                auto next = live.lower_bound(a);
                bool overlap = (next != live.end() && next->first < end) ||
                               (next != live.begin() && std::prev(next)->second > a);
                if (overlap) {
                    if (overlaps < 5) std::printf("  op %zu: OVERLAP: [%#llx, %#llx) meets a live allocation\n", i,
                                                  (unsigned long long)a, (unsigned long long)end);
                    overlaps++;
                }
                live[a] = end;
                size_of[op.slot] = op.size;
                stream_of[op.slot] = (CUstream)gpu_stream[i];
                tag_of[op.slot] = (unsigned char)(1 + allocs++ % 255);
                if (args.verify) {
                    CU(cuMemsetD8Async((CUdeviceptr)a, tag_of[op.slot], op.size, (CUstream)gpu_stream[i]));
                }
            }
        } else {
            if (sp[op.slot] != nullptr) {
                must(cachalot_free(sim, sp[op.slot]), "cachalot_free (simulated)");
                sp[op.slot] = nullptr;
            }
            if (gp[op.slot] != nullptr) verify_and_free(op.slot, i);
        }
        cachalot_stats g = stats_of(gpu), s = stats_of(sim);
        if (g.num_device_alloc > gpu_allocs_seen && op.alloc && gp[op.slot] != nullptr) {
            uint64_t a = (uint64_t)(uintptr_t)gp[op.slot];
            gpu_descending += gpu_new_segments > 0 && a < gpu_last_segment;
            gpu_new_segments++;
            gpu_last_segment = a;
        }
        if (s.num_device_alloc > sim_allocs_seen && op.alloc && sp[op.slot] != nullptr) {
            uint64_t a = (uint64_t)(uintptr_t)sp[op.slot];
            sim_descending += sim_new_segments > 0 && a < sim_last_segment;
            sim_new_segments++;
            sim_last_segment = a;
        }
        gpu_allocs_seen = g.num_device_alloc;
        sim_allocs_seen = s.num_device_alloc;
        if (diverged_at < 0 && (g.num_device_alloc != s.num_device_alloc ||
                                g.reserved_bytes.all.current != s.reserved_bytes.all.current)) {
            diverged_at = (long long)i;
            diverged_gpu = g;
            diverged_sim = s;
        }
    }
    if (checked_pass == 0) gpu_cold = stats_of(gpu), sim_cold = stats_of(sim);
    for (uint32_t slot = 0; slot < t.slots; slot++) {
        if (gp[slot] != nullptr) verify_and_free(slot, t.ops.size());
        if (sp[slot] != nullptr) must(cachalot_free(sim, sp[slot]), "cachalot_free (simulated)");
        sp[slot] = nullptr;
    }
    }
    cachalot_stats gpu_checked = stats_of(gpu), sim_checked = stats_of(sim);
    RT(cudaDeviceSynchronize());
    RT(cudaGetLastError());
    double cold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cold_start).count();

    uint64_t violations = 0, corrupted_bytes = 0;
    if (args.verify) {
        std::vector<unsigned int> host(checks);
        RT(cudaMemcpy(host.data(), bad, checks * sizeof(unsigned int), cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < checks; k++) {
            if (host[k] != 0) {
                if (violations < 5) std::printf("  op %zu: %u words no longer hold the allocation's byte\n", check_op[k], host[k]);
                violations++;
                corrupted_bytes += host[k];
            }
        }
        RT(cudaFree(bad));
    }
    bool same_reserved = gpu_cold.reserved_bytes.all.peak == sim_cold.reserved_bytes.all.peak &&
                         gpu_checked.reserved_bytes.all.peak == sim_checked.reserved_bytes.all.peak;
    bool same_allocs = gpu_cold.num_device_alloc == sim_cold.num_device_alloc;
    std::printf("  cold pass (checked%s): %.1f s; %zu frees verified on the GPU, %llu tag violations, %llu overlaps\n",
                args.checked_passes > 1 ? ", with the passes after it" : "", cold_s, checks,
                (unsigned long long)violations, (unsigned long long)overlaps);
    if (args.checked_passes > 1) {
        std::printf("  over %d checked passes: peak reserved GPU %lld, simulated %lld bytes; device allocations GPU %llu, simulated %llu\n",
                    args.checked_passes, (long long)gpu_checked.reserved_bytes.all.peak,
                    (long long)sim_checked.reserved_bytes.all.peak, (unsigned long long)gpu_checked.num_device_alloc,
                    (unsigned long long)sim_checked.num_device_alloc);
    }
    std::printf("  peak reserved: GPU %lld, simulated %lld bytes (%s); device allocations: GPU %llu, simulated %llu (%s)\n",
                (long long)gpu_cold.reserved_bytes.all.peak, (long long)sim_cold.reserved_bytes.all.peak,
                same_reserved ? "equal" : "DIFFERENT", (unsigned long long)gpu_cold.num_device_alloc,
                (unsigned long long)sim_cold.num_device_alloc, same_allocs ? "equal" : "DIFFERENT");
    std::printf("  new segments placed below the previous one: GPU %llu of %llu, simulated %llu of %llu\n",
                (unsigned long long)gpu_descending, (unsigned long long)gpu_new_segments,
                (unsigned long long)sim_descending, (unsigned long long)sim_new_segments);
    if (diverged_at >= 0) {
        std::printf("  first divergence at op %lld: GPU reserved %lld in %llu device allocations, simulated %lld in %llu\n",
                    diverged_at, (long long)diverged_gpu.reserved_bytes.all.current,
                    (unsigned long long)diverged_gpu.num_device_alloc, (long long)diverged_sim.reserved_bytes.all.current,
                    (unsigned long long)diverged_sim.num_device_alloc);
    }

    // ---- 2. warm passes, timed ----
    uint64_t warm_ooms = 0, allocs_before = stats_of(gpu).num_device_alloc;
    std::vector<double> gpu_ns, sim_ns;
    for (int p = 0; p < args.passes; p++) gpu_ns.push_back(timed_pass(gpu, t, gpu_stream, gp, warm_ooms));
    uint64_t warm_device_allocs = stats_of(gpu).num_device_alloc - allocs_before;
    for (int p = 0; p < args.passes; p++) sim_ns.push_back(timed_pass(sim, t, sim_stream, sp, warm_ooms));
    std::printf("  warm passes: GPU %.1f ns/op (median of %d:", median(gpu_ns), args.passes);
    for (double v : gpu_ns) std::printf(" %.1f", v);
    std::printf("), simulated device %.1f ns/op; %llu device allocations while warm\n", median(sim_ns),
                (unsigned long long)warm_device_allocs);

    // ---- 3. empty_cache returns every segment ----
    must(cachalot_empty_cache(gpu), "cachalot_empty_cache");
    cachalot_stats end = stats_of(gpu);
    // Every segment (or virtual range) returned; under virtual memory, maps and unmaps need not
    // pair up one for one, so the count of live segments is what tells.
    bool emptied = end.reserved_bytes.all.current == 0 && end.segment.all.current == 0;
    std::printf("  empty_cache: %lld bytes still reserved, %lld segments left (%llu device allocations, %llu frees)\n",
                (long long)end.reserved_bytes.all.current, (long long)end.segment.all.current,
                (unsigned long long)end.num_device_alloc, (unsigned long long)end.num_device_free);
    cachalot_allocator_free(gpu);
    cachalot_allocator_free(sim);

    bool ok = violations == 0 && overlaps == 0 && same_reserved && same_allocs && gpu_ooms == 0 && warm_ooms == 0 &&
              emptied;
    std::printf("  %s\n", ok ? "PASS" : "FAIL");
    std::printf(
        "RESULT {\"trace\": \"%s\", \"config\": \"%s\", \"ops\": %zu, \"verified_frees\": %zu, \"violations\": %llu, "
        "\"corrupted_words\": %llu, \"overlaps\": %llu, \"gpu_ooms\": %llu, \"sim_ooms\": %llu, "
        "\"gpu_peak_reserved\": %lld, \"sim_peak_reserved\": %lld, \"gpu_peak_allocated\": %lld, "
        "\"sim_peak_allocated\": %lld, \"peak_requested\": %lld, \"gpu_device_allocs\": %llu, \"sim_device_allocs\": %llu, "
        "\"first_divergence_op\": %lld, \"ns_per_op_warm_median\": %.1f, \"sim_ns_per_op_warm_median\": %.1f, "
        "\"passes\": %d, \"warm_device_allocs\": %llu, \"emptied\": %s, \"ok\": %s}\n",
        args.label.c_str(), args.config.c_str(), t.ops.size(), checks, (unsigned long long)violations,
        (unsigned long long)corrupted_bytes, (unsigned long long)overlaps, (unsigned long long)gpu_ooms,
        (unsigned long long)sim_ooms, (long long)gpu_cold.reserved_bytes.all.peak,
        (long long)sim_cold.reserved_bytes.all.peak, (long long)gpu_cold.allocated_bytes.all.peak,
        (long long)sim_cold.allocated_bytes.all.peak, (long long)gpu_cold.requested_bytes.all.peak,
        (unsigned long long)gpu_cold.num_device_alloc, (unsigned long long)sim_cold.num_device_alloc, diverged_at,
        median(gpu_ns), median(sim_ns), args.passes, (unsigned long long)warm_device_allocs, emptied ? "true" : "false",
        ok ? "true" : "false");
    return ok ? 0 : 1;
}
