/* Differential run of POSIX timers: SEED picks N random timer calls (valid and invalid: clocks,
 * notifications, signals, thread ids, flags, times, ids and NULL pointers), and each call's
 * result, errno and what it reads back is printed. Nothing fires during the run (every
 * expiry is at least 1000 s away and the signals are blocked), so the output on the host
 * kernel and under `uipc run --timers` must be identical.
 *   diff_timers SEED N
 *
 * Timer ids are printed as the kernel numbers them (in creation order from 0, the lowest
 * free one first); a remaining time as whether it lies within the armed interval, never its
 * value. SIGEV_THREAD timers are left out (glibc's ids for them are its own). */
#include "diff.h"
#include <limits.h>

enum { POOL = 8 };


static timer_t ids[POOL];
static int have[POOL];

/* The CPU-time clock of process `pid` (clock_getcpuclockid's encoding, CPUCLOCK_SCHED). */
static clockid_t process_clock(pid_t pid) { return (clockid_t)((~pid << 3) | 2); }
/* The CPU-time clock of thread `tid`. */
static clockid_t thread_clock(pid_t tid) { return (clockid_t)((~tid << 3) | 6); }

/* A random clock; `kind` says which (the CPU-time ones hold pids, which differ between runs). */
static clockid_t rnd_clock(int *kind) {
    *kind = (int)rnd(14);
    switch (*kind) {
    case 0: return CLOCK_REALTIME;
    case 1: return CLOCK_MONOTONIC;
    case 2: return CLOCK_BOOTTIME;
    case 3: return CLOCK_PROCESS_CPUTIME_ID;
    case 4: return CLOCK_THREAD_CPUTIME_ID;
    case 5: return CLOCK_MONOTONIC_RAW;
    case 6: return CLOCK_REALTIME_COARSE;
    case 7: return CLOCK_TAI;
    case 8: return 99;
    case 9: return -1;
    case 10: return process_clock(getpid());
    case 11: return process_clock(1);
    case 12: return thread_clock((pid_t)syscall(SYS_gettid));
    default: return process_clock(4000000);
    }
}

static struct timespec rnd_time(void) {
    switch (rnd(12)) {
    case 0: return (struct timespec){0, 0};
    case 1: return (struct timespec){-1, 0};
    case 2: return (struct timespec){1000, 1000000000};
    case 3: return (struct timespec){1000, -1};
    case 4: return (struct timespec){LONG_MAX, 0};
    default: return (struct timespec){1000 + rnd(1000), rnd(3) * 250000000L};
    }
}

/* Prints what timer_gettime or an old value reports: the interval exactly, the remaining
 * time as 0, "in range" (within (0, 2000 s]) or "out of range". */
static void print_spec(const char *what, const struct itimerspec *s) {
    long long left = (long long)s->it_value.tv_sec * 1000000000LL + s->it_value.tv_nsec;
    printf("  %s interval %lld.%09ld value %s\n", what, (long long)s->it_interval.tv_sec,
           s->it_interval.tv_nsec,
           left == 0 ? "0" : left > 0 && left <= 2000000000000LL ? "in range" : "out of range");
}

/* A pool entry (printed as its kernel id), a deleted one or a bogus id. */
static timer_t pick(int *slot) {
    *slot = (int)rnd(POOL);
    switch (rnd(10)) {
    /* Not negative: glibc takes a negative timer_t for its SIGEV_THREAD record. */
    case 0: *slot = -1; return (timer_t)(long)(rnd(2) ? 12345 : INT_MAX);
    default: return ids[*slot];
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 10) * 2654435761ULL + 3;
    int n = atoi(argv[2]);
    sigset_t all;
    sigfillset(&all);
    CHECK(sigprocmask(SIG_BLOCK, &all, NULL) == 0);
    for (int i = 0; i < n; i++) {
        errno = 0;
        long r;
        int slot;
        switch (rnd(8)) {
        case 0:
        case 1:
        case 2: {
            int kind;
            clockid_t clock = rnd_clock(&kind);
            struct sigevent ev = {0};
            static const int notify[] = {SIGEV_NONE, SIGEV_SIGNAL, SIGEV_SIGNAL, SIGEV_THREAD_ID,
                                         7};
            ev.sigev_notify = notify[rnd(5)];
            const int signos[] = {SIGUSR1, SIGRTMIN, 0, 65, SIGKILL, SIGALRM};
            ev.sigev_signo = signos[rnd(6)];
            ev.sigev_value.sival_int = (int)rnd(100);
            static const pid_t tids[] = {-1, 0, 1};
            int tid_kind = (int)rnd(4);
            ev._sigev_un._tid = tid_kind == 3 ? (pid_t)syscall(SYS_gettid) : tids[tid_kind];
            int null_ev = rnd(8) == 0, null_id = rnd(12) == 0;
            timer_t id;
            /* glibc writes the id itself: a NULL one goes to the kernel by syscall(2). */
            if (null_id)
                r = syscall(SYS_timer_create, clock, null_ev ? NULL : &ev, NULL);
            else
                r = timer_create(clock, null_ev ? NULL : &ev, &id);
            printf("%d: create clock kind %d notify %d signo %d tid %d%s%s = %ld errno %d", i,
                   kind, ev.sigev_notify, ev.sigev_signo, tid_kind,
                   null_ev ? " NULL event" : "", null_id ? " NULL id" : "", r, r ? errno : 0);
            if (r == 0 && !null_id) {
                slot = (int)rnd(POOL);
                if (have[slot])
                    CHECK(timer_delete(ids[slot]) == 0);
                ids[slot] = id;
                have[slot] = 1;
                printf(" id %ld", (long)id);
            }
            printf("\n");
            break;
        }
        case 3:
        case 4: {
            timer_t id = pick(&slot);
            static const int flags[] = {0, 0, TIMER_ABSTIME, 2};
            int fl = flags[rnd(4)];
            struct itimerspec new = {.it_interval = rnd_time(), .it_value = rnd_time()};
            if (fl == TIMER_ABSTIME && new.it_value.tv_sec > 0 && new.it_value.tv_sec < 1000000)
                new.it_value.tv_sec = LONG_MAX / 4; /* far in the future on any clock */
            struct itimerspec old;
            int null_new = rnd(15) == 0, null_old = rnd(2);
            r = timer_settime(id, fl, null_new ? NULL : &new, null_old ? NULL : &old);
            printf("%d: settime slot %d flags %d interval %lld.%ld value %lld.%ld%s%s = %ld errno "
                   "%d\n",
                   i, slot, fl, (long long)new.it_interval.tv_sec, new.it_interval.tv_nsec,
                   (long long)new.it_value.tv_sec, new.it_value.tv_nsec,
                   null_new ? " NULL new" : "", null_old ? "" : " old", r, r ? errno : 0);
            if (r == 0 && !null_old)
                print_spec("old", &old);
            break;
        }
        case 5: {
            timer_t id = pick(&slot);
            struct itimerspec cur;
            int null_cur = rnd(12) == 0;
            r = timer_gettime(id, null_cur ? NULL : &cur);
            printf("%d: gettime slot %d%s = %ld errno %d\n", i, slot, null_cur ? " NULL" : "", r,
                   r ? errno : 0);
            if (r == 0)
                print_spec("now", &cur);
            break;
        }
        case 6: {
            timer_t id = pick(&slot);
            r = timer_getoverrun(id);
            printf("%d: getoverrun slot %d = %ld errno %d\n", i, slot, r, r < 0 ? errno : 0);
            break;
        }
        default: {
            timer_t id = pick(&slot);
            r = timer_delete(id);
            printf("%d: delete slot %d = %ld errno %d\n", i, slot, r, r ? errno : 0);
            if (r == 0 && slot >= 0) {
                /* Another slot may hold the same id (then it is gone there too). */
                for (int s = 0; s < POOL; s++)
                    if (have[s] && ids[s] == id)
                        have[s] = 0;
            }
            break;
        }
        }
    }
    return 0;
}
