/*
 * One adapter per exported function of the C ABI: it turns a row's argument kinds into real
 * arguments, makes the call, and checks what the call wrote.
 *
 * Invariants: out-parameters start as sentinels and a failing call must leave them so;
 * caller buffers are allocated with exactly the length passed (so AddressSanitizer and
 * valgrind see any byte written past it) and filled with 'x', and a failing call must leave
 * every byte; anything a successful call creates (an allocation, an allocator) is released
 * here, so the fixture only changes where a row says it may. An adapter returns the call's
 * status, or RETURNED / WRONG_RETURN / WRONG_OUTPUT (after printing why).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "abi_table.h"

static void *const SENTINEL = (void *)0x5e5e;
static const size_t SENTINEL_LEN = 0x5e5e5e;

static int wrong(int result, const char *why) {
    fprintf(stderr, "    %s\n", why);
    return result;
}

static cachalot_allocator *handle_of(struct fixture *fx, const struct abi_args *in) {
    return in->handle == H_NULL ? NULL : fx->a;
}

static void *stream_of(const struct abi_args *in) {
    return (void *)in->stream;
}

static const char *config_of(const struct abi_args *in) {
    if (in->null_config) {
        if (in->env != NULL) {
            setenv("CACHALOT_ALLOC_CONF", in->env, 1);
        } else {
            unsetenv("CACHALOT_ALLOC_CONF");
        }
        return NULL;
    }
    return in->config != NULL ? in->config : "";
}

/* A buffer of exactly `len` bytes (at least one, so it is never NULL), filled with 'x'. */
static char *xbuf(size_t len) {
    char *b = malloc(len > 0 ? len : 1);
    if (b == NULL) {
        abort();
    }
    memset(b, 'x', len > 0 ? len : 1);
    return b;
}

static bool untouched(const char *b, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (b[i] != 'x') {
            return false;
        }
    }
    return true;
}

static int call_malloc(struct fixture *fx, const struct abi_args *in) {
    void *p = SENTINEL;
    cachalot_allocator *a = handle_of(fx, in);
    cachalot_status s = cachalot_malloc(a, in->size, stream_of(in), in->out == O_NULL ? NULL : &p);
    if (s != CACHALOT_STATUS_OK) {
        return p == SENTINEL ? s : wrong(WRONG_OUTPUT, "a failing malloc wrote *out_ptr");
    }
    if (p == NULL || p == SENTINEL) {
        return wrong(WRONG_OUTPUT, "a successful malloc stored no address");
    }
    return cachalot_free(a, p) == CACHALOT_STATUS_OK ? s : wrong(WRONG_OUTPUT, "its allocation could not be freed");
}

static int call_new(const struct abi_args *in, bool cuda) {
    cachalot_allocator *made = (cachalot_allocator *)SENTINEL;
    cachalot_allocator **out = in->out == O_NULL ? NULL : &made;
    const char *config = config_of(in);
    uint64_t capacity = in->zero_capacity ? 0 : in->capacity != 0 ? in->capacity : 1ull << 30;
    cachalot_status s = cuda ? cachalot_allocator_new_cuda(in->number, config, out)
                             : cachalot_allocator_new_simulated(capacity, config, out);
    unsetenv("CACHALOT_ALLOC_CONF");
    if (s != CACHALOT_STATUS_OK) {
        return made == (cachalot_allocator *)SENTINEL ? s : wrong(WRONG_OUTPUT, "a failing _new wrote *out");
    }
    if (made == NULL || made == (cachalot_allocator *)SENTINEL) {
        return wrong(WRONG_OUTPUT, "a successful _new stored no handle");
    }
    cachalot_allocator_free(made);
    return s;
}

/* Two recorded placements: a 20 MiB large segment and a 2 MiB small one, low in the simulated
 * address space (its own rule places segments from the top down). */
static const uint64_t PLACED[4] = {0x7f0004000000ull, 20ull << 20, 0x7f0005400000ull, 2ull << 20};

static int call_new_placed(const struct abi_args *in) {
    cachalot_allocator *made = (cachalot_allocator *)SENTINEL;
    cachalot_allocator **out = in->out == O_NULL ? NULL : &made;
    uint64_t capacity = in->zero_capacity ? 0 : in->capacity != 0 ? in->capacity : 1ull << 30;
    cachalot_status s = cachalot_allocator_new_simulated_placed(capacity, config_of(in),
                                                                in->null_placements ? NULL : PLACED, in->count, out);
    if (s != CACHALOT_STATUS_OK) {
        return made == (cachalot_allocator *)SENTINEL ? s : wrong(WRONG_OUTPUT, "a failing _new wrote *out");
    }
    if (made == NULL || made == (cachalot_allocator *)SENTINEL) {
        return wrong(WRONG_OUTPUT, "a successful _new stored no handle");
    }
    /* A 5 MiB request takes a 20 MiB segment: where the first pair says, if one was passed (rows
     * that pass pairs use classic segments: policy:pytorch). */
    void *p = NULL;
    int result = s;
    if (cachalot_malloc(made, 5u << 20, NULL, &p) != CACHALOT_STATUS_OK) {
        result = wrong(WRONG_OUTPUT, "the placed allocator could not allocate");
    } else if ((in->count > 0) != ((uint64_t)(uintptr_t)p == PLACED[0])) {
        result = wrong(WRONG_OUTPUT, "the first segment is not where the placements say");
    }
    cachalot_allocator_free(made);
    return result;
}

/* The bytes cachalot_last_error_message keeps of `text` in `len` bytes: snprintf's, cut back
 * to a UTF-8 character boundary. */
static size_t kept_bytes(const char *text, size_t len) {
    size_t n = strlen(text);
    if (n > len - 1) {
        n = len - 1;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) {
            n--;
        }
    }
    return n;
}

/* The buffer and length a row passes for text of `needed` bytes (NUL included); a short
 * buffer is `short_len` bytes. NULL for the rows that pass no buffer. */
static char *buffer_of(enum buf_arg kind, size_t needed, size_t short_len, size_t *len) {
    switch (kind) {
    case B_QUERY: *len = 0; return NULL;
    case B_NULL_64: *len = 64; return NULL;
    case B_NULL_HUGE: *len = SIZE_MAX; return NULL;
    case B_EMPTY: *len = 0; return xbuf(0);
    case B_ONE: *len = 1; break;
    case B_SHORT: *len = short_len; break;
    case B_EXACT: *len = needed; break;
    case B_LARGER: *len = needed + 100; break;
    }
    return xbuf(*len);
}

static int call_last_error(struct fixture *fx, const struct abi_args *in) {
    (void)fx;
    size_t full = strlen(abi_primed), len = 0, got;
    char *b = buffer_of(in->buf, full + 1, in->size != 0 ? in->size : full, &len);
    got = cachalot_last_error_message(b, len);
    int result = got == full ? RETURNED : wrong(WRONG_RETURN, "the length returned is not the message's");
    if (b != NULL && len == 0 && b[0] != 'x') {
        result = wrong(WRONG_OUTPUT, "a zero-length buffer was written");
    } else if (b != NULL && len > 0) {
        size_t n = kept_bytes(abi_primed, len);
        if (memcmp(b, abi_primed, n) != 0 || b[n] != '\0' || !untouched(b + n + 1, len - n - 1)) {
            result = wrong(WRONG_OUTPUT, "the buffer does not hold the message's first characters and a NUL alone");
        }
    }
    free(b);
    return result;
}

/* Summary and snapshot, which share the buffer rules. */
static cachalot_status report(bool summary, const cachalot_allocator *a, bool abbreviated, char *b, size_t len,
                              size_t *out_len) {
    return summary ? cachalot_memory_summary(a, abbreviated, b, len, out_len)
                   : cachalot_snapshot_json(a, b, len, out_len);
}

/*
 * Judges a call that wrote text into a buffer: a failure must write neither *out_len nor the
 * buffer; a success gives the size the query gave, and a whole NUL-terminated text with
 * nothing written past its NUL, whose content `content_ok` vouches for. Frees `b`.
 */
static int text_result(cachalot_status s, char *b, size_t len, size_t out_len, size_t needed,
                       bool (*content_ok)(const char *text, size_t needed, const struct abi_args *in),
                       const struct abi_args *in) {
    int result = s;
    if (s != CACHALOT_STATUS_OK) {
        if (out_len != SENTINEL_LEN || (b != NULL && !untouched(b, len > 0 ? len : 1))) {
            result = wrong(WRONG_OUTPUT, "a failing call wrote *out_len or the buffer");
        }
    } else if (out_len != needed) {
        result = wrong(WRONG_OUTPUT, "*out_len is not the size the query gave");
    } else if (b != NULL && (strlen(b) + 1 != needed || !untouched(b + needed, len - needed) ||
                             !content_ok(b, needed, in))) {
        result = wrong(WRONG_OUTPUT, "the text is not the one expected, not whole, not NUL-terminated, "
                                     "or was written past its NUL");
    }
    free(b);
    return result;
}

static bool is_summary(const char *text, size_t needed, const struct abi_args *in) {
    (void)needed, (void)in;
    return strstr(text, "memory summary") != NULL;
}

static bool is_json_object(const char *text, size_t needed, const struct abi_args *in) {
    (void)in;
    return text[0] == '{' && text[needed - 2] == '}';
}

static bool has_expected_notes(const char *text, size_t needed, const struct abi_args *in) {
    (void)needed;
    return in->text[0] == '\0' ? text[0] == '\0' : strstr(text, in->text) != NULL;
}

static int call_report(struct fixture *fx, const struct abi_args *in, bool summary) {
    size_t needed = 0, len = 0, out_len = SENTINEL_LEN;
    if (report(summary, fx->a, in->abbreviated, NULL, 0, &needed) != CACHALOT_STATUS_OK || needed < 2) {
        return wrong(WRONG_OUTPUT, "the size query of the fixture failed");
    }
    char *b = buffer_of(in->buf, needed, needed - 1, &len);
    cachalot_status s = report(summary, handle_of(fx, in), in->abbreviated, b, len, in->out == O_NULL ? NULL : &out_len);
    return text_result(s, b, len, out_len, needed, summary ? is_summary : is_json_object, in);
}

static int call_config_notes(const struct abi_args *in) {
    const char *config = config_of(in);
    size_t needed = 0, len = 0, out_len = SENTINEL_LEN;
    if (cachalot_config_notes(config, NULL, 0, &needed) != CACHALOT_STATUS_OK) {
        needed = 1; /* a config the row expects refused: any buffer will do */
    }
    char *b = buffer_of(in->buf, needed, needed - 1, &len);
    cachalot_status s = cachalot_config_notes(config, b, len, in->out == O_NULL ? NULL : &out_len);
    return text_result(s, b, len, out_len, needed, has_expected_notes, in);
}

/* The bytes of version 1's cachalot_stats (up to max_split_size), the least a caller may pass:
 * a caller of that size gets version 1's fields, a larger one the whole current layout. */
#define STATS_V1_SIZE (offsetof(cachalot_stats, max_split_size) + sizeof(int64_t))

static int call_get_stats(struct fixture *fx, const struct abi_args *in) {
    long want = (long)sizeof(cachalot_stats) + in->struct_delta;
    uint32_t size = (uint32_t)want;
    size_t bytes = size < sizeof size ? sizeof size : size;
    unsigned char *b = malloc(bytes);
    if (want < 0 || b == NULL) {
        abort();
    }
    memset(b, 0xab, bytes);
    memcpy(b, &size, sizeof size);
    cachalot_stats *out = in->out == O_NULL ? NULL : (cachalot_stats *)(void *)b;
    cachalot_status s = cachalot_get_stats(handle_of(fx, in), out);
    int result = s;
    size_t written = size >= sizeof(cachalot_stats) ? sizeof(cachalot_stats) : STATS_V1_SIZE;
    size_t from = s == CACHALOT_STATUS_OK ? written : sizeof size;
    uint32_t size_after;
    memcpy(&size_after, b, sizeof size_after);
    for (size_t i = from; i < bytes; i++) {
        if (b[i] != 0xab) {
            result = wrong(WRONG_OUTPUT, "bytes written past what the call may write");
            break;
        }
    }
    if (s == CACHALOT_STATUS_OK) {
        cachalot_stats st;
        memset(&st, 0, sizeof st);
        memcpy(&st, b, written); /* the call wrote `written` bytes, fewer for a version 1 caller */
        if (st.struct_size != written || st.version != (written == sizeof st ? CACHALOT_STATS_VERSION : 1u)) {
            result = wrong(WRONG_OUTPUT, "struct_size or version is wrong");
        }
    } else if (size_after != size) {
        result = wrong(WRONG_OUTPUT, "a failing call changed struct_size");
    }
    free(b);
    return result;
}

static int call_torch(struct fixture *fx, const struct abi_row *row, void *ptr) {
    const struct abi_args *in = &row->in;
    switch (row->fn) {
    case F_TORCH_MALLOC: {
        void *p = cachalot_torch_malloc(in->ssize, in->number, stream_of(in));
        if (p != NULL) {
            cachalot_torch_free(p, in->ssize, in->number, stream_of(in));
            return wrong(WRONG_RETURN, "cachalot_torch_malloc returned an allocation");
        }
        return RETURNED;
    }
    case F_TORCH_FREE: cachalot_torch_free(ptr, in->ssize, in->number, stream_of(in)); return RETURNED;
    case F_TORCH_EMPTY_CACHE: cachalot_torch_empty_cache(); return RETURNED;
    case F_TORCH_SET_MEMORY_FRACTION: cachalot_torch_set_memory_fraction(in->fraction, in->number); return RETURNED;
    case F_TORCH_RECORD_STREAM: cachalot_torch_record_stream(ptr, stream_of(in)); return RETURNED;
    case F_TORCH_MALLOC_STATUS: {
        void *p = SENTINEL;
        cachalot_status s =
            cachalot_torch_malloc_status((size_t)in->ssize, in->number, stream_of(in), in->out == O_NULL ? NULL : &p);
        if (s == CACHALOT_STATUS_OK) {
            cachalot_torch_free(p, in->ssize, in->number, stream_of(in));
            return wrong(WRONG_RETURN, "cachalot_torch_malloc_status returned an allocation");
        }
        return p == SENTINEL ? s : wrong(WRONG_OUTPUT, "a failing cachalot_torch_malloc_status wrote *out");
    }
    default: {
        cachalot_allocator *found = (cachalot_allocator *)SENTINEL;
        cachalot_status s = cachalot_torch_allocator(in->number, in->out == O_NULL ? NULL : &found);
        if (s != CACHALOT_STATUS_OK && found != (cachalot_allocator *)SENTINEL) {
            return wrong(WRONG_OUTPUT, "a failing cachalot_torch_allocator wrote *out");
        }
        if (s == CACHALOT_STATUS_OK && found != NULL && found == fx->a) {
            return wrong(WRONG_OUTPUT, "cachalot_torch_allocator returned a caller's allocator");
        }
        return s;
    }
    }
}

/* cachalot_blocks: the buffer kinds count rows, not bytes; a failing call writes no row. */
static int call_blocks(struct fixture *fx, const struct abi_args *in) {
    size_t needed = 0, len = 0, count = SENTINEL_LEN;
    if (cachalot_blocks(fx->a, NULL, 0, &needed) != CACHALOT_STATUS_OK || needed < 2) {
        return wrong(WRONG_OUTPUT, "the count query of the fixture failed");
    }
    char *bytes = buffer_of(in->buf, needed * sizeof(cachalot_block_info), (needed - 1) * sizeof(cachalot_block_info),
                            &len);
    size_t rows = len / sizeof(cachalot_block_info);
    if (bytes == NULL) {
        rows = len;
    }
    cachalot_block_info *out = (cachalot_block_info *)(void *)bytes;
    cachalot_status s = cachalot_blocks(handle_of(fx, in), out, rows, in->out == O_NULL ? NULL : &count);
    int result = s;
    if (s != CACHALOT_STATUS_OK) {
        if (count != SENTINEL_LEN || (bytes != NULL && !untouched(bytes, len))) {
            result = wrong(WRONG_OUTPUT, "a failing cachalot_blocks wrote an output");
        }
    } else if (count != needed) {
        result = wrong(WRONG_OUTPUT, "the count is not the query's");
    } else if (out != NULL) {
        size_t allocated = 0;
        for (size_t i = 0; i < count; i++) {
            const cachalot_block_info *b = &out[i];
            if (b->address < b->segment_address || b->address + b->size > b->segment_address + b->segment_size ||
                b->state > CACHALOT_BLOCK_CACHED || b->pool != 0 || (i > 0 && b->address < out[i - 1].address)) {
                result = wrong(WRONG_OUTPUT, "a row is not a block of its segment, by address");
            }
            allocated += b->state == CACHALOT_BLOCK_ALLOCATED;
        }
        if (result == s && allocated == 0) {
            result = wrong(WRONG_OUTPUT, "the fixture's live allocations are missing");
        }
        if (result == s && !untouched(bytes + count * sizeof(cachalot_block_info), len - count * sizeof(cachalot_block_info))) {
            result = wrong(WRONG_OUTPUT, "bytes written past the rows");
        }
    }
    free(bytes);
    return result;
}

/* cachalot_allocate_at: a block placed in the fixture's cache is freed again, so the fixture
 * ends as it began; only classic segments place one. */
static int call_allocate_at(struct fixture *fx, const struct abi_args *in, cachalot_allocator *a, void *ptr) {
    cachalot_status s = cachalot_allocate_at(a, ptr, in->size, in->size);
    bool classic = strcmp(fx->config, "policy:pytorch") == 0;
    if (s == CACHALOT_STATUS_OK && cachalot_free(a, ptr) != CACHALOT_STATUS_OK) {
        return wrong(WRONG_OUTPUT, "the placed block could not be freed");
    }
    if (in->handle == H_LIVE && in->ptr == P_FREE_START && in->size == 512 && classic != (s == CACHALOT_STATUS_OK)) {
        return wrong(WRONG_RETURN, classic ? "classic segments refused a cached range" : "virtual memory placed a block");
    }
    return s;
}

/* The cachalot_pool_* functions. `in->number` is the pool: 0 makes one for the call (and the
 * adapter frees what the call allocated in it and gives the pool back afterwards, so only the
 * statistics' counters of a row that allocated may move), any other id is passed as it is. */
static int call_pool(struct fixture *fx, const struct abi_row *row, cachalot_allocator *a, void *ptr) {
    const struct abi_args *in = &row->in;
    uint32_t pool = (uint32_t)in->number;
    bool made = false;
    if (pool == 0 && row->fn != F_POOL_CREATE) {
        if (cachalot_pool_create(fx->a, &pool) != CACHALOT_STATUS_OK || pool == 0) {
            return wrong(WRONG_OUTPUT, "the adapter could not make a pool");
        }
        made = true;
    }
    cachalot_status s;
    int result;
    switch (row->fn) {
    case F_POOL_CREATE: {
        uint32_t made_here = 0x5e5e;
        s = cachalot_pool_create(a, in->out == O_NULL ? NULL : &made_here);
        result = s;
        if (s != CACHALOT_STATUS_OK && made_here != 0x5e5e) {
            result = wrong(WRONG_OUTPUT, "a failing cachalot_pool_create wrote *out_pool");
        } else if (s == CACHALOT_STATUS_OK) {
            pool = made_here;
            made = true;
        }
        break;
    }
    case F_POOL_RETAIN:
        result = s = cachalot_pool_retain(a, pool);
        if (s == CACHALOT_STATUS_OK) {
            cachalot_pool_release(fx->a, pool);
        }
        break;
    case F_POOL_RELEASE:
        result = s = cachalot_pool_release(a, pool);
        if (s == CACHALOT_STATUS_OK) {
            made = false; /* its one use is ended */
        }
        break;
    case F_POOL_USE_COUNT: {
        uint32_t uses = 0x5e5e;
        result = s = cachalot_pool_use_count(a, pool, in->out == O_NULL ? NULL : &uses);
        if (s != CACHALOT_STATUS_OK && uses != 0x5e5e) {
            result = wrong(WRONG_OUTPUT, "a failing cachalot_pool_use_count wrote *out_count");
        } else if (s == CACHALOT_STATUS_OK && uses != 1) {
            result = wrong(WRONG_OUTPUT, "a pool just made has one use");
        }
        break;
    }
    case F_POOL_BEGIN:
        result = s = cachalot_pool_begin_allocate(a, pool, stream_of(in));
        if (s == CACHALOT_STATUS_OK) {
            cachalot_pool_end_allocate(fx->a, pool);
        }
        break;
    case F_POOL_END: result = s = cachalot_pool_end_allocate(a, pool); break;
    case F_POOL_MALLOC: {
        void *p = SENTINEL;
        result = s = cachalot_pool_malloc(a, pool, in->size, stream_of(in), in->out == O_NULL ? NULL : &p);
        if (s != CACHALOT_STATUS_OK && p != SENTINEL) {
            result = wrong(WRONG_OUTPUT, "a failing cachalot_pool_malloc wrote *out_ptr");
        } else if (s == CACHALOT_STATUS_OK && cachalot_free(fx->a, p) != CACHALOT_STATUS_OK) {
            result = wrong(WRONG_OUTPUT, "the pool's allocation could not be freed");
        }
        break;
    }
    case F_POOL_EMPTY_CACHE: result = s = cachalot_pool_empty_cache(a, pool); break;
    case F_POOL_ALLOCATE_AT: result = s = cachalot_pool_allocate_at(a, pool, ptr, in->size, in->size); break;
    default: return wrong(WRONG_RETURN, "not a pool function");
    }
    /* Calls that succeed leave the last error alone: the call's own message stays. A pool that
     * holds nothing goes at its release; one that cached the row's allocation is emptied after
     * it (waiting for pending frees counts in the statistics, which that row may change). */
    if (made && (cachalot_pool_release(fx->a, pool) != CACHALOT_STATUS_OK ||
                 (row->fn == F_POOL_MALLOC && s == CACHALOT_STATUS_OK &&
                  cachalot_pool_empty_cache(fx->a, pool) != CACHALOT_STATUS_OK))) {
        return wrong(WRONG_OUTPUT, "the pool made for the call could not be given back");
    }
    return result;
}

int abi_call(struct fixture *fx, const struct abi_row *row) {
    const struct abi_args *in = &row->in;
    cachalot_allocator *a = handle_of(fx, in);
    void *ptr = fx->ptr[in->ptr];
    switch (row->fn) {
    case F_MALLOC: return call_malloc(fx, in);
    case F_FREE: return cachalot_free(a, ptr);
    case F_RECORD_STREAM: return cachalot_record_stream(a, ptr, stream_of(in));
    case F_EMPTY_CACHE: return cachalot_empty_cache(a);
    case F_SET_MEMORY_FRACTION: return cachalot_set_memory_fraction(a, in->fraction);
    case F_NEW_CUDA: return call_new(in, true);
    case F_NEW_SIMULATED: return call_new(in, false);
    case F_NEW_SIMULATED_PLACED: return call_new_placed(in);
    case F_ALLOCATOR_FREE:
        if (in->handle != H_NULL) {
            return wrong(WRONG_RETURN, "only NULL may be destroyed here");
        }
        cachalot_allocator_free(NULL);
        return RETURNED;
    case F_LAST_ERROR_MESSAGE: return call_last_error(fx, in);
    case F_MEMORY_SUMMARY: return call_report(fx, in, true);
    case F_SNAPSHOT_JSON: return call_report(fx, in, false);
    case F_GET_STATS: return call_get_stats(fx, in);
    case F_CONFIG_NOTES: return call_config_notes(in);
    case F_RESET_PEAK_STATS: return cachalot_reset_peak_stats(a);
    case F_RESET_ACCUMULATED_STATS: return cachalot_reset_accumulated_stats(a);
    case F_LARGEST_CACHED_BLOCK: {
        size_t largest = (size_t)SENTINEL;
        cachalot_status s = cachalot_largest_cached_block(a, in->out == O_NULL ? NULL : &largest);
        if (s != CACHALOT_STATUS_OK && largest != (size_t)SENTINEL) {
            return wrong(WRONG_OUTPUT, "a failing cachalot_largest_cached_block wrote *out");
        }
        return s;
    }
    case F_BLOCKS: return call_blocks(fx, in);
    case F_ALLOCATE_AT: return call_allocate_at(fx, in, a, ptr);
    case F_TORCH_DEVICE_ALLOCATOR: {
        cachalot_allocator *got = SENTINEL;
        cachalot_status s = cachalot_torch_device_allocator(in->number, in->out == O_NULL ? NULL : &got);
        return s != CACHALOT_STATUS_OK && got != SENTINEL ? wrong(WRONG_OUTPUT, "a failing call wrote *out") : s;
    }
    case F_POOL_CREATE:
    case F_POOL_RETAIN:
    case F_POOL_RELEASE:
    case F_POOL_USE_COUNT:
    case F_POOL_BEGIN:
    case F_POOL_END:
    case F_POOL_MALLOC:
    case F_POOL_EMPTY_CACHE:
    case F_POOL_ALLOCATE_AT: return call_pool(fx, row, a, ptr);
    case F_CAPTURE_BEGIN: {
        cachalot_status s = cachalot_capture_begin(a);
        if (s == CACHALOT_STATUS_OK && cachalot_capture_end(fx->a) != CACHALOT_STATUS_OK) {
            return wrong(WRONG_OUTPUT, "the capture begun could not be ended");
        }
        return s;
    }
    case F_CAPTURE_END: return cachalot_capture_end(a);
    case F_STATUS_NAME: {
        const char *name = cachalot_status_name(in->number);
        return name != NULL && strcmp(name, in->text) == 0 ? RETURNED : wrong(WRONG_RETURN, name ? name : "NULL");
    }
    case F_VERSION: {
        const char *v = cachalot_version();
#ifdef CACHALOT_EXPECTED_VERSION
        return v != NULL && strcmp(v, CACHALOT_EXPECTED_VERSION) == 0 ? RETURNED : wrong(WRONG_RETURN, "version");
#else
        return v != NULL && strchr(v, '.') != NULL ? RETURNED : wrong(WRONG_RETURN, "version");
#endif
    }
    default: return call_torch(fx, row, ptr);
    }
}
