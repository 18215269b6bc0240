/* POSIX record locks between processes: contention and F_GETLK's holder pid, a waiter that
 * gets the lock when the holder unlocks, a SIGKILLed holder's locks released, EDEADLK,
 * F_SETLKW and signals (EINTR without SA_RESTART, restarted with it), lockf, and closes that
 * drop the process's locks (close of another descriptor, dup2 over one, fclose; not the close
 * of an O_PATH descriptor). */
#include "check.h"
#include "alarm.h"
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/time.h>

static char path[64];

static int lk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl);
}

static void sync_read(int p) {
    char c;
    CHECK(read(p, &c, 1) == 1);
}

static void sync_write(int p) {
    CHECK(write(p, "x", 1) == 1);
}

static void child_sees_parents_lock(void) {
    int fd = open_rw(path);
    errno = 0;
    CHECK(lk(fd, F_SETLK, F_RDLCK, 5, 1) == -1 && errno == EAGAIN);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    CHECK(fl.l_type == F_WRLCK && fl.l_pid == getppid() && fl.l_start == 0 && fl.l_len == 10);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 10, 5) == 0);
}

static void child_sees_no_lock(void) {
    int fd = open_rw(path);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    CHECK(fl.l_type == F_UNLCK);
}

static void child_sees_parents_whole_file_lock(void) {
    int fd = open_rw(path);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    CHECK(fl.l_type == F_WRLCK && fl.l_pid == getppid() && fl.l_len == 0);
}

static void child_lockf(void) {
    int fd = open_rw(path);
    errno = 0;
    CHECK(lockf(fd, F_TEST, 10) == -1 && errno == EACCES);
    errno = 0;
    CHECK(lockf(fd, F_TLOCK, 10) == -1 && (errno == EAGAIN || errno == EACCES));
    CHECK(lseek(fd, 10, SEEK_SET) == 10);
    CHECK(lockf(fd, F_TEST, 5) == 0);
    CHECK(lockf(fd, F_TLOCK, 5) == 0);
}

/* In a child: a new description of the file, on which it takes a write lock of `len` bytes
 * from `start` with `cmd`, then says so on `p`. The descriptor. */
static int lock_and_say(int cmd, off_t start, off_t len, int p) {
    int fd = open_rw(path);
    CHECK(lk(fd, cmd, F_WRLCK, start, len) == 0);
    sync_write(p);
    return fd;
}

/* A child takes a write lock on the whole file, says so, and keeps it `hold_ms` (0: until
 * killed). */
static pid_t holder(int hold_ms) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        lock_and_say(F_SETLK, 0, 0, p[1]);
        if (hold_ms == 0)
            for (;;) pause();
        usleep(hold_ms * 1000);
        _exit(0);
    }
    close(p[1]);
    sync_read(p[0]);
    close(p[0]);
    return pid;
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-posix-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789abcdefghij", 20) == 20);

    /* Contention and F_GETLK. */
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 10) == 0);
    in_child(child_sees_parents_lock);

    /* A waiter sleeps until the holder unlocks. */
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t w = checked_fork();
    if (w == 0) {
        lock_and_say(F_SETLKW, 0, 10, p[1]);
        _exit(0);
    }
    usleep(150000);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);
    sync_read(p[0]);
    expect_clean_exit(w);
    /* Its lock went with its exit. */
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 10) == 0);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);

    /* A SIGKILLed holder's locks are released. */
    pid_t h = holder(0);
    errno = 0;
    CHECK(lk(fd, F_SETLK, F_RDLCK, 3, 1) == -1 && errno == EAGAIN);
    CHECK(kill(h, SIGKILL) == 0);
    CHECK(waitpid(h, NULL, 0) == h);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);

    /* EDEADLK: the child holds byte 1 and waits for byte 0, which we hold. */
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 1) == 0);
    w = checked_fork();
    if (w == 0) {
        int cfd = lock_and_say(F_SETLK, 1, 1, p[1]);
        CHECK(lk(cfd, F_SETLKW, F_WRLCK, 0, 1) == 0);
        _exit(0);
    }
    sync_read(p[0]);
    usleep(150000);
    errno = 0;
    CHECK(lk(fd, F_SETLKW, F_WRLCK, 1, 1) == -1 && errno == EDEADLK);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 1) == 0);
    expect_clean_exit(w);

    /* F_SETLKW and a signal: EINTR without SA_RESTART. */
    struct sigaction sa = {.sa_handler = on_alarm};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    h = holder(0);
    arm(150000);
    errno = 0;
    CHECK(lk(fd, F_SETLKW, F_WRLCK, 0, 0) == -1 && errno == EINTR);
    CHECK(fired == 1);
    CHECK(kill(h, SIGKILL) == 0);
    CHECK(waitpid(h, NULL, 0) == h);
    /* With SA_RESTART the wait goes on until the holder (here after 500 ms) leaves. */
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    h = holder(500);
    arm(150000);
    CHECK(lk(fd, F_SETLKW, F_WRLCK, 0, 0) == 0);
    CHECK(fired == 2);
    CHECK(waitpid(h, NULL, 0) == h);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);

    /* lockf over fcntl, from the current offset. */
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(lockf(fd, F_LOCK, 10) == 0);
    CHECK(lockf(fd, F_TEST, 10) == 0); /* our own lock */
    in_child(child_lockf);
    CHECK(lockf(fd, F_ULOCK, 10) == 0);
    errno = 0;
    CHECK(lockf(fd, 99, 10) == -1 && errno == EINVAL);

    /* Closing any descriptor of the file drops the process's locks on it. */
    int other = open_rw(path);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(close(other) == 0);
    in_child(child_sees_no_lock);
    other = open_rw(path);
    int spare = open("/dev/null", O_RDONLY);
    CHECK(spare >= 0);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(dup2(spare, other) == other);
    in_child(child_sees_no_lock);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(fclose(f) == 0);
    in_child(child_sees_no_lock);

    /* ... except an O_PATH descriptor, whose close (close, dup2 over it, close_range) the
     * kernel does not count. */
    int path_fd = open(path, O_PATH);
    CHECK(path_fd >= 0);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(close(path_fd) == 0);
    in_child(child_sees_parents_whole_file_lock);
    path_fd = open(path, O_PATH);
    CHECK(path_fd >= 0 && dup2(spare, path_fd) == path_fd);
    in_child(child_sees_parents_whole_file_lock);
    path_fd = open(path, O_PATH);
    CHECK(path_fd >= 0 && dup2(path_fd, 700) == 700 && close(path_fd) == 0);
    CHECK(close_range(700, 700, 0) == 0);
    in_child(child_sees_parents_whole_file_lock);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);

    /* closefrom and close_range close descriptors too. */
    other = open_rw(path);
    CHECK(dup2(other, 900) == 900 && close(other) == 0);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    closefrom(900);
    in_child(child_sees_no_lock);
    other = open_rw(path);
    CHECK(dup2(other, 800) == 800 && close(other) == 0);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(close_range(800, 800, CLOSE_RANGE_CLOEXEC) == 0); /* marks only */
    in_child(child_sees_parents_whole_file_lock);
    CHECK(close_range(800, 810, 0) == 0);
    in_child(child_sees_no_lock);

    /* Bad descriptors and commands. */
    errno = 0;
    CHECK(lk(999, F_SETLK, F_WRLCK, 0, 0) == -1 && errno == EBADF);
    errno = 0;
    CHECK(lk(spare, F_SETLK, F_WRLCK, 0, 0) == -1 && errno == EBADF); /* read-only */
    errno = 0;
    CHECK(lk(fd, F_SETLK, 7, 0, 0) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(fcntl(fd, F_SETLK, (void *)8) == -1 && errno == EFAULT);
    /* Other commands pass through with their argument. */
    CHECK(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC);
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);

    unlink(path);
    puts("locks_posix: ok");
    return 0;
}
