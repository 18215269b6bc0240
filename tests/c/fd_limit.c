/* SysV IPC in a process that has used every descriptor its soft RLIMIT_NOFILE allows (the
 * hard limit is higher): the calls need no descriptor on Linux, so msgget, msgsnd, semget,
 * semop, shmget and shmat work, in the process, in a new thread (its first call) and in a
 * forked child; the limit is unchanged afterwards (one more open still fails with EMFILE).
 * Under uipc run the library's own descriptors (a thread's connection, a received memfd)
 * must not make these calls fail. */
#include "check.h"
#include <pthread.h>
#include <sys/resource.h>

#define SOFT 24

/* Fills the descriptor table up to the soft limit. */
static void use_every_descriptor(void) {
    while (open("/dev/null", O_RDONLY) >= 0)
        ;
    CHECK(errno == EMFILE);
}

/* Every kind of object, made, used and removed; exits on a failed check. */
static void calls(const char *who) {
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(q >= 0);
    struct {
        long type;
        char text[8];
    } msg = {1, "fdlimit"};
    CHECK(msgsnd(q, &msg, sizeof msg.text, 0) == 0);
    CHECK(msgrcv(q, &msg, sizeof msg.text, 0, 0) == sizeof msg.text);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    int s = semget(IPC_PRIVATE, 1, 0600);
    CHECK(s >= 0);
    struct sembuf up = {0, 2, 0}, down = {0, -1, 0};
    CHECK(semop(s, &up, 1) == 0 && semop(s, &down, 1) == 0);
    CHECK(semctl(s, 0, GETVAL) == 1);
    CHECK(semctl(s, 0, IPC_RMID) == 0);
    int m = shmget(IPC_PRIVATE, 8192, 0600);
    CHECK(m >= 0);
    char *p = shmat(m, NULL, 0);
    CHECK(p != (void *)-1);
    strcpy(p + 4096, who);
    char *r = shmat(m, NULL, SHM_RDONLY);
    CHECK(r != (void *)-1 && strcmp(r + 4096, who) == 0);
    CHECK(shmdt(r) == 0 && shmdt(p) == 0);
    struct shmid_ds ds;
    CHECK(shmctl(m, IPC_STAT, &ds) == 0 && ds.shm_nattch == 0);
    CHECK(shmctl(m, IPC_RMID, NULL) == 0);
    /* The soft limit is as it was: no descriptor to be had. */
    CHECK(open("/dev/null", O_RDONLY) == -1 && errno == EMFILE);
}

static void *thread_main(void *arg) {
    calls(arg);
    return NULL;
}

int main(void) {
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < SOFT + 8) {
        puts("fd_limit: skipped (hard RLIMIT_NOFILE too low)");
        return 0;
    }
    rl.rlim_cur = SOFT;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        /* A process whose first call comes at the limit. */
        use_every_descriptor();
        calls("child");
        _exit(0);
    }
    expect_clean_exit(pid);
    use_every_descriptor();
    calls("main");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_main, "thread") == 0);
    CHECK(pthread_join(t, NULL) == 0);
    pid = checked_fork();
    if (pid == 0) {
        calls("forked");
        _exit(0);
    }
    expect_clean_exit(pid);
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur == SOFT);
    puts("fd_limit: passed");
    return 0;
}
