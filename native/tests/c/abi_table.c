/*
 * The runner of the table-driven bad-input suite (rows in abi_rows.c): builds a fixture
 * allocator over a simulated device, runs every row against it under each of three configs
 * (PyTorch's policy with classic segments, with expandable segments, and cachalot's own
 * policy), and checks each row's result, message, out-parameters and the allocator's state.
 * Afterwards the fixture must still work: its allocations free cleanly and an emptied cache
 * holds nothing, so no bad call left it half-updated.
 *
 * Prints one line per failed row and a closing "N passed, N failed" line; exits non-zero when
 * any row failed. A row that names a known library bug (abi_row.known) and fails is printed
 * and counted apart, without failing the run, until the bug is fixed. Built plain (run under valgrind) and with AddressSanitizer and
 * UndefinedBehaviorSanitizer by `make c-sanitize`.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_table.h"

char abi_primed[512];
static char message[512];
static int passed, failed, known;

static const char *const CONFIGS[] = {"policy:pytorch", "policy:pytorch,expandable_segments:True", ""};

/* The allocator's whole state as bytes: snapshot JSON, then the statistics. */
static char *state_of(const cachalot_allocator *a, size_t *len) {
    size_t text = 0;
    cachalot_stats stats = {.struct_size = sizeof stats};
    if (cachalot_snapshot_json(a, NULL, 0, &text) != CACHALOT_STATUS_OK) {
        return NULL;
    }
    char *s = malloc(text + sizeof stats);
    if (s == NULL || cachalot_snapshot_json(a, s, text, &text) != CACHALOT_STATUS_OK ||
        cachalot_get_stats(a, &stats) != CACHALOT_STATUS_OK) {
        free(s);
        return NULL;
    }
    memcpy(s + text, &stats, sizeof stats);
    *len = text + sizeof stats;
    return s;
}

static bool same_state(const cachalot_allocator *a, const char *before, size_t before_len) {
    size_t len = 0;
    char *now = state_of(a, &len);
    bool same = now != NULL && len == before_len && memcmp(now, before, len) == 0;
    free(now);
    return same;
}

/* Sets this thread's last error to the primer's message, which no row's call produces. */
static void prime(const char *config) {
    cachalot_allocator *unused = NULL;
    if (cachalot_allocator_new_simulated(1, config != NULL ? config : "abi_table_primer:1", &unused) !=
        CACHALOT_STATUS_INVALID_CONFIG) {
        fprintf(stderr, "the primer did not fail\n");
        exit(2);
    }
    cachalot_last_error_message(abi_primed, sizeof abi_primed);
}

static bool ok(cachalot_status s, const char *what) {
    if (s != CACHALOT_STATUS_OK) {
        cachalot_last_error_message(message, sizeof message);
        fprintf(stderr, "fixture: %s: %s (%s)\n", what, cachalot_status_name(s), message);
    }
    return s == CACHALOT_STATUS_OK;
}

static bool make_fixture(struct fixture *fx, const char *config) {
    void *p = NULL;
    memset(fx, 0, sizeof *fx);
    fx->config = config;
    fx->live_size = 3 << 20;
    fx->host_heap = malloc(64);
    fx->ptr[P_HOST_HEAP] = fx->host_heap;
    fx->ptr[P_HOST_STACK] = &fx->host_stack;
    fx->ptr[P_FOREIGN] = (void *)0x1234;
    fx->ptr[P_ALL_ONES] = (void *)UINTPTR_MAX;
    if (!ok(cachalot_allocator_new_simulated(FIXTURE_CAPACITY, config, &fx->a), "new") ||
        /* A segment of its own, freed and given back: a pointer into nothing. */
        !ok(cachalot_malloc(fx->a, 30 << 20, NULL, &fx->ptr[P_RELEASED]), "released") ||
        !ok(cachalot_free(fx->a, fx->ptr[P_RELEASED]), "free released") || !ok(cachalot_empty_cache(fx->a), "empty") ||
        !ok(cachalot_malloc(fx->a, fx->live_size, NULL, &fx->ptr[P_LIVE]), "live") ||
        /* A freed small block whose segment stays (it holds `keep`). */
        !ok(cachalot_malloc(fx->a, 1000, NULL, &fx->keep), "keep") ||
        !ok(cachalot_malloc(fx->a, 1000, NULL, &fx->ptr[P_FREED]), "freed") ||
        !ok(cachalot_malloc(fx->a, 1000, NULL, &fx->ptr[P_FULL_STREAMS]), "full") ||
        !ok(cachalot_free(fx->a, fx->ptr[P_FREED]), "free freed")) {
        return false;
    }
    fx->ptr[P_INTERIOR] = (char *)fx->ptr[P_LIVE] + 512;
    fx->ptr[P_INTERIOR_1] = (char *)fx->ptr[P_LIVE] + 1;
    fx->ptr[P_LAST_BYTE] = (char *)fx->ptr[P_LIVE] + fx->live_size - 1;
    fx->ptr[P_FREE_START] = (char *)fx->ptr[P_LIVE] + fx->live_size;
    fx->ptr[P_FREE_INSIDE] = (char *)fx->ptr[P_LIVE] + fx->live_size + 4096;
    for (uintptr_t s = 1; s <= 255; s++) {
        if (!ok(cachalot_record_stream(fx->a, fx->ptr[P_FULL_STREAMS], (void *)s), "record")) {
            return false;
        }
    }
    /* Another allocator's allocation, placed far from anything an 8 GiB device can hold. */
    if (!ok(cachalot_allocator_new_simulated(1ull << 40, config, &fx->other), "other") ||
        !ok(cachalot_malloc(fx->other, 600ull << 30, NULL, &p), "other big") ||
        !ok(cachalot_malloc(fx->other, 1 << 20, NULL, &fx->ptr[P_OTHER]), "other small")) {
        return false;
    }
    return true;
}

/* Frees the fixture; counts as checks that its allocations free cleanly and all goes back. */
static void drop_fixture(struct fixture *fx) {
    cachalot_stats st = {.struct_size = sizeof st};
    bool clean = ok(cachalot_free(fx->a, fx->ptr[P_LIVE]), "free live") &&
                 ok(cachalot_free(fx->a, fx->keep), "free keep") &&
                 ok(cachalot_free(fx->a, fx->ptr[P_FULL_STREAMS]), "free full") &&
                 ok(cachalot_empty_cache(fx->a), "empty") && ok(cachalot_get_stats(fx->a, &st), "stats") &&
                 st.allocation.all.current == 0 && st.allocated_bytes.all.current == 0 &&
                 st.active_bytes.all.current == 0 && st.reserved_bytes.all.current == 0;
    if (clean) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "[%s] the fixture did not end empty\n", fx->config);
    }
    cachalot_allocator_free(fx->a);
    cachalot_allocator_free(fx->other);
    free(fx->host_heap);
}

static int64_t reserved(const cachalot_allocator *a) {
    cachalot_stats st = {.struct_size = sizeof st};
    return cachalot_get_stats(a, &st) == CACHALOT_STATUS_OK ? st.reserved_bytes.all.current : -1;
}

static void run_row(struct fixture *fx, const struct abi_row *row, size_t index, char **state, size_t *state_len) {
    int64_t reserved_before = reserved(fx->a);
    prime(row->in.primer);
    int got = abi_call(fx, row);
    cachalot_last_error_message(message, sizeof message);
    bool result = got == row->expect || (row->also != 0 && got == row->also);
    /* A success leaves the last error alone; a failure sets it to text with the needle. */
    bool text = got == CACHALOT_STATUS_OK || row->needle == LEFT_ALONE
                    ? strcmp(message, abi_primed) == 0
                    : strcmp(message, abi_primed) != 0 && strstr(message, row->needle) != NULL;
    bool same = (row->flags & MAY_CHANGE) != 0 || same_state(fx->a, *state, *state_len);
    int64_t reserved_after = reserved(fx->a);
    bool kept = (row->flags & NO_GROWTH) == 0 || reserved_after <= reserved_before;
    if ((row->flags & IN_FRACTION) != 0 && reserved_after > reserved_before) {
        kept = reserved_after <= (int64_t)(row->in.fraction * (double)FIXTURE_CAPACITY);
    }
    if (result && text && same && kept) {
        passed++;
    } else if (row->known != NULL) {
        known++;
        printf("[%s] row %zu \"%s\": known bug: %s (got %s; reserved %lld -> %lld bytes)\n", fx->config, index,
               row->what, row->known, got >= RETURNED ? "a wrong output" : cachalot_status_name(got),
               (long long)reserved_before, (long long)reserved_after);
    } else {
        failed++;
        fprintf(stderr, "[%s] row %zu \"%s\": got %s, expected %s; message \"%s\", expected %s \"%s\"%s%s\n",
                fx->config, index, row->what,
                got >= RETURNED ? (got == RETURNED ? "RETURNED" : "a wrong output") : cachalot_status_name(got),
                row->expect == RETURNED ? "RETURNED" : cachalot_status_name(row->expect), message,
                row->needle == LEFT_ALONE ? "unchanged from" : "to contain",
                row->needle == LEFT_ALONE ? abi_primed : row->needle, same ? "" : "; the allocator's state changed",
                kept ? "" : "; the request reserved more memory than it may");
    }
    if ((row->flags & MAY_CHANGE) != 0) {
        free(*state);
        *state = state_of(fx->a, state_len);
    }
}

int main(void) {
    unsetenv("CACHALOT_ALLOC_CONF");
    abi_rows_prepare();
    for (size_t c = 0; c < sizeof CONFIGS / sizeof CONFIGS[0]; c++) {
        struct fixture fx;
        if (!make_fixture(&fx, CONFIGS[c])) {
            return 2;
        }
        size_t state_len = 0;
        char *state = state_of(fx.a, &state_len);
        if (state == NULL) {
            return 2;
        }
        for (size_t i = 0; i < abi_row_count; i++) {
            run_row(&fx, &abi_rows[i], i, &state, &state_len);
        }
        free(state);
        drop_fixture(&fx);
    }
    printf("abi_table: %zu rows x %zu configs: %d passed, %d failed, %d known library bugs shown\n",
           abi_row_count, sizeof CONFIGS / sizeof CONFIGS[0], passed, failed, known);
    return failed == 0 ? 0 : 1;
}
