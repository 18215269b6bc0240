/* Handlers installed every way the C library offers, and what sigaction reports of them,
 * beside timer calls that run while signals arrive (under `uipc run --timers` each handler
 * runs behind the library's trampoline, which holds a signal off while a timer call runs).
 *
 * 1. signal(): BSD semantics (SA_RESTART, the signal blocked in its handler, no SA_SIGINFO),
 *    the old handler returned, and sigaction reporting the program's handler.
 * 2. sysv_signal(): SA_RESETHAND and SA_NODEFER; the handler runs once, then the default.
 * 3. sigset(): SIG_HOLD blocks and reports the old disposition, a second SIG_HOLD reports
 *    SIG_HOLD, a new handler unblocks and reports SIG_HOLD.
 * 4. sigaction with SA_RESETHAND in a child: the second signal takes the default action.
 * 5. A thread sigqueues SIGRTMIN+1 with values 1..N while the main thread loops over
 *    timer_gettime and timer_settime and a plain SIGALRM handler (signal()) calls them too:
 *    every value arrives once, with SI_QUEUE and the sender's pid, and nothing deadlocks (a
 *    watchdog ends the program with status 3). */
/* sigset() is deprecated in glibc's headers, but programs still call it. */
#include "check.h"
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "watchdog.h"
#include <sys/time.h>

#define N 2000

static volatile sig_atomic_t plain_runs, once_runs, failed_line;
static int alarm_runs;
static timer_t spare;
static unsigned char seen[N + 1];
static int received;

#define HCHECK(cond) NOTE_FAILED_LINE(cond)

static void plain(int sig) {
    (void)sig;
    plain_runs++;
}

static void once(int sig) {
    (void)sig;
    once_runs++;
}

static void on_alarm(int sig) {
    int saved = errno;
    HCHECK(sig == SIGALRM);
    struct itimerspec now, set = {.it_value = {.tv_sec = 3600}, .it_interval = {.tv_nsec = 2000000}};
    HCHECK(timer_gettime(spare, &now) == 0);
    HCHECK(now.it_interval.tv_nsec == 1000000 || now.it_interval.tv_nsec == 2000000);
    HCHECK(timer_settime(spare, 0, &set, NULL) == 0);
    __atomic_fetch_add(&alarm_runs, 1, __ATOMIC_RELAXED);
    errno = saved;
}

static void on_queued(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    HCHECK(sig == SIGRTMIN + 1 && info->si_code == SI_QUEUE && info->si_pid == getpid());
    int v = info->si_value.sival_int;
    HCHECK(v >= 1 && v <= N && !seen[v]);
    if (v >= 1 && v <= N)
        seen[v] = 1;
    /* Both threads may take a process signal at once: the count is atomic. */
    __atomic_fetch_add(&received, 1, __ATOMIC_RELAXED);
}

static sigset_t blocked_now(void) {
    sigset_t s;
    CHECK(sigprocmask(SIG_BLOCK, NULL, &s) == 0);
    return s;
}

static void part_signal(void) {
    CHECK(signal(SIGUSR1, plain) == SIG_DFL);
    struct sigaction o;
    CHECK(sigaction(SIGUSR1, NULL, &o) == 0);
    CHECK(o.sa_handler == plain && !(o.sa_flags & SA_SIGINFO) && (o.sa_flags & SA_RESTART));
    CHECK(!(o.sa_flags & SA_RESETHAND) && sigismember(&o.sa_mask, SIGUSR1) == 1);
    CHECK(raise(SIGUSR1) == 0 && plain_runs == 1);
    CHECK(signal(SIGUSR1, SIG_IGN) == plain);
    CHECK(raise(SIGUSR1) == 0 && plain_runs == 1);
    CHECK(signal(SIGUSR1, SIG_DFL) == SIG_IGN);
    CHECK(signal(0, plain) == SIG_ERR && errno == EINVAL);
    CHECK(signal(SIGKILL, plain) == SIG_ERR && errno == EINVAL);
    printf("signal: BSD semantics, the program's handler reported\n");
}

static void part_sysv(void) {
    CHECK(sysv_signal(SIGUSR2, once) == SIG_DFL);
    struct sigaction o;
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0);
    CHECK(o.sa_handler == once && !(o.sa_flags & SA_SIGINFO));
    CHECK((o.sa_flags & SA_RESETHAND) && (o.sa_flags & SA_NODEFER));
    CHECK(raise(SIGUSR2) == 0 && once_runs == 1);
    CHECK(sigaction(SIGUSR2, NULL, &o) == 0 && o.sa_handler == SIG_DFL);
    printf("sysv_signal: one run, then the default action\n");
}

static void part_sigset(void) {
    CHECK(sigset(SIGHUP, plain) == SIG_DFL);
    sigset_t b = blocked_now();
    CHECK(sigismember(&b, SIGHUP) == 0);
    CHECK(sigset(SIGHUP, SIG_HOLD) == plain);
    b = blocked_now();
    CHECK(sigismember(&b, SIGHUP) == 1);
    CHECK(sigset(SIGHUP, SIG_HOLD) == SIG_HOLD);
    int before = plain_runs;
    CHECK(raise(SIGHUP) == 0 && plain_runs == before);
    CHECK(sigset(SIGHUP, plain) == SIG_HOLD);
    b = blocked_now();
    CHECK(sigismember(&b, SIGHUP) == 0 && plain_runs == before + 1);
    struct sigaction o;
    CHECK(sigaction(SIGHUP, NULL, &o) == 0 && o.sa_handler == plain);
    CHECK(sigset(SIGHUP, SIG_DFL) == plain);
    printf("sigset: SIG_HOLD blocks and reports, a handler unblocks\n");
}

static void resethand_child(void) {
    once_runs = 0;
    struct sigaction sa = {0};
    sa.sa_handler = once;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    struct sigaction o;
    CHECK(sigaction(SIGUSR1, NULL, &o) == 0 && o.sa_handler == once);
    CHECK((o.sa_flags & SA_RESETHAND) && !(o.sa_flags & SA_SIGINFO));
    raise(SIGUSR1);
    CHECK(once_runs == 1);
    raise(SIGUSR1); /* the default action: terminated by SIGUSR1 */
    _exit(9);
}

static void part_resethand(void) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        resethand_child();
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1);
    printf("SA_RESETHAND: the second signal takes the default action\n");
}

static void *sender(void *arg) {
    (void)arg;
    for (int v = 1; v <= N; v++) {
        union sigval val = {.sival_int = v};
        while (sigqueue(getpid(), SIGRTMIN + 1, val) != 0)
            CHECK(errno == EAGAIN);
        if (v % 64 == 0)
            usleep(200);
    }
    return NULL;
}

static void part_storm(void) {
    struct sigevent ev = {0};
    ev.sigev_notify = SIGEV_NONE;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &spare) == 0);
    struct itimerspec set = {.it_value = {.tv_sec = 3600}, .it_interval = {.tv_nsec = 1000000}};
    CHECK(timer_settime(spare, 0, &set, NULL) == 0);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_queued;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGRTMIN + 1, &sa, NULL) == 0);
    CHECK(signal(SIGALRM, on_alarm) == SIG_DFL);
    struct itimerval it = {.it_interval = {.tv_usec = 1000}, .it_value = {.tv_usec = 1000}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, sender, NULL) == 0);
    time_t start = time(NULL);
    long rounds = 0;
    while (__atomic_load_n(&received, __ATOMIC_RELAXED) < N && time(NULL) - start < 50) {
        struct itimerspec now, one = set;
        CHECK(timer_gettime(spare, &now) == 0);
        CHECK(timer_settime(spare, 0, &one, NULL) == 0);
        rounds++;
    }
    struct itimerval off = {0};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    if (failed_line) {
        fprintf(stderr, "a handler check failed at line %d\n", (int)failed_line);
        exit(1);
    }
    if (received != N || alarm_runs == 0 || rounds == 0)
        fprintf(stderr, "received %d of %d, %d alarms, %ld rounds\n", (int)received, N, (int)alarm_runs, rounds);
    CHECK(received == N && alarm_runs > 0 && rounds > 0);
    for (int v = 1; v <= N; v++)
        CHECK(seen[v]);
    printf("storm: %d queued signals each taken once beside timer calls in and out of handlers\n", N);
}

static void *watch(void *arg) {
    (void)arg;
    sleep_through(55);
    say("signal_kinds: no progress in 55 s (deadlock?)\n");
    _exit(3);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    start_watchdog(watch, NULL);
    part_signal();
    part_sysv();
    part_sigset();
    part_resethand();
    part_storm();
    return 0;
}
