/*
 * cachalot's CUDA path through the C ABI, against the stand-in driver of
 * native/tests/fake_cuda (no GPU needed): contexts made current on threads that have none or
 * another one, segments from cuMemAlloc, pending frees behind events, the pointer lookup of the
 * PyTorch hooks, out of memory from the driver, and everything given back on destroy.
 *
 * Prints one line per failed check and a closing "N passed, N failed" line.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cachalot.h"
#include "check.h"

/* The few driver calls the test makes itself, and the fake's counters. */
typedef struct fake_ctx *CUcontext;
int cuInit(unsigned int flags);
int cuDevicePrimaryCtxRetain(CUcontext *ctx, int device);
int cuDevicePrimaryCtxRelease_v2(int device);
int cuCtxGetCurrent(CUcontext *ctx);
int cuCtxSetCurrent(CUcontext ctx);
int cuCtxPushCurrent_v2(CUcontext ctx);
int cuCtxPopCurrent_v2(CUcontext *ctx);
int cuStreamCreate(void **stream, unsigned int flags);
int cuStreamDestroy_v2(void *stream);
int fake_cuda_live_allocations(void);
int fake_cuda_live_events(void);
int fake_cuda_retained_contexts(void);
long fake_cuda_context_errors(void);
long fake_cuda_wrong_context_calls(void);
long fake_cuda_stream_syncs(void);

static cachalot_stats stats_of(cachalot_allocator *a) {
    cachalot_stats s = {.struct_size = sizeof s};
    cachalot_get_stats(a, &s);
    return s;
}

static cachalot_allocator *shared;
static CUcontext ctx0, ctx1;

/* A thread with no context: cachalot makes device 0's current for its driver calls and unsets
 * it again, so the thread is left as it was (no current device chosen behind its back). */
static void *no_context_thread(void *arg) {
    (void)arg;
    void *p = NULL;
    CUcontext before = NULL, after = NULL;
    cuCtxGetCurrent(&before);
    CHECK(before == NULL);
    CHECK(cachalot_malloc(shared, 5 << 20, NULL, &p) == CACHALOT_STATUS_OK && p != NULL);
    cuCtxGetCurrent(&after);
    CHECK(after == NULL);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK);
    return NULL;
}

/* A thread working on device 1: cachalot pushes device 0's context and pops it again. */
static void *other_context_thread(void *arg) {
    (void)arg;
    void *p = NULL;
    CUcontext after = NULL;
    cuCtxSetCurrent(ctx1);
    CHECK(cachalot_malloc(shared, 50 << 20, NULL, &p) == CACHALOT_STATUS_OK && p != NULL);
    CHECK(cachalot_empty_cache(shared) == CACHALOT_STATUS_OK);
    cuCtxGetCurrent(&after);
    CHECK(after == ctx1);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK);
    cuCtxGetCurrent(&after);
    CHECK(after == ctx1);
    return NULL;
}

static void contexts(void) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, no_context_thread, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(pthread_create(&t, NULL, other_context_thread, NULL) == 0);
    pthread_join(t, NULL);
}

static void pending_frees(void) {
    void *side = NULL, *p = NULL, *q = NULL;
    CHECK(cuStreamCreate(&side, 0) == 0);
    cachalot_stats before = stats_of(shared);
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(cachalot_record_stream(shared, p, side) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK); /* an event on `side`: not reusable yet */
    CHECK(fake_cuda_live_events() == 1);
    /* The event is not ready at the first query: the same size needs another block. */
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &q) == CACHALOT_STATUS_OK && q != p);
    CHECK(cachalot_free(shared, q) == CACHALOT_STATUS_OK);
    /* Now it is: the freed block is reused, the event goes back to the pool. */
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &q) == CACHALOT_STATUS_OK && q == p);
    CHECK(cachalot_free(shared, q) == CACHALOT_STATUS_OK);
    CHECK(cachalot_record_stream(shared, p, side) == CACHALOT_STATUS_DOUBLE_FREE);
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(cachalot_record_stream(shared, p, side) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK);
    CHECK(cachalot_empty_cache(shared) == CACHALOT_STATUS_OK); /* waits for the event */
    CHECK(fake_cuda_live_events() == 1); /* pooled, not destroyed: one event served both frees */
    cachalot_stats after = stats_of(shared);
    CHECK(after.num_sync_all_streams > before.num_sync_all_streams);
    CHECK(after.reserved_bytes.all.current == 0 && fake_cuda_live_allocations() == 0);
    cuStreamDestroy_v2(side);
}

/* A stream of another device (PyTorch lets record_stream name one): the free waits for it at
 * once, under that stream's own context, and the block is reusable straight away. */
static void a_stream_of_another_device(void) {
    void *other = NULL, *p = NULL, *q = NULL;
    cuCtxPushCurrent_v2(ctx1);
    CHECK(cuStreamCreate(&other, 0) == 0);
    cuCtxPopCurrent_v2(NULL);
    long syncs = fake_cuda_stream_syncs(), wrong = fake_cuda_wrong_context_calls();
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(cachalot_record_stream(shared, p, other) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_stream_syncs() == syncs + 1);
    CHECK(fake_cuda_wrong_context_calls() == wrong);
    CHECK(cachalot_malloc(shared, 1 << 20, NULL, &q) == CACHALOT_STATUS_OK && q == p);
    CHECK(cachalot_free(shared, q) == CACHALOT_STATUS_OK);
    CUcontext now = NULL;
    cuCtxGetCurrent(&now);
    CHECK(now == ctx0); /* the caller's context is as it was */
    cuStreamDestroy_v2(other);
}

static void driver_out_of_memory(void) {
    void *p = (void *)0x5e5e;
    char message[512];
    /* The fake device holds 1 GiB: the driver refuses, cachalot reports PyTorch's figures. */
    CHECK(cachalot_malloc(shared, 3u << 30, NULL, &p) == CACHALOT_STATUS_OUT_OF_MEMORY && p == (void *)0x5e5e);
    cachalot_last_error_message(message, sizeof message);
    CHECK(strstr(message, "total capacity of 1024.00 MiB") != NULL);
    CHECK(cachalot_set_memory_fraction(shared, 0.5) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(shared, 600u << 20, NULL, &p) == CACHALOT_STATUS_OUT_OF_MEMORY);
    CHECK(cachalot_set_memory_fraction(shared, 1.0) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(shared, 600u << 20, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(shared, p) == CACHALOT_STATUS_OK);
}

static void destroy_returns_everything(void) {
    cachalot_allocator *a = NULL;
    void *p = NULL;
    CHECK(cachalot_allocator_new_cuda(1, "policy:pytorch", &a) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(a, 30 << 20, NULL, &p) == CACHALOT_STATUS_OK); /* never freed */
    CHECK(cachalot_malloc(a, 1000, NULL, &p) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_live_allocations() == 2);
    int retained = fake_cuda_retained_contexts();
    cachalot_allocator_free(a);
    CHECK(fake_cuda_live_allocations() == 0);
    CHECK(fake_cuda_retained_contexts() == retained - 1);
    CHECK(cachalot_allocator_new_cuda(2, "", &a) == CACHALOT_STATUS_NO_DEVICE);
    char message[256];
    cachalot_last_error_message(message, sizeof message);
    CHECK(strstr(message, "CUDA device 2 does not exist: this machine has 2 CUDA devices") != NULL);
}

static void torch_hooks(void) {
    char before[256] = "", after[256] = "";
    cachalot_last_error_message(before, sizeof before);
    void *p = cachalot_torch_malloc(1 << 20, 0, NULL);
    CHECK(p != NULL);
    void *q = cachalot_torch_malloc(3 << 20, 1, NULL); /* a second device: a second allocator */
    CHECK(q != NULL);
    cachalot_torch_record_stream(q, NULL); /* device found from the pointer */
    cachalot_torch_record_stream(p, NULL);
    cachalot_torch_free(p, 1 << 20, 0, NULL);
    cachalot_torch_free(q, 3 << 20, 1, NULL);
    cachalot_torch_set_memory_fraction(0.5, 0);
    cachalot_torch_empty_cache();
    cachalot_last_error_message(after, sizeof after);
    CHECK(strcmp(before, after) == 0); /* no hook failed: the last error is still the earlier one */
    CHECK(fake_cuda_live_allocations() == 0);
    /* The hooks' allocator is borrowed: freeing it is refused, and it goes on working. */
    cachalot_allocator *borrowed = NULL;
    CHECK(cachalot_torch_allocator(0, &borrowed) == CACHALOT_STATUS_OK && borrowed != NULL);
    cachalot_allocator_free(borrowed);
    cachalot_last_error_message(after, sizeof after);
    CHECK(strstr(after, "borrowed") != NULL);
    void *r = cachalot_torch_malloc(1 << 20, 0, NULL);
    CHECK(r != NULL);
    cachalot_torch_free(r, 1 << 20, 0, NULL);
}

int main(void) {
    CHECK(cuInit(0) == 0);
    CHECK(cuDevicePrimaryCtxRetain(&ctx0, 0) == 0 && cuDevicePrimaryCtxRetain(&ctx1, 1) == 0);
    CHECK(cachalot_allocator_new_cuda(0, "policy:pytorch", &shared) == CACHALOT_STATUS_OK && shared != NULL);
    if (shared == NULL) {
        return 1;
    }
    cuCtxSetCurrent(ctx0); /* the main thread works on device 0, as a CUDA program would */
    contexts();
    pending_frees();
    a_stream_of_another_device();
    driver_out_of_memory();
    cachalot_allocator_free(shared);
    CHECK(fake_cuda_live_allocations() == 0 && fake_cuda_live_events() == 0);
    destroy_returns_everything();
    torch_hooks();
    CHECK(fake_cuda_context_errors() == 0);
    cuDevicePrimaryCtxRelease_v2(0);
    cuDevicePrimaryCtxRelease_v2(1);
    printf("cuda_device: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
