// vmm_costs: what each CUDA virtual-memory call costs on this GPU, from C, in the pattern
// cachalot's paged policy uses them (2 MiB pages, one handle per page), and whether the
// driver unmaps a range made of several mappings in one cuMemUnmap call; also what the policy's
// slow paths ask besides: cuMemGetInfo (what is free) and an event recorded and queried; and
// what a cuMemCreate the driver refuses costs on a device filled to within a page.
//
//   vmm_costs [PAGES]      (default 512 pages = 1 GiB)
//
// Prints microseconds per call (median of the calls) and `RESULT {json}`.
#define PROBE_NAME "vmm_costs"
#include "driver_timing.h"

int main(int argc, char **argv) {
    int pages = argc > 1 ? std::atoi(argv[1]) : 512;
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUdeviceptr base;
    CU(cuMemAddressReserve(&base, g * pages * 2, 0, 0, 0));

    std::vector<CUmemGenericAllocationHandle> h(pages);
    std::vector<double> create, map, access1, unmap1, release, mapB;
    for (int i = 0; i < pages; i++) {
        auto t0 = Clock::now();
        CU(cuMemCreate(&h[i], g, &prop, 0));
        auto t1 = Clock::now();
        CU(cuMemMap(base + i * g, g, 0, h[i], 0));
        auto t2 = Clock::now();
        CU(cuMemSetAccess(base + i * g, g, &access, 1));
        auto t3 = Clock::now();
        create.push_back(us(t0, t1));
        map.push_back(us(t1, t2));
        access1.push_back(us(t2, t3));
    }
    // Unmap one mapping at a time, then map the same handles again with one access grant.
    for (int i = 0; i < pages; i++) {
        auto t0 = Clock::now();
        CU(cuMemUnmap(base + i * g, g));
        unmap1.push_back(us(t0, Clock::now()));
    }
    auto t0 = Clock::now();
    for (int i = 0; i < pages; i++) {
        auto a = Clock::now();
        CU(cuMemMap(base + i * g, g, 0, h[i], 0));
        mapB.push_back(us(a, Clock::now()));
    }
    auto t1 = Clock::now();
    CU(cuMemSetAccess(base, g * pages, &access, 1));
    auto t2 = Clock::now();
    double access_range = us(t1, t2), map_all = us(t0, t1);
    // Unmap all mappings in one call: allowed?
    auto t3 = Clock::now();
    CUresult multi = cuMemUnmap(base, g * pages);
    auto t4 = Clock::now();
    bool multi_ok = multi == CUDA_SUCCESS;
    if (!multi_ok)
        for (int i = 0; i < pages; i++) CU(cuMemUnmap(base + i * g, g));
    for (int i = 0; i < pages; i++) {
        auto a = Clock::now();
        CU(cuMemRelease(h[i]));
        release.push_back(us(a, Clock::now()));
    }
    // One handle for all pages: create, map, access, unmap, release.
    CUmemGenericAllocationHandle big;
    auto b0 = Clock::now();
    CU(cuMemCreate(&big, g * pages, &prop, 0));
    auto b1 = Clock::now();
    CU(cuMemMap(base, g * pages, 0, big, 0));
    CU(cuMemSetAccess(base, g * pages, &access, 1));
    auto b2 = Clock::now();
    CU(cuMemUnmap(base, g * pages));
    CU(cuMemRelease(big));
    auto b3 = Clock::now();
    CU(cuMemAddressFree(base, g * pages * 2));
    // What is free, and an event recorded on the default stream then queried, as many times.
    std::vector<double> info, record, query;
    CUevent ev;
    CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < pages; i++) {
        size_t free_b = 0, total_b = 0;
        auto a = Clock::now();
        CU(cuMemGetInfo(&free_b, &total_b));
        auto b = Clock::now();
        CU(cuEventRecord(ev, 0));
        auto c = Clock::now();
        CUresult q = cuEventQuery(ev);
        auto d = Clock::now();
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) CU(q);
        info.push_back(us(a, b));
        record.push_back(us(b, c));
        query.push_back(us(c, d));
    }
    CU(cuEventDestroy(ev));
    // A page the driver refuses: the device filled to within a page (handles of 1 GiB, then
    // pages, each until refused), then as many refused cuMemCreate calls of one page, and what
    // is free asked there, as the paged policy does at a job's smallest device.
    std::vector<CUmemGenericAllocationHandle> fill;
    CUmemGenericAllocationHandle hb;
    for (size_t size : {g * 512, g}) {
        while (cuMemCreate(&hb, size, &prop, 0) == CUDA_SUCCESS) fill.push_back(hb);
    }
    std::vector<double> refused, info_full;
    int granted = 0;
    for (int i = 0; i < pages; i++) {
        auto a = Clock::now();
        CUresult r = cuMemCreate(&hb, g, &prop, 0);
        auto b = Clock::now();
        size_t f2 = 0, t2b = 0;
        CU(cuMemGetInfo(&f2, &t2b));
        auto c = Clock::now();
        if (r == CUDA_SUCCESS) {
            fill.push_back(hb);
            granted++;
            continue;
        }
        refused.push_back(us(a, b));
        info_full.push_back(us(b, c));
    }
    for (auto x : fill) CU(cuMemRelease(x));
    if (refused.empty())
        std::printf("device full (%zu handles): no cuMemCreate refused (%d granted)\n", fill.size(), granted);
    else
        std::printf("device full (%zu handles): refused cuMemCreate of a page %.1f us, cuMemGetInfo %.2f us "
                    "(median of %zu; %d granted meanwhile)\n",
                    fill.size(), median(refused), median(info_full), refused.size(), granted);
    std::printf("granularity %zu bytes, %d pages\n", g, pages);
    std::printf("per 2 MiB page (median us): cuMemCreate %.1f, cuMemMap %.1f, cuMemSetAccess %.1f, cuMemUnmap %.1f, "
                "cuMemRelease %.1f; re-map %.1f\n",
                median(create), median(map), median(access1), median(unmap1), median(release), median(mapB));
    std::printf("one cuMemSetAccess over %d mappings: %.1f us; mapping them all: %.1f us\n", pages, access_range, map_all);
    std::printf("one cuMemUnmap over %d mappings: %s (%.1f us)\n", pages, multi_ok ? "allowed" : "refused", us(t3, t4));
    std::printf("one %d-page handle: create %.1f us, map+access %.1f us, unmap+release %.1f us\n", pages, us(b0, b1),
                us(b1, b2), us(b2, b3));
    std::printf("cuMemGetInfo %.2f us, cuEventRecord %.2f us, cuEventQuery %.2f us (median of %d)\n", median(info),
                median(record), median(query), pages);
    std::printf("RESULT {\"granularity\": %zu, \"create_us\": %.1f, \"map_us\": %.1f, \"set_access_us\": %.1f, "
                "\"unmap_us\": %.1f, \"release_us\": %.1f, \"remap_us\": %.1f, \"set_access_range_us\": %.1f, "
                "\"multi_unmap\": %s, \"multi_unmap_us\": %.1f, \"big_create_us\": %.1f, \"big_map_access_us\": %.1f, "
                "\"big_unmap_release_us\": %.1f, \"mem_get_info_us\": %.2f, \"event_record_us\": %.2f, "
                "\"event_query_us\": %.2f, \"refused_create_us\": %.1f, \"mem_get_info_full_us\": %.2f}\n",
                g, median(create), median(map), median(access1), median(unmap1), median(release), median(mapB),
                access_range, multi_ok ? "true" : "false", us(t3, t4), us(b0, b1), us(b1, b2), us(b2, b3), median(info), median(record), median(query),
                median(refused), median(info_full));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
