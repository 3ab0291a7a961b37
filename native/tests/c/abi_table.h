/*
 * The table-driven bad-input suite of the C ABI: one row per (function, argument case), each
 * naming the expected result and the text its message must contain. Shared by the rows
 * (abi_rows.c), the call adapters (abi_calls.c) and the runner (abi_table.c).
 *
 * Invariants every row is checked for, by the runner: the call returns the row's result; a
 * failing call leaves a message containing the row's needle as the thread's last error, a
 * call that succeeds leaves the last error as it was; a failing call writes no
 * out-parameter and no byte of a caller's buffer; the fixture allocator's whole state
 * (snapshot JSON and statistics) is unchanged unless the row says it may change.
 *
 * Argument kinds are enums whose 0 is the ordinary value, so a row names only what is bad.
 */
#ifndef CACHALOT_ABI_TABLE_H
#define CACHALOT_ABI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cachalot.h"

/* Every exported function. */
enum abi_fn {
    F_MALLOC, F_FREE, F_RECORD_STREAM, F_EMPTY_CACHE, F_SET_MEMORY_FRACTION,
    F_NEW_CUDA, F_NEW_SIMULATED, F_NEW_SIMULATED_PLACED, F_ALLOCATOR_FREE, F_LAST_ERROR_MESSAGE,
    F_MEMORY_SUMMARY, F_SNAPSHOT_JSON, F_GET_STATS, F_RESET_PEAK_STATS, F_STATUS_NAME,
    F_TORCH_MALLOC, F_TORCH_FREE, F_TORCH_EMPTY_CACHE, F_TORCH_SET_MEMORY_FRACTION,
    F_TORCH_RECORD_STREAM, F_TORCH_ALLOCATOR, F_VERSION, F_CONFIG_NOTES,
    F_RESET_ACCUMULATED_STATS, F_LARGEST_CACHED_BLOCK, F_TORCH_MALLOC_STATUS, F_BLOCKS, F_ALLOCATE_AT,
    F_TORCH_DEVICE_ALLOCATOR, F_POOL_CREATE, F_POOL_RETAIN, F_POOL_RELEASE, F_POOL_USE_COUNT, F_POOL_BEGIN,
    F_POOL_END, F_POOL_MALLOC, F_POOL_EMPTY_CACHE, F_POOL_ALLOCATE_AT, F_CAPTURE_BEGIN, F_CAPTURE_END,
    F_COUNT
};

/* The allocator handle passed. */
enum handle_arg { H_LIVE, H_NULL };

/* The device pointer passed (see struct fixture for how each is made). */
enum ptr_arg {
    P_NULL,
    P_LIVE,         /* a live 3 MiB allocation */
    P_FREED,        /* freed, its block still cached (a double free) */
    P_RELEASED,     /* freed, and its segment given back by empty_cache (a double free too) */
    P_INTERIOR,     /* live + 512 */
    P_INTERIOR_1,   /* live + 1 */
    P_LAST_BYTE,    /* live + size - 1 */
    P_FREE_START,   /* start of the free remainder behind live: never handed out */
    P_FREE_INSIDE,  /* inside that free remainder */
    P_FOREIGN,      /* 0x1234 */
    P_ALL_ONES,     /* (void *)UINTPTR_MAX */
    P_HOST_STACK,   /* the address of a C local */
    P_HOST_HEAP,    /* a pointer from the C library's malloc */
    P_OTHER,        /* a live allocation of another allocator, outside this one's addresses */
    P_FULL_STREAMS  /* a live allocation already recorded on the most streams one block tracks */
};

/* An out-parameter (out, out_ptr, out_len): a writable one or NULL. */
enum out_arg { O_VALID, O_NULL };

/* A text buffer and its length, relative to the bytes the text needs (NUL included). */
enum buf_arg {
    B_QUERY,      /* NULL, 0: ask for the size */
    B_NULL_64,    /* NULL, 64 */
    B_NULL_HUGE,  /* NULL, SIZE_MAX */
    B_EMPTY,      /* a buffer, 0 */
    B_ONE,        /* a buffer of 1 byte */
    B_SHORT,      /* a buffer of needed - 1 bytes (no room for the NUL) */
    B_EXACT,      /* a buffer of needed bytes */
    B_LARGER      /* a buffer of needed + 100 bytes */
};

struct abi_args {
    enum handle_arg handle;
    enum ptr_arg ptr;
    enum out_arg out;
    enum buf_arg buf;
    size_t size;           /* cachalot_malloc, cachalot_allocate_at; buf_len for cachalot_last_error_message */
    ptrdiff_t ssize;       /* the torch functions */
    uintptr_t stream;      /* a stream handle value (opaque; any value is a stream here) */
    int number;            /* a device ordinal, or the code for cachalot_status_name; for the pool
                              functions a pool id, 0 meaning one the adapter makes for the call */
    double fraction;       /* cachalot_set_memory_fraction; the limit an IN_FRACTION row checks */
    uint64_t capacity;     /* 0 means 1 GiB in F_NEW_SIMULATED rows unless zero_capacity */
    bool zero_capacity;
    size_t count;          /* F_NEW_SIMULATED_PLACED: pairs passed (the table holds two) */
    bool null_placements;  /* F_NEW_SIMULATED_PLACED: pass NULL for the pairs */
    const char *config;    /* NULL means "" unless null_config */
    bool null_config;      /* pass NULL: CACHALOT_ALLOC_CONF is read */
    const char *env;       /* CACHALOT_ALLOC_CONF for a null_config row (NULL: unset) */
    long struct_delta;     /* cachalot_get_stats: struct_size = sizeof(cachalot_stats) + this */
    bool abbreviated;
    const char *text;      /* the string cachalot_status_name must return; the text
                              cachalot_config_notes must write ("" exactly, or a part of it) */
    const char *primer;    /* a config whose error primes the last error (NULL: the usual) */
};

/* Results of functions that return no status, kept apart from the status codes. */
enum {
    RETURNED = 100,     /* the function returned what the row expects */
    WRONG_RETURN = 101, /* it returned something else (the adapter printed what) */
    WRONG_OUTPUT = 102  /* the status was right but an output was not (printed) */
};

/* What the needle checks. */
#define LEFT_ALONE NULL /* the last error is unchanged */
#define ANY_MESSAGE ""  /* the last error changed, to any text */

/* Row flags. */
enum {
    MAY_CHANGE = 1u << 0, /* the call may change the allocator (an out-of-memory count, say) */
    NO_GROWTH = 1u << 1,  /* ... but must not reserve more memory than before (a failed request) */
    IN_FRACTION = 1u << 2 /* ... nor more than in.fraction of the fixture's device, if it grows */
};

struct abi_row {
    const char *what;
    enum abi_fn fn;
    struct abi_args in;
    int expect;         /* a cachalot_status, or RETURNED */
    int also;           /* another accepted result (0: none, so OK goes in expect) */
    const char *needle; /* LEFT_ALONE, ANY_MESSAGE, or text the last error must contain */
    unsigned flags;
    const char *known;  /* a known library bug this row shows (reported, not failed); NULL: none */
};

/* The capacity of the fixture's simulated device. */
#define FIXTURE_CAPACITY ((uint64_t)8 << 30)

/* The allocator every row runs against, and the pointers rows refer to. */
struct fixture {
    const char *config;
    cachalot_allocator *a;
    cachalot_allocator *other;
    void *ptr[P_FULL_STREAMS + 1]; /* by enum ptr_arg; ptr[P_NULL] is NULL */
    void *keep;                    /* keeps P_FREED's segment split, so it stays cached */
    size_t live_size;
    int host_stack;
    void *host_heap;
};

extern const struct abi_row abi_rows[];
extern const size_t abi_row_count;

/* A config whose key is 64 KiB long, filled in by abi_rows_prepare() before any row runs. */
extern char abi_long_config[];
void abi_rows_prepare(void);

/* The primer's message: set as the last error before each row. */
extern char abi_primed[512];

/* Runs a row's call against the fixture; returns a status or one of the results above. */
int abi_call(struct fixture *fx, const struct abi_row *row);

#endif
