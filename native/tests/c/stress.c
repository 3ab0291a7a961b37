/*
 * The concurrency stress test of the C ABI: `stress [THREADS [OPS [CONFIG [CAPACITY]]]]` runs
 * THREADS threads (default 16) of OPS operations each (default 20000) on one allocator over a
 * simulated device of CAPACITY bytes (default 1 TiB, the most: large enough that, with at
 * most 48 live allocations of up to 128 MiB per thread, only a memory fraction can make a
 * request fail) with config CONFIG (default "": cachalot's own policy). See stress.h for
 * what it checks; stress_worker.c for the operation mix.
 *
 * Prints a summary line (operations of each kind, errors) and exits non-zero on any error.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stress.h"

struct stress g_stress;

void stress_error(struct worker *w, const char *call, cachalot_status s) {
    char message[512];
    cachalot_last_error_message(message, sizeof message);
    if (w->errors++ < 5) {
        fprintf(stderr, "thread %d: %s failed: %s: %s\n", w->id, call, cachalot_status_name(s), message);
    }
}

static int by_address(const void *x, const void *y) {
    uintptr_t a = (uintptr_t)((const struct live *)x)->ptr, b = (uintptr_t)((const struct live *)y)->ptr;
    return a < b ? -1 : a > b;
}

static void checkpoint_failed(const char *what, long long ours, long long theirs) {
    fprintf(stderr, "checkpoint: %s: the threads hold %lld, the allocator says %lld\n", what, ours, theirs);
    atomic_fetch_add(&g_stress.checkpoint_errors, 1);
}

void stress_checkpoint(int index) {
    static struct live all[MAX_THREADS * LIVE_MAX];
    size_t n = 0;
    long long requested = 0;
    for (int t = 0; t < g_stress.threads; t++) {
        for (int i = 0; i < g_stress.workers[t].n_live; i++) {
            all[n++] = g_stress.workers[t].live[i];
            requested += (long long)g_stress.workers[t].live[i].size;
        }
    }
    qsort(all, n, sizeof all[0], by_address);
    for (size_t i = 1; i < n; i++) {
        if ((uintptr_t)all[i - 1].ptr + all[i - 1].size > (uintptr_t)all[i].ptr) {
            fprintf(stderr, "checkpoint %d: live [%p, +%zu) overlaps live [%p, +%zu)\n", index, all[i - 1].ptr,
                    all[i - 1].size, all[i].ptr, all[i].size);
            atomic_fetch_add(&g_stress.checkpoint_errors, 1);
        }
    }
    /* Requested bytes count frees still pending on other streams: wait for those first. */
    cachalot_stats st = {.struct_size = sizeof st};
    if (cachalot_empty_cache(g_stress.a) != CACHALOT_STATUS_OK || cachalot_get_stats(g_stress.a, &st) != CACHALOT_STATUS_OK) {
        checkpoint_failed("empty_cache or get_stats failed", 0, 0);
        return;
    }
    if (st.allocation.all.current != (long long)n) {
        checkpoint_failed("live allocations", (long long)n, st.allocation.all.current);
    }
    if (st.requested_bytes.all.current != requested) {
        checkpoint_failed("requested bytes", requested, st.requested_bytes.all.current);
    }
    if (index == CHECKPOINTS / 2) {
        atomic_store(&g_stress.fractions_open, true);
    }
}

static int final_checks(void) {
    uint64_t mallocs = 0, frees = 0, ooms = 0, records = 0, empties = 0, fractions = 0, stats = 0, reports = 0,
             retries = 0, errors = atomic_load(&g_stress.checkpoint_errors);
    for (int t = 0; t < g_stress.threads; t++) {
        const struct worker *w = &g_stress.workers[t];
        mallocs += w->mallocs, frees += w->frees, ooms += w->ooms, records += w->records, empties += w->empties;
        fractions += w->fractions, stats += w->stats_reads, reports += w->reports, retries += w->retries;
        errors += w->errors;
    }
    cachalot_stats st = {.struct_size = sizeof st};
    size_t len = 0;
    char json[4096];
    if (cachalot_empty_cache(g_stress.a) != CACHALOT_STATUS_OK || cachalot_get_stats(g_stress.a, &st) != CACHALOT_STATUS_OK ||
        cachalot_snapshot_json(g_stress.a, json, sizeof json, &len) != CACHALOT_STATUS_OK) {
        fprintf(stderr, "final: empty_cache, get_stats or snapshot_json failed\n");
        errors++;
    }
    const struct {
        const char *what;
        long long got, want;
    } checks[] = {
        {"allocations now", st.allocation.all.current, 0},
        {"allocated bytes", st.allocated_bytes.all.current, 0},
        {"active bytes", st.active_bytes.all.current, 0},
        {"reserved bytes", st.reserved_bytes.all.current, 0},
        {"requested bytes", st.requested_bytes.all.current, 0},
        {"allocations counted", st.allocation.all.allocated, (long long)mallocs},
        {"frees counted", st.allocation.all.freed, (long long)frees},
        {"out of memory counted", (long long)st.num_ooms, (long long)ooms},
        {"mallocs vs frees", (long long)mallocs, (long long)frees},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (checks[i].got != checks[i].want) {
            fprintf(stderr, "final: %s is %lld, expected %lld\n", checks[i].what, checks[i].got, checks[i].want);
            errors++;
        }
    }
    if (strstr(json, "\"segments\":[]") == NULL) {
        fprintf(stderr, "final: the snapshot still lists segments: %.200s\n", json);
        errors++;
    } else if (st.segment.all.current != 0) {
        /* Empty virtual ranges kept after empty_cache would be counted here (fixed bug). */
        fprintf(stderr, "final: %lld segments counted after empty_cache, none listed\n", (long long)st.segment.all.current);
        errors++;
    }
    printf("stress: %d threads x %ld ops: %llu mallocs, %llu frees, %llu out of memory (fraction), %llu records, "
           "%llu empty_cache, %llu fractions, %llu stats, %llu reports (%llu retried), %llu device allocs; %llu errors\n",
           g_stress.threads, g_stress.ops, (unsigned long long)mallocs, (unsigned long long)frees,
           (unsigned long long)ooms, (unsigned long long)records, (unsigned long long)empties,
           (unsigned long long)fractions, (unsigned long long)stats, (unsigned long long)reports,
           (unsigned long long)retries, (unsigned long long)st.num_device_alloc, (unsigned long long)errors);
    return errors == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    g_stress.threads = argc > 1 ? atoi(argv[1]) : 16;
    g_stress.ops = argc > 2 ? atol(argv[2]) : 20000;
    const char *config = argc > 3 ? argv[3] : "";
    uint64_t capacity = argc > 4 ? strtoull(argv[4], NULL, 0) : 1ull << 40;
    if (g_stress.threads < 1 || g_stress.threads > MAX_THREADS || g_stress.ops < CHECKPOINTS + 1) {
        fprintf(stderr, "usage: stress [THREADS (1-%d) [OPS [CONFIG [CAPACITY]]]]\n", MAX_THREADS);
        return 2;
    }
    if (cachalot_allocator_new_simulated(capacity, config, &g_stress.a) != CACHALOT_STATUS_OK) {
        fprintf(stderr, "cannot create the allocator (config \"%s\")\n", config);
        return 2;
    }
    pthread_barrier_init(&g_stress.barrier, NULL, (unsigned)g_stress.threads);
    pthread_t tids[MAX_THREADS];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int t = 0; t < g_stress.threads; t++) {
        struct worker *w = &g_stress.workers[t];
        w->id = t;
        w->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
        if (pthread_create(&tids[t], NULL, stress_worker, w) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 2;
        }
    }
    for (int t = 0; t < g_stress.threads; t++) {
        pthread_join(tids[t], NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int rc = final_checks();
    printf("stress: config \"%s\", %.2f s\n", config, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    pthread_barrier_destroy(&g_stress.barrier);
    cachalot_allocator_free(g_stress.a);
    return rc;
}
