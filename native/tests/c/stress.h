/*
 * The concurrency stress test of the C ABI (stress.c runs it, stress_worker.c is one thread's
 * operation mix, stress_registry.c the process-wide set of live addresses).
 *
 * Many threads share one allocator over a simulated device: each allocates and frees on its
 * own stream and on shared ones, records its allocations on other threads' streams before
 * freeing them, empties the cache, reads statistics, summaries and snapshots, and (in the
 * second half only) sets memory fractions.
 *
 * Invariants checked: no call fails except out of memory, and that only once a fraction has
 * been set; every address handed out is distinct among live allocations (per thread on each
 * malloc, process-wide by start address on each malloc, and by whole interval across all
 * threads at each checkpoint, where the allocator's counts must equal the threads' own);
 * statistics read at any time are consistent; at the end, with everything freed and the
 * cache emptied, nothing is allocated, active or reserved and the counts match the calls.
 */
/* Each .c file defines _POSIX_C_SOURCE 200809L before any include (pthread barriers). */
#ifndef CACHALOT_STRESS_H
#define CACHALOT_STRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cachalot.h"

enum { LIVE_MAX = 48, CHECKPOINTS = 3, MAX_THREADS = 64 };

struct live {
    void *ptr;
    size_t size;
};

/* One thread's state; read by the checkpoint thread only while every worker waits. */
struct worker {
    int id;
    uint64_t rng;
    struct live live[LIVE_MAX];
    int n_live;
    /* What this thread did. */
    uint64_t mallocs, frees, ooms, records, empties, fractions, stats_reads, reports, retries;
    uint64_t errors;
};

struct stress {
    cachalot_allocator *a;
    int threads;
    long ops;
    pthread_barrier_t barrier;
    atomic_bool fraction_set;    /* a fraction below 1 has been set: out of memory may happen */
    atomic_bool fractions_open;  /* the second half: fractions may be set */
    atomic_ulong checkpoint_errors;
    struct worker workers[MAX_THREADS];
};

/* Each thread of the stress test; `arg` is its struct worker, whose id indexes g_stress. */
void *stress_worker(void *arg);

/* At a checkpoint, on one thread while every other waits: the whole-interval and count checks. */
void stress_checkpoint(int index);

/* The stream handle of thread `t` (opaque integers: the simulated device takes any value). */
void *stress_stream(int t);

/* Prints a failed call once per thread up to a limit, and counts it. */
void stress_error(struct worker *w, const char *call, cachalot_status s);

extern struct stress g_stress;

/* The process-wide set of live start addresses: insert fails if present, remove if absent. */
bool registry_insert(uintptr_t addr);
bool registry_remove(uintptr_t addr);

#endif
