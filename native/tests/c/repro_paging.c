/*
 * Minimal reproducers of the library bugs the C ABI hardening found (docs/reliability-c-abi.md),
 * all in cachalot's own policy (the default config, which maps pages in virtual ranges;
 * core/src/engine/paged/paging.rs), all fixed since. Each prints what it saw and whether the bug is back;
 * the exit status is the number of bugs present (`make c-repro`, part of `make test`; the core's
 * own tests in core/tests/policy.rs pin the same behaviour).
 *
 * 1. A request larger than the device makes the allocator create physical chunks for every
 *    free page before failing, and keep them: the failed call leaves the device full.
 * 2. One request that needs several new chunks can exceed the memory fraction: each chunk is
 *    checked against the memory reserved before the request, not counting the chunks already
 *    created for it.
 * 3. empty_cache, when the kept chunks alone bring reserved memory to 0, returns them but
 *    keeps the now empty virtual range: the statistics count it as a segment while the
 *    snapshot lists none.
 */
#include <stdio.h>
#include <string.h>

#include "cachalot.h"

static cachalot_stats stats_of(cachalot_allocator *a) {
    cachalot_stats s = {.struct_size = sizeof s};
    cachalot_get_stats(a, &s);
    return s;
}

static int report(const char *what, int present, const char *seen) {
    printf("%s: %s (%s)\n", what, present ? "BUG PRESENT" : "fixed", seen);
    return present;
}

static int failed_request_keeps_the_device(void) {
    cachalot_allocator *a = NULL;
    void *p = NULL;
    char seen[160];
    cachalot_allocator_new_simulated(8ull << 30, "", &a);
    cachalot_status s = cachalot_malloc(a, 9ull << 30, NULL, &p);
    long long reserved = stats_of(a).reserved_bytes.all.current;
    snprintf(seen, sizeof seen, "9 GiB on an 8 GiB device: %s, then %lld bytes reserved", cachalot_status_name(s),
             reserved);
    cachalot_allocator_free(a);
    return report("1. a failed request keeps the device", reserved != 0, seen);
}

static int fraction_overrun(void) {
    cachalot_allocator *a = NULL;
    void *p = NULL, *q = NULL;
    char seen[160];
    cachalot_allocator_new_simulated(8ull << 30, "", &a);
    cachalot_set_memory_fraction(a, 0.001); /* 8589934 bytes allowed */
    cachalot_malloc(a, 4 << 20, NULL, &p);
    cachalot_status s = cachalot_malloc(a, 6 << 20, NULL, &q);
    long long reserved = stats_of(a).reserved_bytes.all.current;
    snprintf(seen, sizeof seen, "4 MiB then 6 MiB with 8589934 bytes allowed: %s, %lld bytes reserved",
             cachalot_status_name(s), reserved);
    cachalot_allocator_free(a);
    return report("2. a request overruns the memory fraction", reserved > 8589934, seen);
}

static int empty_range_counted(void) {
    cachalot_allocator *a = NULL;
    void *p = NULL;
    char seen[200], json[256];
    size_t len = 0;
    cachalot_allocator_new_simulated(8ull << 30, "", &a);
    cachalot_malloc(a, 9ull << 30, NULL, &p); /* fails; leaves kept chunks (bug 1) */
    cachalot_empty_cache(a);
    cachalot_stats s = stats_of(a);
    cachalot_snapshot_json(a, json, sizeof json, &len);
    int listed = strstr(json, "\"segments\":[]") == NULL;
    snprintf(seen, sizeof seen, "after empty_cache: %lld bytes reserved, %lld segments counted, snapshot lists %s",
             (long long)s.reserved_bytes.all.current, (long long)s.segment.all.current, listed ? "some" : "none");
    cachalot_allocator_free(a);
    return report("3. empty_cache keeps an empty range", s.segment.all.current != 0 && !listed, seen);
}

int main(void) {
    int present = failed_request_keeps_the_device() + fraction_overrun() + empty_range_counted();
    printf("repro_paging: %d of 3 bugs present\n", present);
    return present;
}
