/*
 * One thread of the stress test: a seeded random mix of every call that acts on a shared
 * allocator, with the checks that need no other thread's state.
 *
 * Mix per operation: malloc 45% (sizes from 1 byte to 128 MiB, on the thread's own stream,
 * a shared stream or the default stream), free 33% (a third of them after recording the
 * allocation on other threads' streams), record_stream on a live allocation 6%, stats 8%,
 * summary or snapshot 2%, empty_cache 2%, reset_peak_stats 1%, memory fraction 0.25% (second
 * half only). Invariant: an allocation is in this thread's live list, and in the registry,
 * exactly while it is live; the list is touched only by this thread (and read at checkpoints).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stress.h"

static uint64_t next(struct worker *w) {
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

static uint64_t below(struct worker *w, uint64_t n) {
    return next(w) % n;
}

void *stress_stream(int t) {
    return (void *)(uintptr_t)(0x100 + t);
}

/* A stream for a new allocation: mostly the thread's own, else a shared one or the default. */
static void *pick_stream(struct worker *w) {
    uint64_t r = below(w, 100);
    return r < 85 ? stress_stream(w->id) : r < 95 ? (void *)(uintptr_t)0x1 : NULL;
}

static size_t pick_size(struct worker *w) {
    uint64_t r = below(w, 100);
    if (r < 60) {
        return 1 + below(w, 64 << 10);
    }
    if (r < 85) {
        return (64 << 10) + below(w, (1 << 20) - (64 << 10));
    }
    if (r < 98) {
        return (1 << 20) + below(w, 15 << 20);
    }
    return (16 << 20) + below(w, 112 << 20);
}

static void do_malloc(struct worker *w) {
    size_t size = pick_size(w);
    void *p = NULL;
    cachalot_status s = cachalot_malloc(g_stress.a, size, pick_stream(w), &p);
    if (s == CACHALOT_STATUS_OUT_OF_MEMORY && atomic_load(&g_stress.fraction_set)) {
        w->ooms++;
        return;
    }
    if (s != CACHALOT_STATUS_OK) {
        stress_error(w, "malloc", s);
        return;
    }
    w->mallocs++;
    uintptr_t lo = (uintptr_t)p, hi = lo + size;
    for (int i = 0; i < w->n_live; i++) {
        uintptr_t l = (uintptr_t)w->live[i].ptr, h = l + w->live[i].size;
        if (lo < h && l < hi) {
            fprintf(stderr, "thread %d: [%p, +%zu) overlaps its own live [%p, +%zu)\n", w->id, p, size,
                    w->live[i].ptr, w->live[i].size);
            w->errors++;
        }
    }
    if (!registry_insert(lo)) {
        fprintf(stderr, "thread %d: %p handed out while another thread holds it\n", w->id, p);
        w->errors++;
    }
    w->live[w->n_live++] = (struct live){p, size};
}

static void do_free(struct worker *w) {
    int i = (int)below(w, (uint64_t)w->n_live);
    struct live l = w->live[i];
    if (g_stress.threads > 1 && below(w, 3) == 0) {
        int uses = 1 + (int)below(w, 2);
        for (int k = 0; k < uses; k++) {
            int other = (w->id + 1 + (int)below(w, (uint64_t)g_stress.threads - 1)) % g_stress.threads;
            cachalot_status s = cachalot_record_stream(g_stress.a, l.ptr, stress_stream(other));
            if (s != CACHALOT_STATUS_OK) {
                stress_error(w, "record_stream before free", s);
            }
            w->records++;
        }
    }
    w->live[i] = w->live[--w->n_live];
    if (!registry_remove((uintptr_t)l.ptr)) {
        fprintf(stderr, "thread %d: %p was not in the registry\n", w->id, l.ptr);
        w->errors++;
    }
    cachalot_status s = cachalot_free(g_stress.a, l.ptr);
    if (s != CACHALOT_STATUS_OK) {
        stress_error(w, "free", s);
    }
    w->frees++;
}

static void check_stats(struct worker *w) {
    cachalot_stats st = {.struct_size = sizeof st};
    cachalot_status s = cachalot_get_stats(g_stress.a, &st);
    w->stats_reads++;
    if (s != CACHALOT_STATUS_OK) {
        stress_error(w, "get_stats", s);
        return;
    }
    const cachalot_stat_array *arrays[] = {&st.allocation, &st.segment, &st.active, &st.allocated_bytes,
                                           &st.reserved_bytes, &st.active_bytes, &st.requested_bytes};
    bool ok = st.struct_size == sizeof st && st.version == CACHALOT_STATS_VERSION &&
              st.allocated_bytes.all.current <= st.active_bytes.all.current &&
              st.active_bytes.all.current <= st.reserved_bytes.all.current &&
              /* requested bytes, like active ones, count pending frees (PyTorch's free_block) */
              st.requested_bytes.all.current <= st.active_bytes.all.current &&
              st.allocation.all.current <= st.active.all.current;
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        const cachalot_stat_array *x = arrays[i];
        ok = ok && x->all.current >= 0 && x->all.peak >= x->all.current &&
             x->all.current == x->small_pool.current + x->large_pool.current &&
             x->all.current == x->all.allocated - x->all.freed;
    }
    if (!ok) {
        fprintf(stderr, "thread %d: inconsistent statistics (allocated %lld active %lld reserved %lld requested %lld)\n",
                w->id, (long long)st.allocated_bytes.all.current, (long long)st.active_bytes.all.current,
                (long long)st.reserved_bytes.all.current, (long long)st.requested_bytes.all.current);
        w->errors++;
    }
}

/* A summary or snapshot, which may grow between the size query and the copy: retry then. */
static void read_report(struct worker *w, bool summary) {
    size_t needed = 0;
    for (int attempt = 0; attempt < 20; attempt++) {
        cachalot_status s = summary ? cachalot_memory_summary(g_stress.a, true, NULL, 0, &needed)
                                    : cachalot_snapshot_json(g_stress.a, NULL, 0, &needed);
        if (s != CACHALOT_STATUS_OK) {
            stress_error(w, "report size", s);
            return;
        }
        size_t cap = needed + needed / 8, len = 0;
        char *buf = malloc(cap);
        if (buf == NULL) {
            abort();
        }
        s = summary ? cachalot_memory_summary(g_stress.a, true, buf, cap, &len)
                    : cachalot_snapshot_json(g_stress.a, buf, cap, &len);
        if (s == CACHALOT_STATUS_OK) {
            bool whole = len >= 2 && strlen(buf) + 1 == len &&
                         (summary ? strstr(buf, "memory summary") != NULL : buf[0] == '{' && buf[len - 2] == '}');
            if (!whole) {
                fprintf(stderr, "thread %d: a %s that is not whole\n", w->id, summary ? "summary" : "snapshot");
                w->errors++;
            }
            free(buf);
            w->reports++;
            return;
        }
        free(buf);
        if (s != CACHALOT_STATUS_BUFFER_TOO_SMALL) {
            stress_error(w, "report", s);
            return;
        }
        w->retries++;
    }
    fprintf(stderr, "thread %d: a report never fit\n", w->id);
    w->errors++;
}

static void set_fraction(struct worker *w) {
    static const double choices[] = {0.0005, 0.002, 0.01, 0.05, 1.0};
    double f = choices[below(w, sizeof choices / sizeof choices[0])];
    if (f < 1.0) {
        atomic_store(&g_stress.fraction_set, true);
    }
    cachalot_status s = cachalot_set_memory_fraction(g_stress.a, f);
    if (s != CACHALOT_STATUS_OK) {
        stress_error(w, "set_memory_fraction", s);
    }
    w->fractions++;
}

static void one_op(struct worker *w) {
    uint64_t r = below(w, 10000);
    cachalot_status s = CACHALOT_STATUS_OK;
    if (r < 4500) {
        if (w->n_live < LIVE_MAX) {
            do_malloc(w);
        } else {
            do_free(w);
        }
    } else if (r < 7800) {
        if (w->n_live > 0) {
            do_free(w);
        }
    } else if (r < 8400) {
        if (w->n_live > 0) {
            int other = (int)below(w, (uint64_t)g_stress.threads);
            s = cachalot_record_stream(g_stress.a, w->live[below(w, (uint64_t)w->n_live)].ptr, stress_stream(other));
            w->records++;
        }
    } else if (r < 9200) {
        check_stats(w);
    } else if (r < 9400) {
        read_report(w, r < 9300);
    } else if (r < 9600) {
        s = cachalot_empty_cache(g_stress.a);
        w->empties++;
    } else if (r < 9700) {
        s = cachalot_reset_peak_stats(g_stress.a);
    } else if (r < 9725 && atomic_load(&g_stress.fractions_open)) {
        set_fraction(w);
    }
    if (s != CACHALOT_STATUS_OK) {
        stress_error(w, "record_stream, empty_cache or reset_peak_stats", s);
    }
}

void *stress_worker(void *arg) {
    struct worker *w = arg;
    long per_phase = g_stress.ops / (CHECKPOINTS + 1);
    for (int phase = 0; phase <= CHECKPOINTS; phase++) {
        for (long i = 0; i < per_phase; i++) {
            one_op(w);
        }
        if (phase < CHECKPOINTS) {
            if (pthread_barrier_wait(&g_stress.barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
                stress_checkpoint(phase);
            }
            pthread_barrier_wait(&g_stress.barrier);
        }
    }
    while (w->n_live > 0) {
        do_free(w);
    }
    return NULL;
}
