/*
 * Several GPUs in one process, without a GPU: cachalot's PyTorch entry points and
 * cachalot_allocator_new_cuda(0/1/2, ...) driven from many threads against the stand-in driver
 * of native/tests/fake_cuda, set up with three devices of different capacities.
 *
 * What it checks: every allocation lands on the device it was asked for (the fake says whose
 * address range holds it), whatever context the calling thread has current (its own device's,
 * another device's, none) — and the thread's context is as it was afterwards; record_stream
 * finds a pointer's device by itself and its event goes to that device; the registry keeps one
 * allocator per device, with its own statistics, summary ("device ID N") and snapshot
 * ("device": N); reserved bytes equal what the driver holds for that device; empty_cache, the
 * memory fraction and out of memory act per device; a device that does not exist is refused
 * by name; and no driver call ran without a context or under another device's (the fake counts
 * both, after a self-check that it does).
 *
 * Prints one line per failed check and a closing "N passed, N failed" line.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
int cuMemAlloc_v2(unsigned long long *ptr, size_t size);
int cuMemFree_v2(unsigned long long ptr);
int cuStreamCreate(void **stream, unsigned int flags);
int cuStreamDestroy_v2(void *stream);
int fake_cuda_device_count(void);
int fake_cuda_device_of(const void *ptr);
int fake_cuda_live_allocations(void);
int fake_cuda_live_allocations_on(int device);
int fake_cuda_live_events_on(int device);
size_t fake_cuda_used(int device);
int fake_cuda_retained_contexts(void);
long fake_cuda_context_errors(void);
long fake_cuda_wrong_context_calls(void);

enum { NDEV = 3, ROUNDS = 400, LIVE = 6 };
static const char *const CAPACITIES = "1073741824,536870912,268435456"; /* 1 GiB, 512 MiB, 256 MiB */
static const size_t MiB = (size_t)1 << 20;

static CUcontext ctx[NDEV];
static long torch_mallocs[NDEV];
static long baseline_context_errors, baseline_wrong_context;

static cachalot_stats stats_of(const cachalot_allocator *a) {
    cachalot_stats s = {.struct_size = sizeof s};
    CHECK(cachalot_get_stats(a, &s) == CACHALOT_STATUS_OK);
    return s;
}

static void last_error(char *buf, size_t len) { cachalot_last_error_message(buf, len); }

/* How a thread calls in: with its own device's context current, with none, or with another's. */
enum mode { OWN, NONE, OTHER };

struct worker {
    int device;
    enum mode mode;
    unsigned seed;
};

static CUcontext enter_mode(const struct worker *w) {
    CUcontext want = w->mode == OWN ? ctx[w->device] : w->mode == OTHER ? ctx[(w->device + 1) % NDEV] : NULL;
    if (want != NULL) cuCtxSetCurrent(want);
    return want;
}

/* A stream of `device`, created under its context (restoring the thread's). */
static void *stream_of(int device) {
    void *s = NULL;
    CUcontext popped = NULL;
    CHECK(cuCtxPushCurrent_v2(ctx[device]) == 0);
    CHECK(cuStreamCreate(&s, 0) == 0);
    CHECK(cuCtxPopCurrent_v2(&popped) == 0 && popped == ctx[device]);
    return s;
}

static size_t next_size(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    unsigned r = *seed >> 8;
    return r % 3 == 0 ? 1 + r % (1 << 20) : (1 << 20) + r % (6u << 20); /* small pool, or 1-7 MiB */
}

/* PyTorch's entry points from one thread, for one device: malloc on the legacy stream and on a
 * stream of the device, record_stream on another stream, frees in a shuffled order. */
static void *torch_worker(void *arg) {
    struct worker *w = arg;
    CUcontext mine = enter_mode(w);
    void *side = stream_of(w->device), *own = stream_of(w->device);
    void *live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int slot = (int)((w->seed >> 4) % LIVE);
        if (live[slot] != NULL) {
            cachalot_torch_free(live[slot], (ptrdiff_t)sizes[slot], w->device, NULL);
            live[slot] = NULL;
        }
        sizes[slot] = next_size(&w->seed);
        void *stream = i % 4 == 1 ? own : NULL;
        void *p = cachalot_torch_malloc((ptrdiff_t)sizes[slot], w->device, stream);
        CHECK(p != NULL);
        if (p == NULL) continue;
        __atomic_add_fetch(&torch_mallocs[w->device], 1, __ATOMIC_RELAXED);
        CHECK(fake_cuda_device_of(p) == w->device);
        if (i % 5 == 0) cachalot_torch_record_stream(p, side); /* the device is found from p */
        live[slot] = p;
    }
    for (int s = 0; s < LIVE; s++) {
        if (live[s] != NULL) cachalot_torch_free(live[s], (ptrdiff_t)sizes[s], w->device, NULL);
    }
    CUcontext after = (CUcontext)1;
    cuCtxGetCurrent(&after);
    CHECK(after == mine); /* cachalot left the thread's context as it found it */
    cuStreamDestroy_v2(side);
    cuStreamDestroy_v2(own);
    return NULL;
}

/* An allocator of its own for one device (cachalot_allocator_new_cuda), used and destroyed. */
static void *own_allocator_worker(void *arg) {
    struct worker *w = arg;
    CUcontext mine = enter_mode(w);
    cachalot_allocator *a = NULL;
    CHECK(cachalot_allocator_new_cuda(w->device, "policy:pytorch", &a) == CACHALOT_STATUS_OK && a != NULL);
    if (a == NULL) return NULL;
    void *side = stream_of(w->device), *p = NULL;
    for (int i = 0; i < ROUNDS / 4; i++) {
        CHECK(cachalot_malloc(a, next_size(&w->seed), NULL, &p) == CACHALOT_STATUS_OK);
        CHECK(fake_cuda_device_of(p) == w->device);
        if (i % 3 == 0) CHECK(cachalot_record_stream(a, p, side) == CACHALOT_STATUS_OK);
        CHECK(cachalot_free(a, p) == CACHALOT_STATUS_OK);
    }
    cachalot_stats s = stats_of(a);
    CHECK(s.allocation.all.allocated == ROUNDS / 4 && s.allocation.all.current == 0);
    CHECK(cachalot_empty_cache(a) == CACHALOT_STATUS_OK); /* waits for its events */
    CHECK(stats_of(a).reserved_bytes.all.current == 0);
    cachalot_allocator_free(a);
    CUcontext after = (CUcontext)1;
    cuCtxGetCurrent(&after);
    CHECK(after == mine);
    cuStreamDestroy_v2(side);
    return NULL;
}

/* The fake must catch what this test is about: a free under another device's context, and a
 * memory call with no context. */
static void fake_self_check(void) {
    unsigned long long p = 0;
    CHECK(cuCtxSetCurrent(ctx[1]) == 0);
    CHECK(cuMemAlloc_v2(&p, MiB) == 0 && fake_cuda_device_of((void *)(uintptr_t)p) == 1);
    CHECK(cuCtxSetCurrent(ctx[0]) == 0);
    CHECK(cuMemFree_v2(p) != 0 && fake_cuda_wrong_context_calls() == 1);
    CHECK(cuCtxSetCurrent(NULL) == 0);
    CHECK(cuMemFree_v2(p) != 0 && fake_cuda_context_errors() == 1);
    CHECK(cuCtxSetCurrent(ctx[1]) == 0);
    CHECK(cuMemFree_v2(p) == 0);
    CHECK(cuCtxSetCurrent(NULL) == 0);
    baseline_wrong_context = fake_cuda_wrong_context_calls();
    baseline_context_errors = fake_cuda_context_errors();
}

static void threads(void) {
    enum { TORCH = 2 * NDEV, OWN_ALLOC = NDEV };
    struct worker w[TORCH + OWN_ALLOC];
    pthread_t t[TORCH + OWN_ALLOC];
    for (int i = 0; i < TORCH + OWN_ALLOC; i++) {
        enum mode mode = (enum mode)((i / NDEV + i) % 3); /* every device gets callers of each mode */
        w[i] = (struct worker){.device = i % NDEV, .mode = mode, .seed = 7919u * (unsigned)i + 1};
        CHECK(pthread_create(&t[i], NULL, i < TORCH ? torch_worker : own_allocator_worker, &w[i]) == 0);
    }
    for (int i = 0; i < TORCH + OWN_ALLOC; i++) pthread_join(t[i], NULL);
}

/* One registry allocator per device, each with its own figures. */
static void per_device_figures(cachalot_allocator *a[NDEV]) {
    for (int d = 0; d < NDEV; d++) {
        a[d] = NULL;
        CHECK(cachalot_torch_allocator(d, &a[d]) == CACHALOT_STATUS_OK && a[d] != NULL);
        if (a[d] == NULL) continue;
        for (int e = 0; e < d; e++) CHECK(a[e] != a[d]);
        cachalot_stats s = stats_of(a[d]);
        CHECK(s.allocation.all.allocated == torch_mallocs[d]);
        CHECK(s.allocation.all.current == 0 && s.allocated_bytes.all.current == 0);
        CHECK(s.reserved_bytes.all.current > 0);
        CHECK((size_t)s.reserved_bytes.all.current == fake_cuda_used(d)); /* only this allocator holds d's memory */
        CHECK(s.num_device_alloc == (uint64_t)fake_cuda_live_allocations_on(d) + s.num_device_free);

        size_t need = 0;
        CHECK(cachalot_memory_summary(a[d], true, NULL, 0, &need) == CACHALOT_STATUS_OK);
        char *text = malloc(need);
        CHECK(text != NULL && cachalot_memory_summary(a[d], true, text, need, &need) == CACHALOT_STATUS_OK);
        char want[64];
        snprintf(want, sizeof want, "device ID %d ", d);
        CHECK(text != NULL && strstr(text, want) != NULL);
        free(text);

        CHECK(cachalot_snapshot_json(a[d], NULL, 0, &need) == CACHALOT_STATUS_OK);
        text = malloc(need);
        CHECK(text != NULL && cachalot_snapshot_json(a[d], text, need, &need) == CACHALOT_STATUS_OK);
        snprintf(want, sizeof want, "\"device\":%d,", d);
        CHECK(text != NULL && strstr(text, want) != NULL);
        for (int e = 0; e < NDEV; e++) {
            char other[64];
            snprintf(other, sizeof other, "\"device\":%d,", e);
            if (e != d) CHECK(text != NULL && strstr(text, other) == NULL);
        }
        free(text);
    }
    cachalot_allocator *none = (cachalot_allocator *)&none;
    CHECK(cachalot_torch_allocator(NDEV, &none) == CACHALOT_STATUS_OK && none == NULL);
}

/* empty_cache of one device's allocator releases that device's memory only; the PyTorch hook
 * releases every device's. */
static void empty_cache_per_device(cachalot_allocator *a[NDEV]) {
    size_t before[NDEV];
    for (int d = 0; d < NDEV; d++) before[d] = fake_cuda_used(d);
    CHECK(cachalot_empty_cache(a[1]) == CACHALOT_STATUS_OK);
    CHECK(fake_cuda_used(1) == 0 && stats_of(a[1]).reserved_bytes.all.current == 0);
    CHECK(fake_cuda_used(0) == before[0] && fake_cuda_used(2) == before[2]);
    CHECK(fake_cuda_live_events_on(1) > 0); /* pooled, not destroyed */
    cachalot_torch_empty_cache();
    for (int d = 0; d < NDEV; d++) CHECK(fake_cuda_used(d) == 0 && stats_of(a[d]).reserved_bytes.all.current == 0);
    CHECK(fake_cuda_live_allocations() == 0);
}

/* A memory fraction, capacity and out of memory are per device. */
static void fraction_and_capacity_per_device(cachalot_allocator *a[NDEV]) {
    char message[1024];
    cachalot_torch_set_memory_fraction(0.25, 1); /* 128 MiB of device 1's 512 */
    CHECK(cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 1, NULL) == NULL);
    last_error(message, sizeof message);
    CHECK(strstr(message, "out of memory") != NULL);
    CHECK(stats_of(a[1]).num_ooms == 1);
    void *p0 = cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 0, NULL);
    void *p2 = cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 2, NULL);
    CHECK(p0 != NULL && fake_cuda_device_of(p0) == 0);
    CHECK(p2 != NULL && fake_cuda_device_of(p2) == 2);
    CHECK(stats_of(a[0]).num_ooms == 0 && stats_of(a[2]).num_ooms == 0);
    cachalot_torch_set_memory_fraction(1.0, 1);
    void *p1 = cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 1, NULL);
    CHECK(p1 != NULL && fake_cuda_device_of(p1) == 1);
    /* Device 2 holds 256 MiB: another 200 MiB fits on device 1 (512 MiB), not on device 2. */
    CHECK(cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 2, NULL) == NULL);
    last_error(message, sizeof message);
    CHECK(strstr(message, "total capacity of 256.00 MiB") != NULL);
    void *q1 = cachalot_torch_malloc((ptrdiff_t)(200 * MiB), 1, NULL);
    CHECK(q1 != NULL && fake_cuda_device_of(q1) == 1);
    cachalot_torch_free(p0, 0, 0, NULL);
    cachalot_torch_free(p1, 0, 1, NULL);
    cachalot_torch_free(q1, 0, 1, NULL);
    cachalot_torch_free(p2, 0, 2, NULL);
    cachalot_torch_empty_cache();
    CHECK(fake_cuda_live_allocations() == 0);
}

/* A device that does not exist, and a pointer no device's allocator holds. */
static void bad_device_and_pointer(void) {
    char message[1024];
    CHECK(cachalot_torch_malloc(4096, NDEV, NULL) == NULL);
    last_error(message, sizeof message);
    CHECK(strstr(message, "CUDA device 3 does not exist: this machine has 3 CUDA devices") != NULL);
    CHECK(cachalot_torch_malloc(4096, -1, NULL) == NULL);
    last_error(message, sizeof message);
    CHECK(strstr(message, "CUDA device -1 is out of range") != NULL);
    cachalot_torch_record_stream((void *)(uintptr_t)0x1234000, NULL);
    last_error(message, sizeof message);
    CHECK(strstr(message, "pointer 0x1234000 was not allocated") != NULL);
}

int main(void) {
    setenv("FAKE_CUDA_DEVICES", "3", 1);
    setenv("FAKE_CUDA_CAPACITY", CAPACITIES, 1);
    setenv("CACHALOT_ALLOC_CONF", "", 1); /* the registry's config: the defaults */
    CHECK(cuInit(0) == 0);
    CHECK(fake_cuda_device_count() == NDEV);
    for (int d = 0; d < NDEV; d++) CHECK(cuDevicePrimaryCtxRetain(&ctx[d], d) == 0);
    fake_self_check();

    threads();
    cachalot_allocator *a[NDEV];
    per_device_figures(a);
    if (a[0] != NULL && a[1] != NULL && a[2] != NULL) {
        empty_cache_per_device(a);
        fraction_and_capacity_per_device(a);
    }
    bad_device_and_pointer();

    CHECK(fake_cuda_retained_contexts() == 2 * NDEV); /* the test's and one per registry allocator */
    CHECK(fake_cuda_context_errors() == baseline_context_errors);
    CHECK(fake_cuda_wrong_context_calls() == baseline_wrong_context);
    for (int d = 0; d < NDEV; d++) cuDevicePrimaryCtxRelease_v2(d);
    printf("multi_device: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
