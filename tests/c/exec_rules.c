/* execve: attachments are dropped (also for a program that makes no SysV IPC call), SEM_UNDO
 * adjustments are kept (and applied at exit). */
#include "check.h"

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "after-exec") == 0) {
        int sem = atoi(argv[2]), shm = atoi(argv[3]);
        struct shmid_ds ds;
        CHECK(shmctl(shm, IPC_STAT, &ds) == 0);
        CHECK(ds.shm_nattch == 0 && ds.shm_lpid == getpid());
        CHECK(semctl(sem, 0, GETVAL) == 2);
        return 0; /* exit applies the undo */
    }
    int sem = semget(IPC_PRIVATE, 1, 0600);
    int shm = shmget(IPC_PRIVATE, 4096, 0600);
    CHECK(sem >= 0 && shm >= 0);
    pid_t child = checked_fork();
    if (child == 0) {
        struct sembuf up = {0, 2, SEM_UNDO};
        CHECK(semop(sem, &up, 1) == 0);
        CHECK(shmat(shm, NULL, 0) != (void *)-1);
        char s[16], m[16];
        snprintf(s, sizeof s, "%d", sem);
        snprintf(m, sizeof m, "%d", shm);
        execl("/proc/self/exe", argv[0], "after-exec", s, m, (char *)NULL);
        _exit(127);
    }
    expect_clean_exit(child);
    CHECK(semctl(sem, 0, GETVAL) == 0);

    /* A child that attached and then execs a program making no SysV IPC call (sleep): the
     * exec drops its attachment while the program runs. Linux detaches during the exec,
     * before the close-on-exec pipe closes; the wait for it is bounded. */
    int gone[2];
    CHECK(pipe2(gone, O_CLOEXEC) == 0);
    child = checked_fork();
    if (child == 0) {
        CHECK(shmat(shm, NULL, 0) != (void *)-1);
        execl("/bin/sleep", "sleep", "20", (char *)NULL);
        _exit(127);
    }
    CHECK(close(gone[1]) == 0);
    char byte;
    CHECK(read(gone[0], &byte, 1) == 0);
    struct shmid_ds ds;
    for (int i = 0; i < 1000; i++) {
        CHECK(shmctl(shm, IPC_STAT, &ds) == 0);
        if (ds.shm_nattch == 0)
            break;
        usleep(10000);
    }
    CHECK(ds.shm_nattch == 0 && ds.shm_lpid == child);
    CHECK(kill(child, SIGKILL) == 0 && waitpid(child, NULL, 0) == child);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && shmctl(shm, IPC_RMID, NULL) == 0);
    puts("exec_rules: ok");
    return 0;
}
