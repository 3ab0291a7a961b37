/*
 * The C ABI under bad input, over a simulated device (no GPU needed): NULL handles and
 * arguments, sizes 0 and SIZE_MAX, unknown, interior and double-freed pointers, invalid
 * configs and fractions, small buffers and stats structs, a CUDA device that is not there,
 * many threads at once, an unwritable stderr under PyTorch's hooks and calls made while the
 * process tears down. Each bad call must return its fixed status code, leave a message
 * naming the problem, write no out-parameter and leave the allocator's state unchanged.
 *
 * Prints one line per failed check and a closing "N passed, N failed" line; exits non-zero
 * when any check failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cachalot.h"
#include "check.h"

static char last_message[1024];

/* The status matches, and the thread's last error message contains `needle`. */
#define CHECK_FAILS(call, status, needle)                                               \
    do {                                                                                \
        cachalot_status got_ = (call);                                                  \
        cachalot_last_error_message(last_message, sizeof last_message);                 \
        if (got_ == (status) && strstr(last_message, (needle)) != NULL) {               \
            passed++;                                                                   \
        } else {                                                                        \
            failed++;                                                                   \
            fprintf(stderr, "%s:%d: %s returned %s (message: \"%s\"), expected %s with \"%s\"\n", \
                    __FILE__, __LINE__, #call, cachalot_status_name(got_), last_message, \
                    cachalot_status_name(status), (needle));                            \
        }                                                                               \
    } while (0)

/* The allocator's whole state as text: snapshot JSON and statistics. */
static char *state_of(const cachalot_allocator *a) {
    size_t len = 0;
    if (cachalot_snapshot_json(a, NULL, 0, &len) != CACHALOT_STATUS_OK) {
        return NULL;
    }
    cachalot_stats stats = {.struct_size = sizeof stats};
    char *text = malloc(len + sizeof stats);
    if (text == NULL || cachalot_snapshot_json(a, text, len, &len) != CACHALOT_STATUS_OK ||
        cachalot_get_stats(a, &stats) != CACHALOT_STATUS_OK) {
        free(text);
        return NULL;
    }
    memcpy(text + len, &stats, sizeof stats);
    return text;
}

static int same_state(const cachalot_allocator *a, const char *before) {
    char *now = state_of(a);
    size_t len = strlen(before) + 1 + sizeof(cachalot_stats);
    int same = now != NULL && memcmp(now, before, len) == 0;
    free(now);
    return same;
}

static void *const SENTINEL = (void *)0x5e5e;

static void null_handles(void) {
    void *p = SENTINEL;
    size_t len = 7;
    cachalot_stats stats = {.struct_size = sizeof stats};
    const char *handle = "allocator handle is NULL";
    CHECK_FAILS(cachalot_malloc(NULL, 64, NULL, &p), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK(p == SENTINEL);
    CHECK_FAILS(cachalot_free(NULL, SENTINEL), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_record_stream(NULL, SENTINEL, NULL), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_empty_cache(NULL), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_set_memory_fraction(NULL, 0.5), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_get_stats(NULL, &stats), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_reset_peak_stats(NULL), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_memory_summary(NULL, false, NULL, 0, &len), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK_FAILS(cachalot_snapshot_json(NULL, NULL, 0, &len), CACHALOT_STATUS_NULL_POINTER, handle);
    CHECK(len == 7);
    cachalot_allocator_free(NULL); /* ignored, like free(NULL) */
}

static void creation(void) {
    cachalot_allocator *a = (cachalot_allocator *)SENTINEL;
    CHECK_FAILS(cachalot_allocator_new_simulated(1 << 30, "", NULL), CACHALOT_STATUS_NULL_POINTER, "out is NULL");
    CHECK_FAILS(cachalot_allocator_new_simulated(1 << 30, "max_split_size_mb:10", &a), CACHALOT_STATUS_INVALID_CONFIG,
                "max_split_size_mb");
    CHECK_FAILS(cachalot_allocator_new_simulated(1 << 30, "bogus_key:1", &a), CACHALOT_STATUS_INVALID_CONFIG,
                "allowed keys");
    CHECK_FAILS(cachalot_allocator_new_simulated(1 << 30, "policy", &a), CACHALOT_STATUS_INVALID_CONFIG, "policy");
    CHECK_FAILS(cachalot_allocator_new_simulated(1 << 30, "policy:\xff", &a), CACHALOT_STATUS_INVALID_CONFIG, "UTF-8");
    CHECK_FAILS(cachalot_allocator_new_simulated(0, "", &a), CACHALOT_STATUS_INVALID_ARGUMENT, "capacity");
    /* The config is checked before the driver is touched, with or without a GPU. */
    CHECK_FAILS(cachalot_allocator_new_cuda(0, "garbage_collection_threshold:2", &a), CACHALOT_STATUS_INVALID_CONFIG,
                "garbage_collection_threshold");
    CHECK_FAILS(cachalot_allocator_new_cuda(99999, "", &a), CACHALOT_STATUS_NO_DEVICE, "CUDA");
    CHECK_FAILS(cachalot_allocator_new_cuda(-1, "", &a), CACHALOT_STATUS_NO_DEVICE, "CUDA");
    CHECK(a == (cachalot_allocator *)SENTINEL);

    /* NULL config reads CACHALOT_ALLOC_CONF; the default (unset) is the defaults. */
    cachalot_allocator *b = NULL;
    CHECK(cachalot_allocator_new_simulated(1 << 30, NULL, &b) == CACHALOT_STATUS_OK && b != NULL);
    cachalot_allocator_free(b);

    /* Without a GPU (CI), device 0 is a clear error; with one, it works. */
    cachalot_allocator *c = NULL;
    cachalot_status s = cachalot_allocator_new_cuda(0, "", &c);
    cachalot_last_error_message(last_message, sizeof last_message);
    CHECK(s == CACHALOT_STATUS_OK || (s == CACHALOT_STATUS_NO_DEVICE && strstr(last_message, "CUDA") != NULL));
    if (s == CACHALOT_STATUS_OK) {
        void *p = NULL;
        CHECK(cachalot_malloc(c, 1 << 20, NULL, &p) == CACHALOT_STATUS_OK && p != NULL);
        CHECK(cachalot_free(c, p) == CACHALOT_STATUS_OK);
        cachalot_allocator_free(c);
    } else {
        printf("no CUDA here: \"%s\"\n", last_message);
    }
}

static void bad_requests_and_pointers(cachalot_allocator *a) {
    void *live = NULL, *freed = NULL;
    CHECK(cachalot_malloc(a, 3 << 20, NULL, &live) == CACHALOT_STATUS_OK);
    CHECK(cachalot_malloc(a, 1000, NULL, &freed) == CACHALOT_STATUS_OK);
    CHECK(cachalot_free(a, freed) == CACHALOT_STATUS_OK);
    char *before = state_of(a);
    CHECK(before != NULL);
    if (before == NULL) {
        return;
    }

    void *p = SENTINEL;
    CHECK_FAILS(cachalot_malloc(a, 0, NULL, &p), CACHALOT_STATUS_INVALID_SIZE, "0 bytes");
    CHECK_FAILS(cachalot_malloc(a, SIZE_MAX, NULL, &p), CACHALOT_STATUS_INVALID_SIZE, "larger than any device");
    CHECK_FAILS(cachalot_malloc(a, 64, NULL, NULL), CACHALOT_STATUS_NULL_POINTER, "out_ptr");
    CHECK(p == SENTINEL);
    CHECK(same_state(a, before));

    CHECK_FAILS(cachalot_free(a, freed), CACHALOT_STATUS_DOUBLE_FREE, "already freed");
    CHECK_FAILS(cachalot_free(a, (char *)live + 512), CACHALOT_STATUS_INTERIOR_POINTER, "points inside");
    CHECK_FAILS(cachalot_free(a, (void *)0x1234), CACHALOT_STATUS_UNKNOWN_POINTER, "not allocated");
    CHECK_FAILS(cachalot_free(a, (void *)(uintptr_t)-1), CACHALOT_STATUS_UNKNOWN_POINTER, "not allocated");
    CHECK(cachalot_free(a, NULL) == CACHALOT_STATUS_OK); /* like free(NULL) */
    CHECK_FAILS(cachalot_record_stream(a, NULL, NULL), CACHALOT_STATUS_NULL_POINTER, "ptr is NULL");
    CHECK_FAILS(cachalot_record_stream(a, freed, (void *)7), CACHALOT_STATUS_DOUBLE_FREE, "already freed");
    CHECK_FAILS(cachalot_record_stream(a, (void *)0x1234, (void *)7), CACHALOT_STATUS_UNKNOWN_POINTER, "not allocated");
    CHECK(same_state(a, before));

    CHECK_FAILS(cachalot_set_memory_fraction(a, -0.5), CACHALOT_STATUS_INVALID_ARGUMENT, "fraction");
    CHECK_FAILS(cachalot_set_memory_fraction(a, 1.5), CACHALOT_STATUS_INVALID_ARGUMENT, "fraction");
    CHECK_FAILS(cachalot_set_memory_fraction(a, NAN), CACHALOT_STATUS_INVALID_ARGUMENT, "fraction");
    CHECK(same_state(a, before));
    free(before);

    CHECK(cachalot_free(a, live) == CACHALOT_STATUS_OK);
}

static void out_of_memory(void) {
    cachalot_allocator *a = NULL;
    CHECK(cachalot_allocator_new_simulated(64 << 20, "policy:pytorch", &a) == CACHALOT_STATUS_OK);
    void *p = SENTINEL;
    CHECK_FAILS(cachalot_malloc(a, 1u << 30, NULL, &p), CACHALOT_STATUS_OUT_OF_MEMORY, "out of memory");
    CHECK(strstr(last_message, "total capacity of 64.00 MiB") != NULL);
    CHECK(p == SENTINEL);
    /* A memory fraction turns a fitting request into out of memory too. */
    CHECK(cachalot_set_memory_fraction(a, 0.25) == CACHALOT_STATUS_OK);
    CHECK_FAILS(cachalot_malloc(a, 20 << 20, NULL, &p), CACHALOT_STATUS_OUT_OF_MEMORY, "allowed");
    cachalot_stats stats = {.struct_size = sizeof stats};
    CHECK(cachalot_get_stats(a, &stats) == CACHALOT_STATUS_OK && stats.num_ooms == 2);
    cachalot_allocator_free(a);
}

static void buffers_and_stats(cachalot_allocator *a) {
    size_t len = 0, kept = 12345;
    CHECK(cachalot_memory_summary(a, false, NULL, 0, &len) == CACHALOT_STATUS_OK && len > 100);
    char small[16];
    memset(small, 'x', sizeof small);
    CHECK_FAILS(cachalot_memory_summary(a, false, small, sizeof small, &kept), CACHALOT_STATUS_BUFFER_TOO_SMALL,
                "the text needs");
    CHECK(small[0] == 'x' && kept == 12345);
    CHECK_FAILS(cachalot_memory_summary(a, false, NULL, 64, &kept), CACHALOT_STATUS_NULL_POINTER, "buf");
    CHECK_FAILS(cachalot_memory_summary(a, false, NULL, 0, NULL), CACHALOT_STATUS_NULL_POINTER, "out_len");
    CHECK_FAILS(cachalot_snapshot_json(a, small, sizeof small, &kept), CACHALOT_STATUS_BUFFER_TOO_SMALL, "needs");
    CHECK(kept == 12345);
    char *text = malloc(len);
    CHECK(text != NULL && cachalot_memory_summary(a, false, text, len, &kept) == CACHALOT_STATUS_OK);
    CHECK(kept == len && text != NULL && strlen(text) + 1 == len && strstr(text, "memory summary") != NULL);
    free(text);

    cachalot_stats stats;
    memset(&stats, 0xab, sizeof stats);
    stats.struct_size = 8;
    CHECK_FAILS(cachalot_get_stats(a, &stats), CACHALOT_STATUS_INVALID_ARGUMENT, "struct_size");
    CHECK(stats.struct_size == 8 && stats.version == 0xabababab);
    CHECK_FAILS(cachalot_get_stats(a, NULL), CACHALOT_STATUS_NULL_POINTER, "out is NULL");
    /* A caller built against a newer, larger struct gets this version and its size back. */
    unsigned char bigger[sizeof(cachalot_stats) + 64];
    memset(bigger, 0xcd, sizeof bigger);
    ((cachalot_stats *)(void *)bigger)->struct_size = sizeof bigger;
    CHECK(cachalot_get_stats(a, (cachalot_stats *)(void *)bigger) == CACHALOT_STATUS_OK);
    memcpy(&stats, bigger, sizeof stats);
    CHECK(stats.struct_size == sizeof(cachalot_stats) && stats.version == CACHALOT_STATS_VERSION);
    CHECK(bigger[sizeof bigger - 1] == 0xcd);
    CHECK(stats.max_split_size == -1);
    CHECK(stats.num_oom_rejections == 0); /* counted: the config follows PyTorch 2.15 by default */
    /* A caller built against version 1's header gets version 1's fields and nothing past them. */
    memset(bigger, 0xcd, sizeof bigger);
    ((cachalot_stats *)(void *)bigger)->struct_size = offsetof(cachalot_stats, num_oom_rejections);
    CHECK(cachalot_get_stats(a, (cachalot_stats *)(void *)bigger) == CACHALOT_STATUS_OK);
    memcpy(&stats, bigger, sizeof stats);
    CHECK(stats.struct_size == offsetof(cachalot_stats, num_oom_rejections) && stats.version == 1);
    CHECK(bigger[offsetof(cachalot_stats, num_oom_rejections)] == 0xcd);
}

static void last_error_and_names(void) {
    CHECK_FAILS(cachalot_malloc(NULL, 1, NULL, NULL), CACHALOT_STATUS_NULL_POINTER, "NULL");
    size_t full = cachalot_last_error_message(NULL, 0);
    CHECK(full == strlen(last_message) && full > 4);
    char tiny[5];
    CHECK(cachalot_last_error_message(tiny, sizeof tiny) == full);
    CHECK(strlen(tiny) == 4 && strncmp(tiny, last_message, 4) == 0);
    CHECK(strcmp(cachalot_status_name(CACHALOT_STATUS_DOUBLE_FREE), "CACHALOT_STATUS_DOUBLE_FREE") == 0);
    CHECK(strcmp(cachalot_status_name(12345), "CACHALOT_STATUS_UNKNOWN") == 0);
    CHECK(CACHALOT_STATUS_OK == 0 && CACHALOT_STATUS_NULL_POINTER == 1 && CACHALOT_STATUS_INVALID_ARGUMENT == 2 &&
          CACHALOT_STATUS_INVALID_CONFIG == 3 && CACHALOT_STATUS_INVALID_SIZE == 4 &&
          CACHALOT_STATUS_OUT_OF_MEMORY == 5 && CACHALOT_STATUS_UNKNOWN_POINTER == 6 &&
          CACHALOT_STATUS_DOUBLE_FREE == 7 && CACHALOT_STATUS_INTERIOR_POINTER == 8 &&
          CACHALOT_STATUS_BUFFER_TOO_SMALL == 9 && CACHALOT_STATUS_NO_DEVICE == 10 &&
          CACHALOT_STATUS_DRIVER == 11 && CACHALOT_STATUS_UNSUPPORTED == 12 && CACHALOT_STATUS_INTERNAL == 13);
#ifdef CACHALOT_EXPECTED_VERSION
    CHECK(strcmp(cachalot_version(), CACHALOT_EXPECTED_VERSION) == 0);
#endif
}

static void torch_entry_points(void) {
    /* Size 0 is NULL without an error (PyTorch's convention); NULL frees are ignored. */
    CHECK(cachalot_torch_malloc(0, 0, NULL) == NULL);
    cachalot_torch_free(NULL, 0, 0, NULL);
    cachalot_torch_record_stream(NULL, NULL);
    CHECK(cachalot_last_error_message(last_message, sizeof last_message) > 0 && strstr(last_message, "ptr is NULL"));
    CHECK(cachalot_torch_malloc(-1, 0, NULL) == NULL);
    cachalot_last_error_message(last_message, sizeof last_message);
    CHECK(strstr(last_message, "negative size -1") != NULL);
    CHECK(cachalot_torch_malloc(4096, 4096, NULL) == NULL);
    cachalot_last_error_message(last_message, sizeof last_message);
    CHECK(strstr(last_message, "out of range") != NULL);
    void *p = cachalot_torch_malloc(4096, 0, NULL);
    if (p != NULL) { /* a GPU is here */
        cachalot_torch_free(p, 4096, 0, NULL);
    } else {
        cachalot_last_error_message(last_message, sizeof last_message);
        CHECK(strstr(last_message, "CUDA") != NULL);
    }
    cachalot_torch_empty_cache();
}

/* PyTorch's hooks print failures on stderr. A stderr that cannot be written (a closed pipe,
 * as under `python train.py | tee log` once tee is gone; Python ignores SIGPIPE) must not turn
 * a failure PyTorch can handle into an abort. */
static void torch_entry_points_without_stderr(void) {
    int pipe_ends[2];
    CHECK(pipe(pipe_ends) == 0);
    fflush(stderr);
    int saved = dup(2);
    void (*old_handler)(int) = signal(SIGPIPE, SIG_IGN);
    close(pipe_ends[0]);
    dup2(pipe_ends[1], 2);
    close(pipe_ends[1]);
    void *p = cachalot_torch_malloc(-1, 0, NULL);
    cachalot_torch_free((void *)0x1000, 4096, 4096, NULL);
    dup2(saved, 2);
    close(saved);
    signal(SIGPIPE, old_handler);
    CHECK(p == NULL);
    cachalot_last_error_message(last_message, sizeof last_message);
    CHECK(strstr(last_message, "out of range") != NULL);
}

/* Calls made while the process or a thread is being torn down, after the library's
 * thread-local state is gone (C destructors and atexit handlers run then): a failing call
 * still returns its status, and asking for the message does not abort. */
static pthread_key_t teardown_key;
static cachalot_allocator *teardown_allocator;
static int teardown_status;

static void fail_during_teardown(void *arg) {
    (void)arg;
    teardown_status = cachalot_free(teardown_allocator, (void *)0x1234);
    char buf[64];
    cachalot_last_error_message(buf, sizeof buf);
}

static void *thread_with_destructor(void *arg) {
    (void)arg;
    void *p = NULL;
    /* A failure first, so the thread has a message that teardown then destroys. */
    cachalot_malloc(teardown_allocator, 0, NULL, &p);
    pthread_setspecific(teardown_key, teardown_allocator);
    return NULL;
}

static void at_exit_fails(void) {
    fail_during_teardown(NULL);
    if (teardown_status != CACHALOT_STATUS_UNKNOWN_POINTER) {
        fprintf(stderr, "bad_input: a call from an atexit handler returned %d\n", teardown_status);
        _exit(1);
    }
    cachalot_allocator_free(teardown_allocator);
}

static void calls_during_teardown(void) {
    CHECK(cachalot_allocator_new_simulated(1 << 30, "policy:pytorch", &teardown_allocator) == CACHALOT_STATUS_OK);
    CHECK(pthread_key_create(&teardown_key, fail_during_teardown) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_with_destructor, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(teardown_status == CACHALOT_STATUS_UNKNOWN_POINTER);
    teardown_status = 0;
    atexit(at_exit_fails);
}

enum { THREADS = 8, ROUNDS = 4000 };

static void *hammer(void *arg) {
    cachalot_allocator *a = arg;
    void *live[16] = {0};
    uint64_t x = (uint64_t)(uintptr_t)&live; /* a per-thread seed */
    for (int i = 0; i < ROUNDS; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int slot = (int)((x >> 33) % 16);
        if (live[slot] != NULL && cachalot_free(a, live[slot]) != CACHALOT_STATUS_OK) {
            return (void *)1;
        }
        live[slot] = NULL;
        size_t size = 1 + (size_t)((x >> 13) % (24u << 20));
        if (cachalot_malloc(a, size, (void *)(uintptr_t)(slot % 2), &live[slot]) != CACHALOT_STATUS_OK) {
            return (void *)1;
        }
    }
    for (int slot = 0; slot < 16; slot++) {
        if (live[slot] != NULL && cachalot_free(a, live[slot]) != CACHALOT_STATUS_OK) {
            return (void *)1;
        }
    }
    return NULL;
}

static void threads(void) {
    cachalot_allocator *a = NULL;
    CHECK(cachalot_allocator_new_simulated(1ull << 40, "policy:pytorch", &a) == CACHALOT_STATUS_OK);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&t[i], NULL, hammer, a) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *result = (void *)1;
        pthread_join(t[i], &result);
        CHECK(result == NULL);
    }
    cachalot_stats stats = {.struct_size = sizeof stats};
    CHECK(cachalot_get_stats(a, &stats) == CACHALOT_STATUS_OK);
    CHECK(stats.allocation.all.current == 0 && stats.allocation.all.allocated == THREADS * ROUNDS);
    CHECK(stats.allocated_bytes.all.current == 0);
    cachalot_allocator_free(a);
}

int main(void) {
    cachalot_allocator *a = NULL;
    if (cachalot_allocator_new_simulated(8ull << 30, "policy:pytorch", &a) != CACHALOT_STATUS_OK) {
        fprintf(stderr, "cannot create a simulated allocator\n");
        return 1;
    }
    null_handles();
    creation();
    bad_requests_and_pointers(a);
    buffers_and_stats(a);
    out_of_memory();
    last_error_and_names();
    torch_entry_points();
    torch_entry_points_without_stderr();
    calls_during_teardown();
    threads();
    cachalot_allocator_free(a);
    printf("bad_input: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
