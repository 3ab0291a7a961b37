/*
 * A stand-in for the CUDA driver (libcuda.so) on machines without a GPU, so that CI drives
 * cachalot's CudaDevice through the very driver calls it makes on a GPU: primary contexts,
 * cuMemAlloc/cuMemFree, events, streams, pointer attributes — on several devices.
 *
 * Devices: FAKE_CUDA_DEVICES of them (1 to 8, default 2), each with its own primary context,
 * capacity, address range (device d's allocations lie in [0x7f0000000000 + d * 2^40, + 2^40))
 * and allocation tracking. FAKE_CUDA_CAPACITY gives the capacities in bytes: one value for
 * every device, or a comma-separated list, device by device, whose last value repeats
 * (default 1 GiB each). Both are read once, at the first driver call.
 *
 * It is stricter than the real driver, on purpose: cachalot promises that each driver call for
 * device N runs with device N's primary context current, so every memory, event and stream
 * call fails with CUDA_ERROR_INVALID_CONTEXT unless a retained context is current on the calling
 * thread (counted by fake_cuda_context_errors), and a call on an object of another device than
 * the current context's — cuMemFree of another device's allocation, an event or stream of
 * another device — fails (CUDA_ERROR_INVALID_VALUE / CUDA_ERROR_INVALID_HANDLE) and is counted
 * by fake_cuda_wrong_context_calls. cuPointerGetAttribute needs no context, as on a real driver
 * with unified addressing. An event recorded on a stream other than NULL reports
 * CUDA_ERROR_NOT_READY to its first query, so pending frees are exercised.
 *
 * Invariants: every live allocation lies inside its device's address range and never overlaps
 * another; `used[d]` is the sum of device d's live allocation sizes and never exceeds its
 * capacity; a device's allocations are only ever given back under its own context.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct fake_ctx *CUcontext;
typedef struct fake_event *CUevent;
typedef struct fake_stream *CUstream;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
};

enum { MAX_DEVICES = 8, MAX_ALLOCS = 65536, MAX_EVENTS = 4096, CTX_STACK = 16 };

struct fake_ctx {
    int device;
    int retained;
};
struct fake_event {
    int device;
    int live;
    int pending;
};
struct fake_stream {
    int device;
};
struct allocation {
    CUdeviceptr addr;
    size_t size;
    int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int initialized, ndevices;
static size_t capacities[MAX_DEVICES];
static struct fake_ctx contexts[MAX_DEVICES];
static struct fake_event events[MAX_EVENTS];
static struct allocation allocs[MAX_ALLOCS];
static int nallocs;
static CUdeviceptr next_addr[MAX_DEVICES];
static size_t used[MAX_DEVICES];
static long context_errors, wrong_context, live_streams;
static __thread CUcontext stack[CTX_STACK];
static __thread int depth;

/* Reads FAKE_CUDA_DEVICES and FAKE_CUDA_CAPACITY (once). */
static void setup(void) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    ndevices = n != NULL ? atoi(n) : 2;
    if (ndevices < 1) ndevices = 1;
    if (ndevices > MAX_DEVICES) ndevices = MAX_DEVICES;
    const char *s = getenv("FAKE_CUDA_CAPACITY");
    size_t last = (size_t)1 << 30;
    for (int d = 0; d < MAX_DEVICES; d++) {
        if (s != NULL && *s != '\0') {
            char *end = NULL;
            last = (size_t)strtoull(s, &end, 10);
            s = (end != NULL && *end == ',') ? end + 1 : NULL;
        }
        capacities[d] = last;
        contexts[d] = (struct fake_ctx){d, 0};
        next_addr[d] = 0x7f0000000000ull + ((CUdeviceptr)d << 40);
    }
}

static int device_count(void) {
    pthread_once(&once, setup);
    return ndevices;
}

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

/* The current context's device, or -1 (counted as an error) when none is current. */
static int current_device(void) {
    device_count();
    CUcontext c = current();
    if (c == NULL || c->retained <= 0) {
        __atomic_add_fetch(&context_errors, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return c->device;
}

static void count_wrong_context(void) { __atomic_add_fetch(&wrong_context, 1, __ATOMIC_RELAXED); }

CUresult cuInit(unsigned int flags) {
    (void)flags;
    device_count();
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    contexts[device].retained++;
    pthread_mutex_unlock(&lock);
    *ctx = &contexts[device];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult r = contexts[device].retained > 0 ? (contexts[device].retained--, CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    *ctx = current();
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (ctx == NULL) {
        depth = depth > 0 ? depth - 1 : 0;
        return CUDA_SUCCESS;
    }
    if (depth == 0) depth = 1;
    stack[depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (ctx == NULL || depth == CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
    if (depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext popped = stack[--depth];
    if (ctx != NULL) *ctx = popped;
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    *free_bytes = capacities[d] - used[d];
    *total = capacities[d];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (size > capacities[d] - used[d] || nallocs == MAX_ALLOCS) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        CUdeviceptr a = next_addr[d];
        next_addr[d] += (size + (2u << 20) - 1) & ~(CUdeviceptr)((2u << 20) - 1); /* 2 MiB aligned, never reused */
        allocs[nallocs++] = (struct allocation){a, size, d};
        used[d] += size;
        *ptr = a;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].addr != ptr) continue;
        if (allocs[i].device != d) {
            count_wrong_context();
        } else {
            used[d] -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
            r = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* The device of the live allocation holding `ptr`, or -1; call with the lock held. */
static int owner(CUdeviceptr ptr) {
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].addr <= ptr && ptr < allocs[i].addr + allocs[i].size) return allocs[i].device;
    }
    return -1;
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
    if (attribute != 9 /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int d = owner(ptr);
    pthread_mutex_unlock(&lock);
    if (d < 0) return CUDA_ERROR_INVALID_VALUE;
    *(int *)data = d;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
    (void)flags;
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < MAX_EVENTS; i++) {
        if (!events[i].live) {
            events[i] = (struct fake_event){d, 1, 0};
            *event = &events[i];
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static int valid_event(CUevent e) { return e >= events && e < events + MAX_EVENTS && e->live; }

/* Checks an event call: a context current, a live event of that context's device. Takes the
 * lock on success (the caller unlocks). */
static CUresult event_call(CUevent event) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (!valid_event(event)) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (event->device != d) {
        count_wrong_context();
        r = CUDA_ERROR_INVALID_HANDLE;
    }
    if (r != CUDA_SUCCESS) pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
    CUresult r = event_call(event);
    if (r != CUDA_SUCCESS) return r;
    if (stream != NULL && stream->device != event->device) {
        count_wrong_context();
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        event->pending = stream != NULL;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventQuery(CUevent event) {
    CUresult r = event_call(event);
    if (r != CUDA_SUCCESS) return r;
    if (event->pending) {
        event->pending = 0;
        r = CUDA_ERROR_NOT_READY;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventSynchronize(CUevent event) {
    CUresult r = event_call(event);
    if (r != CUDA_SUCCESS) return r;
    event->pending = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventDestroy_v2(CUevent event) {
    CUresult r = event_call(event);
    if (r != CUDA_SUCCESS) return r;
    event->live = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    (void)flags;
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_stream *s = malloc(sizeof *s);
    if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    s->device = d;
    __atomic_add_fetch(&live_streams, 1, __ATOMIC_RELAXED);
    *stream = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
    if (stream == NULL) return CUDA_ERROR_INVALID_HANDLE;
    free(stream);
    __atomic_sub_fetch(&live_streams, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) { return cuGetErrorName(error, text); }

/* ---- what tests ask the fake ---- */

int fake_cuda_device_count(void) { return device_count(); }

int fake_cuda_live_allocations(void) {
    pthread_mutex_lock(&lock);
    int n = nallocs;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Live allocations of device `device`. */
int fake_cuda_live_allocations_on(int device) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) n += allocs[i].device == device;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Bytes allocated on device `device` (0 for a device that does not exist). */
size_t fake_cuda_used(int device) {
    if (device < 0 || device >= device_count()) return 0;
    pthread_mutex_lock(&lock);
    size_t n = used[device];
    pthread_mutex_unlock(&lock);
    return n;
}

/* The device whose live allocation holds `ptr`, or -1. */
int fake_cuda_device_of(const void *ptr) {
    pthread_mutex_lock(&lock);
    int d = owner((CUdeviceptr)(uintptr_t)ptr);
    pthread_mutex_unlock(&lock);
    return d;
}

int fake_cuda_live_events(void) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_EVENTS; i++) n += events[i].live;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Live events of device `device`. */
int fake_cuda_live_events_on(int device) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_EVENTS; i++) n += events[i].live && events[i].device == device;
    pthread_mutex_unlock(&lock);
    return n;
}

int fake_cuda_retained_contexts(void) {
    int n = 0, count = device_count();
    pthread_mutex_lock(&lock);
    for (int d = 0; d < count; d++) n += contexts[d].retained;
    pthread_mutex_unlock(&lock);
    return n;
}

long fake_cuda_context_errors(void) { return __atomic_load_n(&context_errors, __ATOMIC_RELAXED); }

long fake_cuda_wrong_context_calls(void) { return __atomic_load_n(&wrong_context, __ATOMIC_RELAXED); }

long fake_cuda_live_streams(void) { return __atomic_load_n(&live_streams, __ATOMIC_RELAXED); }
