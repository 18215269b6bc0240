/* Shared by the *_no_malloc tests: the program defines malloc and friends itself (the
 * executable's definitions come first for every library, the preload library and the C
 * library included) and counts the calls made, and the frees, while NO_MALLOC(call) runs
 * `call`. Include after check.h. */
#ifndef UIPC_TEST_MALLOC_COUNT_H
#define UIPC_TEST_MALLOC_COUNT_H
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* volatile: the compiler knows malloc as a builtin and would otherwise drop the stores around
 * a call it believes cannot reach it. */
static __thread volatile int counting;
static __thread volatile long allocations;

void *malloc(size_t n) {
    allocations += counting;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    allocations += counting;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    allocations += counting;
    return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n) {
    allocations += counting;
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    allocations += counting;
    return __libc_memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n) {
    allocations += counting;
    void *p = __libc_memalign(a, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
void free(void *p) {
    allocations += counting && p;
    __libc_free(p);
}

/* Runs `call` (an expression) counting allocations and frees; fails if there were any. */
#define NO_MALLOC(call)                                                                  \
    ({                                                                                   \
        allocations = 0;                                                                 \
        counting = 1;                                                                    \
        __typeof__(call) result_ = (call);                                               \
        counting = 0;                                                                    \
        if (allocations) {                                                               \
            fprintf(stderr, "%s:%d: %ld allocations or frees in %s\n", __FILE__, __LINE__, \
                    allocations, #call);                                                 \
            _exit(1);                                                                    \
        }                                                                                \
        result_;                                                                         \
    })

#endif
