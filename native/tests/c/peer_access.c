/*
 * Virtual memory on several GPUs, against the stand-in driver with FAKE_CUDA_VMM=1 (no GPU
 * needed): pages a device maps are opened to the other GPUs this process allocates on with
 * cachalot, and to no others; mappings made before a second GPU joined are opened to it when
 * it does. Without this, a copy between two GPUs fails on cachalot's pages (cudaMalloc memory
 * is opened by peer access; mapped memory only by cuMemSetAccess).
 *
 * Prints one line per failed check and a closing "N passed, N failed" line.
 */
#include <stdint.h>
#include <stdio.h>

#include "cachalot.h"
#include "check.h"

int cuInit(unsigned int flags);
unsigned fake_cuda_access_of(const void *ptr);
int fake_cuda_live_mappings(void);
long fake_cuda_context_errors(void);
long fake_cuda_wrong_context_calls(void);

enum { DEVICE_0 = 1u, DEVICE_1 = 2u, DEVICE_2 = 4u };

int main(void) {
    CHECK(cuInit(0) == 0);
    cachalot_allocator *a0 = NULL, *a1 = NULL, *a2 = NULL;
    void *p = NULL, *q = NULL, *r = NULL, *s = NULL;
    CHECK(cachalot_allocator_new_cuda(0, "", &a0) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(a0, 8 << 20, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_access_of(p) == DEVICE_0); /* one GPU in use: no other is named */

    CHECK(cachalot_allocator_new_cuda(1, "", &a1) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_access_of(p) == (DEVICE_0 | DEVICE_1)); /* opened when device 1 joined */
    CHECK(cachalot_malloc(a1, 8 << 20, NULL, &q) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_access_of(q) == (DEVICE_1 | DEVICE_0));
    CHECK(cachalot_malloc(a0, 40 << 20, NULL, &r) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_access_of(r) == (DEVICE_0 | DEVICE_1)); /* new pages name both */

    /* PyTorch's expandable segments map pages too. */
    CHECK(cachalot_allocator_new_cuda(2, "policy:pytorch,expandable_segments:True", &a2) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(a2, 30 << 20, NULL, &s) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_access_of(s) == (DEVICE_2 | DEVICE_0 | DEVICE_1));
    CHECK(fake_cuda_access_of(p) == (DEVICE_0 | DEVICE_1 | DEVICE_2));
    CHECK(fake_cuda_access_of(q) == (DEVICE_1 | DEVICE_0 | DEVICE_2));

    CHECK(cachalot_free(a0, p) == CACHALOT_STATUS_OK && cachalot_free(a0, r) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(a1, q) == CACHALOT_STATUS_OK && cachalot_free(a2, s) == CACHALOT_STATUS_OK);
    cachalot_allocator_free(a0);
    cachalot_allocator_free(a1);
    cachalot_allocator_free(a2);
    CHECK(fake_cuda_live_mappings() == 0);
    CHECK(fake_cuda_context_errors() == 0 && fake_cuda_wrong_context_calls() == 0);
    printf("peer_access: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
