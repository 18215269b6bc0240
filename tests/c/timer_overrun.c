/* Timer overruns as Linux counts them: fixed when the signal is dequeued, as the expirations
 * between the one that queued it and the dequeue.
 * 1. The conformance test's pattern, 50 times at each period (1 ns, 1 us, 1 ms): SIGCONT
 *    (no handler) blocked, a timer first due in 2 ms with that period, a sleep of 2 ms plus
 *    75 periods, the signal unblocked, then timer_getoverrun counts more than 70, and
 *    timer_gettime says the next expiry is at most one period away.
 * 2. Signals accepted with sigwaitinfo at a 1 us and a 1 ms period (SIGEV_SIGNAL and
 *    SIGEV_THREAD_ID): each si_overrun equals the timer_getoverrun that follows, and the
 *    signals accepted plus their overruns equal the expirations up to the dequeue, which
 *    happened between a clock read before sigwaitinfo and one after timer_getoverrun. */
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
    struct sigevent ev = {0};
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGCONT;
    timer_t t;
    CHECK(timer_create(CLOCK_REALTIME, &ev, &t) == 0);
    struct itimerspec its = {{0, period}, {0, 2000000}};
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
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
    return 0;
}
