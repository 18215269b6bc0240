/* Many times over: a child's SEM_UNDO adjustment is applied by the time its parent has
 * reaped it (the daemon must apply an exit before a request that follows it, with no exit
 * check of its own on requests that follow none). */
#include "check.h"

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    int sem = semget(IPC_PRIVATE, 1, 0600);
    CHECK(sem >= 0);
    for (int i = 0; i < rounds; i++) {
        pid_t child = checked_fork();
        if (child == 0) {
            struct sembuf up = {0, 1, SEM_UNDO};
            _exit(semop(sem, &up, 1) == 0 ? 0 : 1);
        }
        int status;
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(semctl(sem, 0, GETVAL) == 0);
    }
    CHECK(semctl(sem, 0, IPC_RMID) == 0);
    printf("undo_after_reap: ok (%d rounds)\n", rounds);
    return 0;
}
