/* A process that drops root (setuid to nobody) is judged by its new ids: EACCES for mode
 * checks, EPERM for owner-only commands. It calls once before dropping (its connection to the
 * daemon then predates the switch; tests/c/priv_drop.c makes its first call after). */
#include "check.h"

int main(void) {
    if (geteuid() != 0) {
        puts("perm_setuid: skipped (needs root)");
        return 0;
    }
    int sem = semget(0x75490010, 1, IPC_CREAT | 0600);
    int msq = msgget(0x75490011, IPC_CREAT | 0600);
    int shm = shmget(0x75490012, 4096, IPC_CREAT | 0600);
    CHECK(sem >= 0 && msq >= 0 && shm >= 0);
    int open_sem = semget(0x75490013, 1, IPC_CREAT | 0666);
    CHECK(open_sem >= 0);
    pid_t child = checked_fork();
    if (child == 0) {
        CHECK(semctl(sem, 0, GETVAL) == 0);
        CHECK(setgid(65534) == 0 && setuid(65534) == 0);
        CHECK(semget(0x75490010, 1, 0600) == -1 && errno == EACCES);
        CHECK(semctl(sem, 0, GETVAL) == -1 && errno == EACCES);
        struct sembuf up = {0, 1, 0};
        CHECK(semop(sem, &up, 1) == -1 && errno == EACCES);
        CHECK(semctl(sem, 0, IPC_RMID) == -1 && errno == EPERM);
        CHECK(msgget(0x75490011, 0400) == -1 && errno == EACCES);
        CHECK(msgget(0x75490011, 0) == msq); /* no mode asked, none checked */
        CHECK(msgctl(msq, IPC_RMID, NULL) == -1 && errno == EPERM);
        CHECK(shmat(shm, NULL, 0) == (void *)-1 && errno == EACCES);
        CHECK(shmctl(shm, IPC_RMID, NULL) == -1 && errno == EPERM);
        /* What the mode allows still works, and records the new ids. */
        CHECK(semop(open_sem, &up, 1) == 0);
        CHECK(semctl(open_sem, 0, IPC_RMID) == -1 && errno == EPERM);
        exit(0);
    }
    expect_clean_exit(child);
    CHECK(semctl(open_sem, 0, GETVAL) == 1 && semctl(open_sem, 0, GETPID) == child);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && semctl(open_sem, 0, IPC_RMID) == 0);
    CHECK(msgctl(msq, IPC_RMID, NULL) == 0 && shmctl(shm, IPC_RMID, NULL) == 0);
    puts("perm_setuid: ok");
    return 0;
}
