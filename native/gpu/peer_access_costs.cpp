// peer_access_costs: what granting a second GPU access to virtual-memory mappings costs, and
// whether the other GPU's copy engine can then read them. Needs 2 GPUs.
//
//   peer_access_costs [PAGES]      (default 256 pages of 2 MiB)
//
// Maps PAGES one-page handles on GPU 0 three times: access for GPU 0 only, for GPUs 0 and 1
// in one call, and for GPU 0 then GPU 1 added later by a second call per mapping; prints the
// median microseconds per mapping of each, and whether a copy from GPU 1 reads the memory.
#define PROBE_NAME "peer_access_costs"
#include "driver_timing.h"

int main(int argc, char **argv) {
    int pages = argc > 1 ? std::atoi(argv[1]) : 256;
    CU(cuInit(0));
    int count = 0;
    CU(cuDeviceGetCount(&count));
    if (count < 2) {
        std::printf("peer_access_costs: refused: 2 GPUs needed, %d visible\n", count);
        return 2;
    }
    CUcontext ctx0, ctx1;
    CU(cuDevicePrimaryCtxRetain(&ctx0, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx1, 1));
    CU(cuCtxSetCurrent(ctx0));
    int can = 0;
    CU(cuDeviceCanAccessPeer(&can, 1, 0));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAccessDesc both[2] = {};
    for (int d = 0; d < 2; d++) {
        both[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        both[d].location.id = d;
        both[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CUdeviceptr base;
    CU(cuMemAddressReserve(&base, g * pages, 0, 0, 0));
    std::vector<CUmemGenericAllocationHandle> h(pages);
    for (int i = 0; i < pages; i++) CU(cuMemCreate(&h[i], g, &prop, 0));

    // mode 0: GPU 0 only; 1: both in one call; 2: GPU 0, then GPU 1 in a second call.
    const char *names[3] = {"self only", "self and peer, one call", "peer added by a second call"};
    double per[3], unmap[3];
    bool copy_ok = false;
    for (int mode = 0; mode < 3; mode++) {
        std::vector<double> t, u;
        for (int i = 0; i < pages; i++) {
            CUdeviceptr at = base + i * g;
            auto a = Clock::now();
            CU(cuMemMap(at, g, 0, h[i], 0));
            CU(cuMemSetAccess(at, g, both, mode == 1 ? 2 : 1));
            if (mode == 2) CU(cuMemSetAccess(at, g, &both[1], 1));
            t.push_back(us(a, Clock::now()));
        }
        if (mode == 1) {
            // GPU 1 copies from GPU 0's mappings into its own memory.
            CU(cuCtxSetCurrent(ctx1));
            CUdeviceptr dst;
            CU(cuMemAlloc(&dst, g));
            copy_ok = cuMemcpyDtoD(dst, base, g) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS;
            CU(cuMemFree(dst));
            CU(cuCtxSetCurrent(ctx0));
        }
        for (int i = 0; i < pages; i++) {
            auto a = Clock::now();
            CU(cuMemUnmap(base + i * g, g));
            u.push_back(us(a, Clock::now()));
        }
        per[mode] = median(t);
        unmap[mode] = median(u);
    }
    for (int i = 0; i < pages; i++) CU(cuMemRelease(h[i]));
    CU(cuMemAddressFree(base, g * pages));
    std::printf("GPU 1 can access GPU 0 as a peer: %s; %d mappings of %zu bytes\n", can ? "yes" : "no", pages, g);
    for (int m = 0; m < 3; m++)
        std::printf("map + access, %s: %.1f us per mapping; unmap %.1f us\n", names[m], per[m], unmap[m]);
    std::printf("GPU 1 copies from the mappings granted to both: %s\n", copy_ok ? "yes" : "no");
    std::printf("RESULT {\"self_us\": %.1f, \"both_us\": %.1f, \"added_us\": %.1f, \"unmap_self_us\": %.1f, "
                "\"unmap_both_us\": %.1f, \"copy_ok\": %s}\n",
                per[0], per[1], per[2], unmap[0], unmap[1], copy_ok ? "true" : "false");
    return 0;
}
