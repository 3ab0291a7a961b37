/*
 * The C tests' one assertion: CHECK(cond) counts a pass or a failure (atomically, so threads
 * may check too) and prints each failure with its file and line. A test ends with
 * "name: N passed, N failed" and exits non-zero when `failed` is not 0.
 */
#ifndef CACHALOT_TEST_CHECK_H
#define CACHALOT_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            __atomic_add_fetch(&passed, 1, __ATOMIC_RELAXED);                         \
        } else {                                                                      \
            __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

#endif
