/* timer_settime, timer_gettime and timer_getoverrun run without malloc or free: the program
 * defines malloc and friends itself (the executable's definitions come first for every
 * library, the preload library and the C library included), counting calls made while one of
 * the three is in progress. On Linux they are system calls and the count is zero; under
 * `uipc run --timers` the preload library must get there too, so that a call from a signal
 * handler that interrupted malloc is safe. Covered: each call, their errors (unknown id, NULL
 * and unreadable settings, a bad nanosecond count, an unwritable old/current pointer), arming
 * many timers one after another (the expiry heap must not grow), re-setting a timer whose
 * signal is still pending with other signals of its number queued (the signal is taken back),
 * the first call in a new thread, and the calls from the timer's own handler. timer_create and
 * timer_delete are not async-signal-safe and may allocate. */
#include "check.h"
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "malloc_count.h"

#define MANY 300

static timer_t periodic;
static volatile sig_atomic_t handler_runs, handler_failed;

static void on_timer(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)info, (void)ctx;
    int saved = errno;
    struct itimerspec now;
    if (NO_MALLOC(timer_getoverrun(periodic)) < 0 || NO_MALLOC(timer_gettime(periodic, &now)) != 0)
        handler_failed = 1;
    if (handler_runs == 5) {
        /* Re-set from the handler, same period. */
        if (NO_MALLOC(timer_settime(periodic, 0, &now, NULL)) != 0)
            handler_failed = 1;
    }
    handler_runs++;
    errno = saved;
}

static void *first_calls_in_a_thread(void *arg) {
    timer_t t = *(timer_t *)arg;
    struct itimerspec got, set = {.it_value = {.tv_sec = 50}};
    CHECK(NO_MALLOC(timer_getoverrun(t)) == 0);
    CHECK(NO_MALLOC(timer_gettime(t, &got)) == 0);
    CHECK(NO_MALLOC(timer_settime(t, 0, &set, &got)) == 0);
    return NULL;
}

int main(void) {
    struct sigevent none = {.sigev_notify = SIGEV_NONE};
    timer_t t;
    CHECK(timer_create(CLOCK_MONOTONIC, &none, &t) == 0);
    struct itimerspec set = {.it_value = {.tv_sec = 100}, .it_interval = {.tv_nsec = 1000}};
    struct itimerspec got;
    CHECK(NO_MALLOC(timer_settime(t, 0, &set, &got)) == 0);
    CHECK(got.it_value.tv_sec == 0 && got.it_value.tv_nsec == 0);
    CHECK(NO_MALLOC(timer_gettime(t, &got)) == 0 && got.it_interval.tv_nsec == 1000);
    CHECK(NO_MALLOC(timer_getoverrun(t)) == 0);
    CHECK(NO_MALLOC(timer_settime(t, TIMER_ABSTIME, &set, NULL)) == 0);

    /* Errors. */
    timer_t bogus = (timer_t)(intptr_t)4242;
    errno = 0;
    CHECK(NO_MALLOC(timer_getoverrun(bogus)) == -1 && errno == EINVAL);
    CHECK(NO_MALLOC(timer_gettime(bogus, &got)) == -1 && errno == EINVAL);
    CHECK(NO_MALLOC(timer_settime(bogus, 0, &set, NULL)) == -1 && errno == EINVAL);
    CHECK(NO_MALLOC(timer_settime(t, 0, NULL, NULL)) == -1 && errno == EINVAL);
    struct itimerspec bad = {.it_value = {.tv_nsec = 1000000000}};
    CHECK(NO_MALLOC(timer_settime(t, 0, &bad, NULL)) == -1 && errno == EINVAL);
    /* glibc passes these pointers to the kernel, which fails with EFAULT. */
    void *unmapped = (void *)(uintptr_t)8;
    CHECK(NO_MALLOC(timer_settime(t, 0, unmapped, NULL)) == -1 && errno == EFAULT);
    CHECK(NO_MALLOC(timer_settime(t, 0, &set, unmapped)) == -1 && errno == EFAULT);
    CHECK(NO_MALLOC(timer_gettime(t, unmapped)) == -1 && errno == EFAULT);

    /* Many timers armed one after another, then re-armed: no growth on the way. */
    static timer_t many[MANY];
    for (int i = 0; i < MANY; i++)
        CHECK(timer_create(CLOCK_REALTIME, &none, &many[i]) == 0);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < MANY; i++) {
            struct itimerspec far = {.it_value = {.tv_sec = 1000 + i + round}};
            CHECK(NO_MALLOC(timer_settime(many[i], 0, &far, NULL)) == 0);
            CHECK(NO_MALLOC(timer_settime(many[i], TIMER_ABSTIME, &far, NULL)) == 0);
        }

    /* A signal still pending when its timer is re-set, behind two queued signals of its
     * number that are not the timer's: the timer's is taken back, the others stay. */
    sigset_t rt, old;
    sigemptyset(&rt);
    sigaddset(&rt, SIGRTMIN + 1);
    CHECK(sigprocmask(SIG_BLOCK, &rt, &old) == 0);
    union sigval v = {.sival_int = 5};
    CHECK(sigqueue(getpid(), SIGRTMIN + 1, v) == 0);
    CHECK(sigqueue(getpid(), SIGRTMIN + 1, v) == 0);
    struct sigevent blocked = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN + 1};
    timer_t pending;
    CHECK(timer_create(CLOCK_MONOTONIC, &blocked, &pending) == 0);
    struct itimerspec soon = {.it_value = {.tv_nsec = 1000000}};
    CHECK(NO_MALLOC(timer_settime(pending, 0, &soon, NULL)) == 0);
    usleep(30000);
    CHECK(NO_MALLOC(timer_getoverrun(pending)) == 0);
    CHECK(NO_MALLOC(timer_gettime(pending, &got)) == 0);
    CHECK(NO_MALLOC(timer_settime(pending, 0, &set, NULL)) == 0);
    CHECK(timer_delete(pending) == 0);
    siginfo_t info;
    struct timespec zero = {0};
    int queued = 0;
    while (sigtimedwait(&rt, &info, &zero) == SIGRTMIN + 1) {
        CHECK(info.si_code == SI_QUEUE);
        queued++;
    }
    CHECK(queued == 2);
    CHECK(sigprocmask(SIG_SETMASK, &old, NULL) == 0);

    /* The first calls of a new thread. */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, first_calls_in_a_thread, &t) == 0);
    CHECK(pthread_join(th, NULL) == 0);

    /* From the timer's own handler. */
    struct sigaction sa = {0};
    sa.sa_sigaction = on_timer;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGRTMIN, &sa, NULL) == 0);
    struct sigevent ev = signal_event(SIGRTMIN, 0);
    start_timer(&periodic, CLOCK_MONOTONIC, &ev, 500000, 500000);
    for (int i = 0; i < 2000 && handler_runs < 50; i++)
        usleep(1000);
    CHECK(handler_runs >= 50);
    CHECK(!handler_failed);
    CHECK(timer_delete(periodic) == 0);
    printf("timer_no_malloc: ok\n");
    return 0;
}
