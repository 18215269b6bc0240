/* A signal handler interrupts a sleeping semop and msgrcv with EINTR, even with SA_RESTART
 * (Linux never restarts them), and the sleeper is dequeued. */
#include "check.h"
#include <sys/time.h>

static volatile sig_atomic_t fired;
static void on_alarm(int sig) {
    (void)sig;
    fired++;
}

static void arm(void) {
    struct itimerval t = {.it_value = {.tv_usec = 200000}};
    CHECK(setitimer(ITIMER_REAL, &t, NULL) == 0);
}

int main(void) {
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    int semid = semget(IPC_PRIVATE, 1, 0600);
    CHECK(semid >= 0);
    arm();
    struct sembuf down = {0, -1, 0};
    errno = 0;
    CHECK(semop(semid, &down, 1) == -1 && errno == EINTR);
    CHECK(fired == 1);
    CHECK(semctl(semid, 0, GETNCNT) == 0);
    /* The semaphore still works afterwards. */
    struct sembuf up = {0, 1, 0};
    CHECK(semop(semid, &up, 1) == 0);
    CHECK(semop(semid, &down, 1) == 0);
    int msqid = msgget(IPC_PRIVATE, 0600);
    CHECK(msqid >= 0);
    arm();
    struct { long mtype; char text[8]; } m;
    CHECK(msgrcv(msqid, &m, sizeof m.text, 0, 0) == -1 && errno == EINTR);
    CHECK(fired == 2);
    /* semtimedop's timeout is EAGAIN. */
    struct timespec ts = {0, 50000000};
    CHECK(semtimedop(semid, &down, 1, &ts) == -1 && errno == EAGAIN);
    CHECK(semctl(semid, 0, IPC_RMID) == 0);
    CHECK(msgctl(msqid, IPC_RMID, NULL) == 0);
    puts("semop_eintr: ok");
    return 0;
}
