/*
 * A stand-in for the CUDA driver (libcuda.so) on machines without a GPU, so that CI drives
 * cachalot's CudaDevice through the very driver calls it makes on a GPU: primary contexts,
 * cuMemAlloc/cuMemFree, events, pointer attributes.
 *
 * It is strict where the real driver is: memory, event and stream calls fail with
 * CUDA_ERROR_INVALID_CONTEXT unless a context is current on the calling thread, and cuMemFree
 * refuses anything that is not a live allocation of the current context's device. It also
 * counts what a test wants to know (live allocations, events, retained contexts, calls made
 * without the right context) through fake_cuda_* functions. Two devices, FAKE_CUDA_CAPACITY
 * bytes each (default 1 GiB). An event recorded on a stream other than NULL reports
 * CUDA_ERROR_NOT_READY to its first query, so pending frees are exercised.
 *
 * Invariants: every live allocation lies inside its device's address range and never overlaps
 * another; `used` is the sum of live allocation sizes per device and never exceeds capacity.
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

enum { DEVICES = 2, MAX_ALLOCS = 65536, MAX_EVENTS = 4096, CTX_STACK = 16 };

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
static int initialized;
static struct fake_ctx contexts[DEVICES] = {{0, 0}, {1, 0}};
static struct fake_event events[MAX_EVENTS];
static struct allocation allocs[MAX_ALLOCS];
static int nallocs;
static CUdeviceptr next_addr[DEVICES];
static size_t used[DEVICES];
static long context_errors, live_streams;
static __thread CUcontext stack[CTX_STACK];
static __thread int depth;

static size_t capacity(void) {
    const char *s = getenv("FAKE_CUDA_CAPACITY");
    return s != NULL ? (size_t)strtoull(s, NULL, 10) : (size_t)1 << 30;
}

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

/* The current context's device, or -1 (counted as an error) when none is current. */
static int current_device(void) {
    CUcontext c = current();
    if (c == NULL || c->retained <= 0) {
        __atomic_add_fetch(&context_errors, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return c->device;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *count = DEVICES;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    if (device < 0 || device >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    contexts[device].retained++;
    pthread_mutex_unlock(&lock);
    *ctx = &contexts[device];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    if (device < 0 || device >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
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
    *free_bytes = capacity() - used[d];
    *total = capacity();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (size > capacity() - used[d] || nallocs == MAX_ALLOCS) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        if (next_addr[d] == 0) next_addr[d] = 0x7f0000000000ull + ((CUdeviceptr)d << 40);
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
        if (allocs[i].addr == ptr && allocs[i].device == d) {
            used[d] -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
    if (attribute != 9 /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].addr <= ptr && ptr < allocs[i].addr + allocs[i].size) {
            *(int *)data = allocs[i].device;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
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

CUresult cuEventRecord(CUevent event, CUstream stream) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_event(event) || event->device != d || (stream != NULL && stream->device != d)) return CUDA_ERROR_INVALID_HANDLE;
    event->pending = stream != NULL;
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent event) {
    if (!valid_event(event)) return CUDA_ERROR_INVALID_HANDLE;
    if (event->pending) {
        event->pending = 0;
        return CUDA_ERROR_NOT_READY;
    }
    return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent event) {
    if (!valid_event(event)) return CUDA_ERROR_INVALID_HANDLE;
    event->pending = 0;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) {
    if (!valid_event(event)) return CUDA_ERROR_INVALID_HANDLE;
    event->live = 0;
    return CUDA_SUCCESS;
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

int fake_cuda_live_allocations(void) {
    pthread_mutex_lock(&lock);
    int n = nallocs;
    pthread_mutex_unlock(&lock);
    return n;
}

int fake_cuda_live_events(void) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_EVENTS; i++) n += events[i].live;
    pthread_mutex_unlock(&lock);
    return n;
}

int fake_cuda_retained_contexts(void) {
    pthread_mutex_lock(&lock);
    int n = contexts[0].retained + contexts[1].retained;
    pthread_mutex_unlock(&lock);
    return n;
}

long fake_cuda_context_errors(void) { return __atomic_load_n(&context_errors, __ATOMIC_RELAXED); }

long fake_cuda_live_streams(void) { return __atomic_load_n(&live_streams, __ATOMIC_RELAXED); }
