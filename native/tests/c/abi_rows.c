/*
 * The rows of the table-driven bad-input suite: for every exported function, NULL for each
 * pointer parameter (alone and with other bad arguments, which shows the order arguments are
 * checked in), and the cases of each kind of argument: sizes 0, SIZE_MAX and near it; double
 * frees, interior, foreign and host pointers; fractions outside [0, 1]; invalid UTF-8 and
 * invalid configs; buffers and stats structs too small; device ordinals out of range.
 *
 * Invariant: rows only name what differs from the ordinary call (abi_table.h); a row whose
 * call may change the allocator says MAY_CHANGE, every other row must leave it as it was.
 * Rows that succeed are there to pin an edge (free(NULL), a buffer of exactly the size) or
 * to set up the next row (a memory fraction of 0, then back to 1).
 */
#include <float.h>
#include <limits.h>
#include <math.h>

#include "abi_table.h"

#define S(x) CACHALOT_STATUS_##x
#define ROW(what, fn, expect, needle, ...) {what, fn, {__VA_ARGS__}, expect, 0, needle, 0, NULL}
#define ROW_CHANGES(what, fn, expect, needle, ...) {what, fn, {__VA_ARGS__}, expect, 0, needle, MAY_CHANGE, NULL}
#define ROW_ALSO(what, fn, expect, also, needle, ...) {what, fn, {__VA_ARGS__}, expect, also, needle, 0, NULL}
/* A request that fails out of memory: it may count, and release cache, but not reserve more. */
#define ROW_OOM(what, needle, known, ...)                                                            \
    {what, F_MALLOC, {__VA_ARGS__}, CACHALOT_STATUS_OUT_OF_MEMORY, 0, needle, MAY_CHANGE | NO_GROWTH, known}

#define HANDLE "allocator handle is NULL"
#define NOT_OURS "not allocated by this allocator"
#define TOO_SMALL "the text needs"
#define KIB64_KEY "abi_table_long_key_"

/* The largest request the allocator takes (2^40 bytes, 1 TiB). */
#define MAX_REQUEST ((size_t)1 << 40)

/* A configuration key of 64 KiB (see abi_rows_prepare). */
char abi_long_config[65536 + 8];

const struct abi_row abi_rows[] = {
    /* cachalot_malloc(allocator, size, stream, out_ptr) */
    ROW("malloc: NULL handle", F_MALLOC, S(NULL_POINTER), HANDLE, .handle = H_NULL, .size = 64),
    ROW("malloc: NULL out_ptr", F_MALLOC, S(NULL_POINTER), "out_ptr is NULL", .out = O_NULL, .size = 64),
    ROW("malloc: NULL handle and out_ptr", F_MALLOC, S(NULL_POINTER), HANDLE, .handle = H_NULL, .out = O_NULL,
        .size = 64),
    ROW("malloc: NULL handle, size 0", F_MALLOC, S(NULL_POINTER), HANDLE, .handle = H_NULL, .size = 0),
    ROW("malloc: size 0", F_MALLOC, S(INVALID_SIZE), "0 bytes", .size = 0),
    ROW("malloc: size 0, NULL out_ptr", F_MALLOC, S(NULL_POINTER), "out_ptr is NULL", .size = 0, .out = O_NULL),
    ROW("malloc: SIZE_MAX", F_MALLOC, S(INVALID_SIZE), "larger than any device", .size = SIZE_MAX),
    ROW("malloc: SIZE_MAX - 511 (rounding up would wrap)", F_MALLOC, S(INVALID_SIZE), "larger than any device",
        .size = SIZE_MAX - 511),
    ROW("malloc: SIZE_MAX / 2 + 1", F_MALLOC, S(INVALID_SIZE), "larger than any device", .size = SIZE_MAX / 2 + 1),
    ROW("malloc: 2^40 + 1", F_MALLOC, S(INVALID_SIZE), "larger than any device", .size = MAX_REQUEST + 1),
    ROW("malloc: SIZE_MAX on stream UINTPTR_MAX", F_MALLOC, S(INVALID_SIZE), "larger than any device",
        .size = SIZE_MAX, .stream = UINTPTR_MAX),
    ROW_CHANGES("set_memory_fraction: 0 (allowed)", F_SET_MEMORY_FRACTION, S(OK), LEFT_ALONE, .fraction = 0.0),
    ROW_OOM("malloc: 64 MiB under a memory fraction of 0", "allowed", NULL, .size = 64 << 20),
    ROW_CHANGES("set_memory_fraction: -0.0 is 0 (allowed)", F_SET_MEMORY_FRACTION, S(OK), LEFT_ALONE,
                .fraction = -0.0),
    ROW_OOM("malloc: 64 MiB under a memory fraction of -0.0", "allowed", NULL, .size = 64 << 20),
    ROW_CHANGES("set_memory_fraction: 0.001 (allowed)", F_SET_MEMORY_FRACTION, S(OK), LEFT_ALONE,
                .fraction = 0.001),
    /* Served from the cache (PyTorch's policy, whose 20 MiB segment is mostly free), or out of
     * memory: 6 MiB more than the fixture's 6 MiB is above the 8.6 MB allowed. */
    {"malloc: 6 MiB on top of 6 MiB reserved, 8.6 MB allowed", F_MALLOC, {.size = 6 << 20, .fraction = 0.001},
     S(OK), S(OUT_OF_MEMORY), "allowed", MAY_CHANGE | IN_FRACTION, NULL},
    ROW_CHANGES("set_memory_fraction: 1 (allowed)", F_SET_MEMORY_FRACTION, S(OK), LEFT_ALONE, .fraction = 1.0),
    ROW_OOM("malloc: 2^40 on an 8 GiB device", "out of memory", NULL, .size = MAX_REQUEST),
    ROW_OOM("malloc: capacity + 1", "out of memory", NULL, .size = FIXTURE_CAPACITY + 1),
    ROW_CHANGES("malloc: 1 byte on stream UINTPTR_MAX (any value is a stream)", F_MALLOC, S(OK), LEFT_ALONE,
                .size = 1, .stream = UINTPTR_MAX),

    /* cachalot_free(allocator, ptr) */
    ROW("free: NULL handle", F_FREE, S(NULL_POINTER), HANDLE, .handle = H_NULL, .ptr = P_LIVE),
    ROW("free: NULL handle, NULL ptr (the handle is checked first)", F_FREE, S(NULL_POINTER), HANDLE,
        .handle = H_NULL, .ptr = P_NULL),
    ROW("free: NULL ptr is ignored, as free(NULL) is", F_FREE, S(OK), LEFT_ALONE, .ptr = P_NULL),
    ROW("free: double free", F_FREE, S(DOUBLE_FREE), "already freed", .ptr = P_FREED),
    /* Best effort, as in PyTorch: the segment is gone, so nothing says it was ever ours. */
    ROW("free: double free after empty_cache gave its segment back", F_FREE, S(UNKNOWN_POINTER), NOT_OURS,
        .ptr = P_RELEASED),
    ROW("free: interior pointer (+512)", F_FREE, S(INTERIOR_POINTER), "points inside", .ptr = P_INTERIOR),
    ROW("free: interior pointer (+1)", F_FREE, S(INTERIOR_POINTER), "points inside", .ptr = P_INTERIOR_1),
    ROW("free: the allocation's last byte", F_FREE, S(INTERIOR_POINTER), "points inside", .ptr = P_LAST_BYTE),
    /* Best effort: the start of a free block that was never handed out reads as a double
     * free where the policy keeps such a block (classic segments), as unknown elsewhere. */
    ROW_ALSO("free: start of a free remainder, never handed out", F_FREE, S(DOUBLE_FREE), S(UNKNOWN_POINTER),
             ANY_MESSAGE, .ptr = P_FREE_START),
    ROW("free: inside a free remainder", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_FREE_INSIDE),
    ROW("free: 0x1234", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_FOREIGN),
    ROW("free: UINTPTR_MAX", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_ALL_ONES),
    ROW("free: a host stack address", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_HOST_STACK),
    ROW("free: a host heap pointer", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_HOST_HEAP),
    ROW("free: another allocator's allocation", F_FREE, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_OTHER),

    /* cachalot_record_stream(allocator, ptr, stream) */
    ROW("record_stream: NULL handle", F_RECORD_STREAM, S(NULL_POINTER), HANDLE, .handle = H_NULL, .ptr = P_LIVE,
        .stream = 7),
    ROW("record_stream: NULL ptr", F_RECORD_STREAM, S(NULL_POINTER), "ptr is NULL", .ptr = P_NULL, .stream = 7),
    ROW("record_stream: NULL handle and ptr", F_RECORD_STREAM, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .ptr = P_NULL),
    ROW("record_stream: freed", F_RECORD_STREAM, S(DOUBLE_FREE), "already freed", .ptr = P_FREED, .stream = 7),
    ROW("record_stream: freed, segment given back", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS,
        .ptr = P_RELEASED, .stream = 7),
    ROW("record_stream: interior pointer", F_RECORD_STREAM, S(INTERIOR_POINTER), "points inside",
        .ptr = P_INTERIOR, .stream = 7),
    ROW("record_stream: the allocation's last byte", F_RECORD_STREAM, S(INTERIOR_POINTER), "points inside",
        .ptr = P_LAST_BYTE, .stream = 7),
    ROW_ALSO("record_stream: start of a free remainder", F_RECORD_STREAM, S(DOUBLE_FREE), S(UNKNOWN_POINTER),
             ANY_MESSAGE, .ptr = P_FREE_START, .stream = 7),
    ROW("record_stream: 0x1234", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_FOREIGN, .stream = 7),
    ROW("record_stream: UINTPTR_MAX", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_ALL_ONES),
    ROW("record_stream: a host stack address", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_HOST_STACK),
    ROW("record_stream: a host heap pointer", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS, .ptr = P_HOST_HEAP),
    ROW("record_stream: another allocator's allocation", F_RECORD_STREAM, S(UNKNOWN_POINTER), NOT_OURS,
        .ptr = P_OTHER, .stream = 7),
    ROW("record_stream: a 256th stream", F_RECORD_STREAM, S(INVALID_ARGUMENT), "255 streams",
        .ptr = P_FULL_STREAMS, .stream = 256),
    ROW("record_stream: a stream already recorded, on a full allocation", F_RECORD_STREAM, S(OK), LEFT_ALONE,
        .ptr = P_FULL_STREAMS, .stream = 7),
    ROW("record_stream: the allocation's own stream", F_RECORD_STREAM, S(OK), LEFT_ALONE, .ptr = P_LIVE,
        .stream = 0),

    /* cachalot_empty_cache(allocator), cachalot_reset_peak_stats(allocator) */
    ROW("empty_cache: NULL handle", F_EMPTY_CACHE, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("reset_peak_stats: NULL handle", F_RESET_PEAK_STATS, S(NULL_POINTER), HANDLE, .handle = H_NULL),

    /* cachalot_set_memory_fraction(allocator, fraction) */
    ROW("set_memory_fraction: NULL handle", F_SET_MEMORY_FRACTION, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .fraction = 0.5),
    ROW("set_memory_fraction: NULL handle, NaN", F_SET_MEMORY_FRACTION, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .fraction = NAN),
    ROW("set_memory_fraction: -0.5", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = -0.5),
    ROW("set_memory_fraction: -DBL_MIN", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction",
        .fraction = -DBL_MIN),
    ROW("set_memory_fraction: 1.5", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = 1.5),
    ROW("set_memory_fraction: 1 + DBL_EPSILON", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction",
        .fraction = 1.0 + DBL_EPSILON),
    ROW("set_memory_fraction: DBL_MAX", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = DBL_MAX),
    ROW("set_memory_fraction: NaN", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = NAN),
    ROW("set_memory_fraction: -NaN", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = -NAN),
    ROW("set_memory_fraction: +inf", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = INFINITY),
    ROW("set_memory_fraction: -inf", F_SET_MEMORY_FRACTION, S(INVALID_ARGUMENT), "fraction", .fraction = -INFINITY),

    /* cachalot_allocator_new_cuda(device, config, out): the config is checked before the driver */
    ROW("new_cuda: NULL out", F_NEW_CUDA, S(NULL_POINTER), "out is NULL", .out = O_NULL),
    ROW("new_cuda: NULL out, bad config (out is checked first)", F_NEW_CUDA, S(NULL_POINTER), "out is NULL",
        .out = O_NULL, .config = "bogus_key:1"),
    ROW("new_cuda: unknown key", F_NEW_CUDA, S(INVALID_CONFIG), "allowed keys", .config = "bogus_key:1"),
    ROW("new_cuda: bad value", F_NEW_CUDA, S(INVALID_CONFIG), "garbage_collection_threshold",
        .config = "garbage_collection_threshold:2"),
    ROW("new_cuda: invalid UTF-8", F_NEW_CUDA, S(INVALID_CONFIG), "UTF-8", .config = "policy:\xff"),
    ROW("new_cuda: device -1, bad config (the config is checked first)", F_NEW_CUDA, S(INVALID_CONFIG),
        "allowed keys", .number = -1, .config = "bogus_key:1"),
    ROW("new_cuda: NULL config, bad CACHALOT_ALLOC_CONF", F_NEW_CUDA, S(INVALID_CONFIG), "allowed keys",
        .null_config = true, .env = "bogus_key:1"),
    ROW("new_cuda: device -1", F_NEW_CUDA, S(NO_DEVICE), "CUDA", .number = -1),
    ROW("new_cuda: device INT_MIN", F_NEW_CUDA, S(NO_DEVICE), "CUDA", .number = INT_MIN),
    ROW("new_cuda: device INT_MAX", F_NEW_CUDA, S(NO_DEVICE), "CUDA", .number = INT_MAX),
    ROW("new_cuda: device 99999", F_NEW_CUDA, S(NO_DEVICE), "CUDA", .number = 99999),

    /* cachalot_allocator_new_simulated(capacity, config, out) */
    ROW("new_simulated: NULL out", F_NEW_SIMULATED, S(NULL_POINTER), "out is NULL", .out = O_NULL),
    ROW("new_simulated: NULL out, capacity 0", F_NEW_SIMULATED, S(NULL_POINTER), "out is NULL", .out = O_NULL,
        .zero_capacity = true),
    ROW("new_simulated: capacity 0", F_NEW_SIMULATED, S(INVALID_ARGUMENT), "capacity", .zero_capacity = true),
    ROW("new_simulated: capacity 0, bad config (the config is checked first)", F_NEW_SIMULATED, S(INVALID_CONFIG),
        "allowed keys", .zero_capacity = true, .config = "bogus_key:1"),
    ROW("new_simulated: capacity UINT64_MAX", F_NEW_SIMULATED, S(INVALID_ARGUMENT), "capacity",
        .capacity = UINT64_MAX),
    ROW("new_simulated: capacity 1 TiB + 1", F_NEW_SIMULATED, S(INVALID_ARGUMENT), "capacity",
        .capacity = (1ull << 40) + 1),
    ROW("new_simulated: capacity 1 TiB (the most)", F_NEW_SIMULATED, S(OK), LEFT_ALONE, .capacity = 1ull << 40),
    ROW("new_simulated: capacity 1 byte", F_NEW_SIMULATED, S(OK), LEFT_ALONE, .capacity = 1),
    ROW("new_simulated: empty config", F_NEW_SIMULATED, S(OK), LEFT_ALONE, .config = ""),
    ROW("new_simulated: NULL config, CACHALOT_ALLOC_CONF unset", F_NEW_SIMULATED, S(OK), LEFT_ALONE,
        .null_config = true),
    ROW("new_simulated: NULL config, bad CACHALOT_ALLOC_CONF", F_NEW_SIMULATED, S(INVALID_CONFIG), "allowed keys",
        .null_config = true, .env = "bogus_key:1"),
    ROW("new_simulated: NULL config, CACHALOT_ALLOC_CONF not UTF-8", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .null_config = true, .env = "policy:\xff"),
    ROW("new_simulated: UTF-8: 0xff", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8", .config = "\xff"),
    ROW("new_simulated: UTF-8: a lone continuation byte", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .config = "policy:\x80pytorch"),
    ROW("new_simulated: UTF-8: an overlong '/'", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .config = "policy:\xc0\xaf"),
    ROW("new_simulated: UTF-8: a surrogate", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .config = "policy:\xed\xa0\x80"),
    ROW("new_simulated: UTF-8: past U+10FFFF", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .config = "policy:\xf4\x90\x80\x80"),
    ROW("new_simulated: UTF-8: cut at the end", F_NEW_SIMULATED, S(INVALID_CONFIG), "UTF-8",
        .config = "policy:pytorch\xe2\x82"),
    ROW("new_simulated: unknown key", F_NEW_SIMULATED, S(INVALID_CONFIG), "allowed keys", .config = "bogus_key:1"),
    ROW("new_simulated: a 64 KiB key", F_NEW_SIMULATED, S(INVALID_CONFIG), "invalid allocator config key",
        .config = abi_long_config),
    ROW("new_simulated: key without value", F_NEW_SIMULATED, S(INVALID_CONFIG), "policy", .config = "policy"),
    ROW("new_simulated: value without key", F_NEW_SIMULATED, S(INVALID_CONFIG), "key", .config = ":"),
    ROW("new_simulated: empty entries", F_NEW_SIMULATED, S(INVALID_CONFIG), "key:value", .config = ",,,"),
    ROW("new_simulated: unknown policy", F_NEW_SIMULATED, S(INVALID_CONFIG), "policy", .config = "policy:nonesuch"),
    ROW("new_simulated: max_split_size_mb below 20", F_NEW_SIMULATED, S(INVALID_CONFIG), "max_split_size_mb",
        .config = "max_split_size_mb:10"),
    ROW("new_simulated: max_split_size_mb past u64", F_NEW_SIMULATED, S(INVALID_CONFIG), "max_split_size_mb",
        .config = "max_split_size_mb:99999999999999999999999"),
    ROW("new_simulated: max_split_size_mb negative", F_NEW_SIMULATED, S(INVALID_CONFIG), "max_split_size_mb",
        .config = "max_split_size_mb:-1"),
    ROW("new_simulated: max_non_split_rounding_mb not a number", F_NEW_SIMULATED, S(INVALID_CONFIG),
        "max_non_split_rounding_mb", .config = "max_non_split_rounding_mb:twenty"),
    ROW("new_simulated: fraction 1.5", F_NEW_SIMULATED, S(INVALID_CONFIG), "per_process_memory_fraction",
        .config = "per_process_memory_fraction:1.5"),
    ROW("new_simulated: fraction NaN", F_NEW_SIMULATED, S(INVALID_CONFIG), "per_process_memory_fraction",
        .config = "per_process_memory_fraction:nan"),
    ROW("new_simulated: GC threshold inf", F_NEW_SIMULATED, S(INVALID_CONFIG), "garbage_collection_threshold",
        .config = "garbage_collection_threshold:inf"),
    ROW("new_simulated: expandable_segments:maybe", F_NEW_SIMULATED, S(INVALID_CONFIG), "expandable_segments",
        .config = "expandable_segments:maybe"),
    ROW("new_simulated: divisions not a power of two", F_NEW_SIMULATED, S(INVALID_CONFIG), "roundup_power2_divisions",
        .config = "roundup_power2_divisions:3"),
    ROW("new_simulated: divisions list not a power of two", F_NEW_SIMULATED, S(INVALID_CONFIG),
        "roundup_power2_divisions", .config = "roundup_power2_divisions:[256:3]"),
    ROW("new_simulated: divisions list unclosed", F_NEW_SIMULATED, S(INVALID_CONFIG), "roundup_power2_divisions",
        .config = "roundup_power2_divisions:["),
    ROW("new_simulated: record_history negative", F_NEW_SIMULATED, S(INVALID_CONFIG), "record_history",
        .config = "record_history:-1"),

    /* cachalot_allocator_new_simulated_placed(capacity, config, placements, count, out) */
    ROW("new_simulated_placed: NULL out", F_NEW_SIMULATED_PLACED, S(NULL_POINTER), "out is NULL", .out = O_NULL,
        .count = 2),
    ROW("new_simulated_placed: NULL out, NULL placements", F_NEW_SIMULATED_PLACED, S(NULL_POINTER), "out is NULL",
        .out = O_NULL, .count = 2, .null_placements = true),
    ROW("new_simulated_placed: NULL placements, count 1", F_NEW_SIMULATED_PLACED, S(NULL_POINTER),
        "placements is NULL", .count = 1, .null_placements = true),
    ROW("new_simulated_placed: NULL placements, count 0", F_NEW_SIMULATED_PLACED, S(OK), LEFT_ALONE,
        .null_placements = true, .config = "policy:pytorch"),
    ROW("new_simulated_placed: two pairs, followed", F_NEW_SIMULATED_PLACED, S(OK), LEFT_ALONE, .count = 2,
        .config = "policy:pytorch"),
    ROW("new_simulated_placed: one pair, followed", F_NEW_SIMULATED_PLACED, S(OK), LEFT_ALONE, .count = 1,
        .config = "policy:pytorch"),
    ROW("new_simulated_placed: count past PTRDIFF_MAX / 16", F_NEW_SIMULATED_PLACED, S(INVALID_ARGUMENT),
        "PTRDIFF_MAX / 16", .count = (size_t)PTRDIFF_MAX / 16 + 1),
    ROW("new_simulated_placed: count SIZE_MAX / 16 (bytes past PTRDIFF_MAX)", F_NEW_SIMULATED_PLACED,
        S(INVALID_ARGUMENT), "PTRDIFF_MAX / 16", .count = SIZE_MAX / 16),
    ROW("new_simulated_placed: count SIZE_MAX", F_NEW_SIMULATED_PLACED, S(INVALID_ARGUMENT), "PTRDIFF_MAX / 16",
        .count = SIZE_MAX),
    ROW("new_simulated_placed: bad config, NULL placements (the config is checked first)", F_NEW_SIMULATED_PLACED,
        S(INVALID_CONFIG), "allowed keys", .config = "bogus_key:1", .count = 1, .null_placements = true),
    ROW("new_simulated_placed: capacity 0", F_NEW_SIMULATED_PLACED, S(INVALID_ARGUMENT), "capacity",
        .zero_capacity = true, .count = 2),
    ROW("new_simulated_placed: capacity 1 TiB + 1", F_NEW_SIMULATED_PLACED, S(INVALID_ARGUMENT), "capacity",
        .capacity = (1ull << 40) + 1, .count = 2),
    ROW("new_simulated_placed: capacity UINT64_MAX, NULL placements (placements before capacity)",
        F_NEW_SIMULATED_PLACED, S(NULL_POINTER), "placements is NULL", .capacity = UINT64_MAX, .count = 1,
        .null_placements = true),

    /* cachalot_allocator_free(allocator) */
    ROW("allocator_free: NULL is ignored", F_ALLOCATOR_FREE, RETURNED, LEFT_ALONE, .handle = H_NULL),

    /* cachalot_last_error_message(buf, buf_len): never fails, never changes the message */
    ROW("last_error_message: NULL, 0 gives the length", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_QUERY),
    ROW("last_error_message: NULL, 64 writes nothing", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_NULL_64),
    ROW("last_error_message: NULL, SIZE_MAX writes nothing", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_NULL_HUGE),
    ROW("last_error_message: a buffer, 0", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_EMPTY),
    ROW("last_error_message: 1 byte holds the NUL alone", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_ONE),
    ROW("last_error_message: 10 bytes", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_SHORT, .size = 10),
    ROW("last_error_message: one byte short", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_SHORT),
    ROW("last_error_message: exactly", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_EXACT),
    ROW("last_error_message: larger", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE, .buf = B_LARGER),
    /* "invalid allocator config key '" is 30 bytes, then 'é' (2 bytes) */
    ROW("last_error_message: cut before a 2-byte character", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_SHORT, .size = 31, .primer = "\xc3\xa9_key:1"),
    ROW("last_error_message: cut inside a 2-byte character", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_SHORT, .size = 32, .primer = "\xc3\xa9_key:1"),
    ROW("last_error_message: cut after a 2-byte character", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_SHORT, .size = 33, .primer = "\xc3\xa9_key:1"),
    ROW("last_error_message: cut inside a 4-byte character", F_LAST_ERROR_MESSAGE, RETURNED, LEFT_ALONE,
        .buf = B_SHORT, .size = 33, .primer = "\xf0\x9f\x90\x8b_key:1"),

    /* cachalot_memory_summary(allocator, abbreviated, buf, buf_len, out_len) */
    ROW("memory_summary: NULL handle", F_MEMORY_SUMMARY, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("memory_summary: NULL handle, a buffer", F_MEMORY_SUMMARY, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .buf = B_EXACT),
    ROW("memory_summary: NULL out_len", F_MEMORY_SUMMARY, S(NULL_POINTER), "out_len is NULL", .out = O_NULL),
    ROW("memory_summary: NULL out_len, a buffer", F_MEMORY_SUMMARY, S(NULL_POINTER), "out_len is NULL",
        .out = O_NULL, .buf = B_EXACT),
    ROW("memory_summary: NULL handle and out_len", F_MEMORY_SUMMARY, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .out = O_NULL),
    ROW("memory_summary: NULL buf, buf_len 64", F_MEMORY_SUMMARY, S(NULL_POINTER), "buf", .buf = B_NULL_64),
    ROW("memory_summary: NULL buf, buf_len SIZE_MAX", F_MEMORY_SUMMARY, S(NULL_POINTER), "buf", .buf = B_NULL_HUGE),
    ROW("memory_summary: buf_len 0", F_MEMORY_SUMMARY, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_EMPTY),
    ROW("memory_summary: 1 byte", F_MEMORY_SUMMARY, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_ONE),
    ROW("memory_summary: no room for the NUL", F_MEMORY_SUMMARY, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_SHORT),
    ROW("memory_summary: abbreviated, no room for the NUL", F_MEMORY_SUMMARY, S(BUFFER_TOO_SMALL), TOO_SMALL,
        .buf = B_SHORT, .abbreviated = true),
    ROW("memory_summary: size query", F_MEMORY_SUMMARY, S(OK), LEFT_ALONE, .buf = B_QUERY),
    ROW("memory_summary: exactly", F_MEMORY_SUMMARY, S(OK), LEFT_ALONE, .buf = B_EXACT),
    ROW("memory_summary: abbreviated, exactly", F_MEMORY_SUMMARY, S(OK), LEFT_ALONE, .buf = B_EXACT,
        .abbreviated = true),
    ROW("memory_summary: larger", F_MEMORY_SUMMARY, S(OK), LEFT_ALONE, .buf = B_LARGER),

    /* cachalot_config_notes(config, buf, buf_len, out_len) */
    ROW("config_notes: NULL out_len", F_CONFIG_NOTES, S(NULL_POINTER), "out_len is NULL", .out = O_NULL,
        .config = "max_split_size_mb:128", .text = ""),
    ROW("config_notes: NULL buf, buf_len 64", F_CONFIG_NOTES, S(NULL_POINTER), "buf", .buf = B_NULL_64,
        .config = "max_split_size_mb:128", .text = ""),
    ROW("config_notes: a bad key", F_CONFIG_NOTES, S(INVALID_CONFIG), "bogus_key", .buf = B_EXACT,
        .config = "bogus_key:1", .text = ""),
    ROW("config_notes: no room for the NUL", F_CONFIG_NOTES, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_SHORT,
        .config = "max_split_size_mb:128", .text = ""),
    ROW("config_notes: size query", F_CONFIG_NOTES, S(OK), LEFT_ALONE, .buf = B_QUERY,
        .config = "max_split_size_mb:128", .text = ""),
    ROW("config_notes: every key takes effect", F_CONFIG_NOTES, S(OK), LEFT_ALONE, .buf = B_EXACT,
        .config = "policy:pytorch,max_split_size_mb:128,expandable_segments:True", .text = ""),
    ROW("config_notes: max_split_size_mb under cachalot's policy", F_CONFIG_NOTES, S(OK), LEFT_ALONE, .buf = B_EXACT,
        .config = "max_split_size_mb:128", .text = "max_split_size_mb has no effect under policy:cachalot"),
    ROW("config_notes: NULL reads CACHALOT_ALLOC_CONF", F_CONFIG_NOTES, S(OK), LEFT_ALONE, .buf = B_LARGER,
        .null_config = true, .env = "expandable_segments:True", .text = "expandable_segments has no effect"),

    /* cachalot_snapshot_json(allocator, buf, buf_len, out_len) */
    ROW("snapshot_json: NULL handle", F_SNAPSHOT_JSON, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("snapshot_json: NULL handle, a buffer", F_SNAPSHOT_JSON, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .buf = B_EXACT),
    ROW("snapshot_json: NULL out_len", F_SNAPSHOT_JSON, S(NULL_POINTER), "out_len is NULL", .out = O_NULL),
    ROW("snapshot_json: NULL out_len, a buffer", F_SNAPSHOT_JSON, S(NULL_POINTER), "out_len is NULL",
        .out = O_NULL, .buf = B_EXACT),
    ROW("snapshot_json: NULL handle and out_len", F_SNAPSHOT_JSON, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .out = O_NULL),
    ROW("snapshot_json: NULL buf, buf_len 64", F_SNAPSHOT_JSON, S(NULL_POINTER), "buf", .buf = B_NULL_64),
    ROW("snapshot_json: NULL buf, buf_len SIZE_MAX", F_SNAPSHOT_JSON, S(NULL_POINTER), "buf", .buf = B_NULL_HUGE),
    ROW("snapshot_json: buf_len 0", F_SNAPSHOT_JSON, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_EMPTY),
    ROW("snapshot_json: 1 byte", F_SNAPSHOT_JSON, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_ONE),
    ROW("snapshot_json: no room for the NUL", F_SNAPSHOT_JSON, S(BUFFER_TOO_SMALL), TOO_SMALL, .buf = B_SHORT),
    ROW("snapshot_json: size query", F_SNAPSHOT_JSON, S(OK), LEFT_ALONE, .buf = B_QUERY),
    ROW("snapshot_json: exactly", F_SNAPSHOT_JSON, S(OK), LEFT_ALONE, .buf = B_EXACT),
    ROW("snapshot_json: larger", F_SNAPSHOT_JSON, S(OK), LEFT_ALONE, .buf = B_LARGER),

    /* cachalot_get_stats(allocator, out) */
    ROW("get_stats: NULL handle", F_GET_STATS, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("get_stats: NULL out", F_GET_STATS, S(NULL_POINTER), "out is NULL", .out = O_NULL),
    ROW("get_stats: NULL handle and out", F_GET_STATS, S(NULL_POINTER), HANDLE, .handle = H_NULL, .out = O_NULL),
    ROW("get_stats: NULL handle, struct_size 0", F_GET_STATS, S(NULL_POINTER), HANDLE, .handle = H_NULL,
        .struct_delta = -(long)sizeof(cachalot_stats)),
    ROW("get_stats: struct_size 0", F_GET_STATS, S(INVALID_ARGUMENT), "struct_size",
        .struct_delta = -(long)sizeof(cachalot_stats)),
    ROW("get_stats: struct_size 4", F_GET_STATS, S(INVALID_ARGUMENT), "struct_size",
        .struct_delta = 4 - (long)sizeof(cachalot_stats)),
    ROW("get_stats: struct_size 8", F_GET_STATS, S(INVALID_ARGUMENT), "struct_size",
        .struct_delta = 8 - (long)sizeof(cachalot_stats)),
    ROW("get_stats: struct_size one field short", F_GET_STATS, S(INVALID_ARGUMENT), "struct_size",
        .struct_delta = -8),
    ROW("get_stats: struct_size one byte short", F_GET_STATS, S(INVALID_ARGUMENT), "struct_size",
        .struct_delta = -1),
    ROW("get_stats: struct_size exactly", F_GET_STATS, S(OK), LEFT_ALONE, .struct_delta = 0),
    ROW("get_stats: a newer, larger struct", F_GET_STATS, S(OK), LEFT_ALONE, .struct_delta = 64),

    /* cachalot_status_name(status) */
    ROW("status_name: 0", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 0, .text = "CACHALOT_STATUS_OK"),
    ROW("status_name: 1", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 1, .text = "CACHALOT_STATUS_NULL_POINTER"),
    ROW("status_name: 2", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 2,
        .text = "CACHALOT_STATUS_INVALID_ARGUMENT"),
    ROW("status_name: 3", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 3, .text = "CACHALOT_STATUS_INVALID_CONFIG"),
    ROW("status_name: 4", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 4, .text = "CACHALOT_STATUS_INVALID_SIZE"),
    ROW("status_name: 5", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 5, .text = "CACHALOT_STATUS_OUT_OF_MEMORY"),
    ROW("status_name: 6", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 6,
        .text = "CACHALOT_STATUS_UNKNOWN_POINTER"),
    ROW("status_name: 7", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 7, .text = "CACHALOT_STATUS_DOUBLE_FREE"),
    ROW("status_name: 8", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 8,
        .text = "CACHALOT_STATUS_INTERIOR_POINTER"),
    ROW("status_name: 9", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 9,
        .text = "CACHALOT_STATUS_BUFFER_TOO_SMALL"),
    ROW("status_name: 10", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 10, .text = "CACHALOT_STATUS_NO_DEVICE"),
    ROW("status_name: 11", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 11, .text = "CACHALOT_STATUS_DRIVER"),
    ROW("status_name: 12", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 12, .text = "CACHALOT_STATUS_UNSUPPORTED"),
    ROW("status_name: 13", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 13, .text = "CACHALOT_STATUS_INTERNAL"),
    ROW("status_name: 14", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = 14, .text = "CACHALOT_STATUS_UNKNOWN"),
    ROW("status_name: -1", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = -1, .text = "CACHALOT_STATUS_UNKNOWN"),
    ROW("status_name: INT_MAX", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = INT_MAX,
        .text = "CACHALOT_STATUS_UNKNOWN"),
    ROW("status_name: INT_MIN", F_STATUS_NAME, RETURNED, LEFT_ALONE, .number = INT_MIN,
        .text = "CACHALOT_STATUS_UNKNOWN"),

    /* cachalot_version() */
    ROW("version", F_VERSION, RETURNED, LEFT_ALONE, .handle = H_LIVE),

    /* PyTorch's entry points: no status, so the last error is what shows a failure. No row
     * names device 0, which is a real GPU where there is one. */
    ROW("torch_malloc: size 0 is NULL, not an error", F_TORCH_MALLOC, RETURNED, LEFT_ALONE, .ssize = 0),
    ROW("torch_malloc: size 0, device -1 (the size is checked first)", F_TORCH_MALLOC, RETURNED, LEFT_ALONE,
        .ssize = 0, .number = -1),
    ROW("torch_malloc: size -1", F_TORCH_MALLOC, RETURNED, "negative size -1", .ssize = -1),
    ROW("torch_malloc: size PTRDIFF_MIN", F_TORCH_MALLOC, RETURNED, "negative size", .ssize = PTRDIFF_MIN),
    ROW("torch_malloc: device -1", F_TORCH_MALLOC, RETURNED, "out of range", .ssize = 4096, .number = -1),
    ROW("torch_malloc: device 64", F_TORCH_MALLOC, RETURNED, "out of range", .ssize = 4096, .number = 64),
    ROW("torch_malloc: device INT_MIN", F_TORCH_MALLOC, RETURNED, "out of range", .ssize = 4096, .number = INT_MIN),
    ROW("torch_malloc: PTRDIFF_MAX on device INT_MAX", F_TORCH_MALLOC, RETURNED, "out of range",
        .ssize = PTRDIFF_MAX, .number = INT_MAX),
    ROW("torch_free: NULL is ignored", F_TORCH_FREE, RETURNED, LEFT_ALONE, .ptr = P_NULL),
    ROW("torch_free: NULL on device -1 is ignored", F_TORCH_FREE, RETURNED, LEFT_ALONE, .ptr = P_NULL,
        .number = -1),
    ROW("torch_free: 0x1234 on device -1", F_TORCH_FREE, RETURNED, "out of range", .ptr = P_FOREIGN, .number = -1),
    ROW("torch_free: a host pointer on device 64", F_TORCH_FREE, RETURNED, "out of range", .ptr = P_HOST_HEAP,
        .number = 64, .ssize = -5),
    ROW("torch_empty_cache: no allocator yet", F_TORCH_EMPTY_CACHE, RETURNED, LEFT_ALONE, .handle = H_LIVE),
    ROW("torch_set_memory_fraction: device -1", F_TORCH_SET_MEMORY_FRACTION, RETURNED, "out of range",
        .fraction = 0.5, .number = -1),
    ROW("torch_set_memory_fraction: NaN on device 64", F_TORCH_SET_MEMORY_FRACTION, RETURNED, "out of range",
        .fraction = NAN, .number = 64),
    ROW("torch_record_stream: NULL ptr", F_TORCH_RECORD_STREAM, RETURNED, "ptr is NULL", .ptr = P_NULL),
    ROW("torch_record_stream: NULL ptr, a stream", F_TORCH_RECORD_STREAM, RETURNED, "ptr is NULL", .ptr = P_NULL,
        .stream = 7),
    ROW("torch_record_stream: 0x1234 with no allocator", F_TORCH_RECORD_STREAM, RETURNED, ANY_MESSAGE,
        .ptr = P_FOREIGN),
    ROW("reset_accumulated_stats: NULL handle", F_RESET_ACCUMULATED_STATS, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("largest_cached_block: NULL handle", F_LARGEST_CACHED_BLOCK, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("largest_cached_block: NULL out", F_LARGEST_CACHED_BLOCK, S(NULL_POINTER), "out is NULL", .out = O_NULL),
    ROW("largest_cached_block: fixture", F_LARGEST_CACHED_BLOCK, S(OK), LEFT_ALONE, .out = O_VALID),
    ROW("blocks: NULL handle", F_BLOCKS, S(NULL_POINTER), HANDLE, .handle = H_NULL),
    ROW("blocks: NULL out_count", F_BLOCKS, S(NULL_POINTER), "out_count is NULL", .out = O_NULL, .buf = B_EXACT),
    ROW("blocks: the count alone", F_BLOCKS, S(OK), LEFT_ALONE, .buf = B_QUERY),
    ROW("blocks: NULL rows with a capacity", F_BLOCKS, S(NULL_POINTER), "out (with capacity above 0) is NULL",
        .buf = B_NULL_64),
    ROW("blocks: no room", F_BLOCKS, S(BUFFER_TOO_SMALL), "the array holds 0 rows", .buf = B_EMPTY),
    ROW("blocks: a row short", F_BLOCKS, S(BUFFER_TOO_SMALL), "the array holds", .buf = B_SHORT),
    ROW("blocks: exactly the rows", F_BLOCKS, S(OK), LEFT_ALONE, .buf = B_EXACT),
    ROW("blocks: more room than rows", F_BLOCKS, S(OK), LEFT_ALONE, .buf = B_LARGER),
    ROW("allocate_at: NULL handle", F_ALLOCATE_AT, S(NULL_POINTER), HANDLE, .handle = H_NULL, .ptr = P_FREE_START,
        .size = 512),
    ROW("allocate_at: a live block", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block", .ptr = P_LIVE,
        .size = 512),
    ROW("allocate_at: inside a live block", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block",
        .ptr = P_INTERIOR, .size = 512),
    ROW("allocate_at: not a multiple of 512", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "multiples of 512",
        .ptr = P_INTERIOR_1, .size = 512),
    ROW("allocate_at: 0x1234", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block", .ptr = P_FOREIGN,
        .size = 512),
    ROW("allocate_at: NULL", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block", .ptr = P_NULL, .size = 512),
    ROW("allocate_at: all ones", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block", .ptr = P_ALL_ONES,
        .size = 512),
    ROW("allocate_at: 0 bytes", F_ALLOCATE_AT, S(INVALID_SIZE), "0 bytes", .ptr = P_FREE_START, .size = 0),
    ROW("allocate_at: SIZE_MAX bytes", F_ALLOCATE_AT, S(INVALID_ARGUMENT), "no cached free block",
        .ptr = P_FREE_START, .size = SIZE_MAX - 511),
    ROW("torch_malloc_status: NULL out (checked before any device)", F_TORCH_MALLOC_STATUS, S(NULL_POINTER),
        "out is NULL", .out = O_NULL, .ssize = 4096),
    ROW("torch_allocator: NULL out", F_TORCH_ALLOCATOR, S(NULL_POINTER), "out is NULL", .out = O_NULL),
    ROW("torch_allocator: NULL out, device -1 (out is checked first)", F_TORCH_ALLOCATOR, S(NULL_POINTER),
        "out is NULL", .out = O_NULL, .number = -1),
    ROW("torch_allocator: device -1", F_TORCH_ALLOCATOR, S(INVALID_ARGUMENT), "out of range", .number = -1),
    ROW("torch_allocator: device 64", F_TORCH_ALLOCATOR, S(INVALID_ARGUMENT), "out of range", .number = 64),
    ROW("torch_allocator: device INT_MAX", F_TORCH_ALLOCATOR, S(INVALID_ARGUMENT), "out of range",
        .number = INT_MAX),
    ROW("torch_allocator: device INT_MIN", F_TORCH_ALLOCATOR, S(INVALID_ARGUMENT), "out of range",
        .number = INT_MIN),
    ROW("torch_allocator: device 63 has none (NULL stored)", F_TORCH_ALLOCATOR, S(OK), LEFT_ALONE, .number = 63),

    /* Last: calls that change the allocator, to check the fixture still works after them. */
    ROW_CHANGES("reset_peak_stats (allowed)", F_RESET_PEAK_STATS, S(OK), LEFT_ALONE, .handle = H_LIVE),
    /* Placed and freed again (the adapter frees it); refused under virtual memory. */
    {"allocate_at: the free remainder's first 512 bytes (allowed)", F_ALLOCATE_AT, {.ptr = P_FREE_START, .size = 512},
     S(OK), S(INVALID_ARGUMENT), "no cached free block of a classic segment", MAY_CHANGE, NULL},
    ROW_CHANGES("empty_cache (allowed)", F_EMPTY_CACHE, S(OK), LEFT_ALONE, .handle = H_LIVE),
    ROW("free: double free after empty_cache", F_FREE, S(DOUBLE_FREE), "already freed", .ptr = P_FREED),
};

const size_t abi_row_count = sizeof abi_rows / sizeof abi_rows[0];

void abi_rows_prepare(void) {
    size_t n = sizeof abi_long_config - 3;
    for (size_t i = 0; i < n; i++) {
        abi_long_config[i] = KIB64_KEY[i % (sizeof KIB64_KEY - 1)];
    }
    abi_long_config[n] = ':';
    abi_long_config[n + 1] = '1';
    abi_long_config[n + 2] = '\0';
}
