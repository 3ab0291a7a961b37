// driver_timing.h: what the GPU probe programs share. CU(call) runs a CUDA driver call and
// ends the program with the call and the driver's error name when it fails (the includer
// defines PROBE_NAME first); us() and median() time the calls.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CU(call)                                                                                \
    do {                                                                                        \
        CUresult r_ = (call);                                                                   \
        if (r_ != CUDA_SUCCESS) {                                                               \
            const char *name = nullptr;                                                         \
            cuGetErrorName(r_, &name);                                                          \
            std::fprintf(stderr, "%s: %s failed: %s\n", PROBE_NAME, #call, name ? name : "?"); \
            std::exit(1);                                                                       \
        }                                                                                       \
    } while (0)

using Clock = std::chrono::steady_clock;

static double us(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}
