/* Descriptor numbers stay the kernel's: open(2) gives the lowest free number (POSIX), so a
 * program that took file locks (or made SysV IPC calls) and then opens files gets the same
 * numbers as on Linux; a number it never opened stays free (EBADF). Run on the host and under
 * uipc run --locks, where the library's connection to the daemon must not take one of them. */
#include "check.h"
#include <sys/file.h>
#include <pthread.h>

static char path[64];

/* The lowest descriptor number not open, found with fcntl (F_GETFD is never routed). */
static int lowest_free(void) {
    for (int fd = 0;; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) return fd;
}

static void lock_calls(int fd) {
    struct flock fl = range(F_WRLCK, 0, 10);
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    struct flock ofd = range(F_RDLCK, 20, 5);
    CHECK(fcntl(fd, F_OFD_SETLK, &ofd) == 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    struct flock q = range(F_WRLCK, 0, 0);
    CHECK(fcntl(fd, F_GETLK, &q) == 0);
    /* The description's locks go (another description takes them next). */
    CHECK(flock(fd, LOCK_UN) == 0);
    ofd.l_type = F_UNLCK;
    CHECK(fcntl(fd, F_OFD_SETLK, &ofd) == 0);
}

static void *in_thread(void *arg) {
    int fd = open_rw(path);
    lock_calls(fd);
    *(int *)arg = fd;
    return NULL;
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-fdnum-%d", getpid());
    int first = lowest_free();
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd == first);
    lock_calls(fd);
    /* The next open gets the next number, and every number up to it was the program's. */
    int next = open_rw(path);
    CHECK(next == fd + 1);
    CHECK(lowest_free() == next + 1);
    CHECK(close(next) == 0);
    errno = 0;
    CHECK(fcntl(next, F_GETFD) == -1 && errno == EBADF);

    /* A second thread's calls (a connection of its own under uipc) and a forked child's. */
    pthread_t t;
    int tfd = -1;
    CHECK(pthread_create(&t, NULL, in_thread, &tfd) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(tfd == next);
    CHECK(lowest_free() == tfd + 1);
    pid_t c = checked_fork();
    if (c == 0) {
        int o = open_rw(path);
        struct flock fl = range(F_RDLCK, 100, 1);
        CHECK(fcntl(o, F_SETLK, &fl) == 0);
        CHECK(lowest_free() == o + 1);
        _exit(0);
    }
    expect_clean_exit(c);

    /* A SysV call too. */
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(q >= 0);
    int after = open_rw(path);
    CHECK(after == tfd + 1);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    CHECK(unlink(path) == 0);
    puts("locks_fd_numbers: ok");
    return 0;
}
