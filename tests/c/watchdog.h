/* Watchdogs for the signal-handler tests: a thread started with every signal blocked (so no
 * handler under test ever runs on it, and a deadlock that blocks signals cannot silence it),
 * which ends the program with status 3 instead of letting a deadlock hang the test run.
 * Include after check.h. */
#include <pthread.h>
#include <time.h>
#ifndef UIPC_TEST_WATCHDOG_H
#define UIPC_TEST_WATCHDOG_H

/* A check inside a signal handler: the first failure's line goes into the test's
 * `failed_line` (a volatile sig_atomic_t it declares), which the main flow reports. */
#define NOTE_FAILED_LINE(cond)                                                            \
    do {                                                                                  \
        if (!(cond) && !failed_line)                                                      \
            failed_line = __LINE__;                                                       \
    } while (0)

/* Writes `s` to stderr with write(2) only (async-signal-safe). */
static inline void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* Sleeps `seconds` on the monotonic clock, whatever interrupts it. */
static inline void sleep_through(long seconds) {
    struct timespec t = {.tv_sec = seconds};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) == EINTR)
        ;
}

/* Starts `fn(arg)` on a detached-in-spirit thread whose signal mask blocks everything. */
static inline void start_watchdog(void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    CHECK(pthread_sigmask(SIG_SETMASK, &all, &old) == 0);
    pthread_t dog;
    CHECK(pthread_create(&dog, NULL, fn, arg) == 0);
    CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
}

/* A watchdog on progress: every `stall_s` seconds both counters must have moved (until
 * `*done`); otherwise it says which one stalled, kills `kill_on_stall` if set, and exits 3. */
struct progress_watch {
    const char *name;
    long stall_s;
    volatile sig_atomic_t *handler_runs, *main_rounds, *done;
    pid_t kill_on_stall;
};

static inline void *watch_progress(void *arg) {
    struct progress_watch *w = arg;
    long last_h = -1, last_m = -1;
    for (;;) {
        sleep_through(w->stall_s);
        if (*w->done)
            return NULL;
        if (*w->handler_runs == last_h || *w->main_rounds == last_m) {
            say(w->name);
            say(*w->handler_runs == last_h ? ": the handler made no progress (deadlock?)\n"
                                           : ": the main loop made no progress (deadlock?)\n");
            if (w->kill_on_stall > 0)
                kill(w->kill_on_stall, SIGKILL);
            _exit(3);
        }
        last_h = *w->handler_runs;
        last_m = *w->main_rounds;
    }
}

/* Starts watch_progress on a watchdog thread, over `handler_runs` and `main_rounds` until
 * `*done` (one watch a program). */
static inline void start_progress_watch(const char *name, long stall_s,
                                        volatile sig_atomic_t *handler_runs,
                                        volatile sig_atomic_t *main_rounds,
                                        volatile sig_atomic_t *done, pid_t kill_on_stall) {
    static struct progress_watch watch;
    watch = (struct progress_watch){name, stall_s, handler_runs, main_rounds, done, kill_on_stall};
    start_watchdog(watch_progress, &watch);
}

/* A handler test's main loop stops at its target of handler runs, or after ENOUGH_S seconds
 * once the handler reached a tenth of it (a slow machine still ends in time). */
#define ENOUGH_S 25

/* Whether the main loop may stop: the handler ran `target` times, or ENOUGH_S seconds passed
 * since `start` and it ran a tenth of that. */
static inline int handler_test_done(long runs, long target, const struct timespec *start) {
    if (runs >= target)
        return 1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec - start->tv_sec >= ENOUGH_S && runs >= target / 10;
}

/* Heap churn in the main loop, so a handler that allocated would meet malloc mid-call: round
 * `k` frees one of the eight blocks and allocates it again at another size. */
static inline void churn_heap(void *blocks[8], unsigned k) {
    unsigned slot = k % 8;
    free(blocks[slot]);
    blocks[slot] = malloc(16 + (k * 97) % 5000);
    CHECK(blocks[slot] != NULL);
}

/* Frees what churn_heap left. */
static inline void free_churned(void *blocks[8]) {
    for (int i = 0; i < 8; i++)
        free(blocks[i]);
}

#endif
