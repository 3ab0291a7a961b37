/*
 * cachalot from C: create an allocator, allocate and free, print the memory summary.
 *
 * It runs over a simulated device, so it needs no GPU. For real memory, create the allocator
 * with cachalot_allocator_new_cuda(0, NULL, &a) instead (NULL: read CACHALOT_ALLOC_CONF).
 *
 *   cc -std=c11 example.c $(pkg-config --cflags --libs cachalot) -o example
 */
#include <stdio.h>
#include <stdlib.h>

#include "cachalot.h"

/* Prints the failed call with cachalot's message and exits. */
static void check(cachalot_status status, const char *call) {
    if (status != CACHALOT_STATUS_OK) {
        char message[512];
        cachalot_last_error_message(message, sizeof message);
        fprintf(stderr, "%s failed: %s: %s\n", call, cachalot_status_name(status), message);
        exit(1);
    }
}

int main(void) {
    printf("cachalot %s\n", cachalot_version());

    cachalot_allocator *allocator = NULL;
    check(cachalot_allocator_new_simulated(80ull << 30, "policy:pytorch", &allocator), "new_simulated");

    /* A few activations of a training step: small blocks share 2 MiB segments, large ones
     * get 20 MiB segments or their own. */
    static const size_t sizes[] = {4096, 1000, 786432, 3u << 20, 12u << 20, 64u << 20, 512, 8u << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *ptrs[N];
    for (int i = 0; i < N; i++) {
        check(cachalot_malloc(allocator, sizes[i], NULL, &ptrs[i]), "malloc");
    }
    for (int i = 0; i < N; i += 2) { /* free half: their blocks stay cached */
        check(cachalot_free(allocator, ptrs[i]), "free");
    }
    void *again = NULL; /* served from the cache: no new segment */
    check(cachalot_malloc(allocator, 4096, NULL, &again), "malloc");

    size_t len = 0;
    check(cachalot_memory_summary(allocator, false, NULL, 0, &len), "memory_summary (size)");
    char *summary = malloc(len);
    if (summary == NULL) {
        return 1;
    }
    check(cachalot_memory_summary(allocator, false, summary, len, &len), "memory_summary");
    printf("%s\n", summary);
    free(summary);

    cachalot_stats stats = {.struct_size = sizeof stats};
    check(cachalot_get_stats(allocator, &stats), "get_stats");
    printf("allocations: %lld live, %lld peak; reserved %lld bytes in %llu device allocations\n",
           (long long)stats.allocation.all.current, (long long)stats.allocation.all.peak,
           (long long)stats.reserved_bytes.all.current, (unsigned long long)stats.num_device_alloc);

    for (int i = 1; i < N; i += 2) {
        check(cachalot_free(allocator, ptrs[i]), "free");
    }
    check(cachalot_free(allocator, again), "free");
    check(cachalot_empty_cache(allocator), "empty_cache");
    check(cachalot_get_stats(allocator, &stats), "get_stats");
    cachalot_allocator_free(allocator);
    if (stats.allocation.all.current != 0 || stats.reserved_bytes.all.current != 0) {
        fprintf(stderr, "expected nothing live or reserved after empty_cache\n");
        return 1;
    }
    printf("C example: ok\n");
    return 0;
}
