/* Shared helpers of the C test programs run under `uipc run` (and natively, as the oracle). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__,     \
                    __LINE__, #cond, errno, strerror(errno));                         \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* A POSIX/OFD lock request for `len` bytes from `start` (SEEK_SET). */
static inline struct flock range(short type, off_t start, off_t len) {
    struct flock fl = {0};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    return fl;
}

union semun {
    int val;
    struct semid_ds *buf;
    unsigned short *array;
    struct seminfo *__buf;
};

/* Waits for `pid` and checks it exited with status 0. */
static inline void expect_clean_exit(pid_t pid) {
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child %d ended with status 0x%x\n", pid, st);
        exit(1);
    }
}

/* Runs `f` in a child process and checks the child exits 0. */
static inline void in_child(void (*f)(void)) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        f();
        _exit(0);
    }
    expect_clean_exit(pid);
}
