/* File locks through syscall(2): syscall(SYS_fcntl, ...) and syscall(SYS_flock, ...) take,
 * test and release the same locks as the C library's fcntl and flock (another process sees
 * them and waits for them), and the closes made through syscall (SYS_close, SYS_dup2,
 * SYS_dup3, SYS_close_range) drop them; each returns as syscall(3) does (-1 and errno, errno
 * untouched on success), and fcntl commands other than locks pass through unchanged.
 *
 * `locks_syscall kernel` (run natively) also checks that its locks are in the host's
 * /proc/locks; `locks_syscall uipc` (under `uipc run --locks`) that they are not: the daemon
 * holds them. A second argument is a shell command run while the locks are held, with $HOLDER
 * set to the holder's pid (to list them with `uipc locks`). */
#include "check.h"
#include "proc_locks.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC 4
#endif

static char path[64];

static long sys_lock(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return syscall(SYS_fcntl, fd, cmd, &fl);
}

/* What another process learns about [start, start+len) with F_GETLK through syscall (or
 * through the C library's fcntl if `libc`): F_UNLCK, or the conflicting lock's type, whose
 * l_pid must be `holder`. */
static int seen_by_child(short want, off_t start, off_t len, pid_t holder, int libc) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0);
        struct flock fl = {.l_type = want, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
        CHECK((libc ? fcntl(fd, F_GETLK, &fl) : syscall(SYS_fcntl, fd, F_GETLK, &fl)) == 0);
        CHECK(fl.l_type == F_UNLCK || fl.l_pid == holder);
        _exit(fl.l_type == F_UNLCK ? 10 : 20 + fl.l_type);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    CHECK(WEXITSTATUS(st) >= 10);
    return WEXITSTATUS(st) == 10 ? F_UNLCK : WEXITSTATUS(st) - 20;
}

/* Whether a new open file description, in a child process (a close in this one would drop
 * its POSIX locks), can take a whole-file flock lock (`ofd` 0) or a write OFD lock on byte 20
 * (`ofd` 1) now, through syscall. */
static int free_for_new_description(int ofd) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0);
        long r = ofd ? sys_lock(fd, F_OFD_SETLK, F_WRLCK, 20, 1)
                     : syscall(SYS_flock, fd, LOCK_EX | LOCK_NB);
        CHECK(r == 0 || errno == (ofd ? EAGAIN : EWOULDBLOCK));
        _exit(r == 0 ? 0 : 3);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3);
    return WEXITSTATUS(st) == 0;
}

static int flock_free(void) { return free_for_new_description(0); }
static int ofd_free(void) { return free_for_new_description(1); }

static void errors_and_pass_through(int fd) {
    int rdonly = open(path, O_RDONLY);
    CHECK(rdonly >= 0);
    errno = 0;
    CHECK(sys_lock(-1, F_SETLK, F_RDLCK, 0, 1) == -1 && errno == EBADF);
    CHECK(syscall(SYS_fcntl, fd, F_SETLK, (void *)8) == -1 && errno == EFAULT);
    CHECK(syscall(SYS_fcntl, fd, F_GETLK, NULL) == -1 && errno == EFAULT);
    CHECK(sys_lock(fd, F_SETLK, 99, 0, 1) == -1 && errno == EINVAL);
    CHECK(sys_lock(rdonly, F_SETLK, F_WRLCK, 0, 1) == -1 && errno == EBADF);
    CHECK(sys_lock(fd, F_SETLK, F_RDLCK, -5, 1) == -1 && errno == EINVAL);
    CHECK(syscall(SYS_flock, -1, LOCK_SH) == -1 && errno == EBADF);
    CHECK(syscall(SYS_flock, fd, 0) == -1 && errno == EINVAL);
    /* Other commands reach the kernel with their arguments. */
    CHECK((syscall(SYS_fcntl, fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK((syscall(SYS_fcntl, rdonly, F_GETFL) & O_ACCMODE) == O_RDONLY);
    long high = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 200);
    CHECK(high >= 200 && syscall(SYS_fcntl, high, F_GETFD) == FD_CLOEXEC);
    CHECK(syscall(SYS_fcntl, high, F_SETFD, 0) == 0 && syscall(SYS_fcntl, high, F_GETFD) == 0);
    CHECK(syscall(SYS_close, high) == 0);
    CHECK(syscall(SYS_close, high) == -1 && errno == EBADF);
    CHECK(syscall(SYS_fcntl, fd, 0x7fff) == -1 && errno == EINVAL);
    CHECK(syscall(SYS_close, rdonly) == 0);
}

/* A child waits in F_SETLKW (through syscall) until the parent's close through syscall
 * drops the lock it waits for. */
static void setlkw_waits_for_a_syscall_close(int fd) {
    int dupfd = dup(fd);
    CHECK(dupfd >= 0);
    CHECK(sys_lock(fd, F_SETLK, F_WRLCK, 40, 5) == 0);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        int own = open(path, O_RDWR);
        CHECK(own >= 0);
        CHECK(write(ready[1], "w", 1) == 1);
        CHECK(sys_lock(own, F_SETLKW, F_WRLCK, 42, 1) == 0);
        _exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    wait_blocked(pid); /* asleep behind the parent's lock, not granted */
    int st;
    CHECK(waitpid(pid, &st, WNOHANG) == 0);
    CHECK(syscall(SYS_close, dupfd) == 0);   /* drops the process's POSIX locks on the file */
    expect_clean_exit(pid);
    close(ready[0]);
    close(ready[1]);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    int kernel = strcmp(argv[1], "kernel") == 0;
    pid_t me = getpid();
    snprintf(path, sizeof path, "/tmp/uipc-locks-syscall-%d", me);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789012345678901234567890123456789012345", 46) == 46);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    /* First, as it closes descriptors of the file (which would drop POSIX locks). */
    errors_and_pass_through(fd);

    /* POSIX, OFD and flock locks taken through syscall; errno kept on success. */
    errno = 1234;
    CHECK(sys_lock(fd, F_SETLK, F_WRLCK, 0, 4) == 0 && errno == 1234);
    CHECK(sys_lock(fd, F_SETLK, F_RDLCK, 10, 2) == 0);
    int ofd = open(path, O_RDWR);
    CHECK(ofd >= 0);
    CHECK(sys_lock(ofd, F_OFD_SETLK, F_RDLCK, 20, 1) == 0);
    CHECK(syscall(SYS_flock, fd, LOCK_EX) == 0 && errno == 1234);

    /* Another process sees them, through syscall and through the C library. */
    CHECK(seen_by_child(F_WRLCK, 0, 1, me, 0) == F_WRLCK);
    CHECK(seen_by_child(F_RDLCK, 2, 1, me, 1) == F_WRLCK);
    CHECK(seen_by_child(F_WRLCK, 11, 5, me, 0) == F_RDLCK);
    CHECK(seen_by_child(F_RDLCK, 11, 5, me, 0) == F_UNLCK);
    CHECK(seen_by_child(F_WRLCK, 5, 5, me, 1) == F_UNLCK);
    CHECK(!ofd_free());
    CHECK(!flock_free());
    /* Our own OFD lock as F_OFD_GETLK reports it to another description: l_pid -1. */
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 20, .l_len = 1};
    CHECK(syscall(SYS_fcntl, fd, F_OFD_GETLK, &q) == 0);
    CHECK(q.l_type == F_RDLCK && q.l_pid == -1 && q.l_start == 20 && q.l_len == 1);

    CHECK(kernel_lines(st.st_ino) == (kernel ? 4 : 0));
    if (argc >= 3) {
        char pid[16];
        snprintf(pid, sizeof pid, "%d", me);
        setenv("HOLDER", pid, 1);
        CHECK(system(argv[2]) == 0);
    }

    /* Unlock through syscall. */
    CHECK(sys_lock(fd, F_SETLK, F_UNLCK, 10, 2) == 0);
    CHECK(seen_by_child(F_WRLCK, 10, 2, me, 0) == F_UNLCK);
    CHECK(syscall(SYS_flock, fd, LOCK_UN) == 0);
    CHECK(flock_free());
    CHECK(syscall(SYS_flock, fd, LOCK_SH) == 0);

    /* Closing any descriptor of the file through syscall drops the POSIX locks. */
    int d = dup(fd);
    CHECK(d >= 0);
    CHECK(syscall(SYS_close, d) == 0);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_UNLCK);
    /* ... but not the flock lock of the description, which fd still refers to. */
    CHECK(!flock_free());

    /* dup2 and dup3 over a descriptor of the file close it: the POSIX locks go. */
    int devnull = open("/dev/null", O_RDONLY);
    CHECK(devnull >= 0);
    CHECK(sys_lock(fd, F_SETLK, F_WRLCK, 0, 4) == 0);
    d = dup(fd);
    CHECK(syscall(SYS_dup2, devnull, d) == d);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_UNLCK);
    CHECK(syscall(SYS_close, d) == 0);
    CHECK(sys_lock(fd, F_SETLK, F_WRLCK, 0, 4) == 0);
    d = dup(fd);
    CHECK(syscall(SYS_dup3, d, d, 0) == -1 && errno == EINVAL); /* no close, no drop */
    CHECK(syscall(SYS_dup2, d, d) == d);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_WRLCK);
    CHECK(syscall(SYS_dup3, devnull, d, O_CLOEXEC) == d);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_UNLCK);
    CHECK(syscall(SYS_close, d) == 0);

    /* close_range: CLOSE_RANGE_CLOEXEC closes nothing and drops nothing; a plain one does. */
    CHECK(sys_lock(fd, F_SETLK, F_WRLCK, 0, 4) == 0);
    d = (int)syscall(SYS_fcntl, fd, F_DUPFD, 300);
    CHECK(d >= 300);
    CHECK(syscall(SYS_close_range, d, d + 5, CLOSE_RANGE_CLOEXEC) == 0);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_WRLCK);
    CHECK(syscall(SYS_close_range, d, d + 5, 0x100) == -1 && errno == EINVAL);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_WRLCK);
    CHECK(syscall(SYS_close_range, d, d + 5, 0) == 0);
    CHECK(seen_by_child(F_WRLCK, 0, 4, me, 0) == F_UNLCK);

    /* The OFD lock goes with its description's last close, through syscall. */
    CHECK(!ofd_free());
    CHECK(syscall(SYS_close, ofd) == 0);
    CHECK(ofd_free());

    setlkw_waits_for_a_syscall_close(fd);

    /* The flock lock goes with the last close of its description. */
    CHECK(syscall(SYS_close, fd) == 0);
    CHECK(flock_free());
    CHECK(syscall(SYS_close, devnull) == 0);
    unlink(path);
    puts("locks_syscall: ok");
    return 0;
}
