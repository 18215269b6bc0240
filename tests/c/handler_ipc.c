/* SysV IPC from signal handlers, as Linux allows (the calls are plain system calls there).
 *
 * The main thread loops over semop, semctl(GETVAL), a semtimedop that sleeps until its
 * timeout or a signal, msgsnd, msgrcv, shmat, shmdt and malloc/free on its own objects while two timers fire handlers: SIGALRM (setitimer,
 * ITIMER_REAL) and SIGUSR1 (timer_create, CLOCK_MONOTONIC), which can interrupt each other.
 * Each handler runs semop, semctl(GETVAL), msgsnd + msgrcv and shmat/shmdt on objects of its
 * own, and checks every result: the semaphore's value, the message's type and text, the
 * segment's counter. So a handler interrupts the main thread inside malloc and inside every
 * IPC call, and one handler interrupts the other inside its calls.
 *
 * A library that allocates or takes a lock in a handler deadlocks or corrupts its exchange
 * with the daemon; a watchdog thread (all signals blocked, so a deadlock that blocks signals
 * is caught too: an alarm() would not be) ends the program with status 3 after WATCHDOG_S.
 *
 * Usage: handler_ipc [alarm runs] [usr1 runs] [alarm period us] [usr1 period us]
 * (defaults 2000, 400, 1500, 4700: under uipc a handler's eight round trips take some
 * hundreds of microseconds, and a SIGUSR1 handler that interrupted the SIGALRM one inside the
 * library opens a connection per call, a millisecond or more; periods shorter than that
 * would starve the main thread). */
#include "check.h"
#include "watchdog.h"
#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#define WATCHDOG_S 50
#define WATCHDOG_TEXT "50"
#define SEM_WRAP 100

/* One handler's objects and how many times it has run to the end. */
struct objects {
    int sem, q, shm;
    volatile sig_atomic_t runs;
};

static struct objects on_alarm, on_usr1, on_main;

struct text_msg {
    long mtype;
    char text[48];
};

/* Writes `v` in decimal at `out` (async-signal-safe); returns the length. */
static int put_int(char *out, long v) {
    char tmp[24];
    int n = 0, len = 0;
    unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    out[len] = 0;
    return len;
}

/* A failed check inside a handler: only async-signal-safe calls. */
static void handler_failed(int line, int err) {
    char buf[96] = "handler_ipc.c:";
    int n = (int)strlen(buf);
    n += put_int(buf + n, line);
    memcpy(buf + n, ": check failed in a handler, errno ", 35);
    n += 35;
    n += put_int(buf + n, err);
    buf[n++] = '\n';
    buf[n] = 0;
    say(buf);
    _exit(1);
}

#define HCHECK(cond)                          \
    do {                                      \
        if (!(cond))                          \
            handler_failed(__LINE__, errno); \
    } while (0)

/* The text of message `k` of a handler ("<tag> <k>"); returns its length. */
static int message_text(char *out, char tag, int k) {
    out[0] = tag;
    out[1] = ' ';
    return 2 + put_int(out + 2, k);
}

/* One round of calls on `o`, checking each result against the round number. */
static void ipc_round(struct objects *o, char tag) {
    int k = o->runs;
    struct sembuf up = {0, 1, 0};
    HCHECK(semop(o->sem, &up, 1) == 0);
    int expect = k % SEM_WRAP + 1;
    HCHECK(semctl(o->sem, 0, GETVAL) == expect);
    if (expect == SEM_WRAP) {
        struct sembuf down = {0, -SEM_WRAP, 0};
        HCHECK(semop(o->sem, &down, 1) == 0);
        HCHECK(semctl(o->sem, 0, GETVAL) == 0);
    }
    struct text_msg m = {.mtype = k % 5 + 1};
    int len = message_text(m.text, tag, k);
    HCHECK(msgsnd(o->q, &m, (size_t)len, 0) == 0);
    struct text_msg r;
    memset(&r, 0, sizeof r);
    ssize_t n = msgrcv(o->q, &r, sizeof r.text, k % 2 ? m.mtype : 0, 0);
    HCHECK(n == len);
    HCHECK(r.mtype == m.mtype && memcmp(r.text, m.text, (size_t)len) == 0);
    int *p = shmat(o->shm, NULL, 0);
    HCHECK(p != (void *)-1);
    HCHECK(p[0] == k);
    p[0] = k + 1;
    HCHECK(shmdt(p) == 0);
    o->runs = k + 1;
}

static void alarm_handler(int sig) {
    (void)sig;
    int saved = errno;
    ipc_round(&on_alarm, 'a');
    errno = saved;
}

static void usr1_handler(int sig) {
    (void)sig;
    int saved = errno;
    ipc_round(&on_usr1, 'u');
    errno = saved;
}

static void make_objects(struct objects *o) {
    o->sem = semget(IPC_PRIVATE, 1, 0600);
    o->q = msgget(IPC_PRIVATE, 0600);
    o->shm = shmget(IPC_PRIVATE, 4096, 0600);
    CHECK(o->sem >= 0 && o->q >= 0 && o->shm >= 0);
    o->runs = 0;
}

/* After the storm: the objects hold what `runs` rounds leave (the semaphore: `sem_value`),
 * and are removed. */
static void check_and_remove(struct objects *o, int sem_value) {
    CHECK(semctl(o->sem, 0, GETVAL) == sem_value);
    struct msqid_ds ds;
    CHECK(msgctl(o->q, IPC_STAT, &ds) == 0 && ds.msg_qnum == 0);
    int *p = shmat(o->shm, NULL, SHM_RDONLY);
    CHECK(p != (void *)-1 && p[0] == o->runs);
    CHECK(shmdt(p) == 0);
    struct shmid_ds sds;
    CHECK(shmctl(o->shm, IPC_STAT, &sds) == 0 && sds.shm_nattch == 0);
    CHECK(semctl(o->sem, 0, IPC_RMID) == 0 && msgctl(o->q, IPC_RMID, NULL) == 0 &&
          shmctl(o->shm, IPC_RMID, NULL) == 0);
}

static void *watchdog(void *arg) {
    (void)arg;
    sleep_through(WATCHDOG_S);
    char buf[160] = "handler_ipc: not done after " WATCHDOG_TEXT " seconds (deadlock?): alarm runs ";
    int n = (int)strlen(buf);
    n += put_int(buf + n, on_alarm.runs);
    memcpy(buf + n, ", usr1 runs ", 12);
    n += 12;
    n += put_int(buf + n, on_usr1.runs);
    memcpy(buf + n, ", main rounds ", 14);
    n += 14;
    n += put_int(buf + n, on_main.runs);
    buf[n++] = '\n';
    buf[n] = 0;
    say(buf);
    _exit(3);
}

int main(int argc, char **argv) {
    int alarm_target = argc > 1 ? atoi(argv[1]) : 2000;
    int usr1_target = argc > 2 ? atoi(argv[2]) : 400;
    long alarm_us = argc > 3 ? atol(argv[3]) : 1500;
    long usr1_us = argc > 4 ? atol(argv[4]) : 4700;

    start_watchdog(watchdog, NULL);

    make_objects(&on_alarm);
    make_objects(&on_usr1);
    make_objects(&on_main);

    struct sigaction sa = {.sa_handler = alarm_handler, .sa_flags = SA_RESTART};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    sa.sa_handler = usr1_handler;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);

    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1};
    timer_t usr1_timer;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &usr1_timer) == 0);
    struct timespec usr1_period = {.tv_sec = usr1_us / 1000000, .tv_nsec = usr1_us % 1000000 * 1000};
    struct itimerspec its = {.it_interval = usr1_period, .it_value = usr1_period};
    CHECK(timer_settime(usr1_timer, 0, &its, NULL) == 0);
    struct timeval alarm_period = {.tv_sec = alarm_us / 1000000, .tv_usec = alarm_us % 1000000};
    struct itimerval t = {.it_interval = alarm_period, .it_value = alarm_period};
    CHECK(setitimer(ITIMER_REAL, &t, NULL) == 0);

    unsigned seed = 1;
    int interrupted_waits = 0;
    /* Done at the targets, or after ENOUGH_S seconds if each handler reached a tenth of its
     * target (a slow machine); the watchdog ends a run that stops making progress. */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (on_alarm.runs >= alarm_target && on_usr1.runs >= usr1_target)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= ENOUGH_S && on_alarm.runs >= alarm_target / 10 &&
            on_usr1.runs >= usr1_target / 10)
            break;
        int k = on_main.runs;
        struct sembuf up = {0, 1, 0}, down = {0, -1, 0};
        CHECK(semop(on_main.sem, &up, 1) == 0);
        CHECK(semctl(on_main.sem, 0, GETVAL) == 1);
        CHECK(semop(on_main.sem, &down, 1) == 0);
        /* A wait the timers often interrupt: EINTR, or EAGAIN at its timeout. */
        struct timespec brief = {0, 300000};
        struct sembuf take = {0, -1, 0};
        errno = 0;
        CHECK(semtimedop(on_main.sem, &take, 1, &brief) == -1 &&
              (errno == EAGAIN || errno == EINTR));
        interrupted_waits += errno == EINTR;

        struct text_msg m = {.mtype = k % 3 + 1};
        int len = message_text(m.text, 'm', k);
        CHECK(msgsnd(on_main.q, &m, (size_t)len, 0) == 0);
        struct text_msg r;
        memset(&r, 0, sizeof r);
        CHECK(msgrcv(on_main.q, &r, sizeof r.text, m.mtype, 0) == len);
        CHECK(r.mtype == m.mtype && memcmp(r.text, m.text, (size_t)len) == 0);

        int *p = shmat(on_main.shm, NULL, 0);
        CHECK(p != (void *)-1 && p[0] == k);
        p[0] = k + 1;
        CHECK(shmdt(p) == 0);

        /* Sizes from tcache's range to past the mmap threshold's neighbourhood, so that
         * handlers often land inside malloc holding an arena lock. */
        for (int j = 0; j < 8; j++) {
            seed = seed * 1103515245u + 12345u;
            size_t size = 16 + (seed >> 8) % (j % 2 ? 200000 : 4000);
            char *b = malloc(size);
            CHECK(b != NULL);
            b[0] = b[size - 1] = (char)k;
            free(b);
        }
        on_main.runs = k + 1;
    }
    struct itimerval off = {0};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    CHECK(timer_delete(usr1_timer) == 0);

    check_and_remove(&on_alarm, on_alarm.runs % SEM_WRAP);
    check_and_remove(&on_usr1, on_usr1.runs % SEM_WRAP);
    check_and_remove(&on_main, 0);
    printf("handler_ipc: ok (%d SIGALRM and %d SIGUSR1 rounds in handlers, %d main rounds, "
           "%d waits interrupted)\n",
           (int)on_alarm.runs, (int)on_usr1.runs, (int)on_main.runs, interrupted_waits);
    return 0;
}
