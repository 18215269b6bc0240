/* POSIX timers: timer_create, timer_settime, timer_gettime, timer_getoverrun and timer_delete
 * with every notification kind, overruns, Linux's errnos, fork, and the raw system calls
 * through syscall(). Runs on the host kernel and under `uipc run --timers` with the same
 * expectations; under uipc ($UIPC_TIMERS=1) it also checks that the kernel holds no timer of
 * the process (/proc/self/timers empty) while its timers work. */
#include "check.h"
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

static volatile sig_atomic_t got_code, got_timerid, got_overrun, got_count;
static void *volatile got_ptr;
static volatile int got_int;

static void on_timer(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    got_code = si->si_code;
    got_timerid = si->si_timerid;
    got_overrun = si->si_overrun;
    got_ptr = si->si_value.sival_ptr;
    got_int = si->si_value.sival_int;
    got_count++;
}

static void handle(int sig) {
    struct sigaction sa = {.sa_sigaction = on_timer, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

static void block(int sig, int how) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    CHECK(pthread_sigmask(how, &s, NULL) == 0);
}

static struct itimerspec after_ns(long value, long interval) {
    struct itimerspec t = {{interval / 1000000000, interval % 1000000000},
                           {value / 1000000000, value % 1000000000}};
    return t;
}

static long ns_of(struct timespec t) { return t.tv_sec * 1000000000L + t.tv_nsec; }

static int kernel_timers(void) {
    FILE *f = fopen("/proc/self/timers", "r");
    CHECK(f != NULL);
    int n = 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        n += strncmp(line, "ID:", 3) == 0;
    fclose(f);
    return n;
}

static void errnos(void) {
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN};
    CHECK(timer_create(12345, &ev, &t) == -1 && errno == EINVAL);
    CHECK(timer_create(CLOCK_MONOTONIC_RAW, &ev, &t) == -1 && errno == EOPNOTSUPP);
    ev.sigev_notify = 99;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == -1 && errno == EINVAL);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = 0;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == -1 && errno == EINVAL);
    ev.sigev_signo = 65;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == -1 && errno == EINVAL);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGRTMIN;
    ev._sigev_un._tid = 1;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == -1 && errno == EINVAL);

    ev = (struct sigevent){.sigev_notify = SIGEV_NONE};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    struct itimerspec its = after_ns(1000000, 0), old;
    CHECK(timer_settime(t, 0, NULL, NULL) == -1 && errno == EINVAL);
    CHECK(timer_settime(t, 0, (void *)8, NULL) == -1 && errno == EFAULT);
    its.it_value.tv_nsec = 1000000000;
    CHECK(timer_settime(t, 0, &its, NULL) == -1 && errno == EINVAL);
    its = after_ns(1000000, 0);
    its.it_interval.tv_sec = -1;
    CHECK(timer_settime(t, 0, &its, NULL) == -1 && errno == EINVAL);
    its = after_ns(1000000000, 0);
    CHECK(timer_settime((timer_t)12345, 0, &its, NULL) == -1 && errno == EINVAL);
    /* The timer is set before the old value faults. */
    CHECK(timer_settime(t, 0, &its, (void *)8) == -1 && errno == EFAULT);
    CHECK(timer_gettime(t, &old) == 0 && ns_of(old.it_value) > 0);
    CHECK(timer_gettime(t, (void *)8) == -1 && errno == EFAULT);
    CHECK(timer_gettime((timer_t)12345, &old) == -1 && errno == EINVAL);
    /* Settings read from the program's constants and static data, and from a page that is
     * mapped but not readable (EFAULT). */
    static const struct itimerspec in_rodata = {.it_value = {.tv_sec = 50}};
    static struct itimerspec in_data = {.it_value = {.tv_sec = 70}};
    CHECK(timer_settime(t, 0, &in_rodata, NULL) == 0);
    CHECK(timer_gettime(t, &old) == 0 && old.it_value.tv_sec >= 40 && old.it_value.tv_sec < 50);
    CHECK(timer_settime(t, 0, &in_data, &old) == 0);
    CHECK(old.it_value.tv_sec >= 40 && old.it_value.tv_sec < 50);
    CHECK(timer_gettime(t, &old) == 0 && old.it_value.tv_sec >= 60 && old.it_value.tv_sec < 70);
    CHECK(timer_settime(t, 0, &in_data, (void *)&in_rodata) == -1 && errno == EFAULT);
    void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(none != MAP_FAILED);
    CHECK(timer_settime(t, 0, none, NULL) == -1 && errno == EFAULT);
    CHECK(munmap(none, 4096) == 0);
    CHECK(timer_gettime((timer_t)12345, (void *)8) == -1 && errno == EINVAL);
    CHECK(timer_getoverrun((timer_t)12345) == -1 && errno == EINVAL);
    CHECK(timer_delete(t) == 0);
    CHECK(timer_delete(t) == -1 && errno == EINVAL);
    CHECK(timer_gettime(t, &old) == -1 && errno == EINVAL);
    printf("errnos: ok\n");
}

/* Ids are linear per process and not reused; a fresh process starts at 0 (checked in the
 * forked child, whose counter starts again). */
static void ids_in_fresh_process(void) {
    timer_t a, b, c;
    struct sigevent ev = {.sigev_notify = SIGEV_NONE};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &a) == 0);
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &b) == 0);
    CHECK((intptr_t)a == 0 && (intptr_t)b == 1);
    CHECK(timer_delete(a) == 0);
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &c) == 0);
    CHECK((intptr_t)c == 2);
    CHECK(timer_delete(b) == 0 && timer_delete(c) == 0);
}

static int under_uipc_timers(void) {
    const char *v = getenv("UIPC_TIMERS");
    return v && strcmp(v, "1") == 0;
}

static void signal_handler_sees_timer(void) {
    int sig = SIGRTMIN + 1;
    handle(sig);
    static int marker;
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = sig};
    ev.sigev_value.sival_ptr = &marker;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    if (under_uipc_timers())
        CHECK(kernel_timers() == 0);
    else
        CHECK(kernel_timers() == 1);
    got_count = 0;
    struct itimerspec its = after_ns(20000000, 0), cur;
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    CHECK(timer_gettime(t, &cur) == 0);
    CHECK(ns_of(cur.it_value) > 0 && ns_of(cur.it_value) <= 20000000);
    CHECK(ns_of(cur.it_interval) == 0);
    while (got_count == 0)
        pause();
    CHECK(got_code == SI_TIMER && got_ptr == &marker && got_overrun == 0);
    CHECK(got_timerid == (int)(intptr_t)t);
    /* An expired one-shot timer reads 0. */
    CHECK(timer_gettime(t, &cur) == 0 && ns_of(cur.it_value) == 0);
    CHECK(timer_getoverrun(t) == 0);
    /* Periodic: several signals, each with no overrun while handled at once. */
    got_count = 0;
    its = after_ns(5000000, 5000000);
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    while (got_count < 5)
        pause();
    CHECK(timer_delete(t) == 0);
    printf("SIGEV_SIGNAL: handler saw SI_TIMER, si_value and si_timerid\n");

    /* A NULL sigevent: SIGALRM carrying the id. */
    handle(SIGALRM);
    CHECK(timer_create(CLOCK_REALTIME, NULL, &t) == 0);
    got_count = 0;
    its = after_ns(10000000, 0);
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    while (got_count == 0)
        pause();
    /* glibc passes its own SIGALRM sigevent with a zero value (observed with 2.36). */
    CHECK(got_code == SI_TIMER && got_ptr == NULL);
    CHECK(timer_delete(t) == 0);
    /* The system call with a NULL sigevent: the kernel's default, sival_int = id. */
    int id = -1;
    CHECK(syscall(SYS_timer_create, CLOCK_MONOTONIC, NULL, &id) == 0 && id >= 0);
    got_count = 0;
    CHECK(syscall(SYS_timer_settime, id, 0, &its, NULL) == 0);
    while (got_count == 0)
        pause();
    CHECK(got_code == SI_TIMER && got_int == id && got_timerid == id);
    CHECK(syscall(SYS_timer_delete, id) == 0);
    printf("NULL sigevent: SIGALRM (sival_int = id from the kernel, 0 from glibc)\n");
}

static void sigev_none_counts_down(void) {
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_NONE};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    struct itimerspec its = after_ns(1000000000, 0), a, b;
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    CHECK(timer_gettime(t, &a) == 0);
    usleep(50000);
    CHECK(timer_gettime(t, &b) == 0);
    CHECK(ns_of(a.it_value) <= 1000000000 && ns_of(a.it_value) > 900000000);
    CHECK(ns_of(b.it_value) < ns_of(a.it_value) - 40000000);
    /* Absolute expiry in the past: reads 0 (SIGEV_NONE gives no 1 ns). */
    its = after_ns(1, 0);
    CHECK(timer_settime(t, TIMER_ABSTIME, &its, NULL) == 0);
    CHECK(timer_gettime(t, &a) == 0 && ns_of(a.it_value) == 0);
    CHECK(timer_delete(t) == 0);
    printf("SIGEV_NONE: gettime counts down\n");
}

static void overrun_while_blocked(void) {
    int sig = SIGRTMIN + 2;
    block(sig, SIG_BLOCK);
    struct sigevent ev = signal_event(sig, 77);
    timer_t t;
    start_timer(&t, CLOCK_MONOTONIC, &ev, 10000000, 10000000);
    usleep(255000);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    siginfo_t si;
    struct timespec zero = {0, 0};
    CHECK(sigtimedwait(&s, &si, &zero) == sig);
    int overrun = timer_getoverrun(t);
    CHECK(si.si_code == SI_TIMER && si.si_value.sival_int == 77);
    /* 25 periods passed: one signal, the other 24 counted (a little scheduling slack). */
    CHECK(overrun >= 20 && overrun <= 26);
    /* Linux: equal. uipc counts the kernel's copy at each period boundary, so a signal taken
     * right after a boundary may carry one less (see the preload's Not supported list). */
    CHECK(si.si_overrun == overrun || si.si_overrun == overrun - 1);
    /* A deleted timer's pending signal is never received. */
    usleep(15000);
    CHECK(timer_delete(t) == 0);
    CHECK(sigtimedwait(&s, &si, &zero) == -1 && errno == EAGAIN);
    block(sig, SIG_UNBLOCK);
    printf("overrun: one signal for 25 periods while blocked\n");
}

static volatile pid_t waiter_tid;

static void *wait_for_timer(void *arg) {
    int sig = *(int *)arg;
    waiter_tid = gettid();
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    siginfo_t si;
    CHECK(sigwaitinfo(&s, &si) == sig);
    CHECK(si.si_code == SI_TIMER && si.si_value.sival_int == 5);
    return NULL;
}

static void thread_id_target(void) {
    static int sig;
    sig = SIGRTMIN + 3;
    block(sig, SIG_BLOCK); /* inherited by the waiter, which takes it with sigwaitinfo */
    pthread_t th;
    waiter_tid = 0;
    CHECK(pthread_create(&th, NULL, wait_for_timer, &sig) == 0);
    while (waiter_tid == 0)
        usleep(1000);
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID, .sigev_signo = sig};
    ev._sigev_un._tid = waiter_tid;
    ev.sigev_value.sival_int = 5;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    struct itimerspec its = after_ns(10000000, 0);
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(timer_delete(t) == 0);
    block(sig, SIG_UNBLOCK);
    printf("SIGEV_THREAD_ID: the named thread took the signal\n");
}

static int pipe_fds[2];

static void on_thread(union sigval v) {
    pid_t me = gettid();
    CHECK(v.sival_int == 42);
    CHECK(write(pipe_fds[1], &me, sizeof me) == sizeof me);
}

static void sigev_thread_runs_function(void) {
    CHECK(pipe(pipe_fds) == 0);
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD, .sigev_notify_function = on_thread};
    ev.sigev_value.sival_int = 42;
    timer_t t;
    start_timer(&t, CLOCK_MONOTONIC, &ev, 5000000, 5000000);
    for (int i = 0; i < 3; i++) {
        pid_t who;
        CHECK(read(pipe_fds[0], &who, sizeof who) == sizeof who);
        CHECK(who != gettid());
    }
    CHECK(timer_delete(t) == 0);
    /* The pipe stays open: a callback already started may still write, however late a
     * loaded machine runs it. */
    printf("SIGEV_THREAD: the function ran on another thread\n");
}

static void fork_child_has_no_timers(void) {
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_NONE};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    struct itimerspec its = after_ns(1000000000, 0), cur;
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(timer_gettime(t, &cur) == -1 && errno == EINVAL);
        CHECK(timer_delete(t) == -1 && errno == EINVAL);
        ids_in_fresh_process();
        _exit(0);
    }
    expect_clean_exit(pid);
    CHECK(timer_gettime(t, &cur) == 0 && ns_of(cur.it_value) > 0);
    CHECK(timer_delete(t) == 0);
    printf("fork: the child has no timers and its ids start at 0\n");
}

static void raw_system_calls(void) {
    int sig = SIGRTMIN + 4;
    block(sig, SIG_BLOCK);
    int id = -1;
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD, .sigev_signo = sig};
    ev.sigev_value.sival_int = 9;
    /* The kernel's ABI: an int id, and SIGEV_THREAD is a plain signal. */
    CHECK(syscall(SYS_timer_create, 12345, &ev, &id) == -1 && errno == EINVAL);
    CHECK(syscall(SYS_timer_create, CLOCK_MONOTONIC, &ev, NULL) == -1 && errno == EFAULT);
    /* A faulting sigevent beats a bad clock (glibc's timer_create would read it itself). */
    CHECK(syscall(SYS_timer_create, CLOCK_MONOTONIC, (void *)8, &id) == -1 && errno == EFAULT);
    CHECK(syscall(SYS_timer_create, 12345, (void *)8, &id) == -1 && errno == EFAULT);
    CHECK(syscall(SYS_timer_create, CLOCK_MONOTONIC, &ev, &id) == 0 && id >= 0);
    struct itimerspec its = after_ns(10000000, 0), cur;
    CHECK(syscall(SYS_timer_settime, id, 0, &its, NULL) == 0);
    CHECK(syscall(SYS_timer_gettime, id, &cur) == 0 && ns_of(cur.it_value) > 0);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    siginfo_t si;
    CHECK(sigwaitinfo(&s, &si) == sig);
    CHECK(si.si_code == SI_TIMER && si.si_value.sival_int == 9 && si.si_timerid == id);
    CHECK(syscall(SYS_timer_getoverrun, id) == 0);
    CHECK(syscall(SYS_timer_delete, id) == 0);
    CHECK(syscall(SYS_timer_delete, id) == -1 && errno == EINVAL);
    CHECK(syscall(SYS_timer_getoverrun, -1) == -1 && errno == EINVAL);
    block(sig, SIG_UNBLOCK);
    printf("syscall(SYS_timer_*): the kernel's ABI\n");
}

/* A CPU-time timer fires once the CPU time is used (uipc polls the clock every 10 ms). */
static void cpu_clock_timer(clockid_t clock) {
    int sig = SIGRTMIN + 5;
    block(sig, SIG_BLOCK);
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = sig};
    CHECK(timer_create(clock, &ev, &t) == 0);
    struct itimerspec its = after_ns(20000000, 0), cur;
    struct timespec start, now;
    CHECK(clock_gettime(clock, &start) == 0);
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
    CHECK(timer_gettime(t, &cur) == 0);
    CHECK(ns_of(cur.it_value) > 0 && ns_of(cur.it_value) <= 20000000);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    siginfo_t si;
    struct timespec zero = {0, 0};
    int got = 0;
    do {
        for (volatile int i = 0; i < 100000; i++)
            ;
        got = sigtimedwait(&s, &si, &zero) == sig;
        CHECK(clock_gettime(clock, &now) == 0);
    } while (!got && ns_of(now) - ns_of(start) < 3000000000L);
    CHECK(got && si.si_code == SI_TIMER);
    CHECK(ns_of(now) - ns_of(start) >= 20000000);
    CHECK(timer_delete(t) == 0);
    block(sig, SIG_UNBLOCK);
}

/* Every timer costs one RLIMIT_SIGPENDING unit of its real uid: with a limit of 5, a fresh
 * uid gets EAGAIN at its sixth timer (root only: the child becomes an unused uid). */
static void sigpending_limit(void) {
    if (geteuid() != 0)
        return;
    pid_t pid = checked_fork();
    if (pid == 0) {
        struct rlimit lim = {5, 5};
        CHECK(setrlimit(RLIMIT_SIGPENDING, &lim) == 0);
        CHECK(setresgid(54329, 54329, 54329) == 0 && setresuid(54329, 54329, 54329) == 0);
        struct sigevent ev = {.sigev_notify = SIGEV_NONE};
        timer_t t[6];
        for (int i = 0; i < 5; i++)
            CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t[i]) == 0);
        CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t[5]) == -1 && errno == EAGAIN);
        CHECK(timer_delete(t[0]) == 0);
        CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t[5]) == 0);
        _exit(0);
    }
    expect_clean_exit(pid);
    printf("RLIMIT_SIGPENDING: EAGAIN at the sixth timer with a limit of 5\n");
}

/* timer_getoverrun and timer_gettime are async-signal-safe (signal-safety(7)): a handler
 * calls them while the interrupted code is calling them too. */
static timer_t reentrant_timer;
static volatile int reentrant_calls;

static void on_reentrant(int sig) {
    (void)sig;
    struct itimerspec cur;
    CHECK(timer_getoverrun(reentrant_timer) >= 0);
    CHECK(timer_gettime(reentrant_timer, &cur) == 0);
    reentrant_calls++;
}

static void handler_calls_timer_functions(void) {
    int sig = SIGRTMIN + 6;
    struct sigaction sa = {.sa_handler = on_reentrant};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = sig};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &reentrant_timer) == 0);
    struct itimerspec its = after_ns(500000, 500000), cur;
    CHECK(timer_settime(reentrant_timer, 0, &its, NULL) == 0);
    while (reentrant_calls < 100) {
        CHECK(timer_gettime(reentrant_timer, &cur) == 0);
        CHECK(timer_getoverrun(reentrant_timer) >= 0);
    }
    CHECK(timer_delete(reentrant_timer) == 0);
    printf("handlers calling timer_getoverrun/timer_gettime: no deadlock\n");
}

/* execve deletes every timer; a signal the old timers left pending (blocked across the
 * exec) is never received. */
static void exec_drops_timers(void) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        int sig = SIGRTMIN + 7;
        block(sig, SIG_BLOCK);
        timer_t t, u;
        struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = sig};
        CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
        CHECK(timer_create(CLOCK_MONOTONIC, &ev, &u) == 0);
        struct itimerspec its = after_ns(1000000, 1000000);
        CHECK(timer_settime(u, 0, &its, NULL) == 0);
        usleep(20000);
        char *argv[] = {"timers", "after-exec", NULL};
        execv("/proc/self/exe", argv);
        CHECK(0);
    }
    expect_clean_exit(pid);
    printf("exec: no timers, no stale signal\n");
}

static int after_exec(void) {
    int sig = SIGRTMIN + 7;
    struct itimerspec cur;
    CHECK(timer_gettime((timer_t)1, &cur) == -1 && errno == EINVAL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    siginfo_t si;
    struct timespec zero = {0, 0};
    CHECK(sigtimedwait(&s, &si, &zero) == -1 && errno == EAGAIN);
    timer_t t;
    struct sigevent ev = {.sigev_notify = SIGEV_NONE};
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    /* Linux 6.18 keeps the process's id counter across execve (ids 0 and 1 were used before
     * it): the first id is 2 (under uipc the library's execv carries the counter over). */
    CHECK((intptr_t)t == 2);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "after-exec") == 0)
        return after_exec();
    errnos();
    signal_handler_sees_timer();
    sigev_none_counts_down();
    overrun_while_blocked();
    thread_id_target();
    sigev_thread_runs_function();
    fork_child_has_no_timers();
    raw_system_calls();
    cpu_clock_timer(CLOCK_PROCESS_CPUTIME_ID);
    cpu_clock_timer(CLOCK_THREAD_CPUTIME_ID);
    printf("CPU-time clocks: the timer fires after the CPU time\n");
    sigpending_limit();
    handler_calls_timer_functions();
    exec_drops_timers();
    printf("timers: all checks passed\n");
    return 0;
}
