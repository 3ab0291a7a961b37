// stream_check: two checks of cachalot on a real GPU through the C ABI, under a config given
// on the command line (run it once per policy).
//
//   stream_check [--config CONF]
//
// 1. record_stream: a block used on a second stream is not handed out again until the work
//    queued on that stream at free time has finished. A kernel on stream B waits ~200 ms and
//    then fills block X with 0xB1; X is recorded on B and freed at once from the host; a new
//    allocation of the same size on stream A must get other memory (A then fills it with
//    0xA2). After everything finishes, X must hold 0xB1 and the new block 0xA2 byte for byte
//    (memory contents, not only addresses); once B is done, the next allocation reuses X.
// 2. Out of memory at a memory fraction: with the fraction at 5% of the device, 256 MiB
//    allocations fail with CACHALOT_STATUS_OUT_OF_MEMORY and a message naming the allowed
//    bytes; after freeing half of them, allocations succeed again.
// 3. A move within a stream (cachalot's policy only): a kernel on stream A spins ~300 ms, then
//    fills block X (64 MiB); X is freed from the host and a 66 MiB block Y asked for on A, which
//    the paged policy serves by moving X's pages. The malloc must not wait for the kernel
//    (stream order keeps A's later work after it), while X's old mapping stays. A 64 MiB block
//    Z asked for next lands where X was and maps pages over that mapping: unmapping it must wait
//    for the kernel (else the kernel would fault). After everything, Y holds 0xA2 and Z 0xC3
//    byte for byte, and the device reports no error.
// Prints a line per check and `RESULT {json}`; exit 0 when all pass.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cachalot.h"

static std::string last_error() {
    std::string m(cachalot_last_error_message(nullptr, 0) + 1, '\0');
    cachalot_last_error_message(&m[0], m.size());
    m.pop_back();
    return m;
}

#define CUDA(call)                                                                                  \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            std::fprintf(stderr, "stream_check: %s failed: %s\n", #call, cudaGetErrorString(e_));  \
            return false;                                                                           \
        }                                                                                           \
    } while (0)

// Spins for `ns` nanoseconds of GPU time, then fills `n` bytes with `value`.
__global__ void wait_then_fill(unsigned char *p, size_t n, unsigned char value, unsigned long long ns) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long start;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        for (;;) {
            unsigned long long now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if (now - start > ns) break;
        }
    }
    __syncthreads();
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = value;
}

// Counts bytes of `p` that differ from `value` (on the GPU, result copied back).
__global__ void count_wrong(const unsigned char *p, size_t n, unsigned char value, unsigned long long *wrong) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != value) atomicAdd(wrong, 1ULL);
}

static bool wrong_bytes(void *p, size_t n, unsigned char value, unsigned long long &out) {
    unsigned long long *d = nullptr;
    CUDA(cudaMalloc(&d, sizeof *d));
    CUDA(cudaMemset(d, 0, sizeof *d));
    count_wrong<<<256, 256>>>(static_cast<unsigned char *>(p), n, value, d);
    CUDA(cudaGetLastError());
    CUDA(cudaMemcpy(&out, d, sizeof out, cudaMemcpyDeviceToHost));
    CUDA(cudaFree(d));
    return true;
}

static bool record_stream_check(const std::string &config, std::string &detail) {
    cachalot_allocator *a = nullptr;
    if (cachalot_allocator_new_cuda(0, config.c_str(), &a) != CACHALOT_STATUS_OK) {
        detail = "cannot create allocator: " + last_error();
        return false;
    }
    cudaStream_t sa, sb;
    CUDA(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CUDA(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    const size_t n = 64u << 20;
    void *x = nullptr, *y = nullptr, *z = nullptr;
    bool ok = cachalot_malloc(a, n, sa, &x) == CACHALOT_STATUS_OK;
    wait_then_fill<<<512, 256, 0, sb>>>(static_cast<unsigned char *>(x), n, 0xB1, 200ull * 1000 * 1000);
    CUDA(cudaGetLastError());
    ok = ok && cachalot_record_stream(a, x, sb) == CACHALOT_STATUS_OK;
    ok = ok && cachalot_free(a, x) == CACHALOT_STATUS_OK;
    ok = ok && cachalot_malloc(a, n, sa, &y) == CACHALOT_STATUS_OK;
    bool distinct = ok && y != x;
    if (ok) {
        wait_then_fill<<<512, 256, 0, sa>>>(static_cast<unsigned char *>(y), n, 0xA2, 0);
        CUDA(cudaGetLastError());
    }
    CUDA(cudaDeviceSynchronize());
    unsigned long long wrong_x = ~0ull, wrong_y = ~0ull;
    ok = ok && wrong_bytes(x, n, 0xB1, wrong_x) && wrong_bytes(y, n, 0xA2, wrong_y);
    // Stream B has finished: the pending free completes at the next malloc, which reuses X.
    ok = ok && cachalot_malloc(a, n, sa, &z) == CACHALOT_STATUS_OK;
    bool reused = ok && z == x;
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "X=%p, new block while B ran=%p (%s); bytes of X not 0xB1: %llu, of the new block not 0xA2: %llu; "
                  "after B finished the next block is %s",
                  x, y, distinct ? "other memory" : "THE SAME MEMORY", wrong_x, wrong_y, reused ? "X again" : "not X");
    detail = buf;
    if (y) cachalot_free(a, y);
    if (z) cachalot_free(a, z);
    cachalot_allocator_free(a);
    CUDA(cudaStreamDestroy(sa));
    CUDA(cudaStreamDestroy(sb));
    return ok && distinct && wrong_x == 0 && wrong_y == 0 && reused;
}

static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

static bool move_within_stream_check(const std::string &config, std::string &detail) {
    cachalot_allocator *a = nullptr;
    // No slack and no learned layout: Y then needs X's pages, as in the simulated test
    // (core/tests/policy.rs, pages_move_within_their_stream_without_waiting_...).
    std::string conf = config + (config.empty() ? "" : ",") + "page_slack:0,learn_layout:False";
    if (cachalot_allocator_new_cuda(0, conf.c_str(), &a) != CACHALOT_STATUS_OK) {
        detail = "cannot create allocator: " + last_error();
        return false;
    }
    cudaStream_t sa;
    CUDA(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    const size_t mib = 1u << 20;
    void *x = nullptr, *live = nullptr, *y = nullptr, *z = nullptr;
    bool ok = cachalot_malloc(a, 64 * mib, sa, &x) == CACHALOT_STATUS_OK &&
              cachalot_malloc(a, 2 * mib, sa, &live) == CACHALOT_STATUS_OK;
    if (ok) {
        wait_then_fill<<<512, 256, 0, sa>>>(static_cast<unsigned char *>(x), 64 * mib, 0xB1, 300ull * 1000 * 1000);
        CUDA(cudaGetLastError());
    }
    ok = ok && cachalot_free(a, x) == CACHALOT_STATUS_OK;
    auto t = std::chrono::steady_clock::now();
    ok = ok && cachalot_malloc(a, 66 * mib, sa, &y) == CACHALOT_STATUS_OK;
    double move_ms = ms_since(t);
    if (ok) {
        wait_then_fill<<<512, 256, 0, sa>>>(static_cast<unsigned char *>(y), 66 * mib, 0xA2, 0);
        CUDA(cudaGetLastError());
    }
    t = std::chrono::steady_clock::now();
    ok = ok && cachalot_malloc(a, 64 * mib, sa, &z) == CACHALOT_STATUS_OK;
    double ghost_ms = ms_since(t);
    if (ok) {
        wait_then_fill<<<512, 256, 0, sa>>>(static_cast<unsigned char *>(z), 64 * mib, 0xC3, 0);
        CUDA(cudaGetLastError());
    }
    cudaError_t synced = cudaDeviceSynchronize();
    unsigned long long wrong_y = ~0ull, wrong_z = ~0ull;
    ok = ok && synced == cudaSuccess && wrong_bytes(y, 66 * mib, 0xA2, wrong_y) && wrong_bytes(z, 64 * mib, 0xC3, wrong_z);
    bool overlaps_x = z && x && static_cast<char *>(z) < static_cast<char *>(x) + 64 * mib &&
                      static_cast<char *>(x) < static_cast<char *>(z) + 64 * mib;
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "malloc of Y (X's pages moved) took %.1f ms while the kernel ran; Z %s X's old place, its malloc "
                  "took %.1f ms; device: %s; bytes of Y not 0xA2: %llu, of Z not 0xC3: %llu",
                  move_ms, overlaps_x ? "overlaps" : "does NOT overlap", ghost_ms, cudaGetErrorString(synced), wrong_y,
                  wrong_z);
    detail = buf;
    for (void *p : {live, y, z})
        if (p) cachalot_free(a, p);
    cachalot_allocator_free(a);
    CUDA(cudaStreamDestroy(sa));
    return ok && overlaps_x && move_ms < 100 && ghost_ms > 100 && wrong_y == 0 && wrong_z == 0;
}

static bool fraction_check(const std::string &config, std::string &detail) {
    cachalot_allocator *a = nullptr;
    if (cachalot_allocator_new_cuda(0, config.c_str(), &a) != CACHALOT_STATUS_OK) {
        detail = "cannot create allocator: " + last_error();
        return false;
    }
    bool ok = cachalot_set_memory_fraction(a, 0.05) == CACHALOT_STATUS_OK;
    std::vector<void *> blocks;
    cachalot_status s = CACHALOT_STATUS_OK;
    std::string message;
    while (ok && blocks.size() < 1000) {
        void *p = nullptr;
        s = cachalot_malloc(a, 256u << 20, nullptr, &p);
        if (s != CACHALOT_STATUS_OK) {
            message = last_error();
            break;
        }
        blocks.push_back(p);
    }
    bool refused = s == CACHALOT_STATUS_OUT_OF_MEMORY && message.find("allowed") != std::string::npos;
    size_t held = blocks.size();
    for (size_t i = 0; i < held / 2; i++) cachalot_free(a, blocks[i]);
    blocks.erase(blocks.begin(), blocks.begin() + held / 2);
    void *p = nullptr;
    bool recovered = cachalot_malloc(a, 256u << 20, nullptr, &p) == CACHALOT_STATUS_OK;
    if (recovered) blocks.push_back(p);
    cachalot_stats st{};
    st.struct_size = sizeof st;
    cachalot_get_stats(a, &st);
    for (void *b : blocks) cachalot_free(a, b);
    cachalot_allocator_free(a);
    detail = std::to_string(held) + " blocks of 256 MiB fit under 5%, then " + cachalot_status_name(s) + ": \"" +
             message.substr(0, 300) + "\"; after freeing half, allocation " + (recovered ? "succeeded" : "FAILED") +
             "; num_ooms " + std::to_string(st.num_ooms);
    return ok && refused && recovered && held > 0 && st.num_ooms == 1;
}

int main(int argc, char **argv) {
    std::string config = "policy:pytorch";
    for (int i = 1; i < argc; i++)
        if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
    std::string d1, d2, d3 = "not cachalot's policy: nothing moves";
    bool ok1 = record_stream_check(config, d1);
    bool ok2 = fraction_check(config, d2);
    bool paged = config.find("policy:pytorch") == std::string::npos;
    bool ok3 = !paged || move_within_stream_check(config, d3);
    std::printf("[%s] record_stream across streams: %s — %s\n", config.c_str(), ok1 ? "PASS" : "FAIL", d1.c_str());
    std::printf("[%s] out of memory at a memory fraction: %s — %s\n", config.c_str(), ok2 ? "PASS" : "FAIL", d2.c_str());
    std::printf("[%s] pages moved within a stream: %s — %s\n", config.c_str(), ok3 ? "PASS" : "FAIL", d3.c_str());
    std::printf("RESULT {\"config\": \"%s\", \"record_stream\": %s, \"fraction_oom\": %s, \"move_within_stream\": %s}\n",
                config.c_str(), ok1 ? "true" : "false", ok2 ? "true" : "false", ok3 ? "true" : "false");
    return ok1 && ok2 && ok3 ? 0 : 1;
}
