/* A SIGKILLed process's SEM_UNDO adjustments are applied, and its sleeping semop is gone,
 * by the time its parent has reaped it. */
#include "check.h"

int main(void) {
    int semid = semget(IPC_PRIVATE, 2, 0600);
    CHECK(semid >= 0);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        struct sembuf up = {0, 3, SEM_UNDO};
        CHECK(semop(semid, &up, 1) == 0);
        CHECK(write(ready[1], "x", 1) == 1);
        struct sembuf down = {1, -1, SEM_UNDO}; /* sleeps: semaphore 1 is 0 */
        semop(semid, &down, 1);
        _exit(2);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK(semctl(semid, 0, GETVAL) == 3);
    for (int i = 0; i < 2500 && semctl(semid, 1, GETNCNT) != 1; i++)
        usleep(2000);
    CHECK(semctl(semid, 1, GETNCNT) == 1);
    CHECK(kill(child, SIGKILL) == 0);
    int st;
    CHECK(waitpid(child, &st, 0) == child);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(semctl(semid, 0, GETVAL) == 0);
    CHECK(semctl(semid, 1, GETNCNT) == 0);
    CHECK(semctl(semid, 0, GETPID) == child);
    CHECK(semctl(semid, 0, IPC_RMID) == 0);
    puts("sem_undo_kill: ok");
    return 0;
}
