/* Many threads of one process sleep in semop and msgrcv at the same time; each is woken by
 * its own post (per-thread sessions with the daemon). */
#include "check.h"
#include <pthread.h>

#define THREADS 8
static int semid, msqid;

struct msg {
    long mtype;
    int value;
};

static void *sleeper(void *arg) {
    long i = (long)arg;
    struct sembuf down = {(unsigned short)i, -1, 0};
    CHECK(semop(semid, &down, 1) == 0);
    struct msg m;
    CHECK(msgrcv(msqid, &m, sizeof m.value, i + 1, 0) == sizeof m.value);
    CHECK(m.value == (int)i * 10);
    return NULL;
}

int main(void) {
    semid = semget(IPC_PRIVATE, THREADS, 0600);
    CHECK(semid >= 0);
    msqid = msgget(IPC_PRIVATE, 0600);
    CHECK(msqid >= 0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, sleeper, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++)
        for (int k = 0; k < 1000 && semctl(semid, i, GETNCNT) != 1; k++)
            usleep(1000);
    /* Wake them in reverse order: each must be woken by its own semaphore. */
    for (int i = THREADS - 1; i >= 0; i--) {
        CHECK(semctl(semid, i, GETNCNT) == 1);
        struct sembuf up = {(unsigned short)i, 1, 0};
        CHECK(semop(semid, &up, 1) == 0);
        struct msg m = {.mtype = i + 1, .value = i * 10};
        CHECK(msgsnd(msqid, &m, sizeof m.value, 0) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(semctl(semid, 0, IPC_RMID) == 0);
    CHECK(msgctl(msqid, IPC_RMID, NULL) == 0);
    puts("threads_block: ok");
    return 0;
}
