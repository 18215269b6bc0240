/* A daemon that dies under its clients: `daemon_gone PID`, run under `uipc run --socket S`
 * against the daemon PID, kills it and then finds every SysV IPC call failing with
 * ECONNREFUSED (uipc's documented errno for a daemon that does not answer, never one of the
 * calls' own); the library says so once on stderr (the script counts the lines). Without an
 * argument (the host kernel, which cannot die under its callers) it only says "skipped". */
#include "check.h"
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        puts("daemon_gone: skipped (no daemon to kill on the host kernel)");
        return 0;
    }
    pid_t daemon = (pid_t)atoi(argv[1]);
    int sem = semget(IPC_PRIVATE, 1, 0600);
    CHECK(sem >= 0);
    struct sembuf up = {0, 1, 0};
    CHECK(semop(sem, &up, 1) == 0);
    CHECK(kill(daemon, SIGKILL) == 0);
    struct timespec start, now, pause_ = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (semop(sem, &up, 1) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        CHECK(now.tv_sec - start.tv_sec < 10);
        nanosleep(&pause_, NULL);
    }
    CHECK(errno == ECONNREFUSED);
    CHECK(semctl(sem, 0, GETVAL) == -1 && errno == ECONNREFUSED);
    CHECK(semget(IPC_PRIVATE, 1, 0600) == -1 && errno == ECONNREFUSED);
    CHECK(msgget(IPC_PRIVATE, 0600) == -1 && errno == ECONNREFUSED);
    CHECK(shmget(IPC_PRIVATE, 4096, 0600) == -1 && errno == ECONNREFUSED);
    puts("daemon_gone: ok");
    return 0;
}
