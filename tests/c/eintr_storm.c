/* Signals racing completions: a timer fires every 200 us while one process takes N semaphore
 * units and N messages that another process posts. Each semop/msgrcv either completes or fails
 * with EINTR, never both: at the end every unit and every message was received exactly once,
 * in order (a completion that races the signal stands, as on Linux). */
#include "check.h"
#include <sys/time.h>

#define N 2000

static volatile sig_atomic_t ticks;
static void on_alarm(int sig) {
    (void)sig;
    ticks++;
}

struct msg {
    long mtype;
    int seq;
};

int main(void) {
    int sem = semget(IPC_PRIVATE, 1, 0600);
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(sem >= 0 && q >= 0);
    pid_t poster = checked_fork();
    if (poster == 0) {
        struct sembuf up = {0, 1, 0};
        for (int i = 0; i < N; i++) {
            CHECK(semop(sem, &up, 1) == 0);
            struct msg m = {1, i};
            CHECK(msgsnd(q, &m, sizeof m.seq, 0) == 0);
            if (i % 8 == 0)
                usleep(50);
        }
        _exit(0);
    }
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    struct itimerval t = {.it_interval = {.tv_usec = 200}, .it_value = {.tv_usec = 200}};
    CHECK(setitimer(ITIMER_REAL, &t, NULL) == 0);
    int units = 0, next = 0, eintr = 0;
    struct sembuf down = {0, -1, 0};
    while (units < N || next < N) {
        if (units < N) {
            if (semop(sem, &down, 1) == 0)
                units++;
            else {
                CHECK(errno == EINTR);
                eintr++;
            }
        }
        if (next < N) {
            struct msg m;
            ssize_t n = msgrcv(q, &m, sizeof m.seq, 0, 0);
            if (n >= 0) {
                CHECK(n == sizeof m.seq && m.seq == next);
                next++;
            } else {
                CHECK(errno == EINTR);
                eintr++;
            }
        }
    }
    struct itimerval off = {0};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    expect_clean_exit(poster);
    CHECK(semctl(sem, 0, GETVAL) == 0);
    struct msqid_ds ds;
    CHECK(msgctl(q, IPC_STAT, &ds) == 0 && ds.msg_qnum == 0);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && msgctl(q, IPC_RMID, NULL) == 0);
    printf("eintr_storm: ok (%d interrupted calls, %d ticks)\n", eintr, (int)ticks);
    return 0;
}
