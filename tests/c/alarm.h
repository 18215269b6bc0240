/* A one-shot ITIMER_REAL alarm that interrupts a blocking lock call and counts its SIGALRMs
 * in `fired` (the handler is installed by the test). Include after check.h. */
#include <sys/time.h>
#ifndef UIPC_TEST_ALARM_H
#define UIPC_TEST_ALARM_H

static volatile sig_atomic_t fired;

static inline void on_alarm(int sig) {
    (void)sig;
    fired++;
}

/* Delivers SIGALRM once, `usec` microseconds from now. */
static inline void arm(int usec) {
    struct itimerval t = {.it_value = {.tv_usec = usec}};
    CHECK(setitimer(ITIMER_REAL, &t, NULL) == 0);
}

#endif
