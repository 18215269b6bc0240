/* fcntl's record locks and close from a signal handler, as POSIX allows (fcntl and close are
 * async-signal-safe; on Linux they are system calls).
 *
 * A child holds a write lock on bytes 100..199 of files A, C and B0..B15. A periodic timer
 * (SIGRTMIN, PERIOD_US, timer_create) runs a handler that opens B (the next of B0..B15), locks bytes 0..9 (F_SETLK), asks
 * about 100..199 (F_GETLK: the child's write lock), tries 150 (EAGAIN or EACCES), unlocks
 * 0..9 (F_UNLCK), locks it again and closes B, checking every result; at the end the child
 * checks that it can lock 0..9 of A and B, so every close dropped the lock taken before it. Meanwhile the main thread loops over the
 * same calls on A (kept open), opens and closes C (locked by the child too, so its close goes
 * to the daemon under uipc), and mallocs and frees, so the handler interrupts it inside malloc
 * and inside every lock call and close.
 *
 * A library that allocates or takes a lock the interrupted code may hold deadlocks; a
 * watchdog thread (all signals blocked) ends the program with status 3 when the handler or the
 * main loop has made no progress for STALL_S seconds.
 *
 * Usage: locks_handler [handler runs] (default 3000; a slow machine stops after ENOUGH_S
 * seconds once the handler ran a tenth of that). */
#include "check.h"
#include "watchdog.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define PERIOD_US 2000
#define STALL_S 10

#define B_FILES 16

static char path_a[64], path_b[B_FILES][64], path_c[64];
static pid_t holder;
static volatile sig_atomic_t handler_runs, main_rounds, failed_line, done;

#define HCHECK(cond) NOTE_FAILED_LINE(cond)

/* Lock 0..9, see the child's lock, fail on 150, unlock; on `fd`. Returns 0 or the line. */
static int lock_round(int fd) {
    struct flock fl = range(F_WRLCK, 0, 10);
    FAIL_LINE_IF(fcntl(fd, F_SETLK, &fl) != 0);
    fl = range(F_RDLCK, 100, 100);
    FAIL_LINE_IF(fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type != F_WRLCK || fl.l_pid != holder ||
                 fl.l_start != 100 || fl.l_len != 100);
    fl = range(F_WRLCK, 150, 1);
    FAIL_LINE_IF(fcntl(fd, F_SETLK, &fl) != -1 || (errno != EAGAIN && errno != EACCES));
    fl = range(F_UNLCK, 0, 10);
    FAIL_LINE_IF(fcntl(fd, F_SETLK, &fl) != 0);
    return 0;
}

static void on_timer(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)info, (void)ctx;
    int saved = errno;
    int fd = open(path_b[handler_runs % B_FILES], O_RDWR);
    HCHECK(fd >= 0);
    if (fd >= 0) {
        int line = lock_round(fd);
        if (line && !failed_line)
            failed_line = line;
        /* Locked again and left to the close, which must drop it (checked by the child). */
        struct flock fl = range(F_WRLCK, 0, 10);
        HCHECK(fcntl(fd, F_SETLK, &fl) == 0);
        HCHECK(close(fd) == 0);
    }
    handler_runs++;
    errno = saved;
}

static int make_file(char *path, const char *name) {
    snprintf(path, 64, "/tmp/uipc-%s-%d", name, getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) == 0);
    return fd;
}

int main(int argc, char **argv) {
    long target = argc > 1 ? atol(argv[1]) : 3000;
    int a = make_file(path_a, "lh-a");
    int b[B_FILES];
    for (int i = 0; i < B_FILES; i++) {
        char name[16];
        snprintf(name, sizeof name, "lh-b%d", i);
        b[i] = make_file(path_b[i], name);
    }
    int c = make_file(path_c, "lh-c");
    int ready[2], release[2];
    CHECK(pipe(ready) == 0 && pipe(release) == 0);
    holder = checked_fork();
    if (holder == 0) {
        struct flock fl = range(F_WRLCK, 100, 100);
        CHECK(fcntl(a, F_SETLK, &fl) == 0 && fcntl(c, F_SETLK, &fl) == 0);
        for (int i = 0; i < B_FILES; i++)
            CHECK(fcntl(b[i], F_SETLK, &fl) == 0);
        CHECK(write(ready[1], "x", 1) == 1);
        /* Ends when the parent releases it or exits (its write end closes). */
        close(release[1]);
        char ch;
        ssize_t r = read(release[0], &ch, 1);
        /* The handlers' closes of B dropped their locks on 0..9 (the main loop's are gone
         * too: it unlocks A). */
        fl = range(F_WRLCK, 0, 10);
        for (int i = 0; r == 1 && i <= B_FILES; i++) {
            if (fcntl(i < B_FILES ? b[i] : a, F_SETLK, &fl) != 0) {
                fprintf(stderr, "locks_handler: a lock on 0..9 outlived its close\n");
                _exit(2);
            }
        }
        _exit(r == 1 ? 0 : 1);
    }
    char ch;
    CHECK(read(ready[0], &ch, 1) == 1);
    CHECK(close(c) == 0);
    for (int i = 0; i < B_FILES; i++)
        CHECK(close(b[i]) == 0);

    start_progress_watch("locks_handler", STALL_S, &handler_runs, &main_rounds, &done, holder);

    struct sigaction sa = {0};
    sa.sa_sigaction = on_timer;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGRTMIN, &sa, NULL) == 0);
    struct sigevent ev = signal_event(SIGRTMIN, 0);
    timer_t t;
    start_timer(&t, CLOCK_MONOTONIC, &ev, PERIOD_US * 1000, PERIOD_US * 1000);

    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    void *blocks[8] = {0};
    for (unsigned k = 0;; k++) {
        int line = lock_round(a);
        if (line) {
            fprintf(stderr, "locks_handler: main loop check at line %d failed (errno %d)\n",
                    line, errno);
            kill(holder, SIGKILL);
            return 1;
        }
        int fd = open(path_c, O_RDONLY);
        CHECK(fd >= 0 && close(fd) == 0);
        churn_heap(blocks, k);
        main_rounds++;
        if (failed_line) {
            fprintf(stderr, "locks_handler: check failed in the handler at line %d\n",
                    (int)failed_line);
            kill(holder, SIGKILL);
            return 1;
        }
        if (k % 16 == 0 && handler_test_done(handler_runs, target, &start))
            break;
    }
    done = 1;
    CHECK(timer_delete(t) == 0);
    CHECK(write(release[1], "x", 1) == 1);
    expect_clean_exit(holder);
    free_churned(blocks);
    CHECK(close(a) == 0);
    unlink(path_a), unlink(path_c);
    for (int i = 0; i < B_FILES; i++)
        unlink(path_b[i]);
    printf("locks_handler: ok (%ld handler runs, %ld main rounds)\n", (long)handler_runs,
           (long)main_rounds);
    return 0;
}
