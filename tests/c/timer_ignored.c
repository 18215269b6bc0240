/* Timers whose signal the process ignores, and signals of deleted timers, as Linux (6.13 and
 * later) handles them:
 * 1. A 1 ns periodic timer whose signal is ignored by default (SIGCONT, no handler, not
 *    blocked) is parked at its first expiry: it is not re-armed, so it costs no CPU time
 *    (under 20 ms of process CPU time in 200 ms), its signal is never dequeued (overrun 0),
 *    and installing a handler over SIG_DFL does not wake it (no signal in 20 ms).
 * 2. A periodic timer whose signal is set to SIG_IGN is parked too, and installing a handler
 *    over SIG_IGN queues the parked signal: the handler runs, its si_overrun counts the
 *    periods that passed while the timer was parked.
 * 3. A deleted timer's signal is never delivered: 2000 one-shot timers due at once, each
 *    deleted right after its setting, leave no signal to accept. */
#include "check.h"
#include <time.h>

#define NS 1000000000LL

static long long cpu_ns(void) {
    struct timespec t;
    CHECK(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0);
    return t.tv_sec * NS + t.tv_nsec;
}

static void sleep_ns(long long ns) {
    struct timespec ts = {ns / NS, ns % NS};
    while (nanosleep(&ts, &ts) != 0)
        CHECK(errno == EINTR);
}

static volatile sig_atomic_t handled, last_overrun;

static void on_signal(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)ctx;
    if (info->si_code == SI_TIMER) {
        handled++;
        last_overrun = info->si_overrun;
    }
}

static void set_handler(int sig, int handler) {
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    if (handler) {
        sa.sa_flags = SA_SIGINFO;
        sa.sa_sigaction = on_signal;
    } else {
        sa.sa_handler = SIG_IGN;
    }
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

static timer_t periodic(int sig, long period) {
    struct sigevent ev = signal_event(sig, 0);
    timer_t t;
    start_timer(&t, CLOCK_MONOTONIC, &ev, 1000000, period);
    return t;
}

static void ignored_by_default(void) {
    timer_t t = periodic(SIGCONT, 1);
    sleep_ns(5000000);
    long long cpu = cpu_ns();
    sleep_ns(200000000);
    cpu = cpu_ns() - cpu;
    if (cpu > 20000000) {
        fprintf(stderr, "parked 1 ns timer: %lld us of CPU time in 200 ms\n", cpu / 1000);
        exit(1);
    }
    CHECK(timer_getoverrun(t) == 0);
    struct itimerspec cur;
    CHECK(timer_gettime(t, &cur) == 0);
    CHECK(cur.it_interval.tv_nsec == 1 && cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec <= 1);
    /* A handler over SIG_DFL: the parked timer stays parked. */
    handled = 0;
    set_handler(SIGCONT, 1);
    sleep_ns(20000000);
    CHECK(handled == 0);
    CHECK(timer_delete(t) == 0);
    signal(SIGCONT, SIG_DFL);
    printf("SIGCONT (default ignored), 1 ns: parked, %lld us CPU in 200 ms, overrun 0\n",
           cpu / 1000);
}

static void ignored_then_handled(void) {
    int sig = SIGRTMIN + 3;
    set_handler(sig, 0);
    timer_t t = periodic(sig, 1000000);
    sleep_ns(30000000);
    CHECK(timer_getoverrun(t) == 0);
    handled = 0;
    set_handler(sig, 1);
    for (int i = 0; i < 2000 && handled == 0; i++)
        sleep_ns(1000000);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    CHECK(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
    CHECK(timer_delete(t) == 0);
    CHECK(handled >= 1);
    /* Parked from its first expiry (1 ms) until the handler came (30 ms later). */
    if (last_overrun < 20) {
        fprintf(stderr, "unignored timer: si_overrun %d, expected 20 or more\n",
                (int)last_overrun);
        exit(1);
    }
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) > 0) {
    }
    CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
    printf("SIG_IGN then a handler: the parked signal queued, si_overrun >= 20\n");
}

static void deleted_never_delivered(void) {
    int sig = SIGRTMIN + 4;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    CHECK(sigprocmask(SIG_BLOCK, &set, NULL) == 0);
    struct timespec zero = {0, 0};
    int stale = 0;
    for (int i = 0; i < 2000; i++) {
        struct sigevent ev = {0};
        ev.sigev_notify = SIGEV_SIGNAL;
        ev.sigev_signo = sig;
        ev.sigev_value.sival_int = i;
        timer_t t;
        CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
        struct itimerspec its = {{0, 0}, {0, 1}};
        CHECK(timer_settime(t, 0, &its, NULL) == 0);
        for (volatile int k = 0; k < i % 64; k++) {
        }
        CHECK(timer_delete(t) == 0);
        siginfo_t info;
        while (sigtimedwait(&set, &info, &zero) > 0)
            stale++;
        CHECK(errno == EAGAIN);
    }
    CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
    if (stale != 0) {
        fprintf(stderr, "%d signals of deleted timers delivered\n", stale);
        exit(1);
    }
    printf("2000 timers deleted at expiry: no signal delivered\n");
}

int main(void) {
    ignored_by_default();
    ignored_then_handled();
    deleted_never_delivered();
    return 0;
}
