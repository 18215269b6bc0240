/* timer_settime, timer_gettime and timer_getoverrun from a timer's own signal handler, as POSIX
 * allows (they are async-signal-safe; on Linux they are system calls).
 *
 * A periodic timer (SIGRTMIN, PERIOD_US) runs a handler that calls timer_getoverrun and
 * timer_gettime on its own timer and timer_settime, timer_gettime and timer_getoverrun on the
 * "spare" timers (SIGEV_NONE, never firing), and checks every result: the own timer's interval
 * is PERIOD_US, a spare's interval is one of the values anyone sets, overruns are never
 * negative, and the siginfo is the timer's. Meanwhile the main thread loops over the same three
 * calls on the spare timers, re-sets the periodic timer now and then (same period), and
 * mallocs and frees, so the handler interrupts it inside malloc and inside every timer call.
 *
 * A library that allocates or takes a lock the interrupted code may hold deadlocks; a
 * watchdog thread (all signals blocked) ends the program with status 3 when the handler or the
 * main loop has made no progress for STALL_S seconds.
 *
 * Usage: timer_handler [handler runs] (default 20000; a slow machine stops after ENOUGH_S
 * seconds once the handler ran a tenth of that). */
#include "check.h"
#include "watchdog.h"
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define PERIOD_US 250
#define SPARES 6
#define STALL_S 5

static timer_t periodic, spare[SPARES];
static volatile sig_atomic_t handler_runs, main_rounds, failed_line;
static volatile sig_atomic_t done;

/* The intervals anyone gives a spare timer: 1..4 ms. */
static int interval_ok(const struct itimerspec *t) {
    return t->it_interval.tv_sec == 0 && t->it_interval.tv_nsec % 1000000 == 0 &&
           t->it_interval.tv_nsec >= 1000000 && t->it_interval.tv_nsec <= 4000000;
}

/* A spare's setting: a far expiry (never fires), interval 1..4 ms by `k`. */
static struct itimerspec spare_setting(unsigned k) {
    struct itimerspec t = {0};
    t.it_value.tv_sec = 3600;
    t.it_interval.tv_nsec = (long)(1 + k % 4) * 1000000;
    return t;
}

#define HCHECK(cond) NOTE_FAILED_LINE(cond)

static void on_timer(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    int saved = errno;
    HCHECK(sig == SIGRTMIN && info->si_code == SI_TIMER && info->si_value.sival_int == 77);
    HCHECK(info->si_overrun >= 0);
    HCHECK(timer_getoverrun(periodic) >= 0);
    struct itimerspec now;
    HCHECK(timer_gettime(periodic, &now) == 0);
    HCHECK(now.it_interval.tv_sec == 0 && now.it_interval.tv_nsec == PERIOD_US * 1000);
    unsigned k = (unsigned)handler_runs;
    timer_t s = spare[k % SPARES];
    struct itimerspec set = spare_setting(k), old;
    HCHECK(timer_settime(s, 0, &set, &old) == 0);
    HCHECK(interval_ok(&old));
    HCHECK(timer_gettime(s, &now) == 0 && interval_ok(&now));
    HCHECK(timer_getoverrun(s) == 0);
    /* An id that is not a timer: EINVAL, from the handler too. */
    HCHECK(timer_getoverrun((timer_t)(intptr_t)999999) == -1 && errno == EINVAL);
    handler_runs++;
    errno = saved;
}

int main(int argc, char **argv) {
    long target = argc > 1 ? atol(argv[1]) : 20000;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_timer;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGRTMIN, &sa, NULL) == 0);

    struct sigevent none = {.sigev_notify = SIGEV_NONE};
    for (int i = 0; i < SPARES; i++) {
        CHECK(timer_create(CLOCK_MONOTONIC, &none, &spare[i]) == 0);
        struct itimerspec t = spare_setting((unsigned)i);
        CHECK(timer_settime(spare[i], 0, &t, NULL) == 0);
    }
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN};
    ev.sigev_value.sival_int = 77;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &periodic) == 0);

    /* The watchdog starts with every signal blocked, so the timer's signal never runs on it. */
    start_progress_watch("timer_handler", STALL_S, &handler_runs, &main_rounds, &done, 0);

    struct itimerspec period = {0};
    period.it_value.tv_nsec = PERIOD_US * 1000;
    period.it_interval.tv_nsec = PERIOD_US * 1000;
    CHECK(timer_settime(periodic, 0, &period, NULL) == 0);

    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    void *blocks[8] = {0};
    for (unsigned k = 0;; k++) {
        timer_t s = spare[k % SPARES];
        struct itimerspec set = spare_setting(k / SPARES), got;
        CHECK(timer_settime(s, 0, &set, &got) == 0);
        CHECK(interval_ok(&got));
        CHECK(timer_gettime(s, &got) == 0 && interval_ok(&got));
        CHECK(timer_getoverrun(s) == 0);
        CHECK(timer_getoverrun(periodic) >= 0);
        if (k % 512 == 0) {
            /* Re-armed on the same period: the handler's checks still hold. */
            CHECK(timer_settime(periodic, 0, &period, &got) == 0);
            CHECK(got.it_interval.tv_nsec == PERIOD_US * 1000);
        }
        churn_heap(blocks, k);
        main_rounds++;
        if (failed_line) {
            fprintf(stderr, "timer_handler: check failed in the handler at line %d\n",
                    (int)failed_line);
            return 1;
        }
        if (k % 256 == 0 && handler_test_done(handler_runs, target, &start))
            break;
    }
    done = 1;
    CHECK(timer_delete(periodic) == 0);
    for (int i = 0; i < SPARES; i++)
        CHECK(timer_delete(spare[i]) == 0);
    free_churned(blocks);
    CHECK(!failed_line);
    printf("timer_handler: ok (%ld handler runs, %ld main rounds)\n", (long)handler_runs,
           (long)main_rounds);
    return 0;
}
