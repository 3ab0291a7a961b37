// segment_call_costs: what one cuMemAlloc and one cuMemFree cost on this GPU for the segment
// sizes a caching allocator asks for (2 MiB small-pool segments, 20 MiB large-pool ones, and
// large tensors' own sizes up to 2 GiB): the driver calls a cache hit saves, and what
// empty_cache() spends giving segments back and the next pass spends asking again.
//
//   segment_call_costs [REPEATS]      (default 21 calls per size)
//
// Each size: REPEATS allocate/free pairs, timed apart, after one untimed pair; the device is
// idle, so a free waits for no work. Prints a table of median µs and `RESULT {json}`.
#define PROBE_NAME "segment_call_costs"
#include "driver_timing.h"

#include <string>

int main(int argc, char **argv) {
    int repeats = argc > 1 ? std::atoi(argv[1]) : 21;
    if (repeats < 1) repeats = 21;
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    const size_t MiB = size_t(1) << 20;
    const size_t sizes[] = {2 * MiB, 20 * MiB, 64 * MiB, 200 * MiB, 512 * MiB, 2048 * MiB};
    std::string rows, json;
    for (size_t size : sizes) {
        CUdeviceptr p;
        CU(cuMemAlloc(&p, size));
        CU(cuMemFree(p));
        std::vector<double> alloc, free;
        for (int i = 0; i < repeats; i++) {
            auto t0 = Clock::now();
            CU(cuMemAlloc(&p, size));
            auto t1 = Clock::now();
            CU(cuMemFree(p));
            auto t2 = Clock::now();
            alloc.push_back(us(t0, t1));
            free.push_back(us(t1, t2));
        }
        char line[128];
        std::snprintf(line, sizeof line, "%9zu MiB %14.1f %14.1f\n", size / MiB, median(alloc), median(free));
        rows += line;
        std::snprintf(line, sizeof line, "%s{\"bytes\":%zu,\"alloc_us\":%.1f,\"free_us\":%.1f}", json.empty() ? "" : ",",
                      size, median(alloc), median(free));
        json += line;
    }
    std::printf("%12s %14s %14s\n%s", "segment", "cuMemAlloc us", "cuMemFree us", rows.c_str());
    std::printf("RESULT {\"probe\":\"segment_call_costs\",\"repeats\":%d,\"sizes\":[%s]}\n", repeats, json.c_str());
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
