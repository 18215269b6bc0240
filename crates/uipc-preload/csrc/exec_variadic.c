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

enum exec_kind { EXEC_V, EXEC_VE, EXEC_VP };

/* Gathers `arg` and the arguments in `ap` up to their NULL into an argv array on the stack
 * (E2BIG if they are too many to count in an int), then calls execv, execve (with the envp
 * that follows the NULL) or execvp. As vprintf does, it takes the caller's `ap` (read only
 * through copies), which the caller ends afterwards. */
static int exec_gathered(enum exec_kind kind, const char *path, const char *arg, va_list ap) {
    va_list count;
    va_copy(count, ap);
    size_t n = count_until_null(&count);
    va_end(count);
    if (n >= INT_MAX - 1) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n + 2];
    va_list args;
    va_copy(args, ap);
    gather(argv, arg, n, &args);
    char **envp = kind == EXEC_VE ? va_arg(args, char **) : NULL;
    va_end(args);
    switch (kind) {
    case EXEC_VE:
        return execve(path, argv, envp);
    case EXEC_VP:
        return execvp(path, argv);
    default:
        return execv(path, argv);
    }
}

/* One exported execl-style function: gathers its variadic arguments and runs them as `kind`. */
#define EXEC_LIST(name, kind)                                                                 \
    HIDDEN int name(const char *path, const char *arg, ...) {                                 \
        va_list ap;                                                                           \
        va_start(ap, arg);                                                                    \
        int r = exec_gathered(kind, path, arg, ap);                                           \
        va_end(ap);                                                                           \
        return r;                                                                             \
    }

EXEC_LIST(uipc_execl, EXEC_V)
EXEC_LIST(uipc_execle, EXEC_VE)
EXEC_LIST(uipc_execlp, EXEC_VP)
