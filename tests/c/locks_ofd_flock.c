/* OFD and flock locks belong to the open file description: shared across fork and dup,
 * conflicting between descriptions, kept while any process holds the description open and
 * dropped at its last close. Also flock's contention between processes and its conversion. */
#include "check.h"
#include "alarm.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/time.h>

static char path[64];

static int ofd(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl);
}

/* A new description cannot take a whole-file flock lock without waiting. */
static int flock_free(void) {
    int fd = open_rw(path);
    int r = flock(fd, LOCK_EX | LOCK_NB);
    int e = errno;
    close(fd);
    if (r == 0) return 1;
    CHECK(e == EWOULDBLOCK);
    return 0;
}

static int ofd_free(void) {
    int fd = open_rw(path);
    int r = ofd(fd, F_OFD_SETLK, F_WRLCK, 0, 10);
    int e = errno;
    close(fd);
    if (r == 0) return 1;
    CHECK(e == EAGAIN);
    return 0;
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-ofd-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    int p[2], q[2];
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    char c;

    /* OFD locks: shared with a forked child, conflicting with another description. */
    CHECK(ofd(fd, F_OFD_SETLK, F_WRLCK, 0, 10) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(ofd(fd, F_OFD_SETLK, F_WRLCK, 2, 3) == 0); /* same description, same owner */
        int other = open_rw(path);
        errno = 0;
        CHECK(ofd(other, F_OFD_SETLK, F_RDLCK, 5, 1) == -1 && errno == EAGAIN);
        struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
        CHECK(fcntl(other, F_OFD_GETLK, &fl) == 0);
        CHECK(fl.l_type == F_WRLCK && fl.l_pid == -1 && fl.l_start == 0 && fl.l_len == 10);
        errno = 0;
        CHECK(ofd(other, F_OFD_SETLK, F_RDLCK, 0, 1) == -1 && errno == EAGAIN);
        /* A POSIX lock of this process conflicts with the description's OFD lock too. */
        struct flock px = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        errno = 0;
        CHECK(fcntl(other, F_SETLK, &px) == -1 && errno == EAGAIN);
        /* l_pid must be 0 for OFD commands. */
        struct flock bad = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_pid = 1};
        errno = 0;
        CHECK(fcntl(other, F_OFD_SETLK, &bad) == -1 && errno == EINVAL);
        _exit(0);
    }
    expect_clean_exit(pid);
    /* The child's exit closed its copy only: the lock stays. */
    CHECK(!ofd_free());
    /* A dup keeps the description open: closing the original keeps the lock. */
    expect_freed_at_last_close(fd, 0, ofd_free);

    /* flock: contention between processes, and a blocked request granted at unlock. */
    fd = open_rw(path);
    CHECK(flock(fd, LOCK_SH) == 0);
    pid = checked_fork();
    if (pid == 0) {
        int other = open_rw(path);
        CHECK(flock(other, LOCK_SH | LOCK_NB) == 0);
        errno = 0;
        CHECK(flock(other, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
        /* The failed conversion dropped the shared lock (flock's conversion is not atomic). */
        CHECK(write(p[1], "r", 1) == 1);
        CHECK(flock(other, LOCK_EX) == 0); /* waits for the parent */
        CHECK(write(p[1], "x", 1) == 1);
        CHECK(read(q[0], &c, 1) == 1);
        _exit(0);
    }
    CHECK(read(p[0], &c, 1) == 1 && c == 'r');
    usleep(150000);
    CHECK(flock(fd, LOCK_UN) == 0);
    CHECK(read(p[0], &c, 1) == 1 && c == 'x');
    errno = 0;
    CHECK(flock(fd, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(write(q[1], "g", 1) == 1);
    expect_clean_exit(pid);
    /* The child's exit closed its description's last descriptor: its lock is gone. */
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);

    /* A flock lock inherited by a child outlives the parent's close until the child closes. */
    pid = checked_fork();
    if (pid == 0) {
        CHECK(read(q[0], &c, 1) == 1);
        _exit(0);
    }
    CHECK(close(fd) == 0);
    CHECK(!flock_free());
    CHECK(write(q[1], "g", 1) == 1);
    expect_clean_exit(pid);
    CHECK(flock_free());

    /* Signals: F_OFD_SETLKW and flock end with EINTR after a handler without SA_RESTART,
     * and wait on after one with it. */
    fd = open_rw(path);
    CHECK(ofd(fd, F_OFD_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    struct sigaction sa = {.sa_handler = on_alarm};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    pid = checked_fork();
    if (pid == 0) {
        int other = open_rw(path);
        arm(100000);
        errno = 0;
        CHECK(ofd(other, F_OFD_SETLKW, F_RDLCK, 0, 1) == -1 && errno == EINTR);
        arm(100000);
        errno = 0;
        CHECK(flock(other, LOCK_SH) == -1 && errno == EINTR);
        CHECK(fired == 2);
        sa.sa_flags = SA_RESTART;
        CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
        CHECK(write(p[1], "r", 1) == 1);
        arm(100000);
        CHECK(flock(other, LOCK_SH) == 0); /* granted when the parent unlocks */
        CHECK(fired == 3);
        arm(100000);
        CHECK(ofd(other, F_OFD_SETLKW, F_RDLCK, 0, 1) == 0);
        CHECK(fired == 4);
        _exit(0);
    }
    CHECK(read(p[0], &c, 1) == 1 && c == 'r');
    usleep(300000);
    CHECK(flock(fd, LOCK_UN) == 0);
    usleep(300000);
    CHECK(ofd(fd, F_OFD_SETLK, F_UNLCK, 0, 0) == 0);
    expect_clean_exit(pid);
    CHECK(close(fd) == 0);

    /* flock's errors. */
    fd = open_rw(path);
    errno = 0;
    CHECK(flock(fd, LOCK_SH | LOCK_EX) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(flock(999, LOCK_SH) == -1 && errno == EBADF);
    /* The operation is checked before the descriptor. */
    errno = 0;
    CHECK(flock(999, LOCK_NB) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(flock(999, 0) == -1 && errno == EINVAL);
    /* LOCK_MAND (32) is ignored, before the descriptor is looked at: no lock, no error. */
    errno = 0;
    CHECK(flock(999, 32 | LOCK_EX) == 0 && errno == 0);
    CHECK(flock(fd, 32 | LOCK_EX) == 0);
    int other = open_rw(path);
    CHECK(flock(other, LOCK_EX | LOCK_NB) == 0 && close(other) == 0);
    CHECK(flock(fd, LOCK_EX) == 0 && flock(fd, LOCK_UN) == 0);

    unlink(path);
    puts("locks_ofd_flock: ok");
    return 0;
}
