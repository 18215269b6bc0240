/* Semaphore helpers shared by the semaphore C tests (sem_fast, sem_fast_chaos, sem_sleep).
 * Include after check.h (CHECK, the SysV headers). */
#ifndef UIPC_TEST_SEM_OPS_H
#define UIPC_TEST_SEM_OPS_H

/* One semop on semaphore `n`: its result, errno set as the call left it. */
static inline int sop(int id, unsigned short n, short op, short flg) {
    struct sembuf b = {n, op, flg};
    return semop(id, &b, 1);
}

/* Waits up to 5 s for semctl(id, n, cmd) (GETNCNT, GETZCNT, GETVAL...) to read `want`, then
 * checks that it does. */
static inline void wait_count(int id, int n, int cmd, int want) {
    for (int i = 0; i < 5000 && semctl(id, n, cmd) != want; i++)
        usleep(1000);
    CHECK(semctl(id, n, cmd) == want);
}
#endif
