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
 * CUDA_ERROR_NOT_READY to its first query, so pending frees are exercised; cuStreamSynchronize
 * returns at once (fake streams do no work) and is counted by fake_cuda_stream_syncs.
 *
 * With FAKE_CUDA_VMM=1 the devices support virtual memory (below), so the paged policy and
 * expandable segments run too, and fake_cuda_access_of tells which devices may reach a
 * mapping.
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
static long context_errors, wrong_context, live_streams, stream_syncs;
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

/* Needs no current context, as on a real driver: the stream knows its own. */
CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
    if (stream == NULL) {
        CUcontext c = current();
        if (c == NULL) return CUDA_ERROR_INVALID_CONTEXT;
        *ctx = c;
        return CUDA_SUCCESS;
    }
    *ctx = &contexts[stream->device];
    return CUDA_SUCCESS;
}

/* Strict: the stream's own context must be current. Streams of the fake do no work, so
 * there is nothing to wait for. */
CUresult cuStreamSynchronize(CUstream stream) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (stream != NULL && stream->device != d) {
        count_wrong_context();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_RELAXED);
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

/* ---- virtual memory, when FAKE_CUDA_VMM=1 (else devices say they lack it) ----
 * Physical handles count against their device's capacity; mappings must not overlap and are
 * unmapped whole; each mapping remembers which devices cuMemSetAccess opened it to. A call on
 * a mapping of another device than the current context's counts as a wrong-context call. */

enum { MAX_VM = 65536, VMM_ATTRIBUTE = 102, GRANULARITY = 2 << 20 };

typedef struct {
    int type;
    int id;
} CUmemLocation;
typedef struct {
    int type;
    int requested_handle_types;
    CUmemLocation location;
    void *win32_metadata;
    unsigned char alloc_flags[8];
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

struct handle { unsigned long long id; size_t size; int device; };
struct mapping { CUdeviceptr addr; size_t size; unsigned long long handle; int device; unsigned access; };
static struct handle handles[MAX_VM];
static struct mapping mappings[MAX_VM];
static int nhandles, nmappings;
static unsigned long long next_handle = 1;
static CUdeviceptr next_range = 0x100000000000ull;

static int vmm_on(void) {
    const char *v = getenv("FAKE_CUDA_VMM");
    return v != NULL && strcmp(v, "1") == 0;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *value = attribute == VMM_ATTRIBUTE && vmm_on();
    return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice device, CUdevice peer) {
    if (device < 0 || device >= device_count() || peer < 0 || peer >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *can = device != peer;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option) {
    (void)prop, (void)option;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    (void)align, (void)addr, (void)flags;
    if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    *ptr = next_range;
    next_range += (size + GRANULARITY - 1) / GRANULARITY * GRANULARITY + GRANULARITY; /* never reused */
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    (void)ptr, (void)size;
    return current_device() < 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

CUresult cuMemCreate(unsigned long long *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (prop->location.id != d) count_wrong_context();
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (size > capacities[d] - used[d] || nhandles == MAX_VM) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        handles[nhandles++] = (struct handle){next_handle, size, d};
        *handle = next_handle++;
        used[d] += size;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemRelease(unsigned long long handle) {
    if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nhandles; i++) {
        if (handles[i].id != handle) continue;
        used[handles[i].device] -= handles[i].size;
        handles[i] = handles[--nhandles];
        r = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
    (void)offset, (void)flags;
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult r = nmappings == MAX_VM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    for (int i = 0; i < nmappings && r == CUDA_SUCCESS; i++) {
        if (mappings[i].addr < ptr + size && ptr < mappings[i].addr + mappings[i].size) r = CUDA_ERROR_INVALID_VALUE;
    }
    if (r == CUDA_SUCCESS) mappings[nmappings++] = (struct mapping){ptr, size, handle, d, 0};
    pthread_mutex_unlock(&lock);
    return r;
}

/* Applies `f` to each mapping inside [ptr, ptr + size), which must be whole mappings of the
 * current context's device. */
static CUresult each_mapping(CUdeviceptr ptr, size_t size, void (*f)(int, const CUmemAccessDesc *, size_t),
                             const CUmemAccessDesc *desc, size_t count) {
    int d = current_device();
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    size_t covered = 0;
    for (int i = 0; i < nmappings; i++) {
        if (mappings[i].addr >= ptr && mappings[i].addr + mappings[i].size <= ptr + size) covered += mappings[i].size;
    }
    CUresult r = covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (int i = nmappings - 1; i >= 0 && r == CUDA_SUCCESS; i--) {
        if (mappings[i].addr < ptr || mappings[i].addr + mappings[i].size > ptr + size) continue;
        if (mappings[i].device != d) {
            count_wrong_context();
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            f(i, desc, count);
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static void grant(int i, const CUmemAccessDesc *desc, size_t count) {
    for (size_t k = 0; k < count; k++) mappings[i].access |= 1u << desc[k].location.id;
}

static void unmap_one(int i, const CUmemAccessDesc *desc, size_t count) {
    (void)desc, (void)count;
    mappings[i] = mappings[--nmappings];
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    return each_mapping(ptr, size, grant, desc, count);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { return each_mapping(ptr, size, unmap_one, NULL, 0); }

/* ---- what tests ask the fake ---- */

/* The devices (a bit each) that may reach the mapping holding `ptr`; 0 when none holds it. */
unsigned fake_cuda_access_of(const void *ptr) {
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)ptr;
    unsigned access = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nmappings; i++) {
        if (mappings[i].addr <= a && a < mappings[i].addr + mappings[i].size) access = mappings[i].access;
    }
    pthread_mutex_unlock(&lock);
    return access;
}

int fake_cuda_live_mappings(void) {
    pthread_mutex_lock(&lock);
    int n = nmappings;
    pthread_mutex_unlock(&lock);
    return n;
}

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

long fake_cuda_stream_syncs(void) { return __atomic_load_n(&stream_syncs, __ATOMIC_RELAXED); }
