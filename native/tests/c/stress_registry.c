/*
 * The stress test's process-wide set of live start addresses, sharded by address so threads
 * seldom wait on each other (its locks are the test's, apart from the allocator's own).
 *
 * Invariant: an address is in the set from just after the malloc that returned it until just
 * before the free that returns it, so finding it already there on insert means the allocator
 * handed out one address to two live allocations.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "stress.h"

enum { SHARDS = 64 };

struct shard {
    pthread_mutex_t lock;
    uintptr_t *keys;
    size_t n, cap;
};

static struct shard shards[SHARDS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&shards[i].lock, NULL);
    }
}

static struct shard *shard_of(uintptr_t addr) {
    pthread_once(&once, init);
    uint64_t h = (uint64_t)addr * 0x9e3779b97f4a7c15ull;
    return &shards[h >> 58];
}

bool registry_insert(uintptr_t addr) {
    struct shard *s = shard_of(addr);
    bool fresh = true;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n && fresh; i++) {
        fresh = s->keys[i] != addr;
    }
    if (fresh) {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 16;
            s->keys = realloc(s->keys, s->cap * sizeof *s->keys);
            if (s->keys == NULL) {
                abort();
            }
        }
        s->keys[s->n++] = addr;
    }
    pthread_mutex_unlock(&s->lock);
    return fresh;
}

bool registry_remove(uintptr_t addr) {
    struct shard *s = shard_of(addr);
    bool found = false;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++) {
        if (s->keys[i] == addr) {
            s->keys[i] = s->keys[--s->n];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}
