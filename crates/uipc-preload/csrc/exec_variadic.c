/* execl(3), execle(3) and execlp(3) of the uipc preload library, written in C only because
 * they are variadic (stable Rust cannot define a variadic function). The exported symbols are
 * Rust naked functions (exec.rs) that jump here with the caller's registers and stack as they
 * were, since symbols from C objects are not exported from a Rust cdylib. Each gathers its
 * arguments into an argv array on the stack, as the C library does, and calls execv, execve
 * or execvp: the library's own exports (exec.rs), which hand the timer id counter to the new
 * program image. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* How many arguments follow, up to the NULL that ends them. */
static size_t count_until_null(va_list *ap) {
    size_t n = 0;
    while (va_arg(*ap, const char *) != NULL) n++;
    return n;
}

/* argv[0] = first, then `n` more arguments and the NULL after them. */
static void gather(char **argv, const char *first, size_t n, va_list *ap) {
    argv[0] = (char *)first;
    for (size_t i = 1; i <= n + 1; i++) argv[i] = va_arg(*ap, char *);
}

HIDDEN int uipc_execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    size_t n = count_until_null(&ap);
    va_end(ap);
    if (n >= INT_MAX - 1) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n + 2];
    va_start(ap, arg);
    gather(argv, arg, n, &ap);
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int uipc_execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    size_t n = count_until_null(&ap);
    va_end(ap);
    if (n >= INT_MAX - 1) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n + 2];
    va_start(ap, arg);
    gather(argv, arg, n, &ap);
    char **envp = va_arg(ap, char **);
    va_end(ap);
    return execve(path, argv, envp);
}

HIDDEN int uipc_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    size_t n = count_until_null(&ap);
    va_end(ap);
    if (n >= INT_MAX - 1) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n + 2];
    va_start(ap, arg);
    gather(argv, arg, n, &ap);
    va_end(ap);
    return execvp(file, argv);
}
