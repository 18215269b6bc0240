/* Timer overruns as Linux counts them: fixed when the signal is dequeued, as the expirations
 * between the one that queued it and the dequeue.
 * 1. The conformance test's pattern, 50 times at each period (1 ns, 1 us, 1 ms): SIGCONT
 *    (no handler) blocked, a timer first due in 2 ms with that period, a sleep of 2 ms plus
 *    75 periods, the signal unblocked, then timer_getoverrun counts more than 70, and
 *    timer_gettime says the next expiry is at most one period away.
 * 2. Signals accepted with sigwaitinfo at a 1 us and a 1 ms period (SIGEV_SIGNAL and
 *    SIGEV_THREAD_ID): each si_overrun equals the timer_getoverrun that follows, and the
 *    signals accepted plus their overruns equal the expirations up to the dequeue, which
 *    happened between a clock read before sigwaitinfo and one after timer_getoverrun.
 * 3. The same with a SA_SIGINFO handler taking the signals. */
#include "check.h"
#include <sys/syscall.h>
#include <time.h>

#define NS 1000000000LL

static long long now_ns(void) {
    struct timespec t;
    CHECK(clock_gettime(CLOCK_MONOTONIC, &t) == 0);
    return t.tv_sec * NS + t.tv_nsec;
}

static void unblocked_overrun(long period) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCONT);
    CHECK(sigprocmask(SIG_SETMASK, &set, NULL) == 0);
    struct sigevent ev = signal_event(SIGCONT, 0);
    timer_t t;
    start_timer(&t, CLOCK_REALTIME, &ev, 2000000, period);
    long long sleep = 2000000 + 75LL * period;
    struct timespec ts = {sleep / NS, sleep % NS};
    CHECK(nanosleep(&ts, NULL) == 0);
    CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
    int overrun = timer_getoverrun(t);
    if (overrun <= 70) {
        fprintf(stderr, "period %ld ns: %d overruns, expected more than 70\n", period, overrun);
        exit(1);
    }
    struct itimerspec cur;
    CHECK(timer_gettime(t, &cur) == 0);
    CHECK(cur.it_interval.tv_nsec == period && cur.it_value.tv_sec == 0);
    CHECK(cur.it_value.tv_nsec <= period);
    CHECK(timer_delete(t) == 0);
}

/* Accepts `n` signals of a timer with period `period` (ns); checks si_overrun and the count. */
static void accepted(long period, int n, int thread_id) {
    int sig = SIGRTMIN + 1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    CHECK(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
    struct sigevent ev = {0};
    ev.sigev_notify = thread_id ? SIGEV_THREAD_ID : SIGEV_SIGNAL;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    ev.sigev_signo = sig;
    ev.sigev_value.sival_int = 7;
    timer_t t;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    long long first = now_ns() + 1000000;
    struct itimerspec its = {{0, period}, {first / NS, first % NS}};
    CHECK(timer_settime(t, TIMER_ABSTIME, &its, NULL) == 0);
    long long accounted = 0, overruns = 0;
    for (int i = 0; i < n; i++) {
        siginfo_t info;
        long long before = now_ns();
        int got;
        /* A stray SIGCONT of the first part (default action) may interrupt the wait. */
        while ((got = sigwaitinfo(&set, &info)) == -1 && errno == EINTR)
            ;
        CHECK(got == sig);
        int overrun = timer_getoverrun(t);
        long long after = now_ns();
        CHECK(info.si_code == SI_TIMER && info.si_value.sival_int == 7);
        if (info.si_overrun != overrun) {
            fprintf(stderr, "period %ld ns, signal %d: si_overrun %d, timer_getoverrun %d\n",
                    period, i, info.si_overrun, overrun);
            exit(1);
        }
        accounted += 1 + overrun;
        overruns += overrun;
        /* Expirations up to a dequeue at D: floor((D - first) / period) + 1. */
        long long lo = before < first ? 1 : (before - first) / period + 1;
        long long hi = (after - first) / period + 1;
        if (accounted < lo || accounted > hi) {
            fprintf(stderr, "period %ld ns, signal %d: %lld signals + overruns, expected %lld..%lld\n",
                    period, i, accounted, lo, hi);
            exit(1);
        }
    }
    CHECK(timer_delete(t) == 0);
    CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
    printf("period %ld ns%s: %d signals, %lld overruns, accounted\n", period,
           thread_id ? " (thread)" : "", n, overruns);
}

/* The same through a SA_SIGINFO handler: its si_overrun equals the timer_getoverrun it calls,
 * and the signals plus overruns equal the expirations up to a dequeue that happened after the
 * previous handler's last clock read (the signal is blocked while its handler runs). */
static timer_t h_timer;
static long long h_first, h_period, h_accounted, h_prev_after, h_overruns;
static volatile sig_atomic_t h_count, h_bad, h_goal;

static void on_timer(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    int overrun = timer_getoverrun(h_timer);
    long long after = now_ns();
    if (info->si_code != SI_TIMER || info->si_overrun != overrun)
        h_bad = 1;
    h_accounted += 1 + overrun;
    h_overruns += overrun;
    long long lo = h_prev_after < h_first ? 1 : (h_prev_after - h_first) / h_period + 1;
    long long hi = (after - h_first) / h_period + 1;
    if (h_accounted < lo || h_accounted > hi)
        h_bad = 2;
    h_prev_after = after;
    /* Disarmed from here: at 1 us the next signal is pending whenever a handler returns, so
     * the main thread might never run again. */
    if (++h_count >= h_goal || h_bad) {
        struct itimerspec off = {{0, 0}, {0, 0}};
        timer_settime(h_timer, 0, &off, NULL);
    }
}

static void handled(long period, int n, int thread_id) {
    int sig = SIGRTMIN + 2;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_timer;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
    struct sigaction back;
    CHECK(sigaction(sig, NULL, &back) == 0 && back.sa_sigaction == on_timer);
    struct sigevent ev = {0};
    ev.sigev_notify = thread_id ? SIGEV_THREAD_ID : SIGEV_SIGNAL;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    ev.sigev_signo = sig;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &h_timer) == 0);
    h_period = period;
    h_accounted = h_overruns = h_count = h_bad = 0;
    h_goal = n;
    h_first = now_ns() + 1000000;
    h_prev_after = 0;
    struct itimerspec its = {{0, period}, {h_first / NS, h_first % NS}};
    CHECK(timer_settime(h_timer, TIMER_ABSTIME, &its, NULL) == 0);
    while (h_count < n && !h_bad) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    CHECK(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
    CHECK(timer_delete(h_timer) == 0);
    if (h_bad) {
        fprintf(stderr, "period %ld ns handler: %s at signal %d\n", period,
                h_bad == 1 ? "si_overrun differs from timer_getoverrun" : "count off",
                (int)h_count);
        exit(1);
    }
    CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
    printf("period %ld ns%s, handler: %d signals, %lld overruns, accounted\n", period,
           thread_id ? " (thread)" : "", n, h_overruns);
}

int main(void) {
    long periods[] = {1, 1000, 1000000};
    for (int p = 0; p < 3; p++)
        for (int run = 0; run < 50; run++)
            unblocked_overrun(periods[p]);
    printf("unblocked after 75 periods: more than 70 overruns, 50 runs at 1 ns, 1 us, 1 ms\n");
    accepted(1000, 2000, 0);
    accepted(1000, 2000, 1);
    accepted(1000000, 100, 0);
    accepted(1000000, 100, 1);
    handled(1000, 2000, 0);
    handled(1000, 2000, 1);
    handled(1000000, 100, 0);
    handled(1000000, 100, 1);
    return 0;
}
