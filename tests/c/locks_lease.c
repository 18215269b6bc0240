/* POSIX record locks of a process that alone locks a file (under `uipc run --locks` these
 * complete in the caller's process, on the file's lease) seen by other processes: ranges set,
 * split and merged by the holder; F_GETLK by the holder and by another process; a conflicting
 * F_SETLK and a waiting F_SETLKW of another process; close of another descriptor of the file,
 * a descriptor number closed and reopened on another file,
 * a fork child, exit and SIGKILL of the holder; lockf. Then a chaos run (argument: rounds): a
 * child locks and unlocks in a loop and is stopped at a random point; another process must
 * see the locks of the child's last finished call or of the one in flight, never anything
 * else, and after a SIGKILL none at all. Runs the same on the host kernel. */
#include "check.h"
#include <sched.h>
#include <sys/mman.h>

static char path[64];

static void set(int fd, short type, off_t start, off_t len) {
    struct flock fl = range(type, start, len);
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
}

/* `pairs` lock and unlock calls of [0, 10) on `fd`: under uipc the lease is granted after a
 * daemon call, and one taken back for another process comes back only later. */
static void warm(int fd, int pairs) {
    for (int i = 0; i < pairs; i++) {
        set(fd, F_WRLCK, 0, 10);
        set(fd, F_UNLCK, 0, 10);
    }
}

/* F_GETLK of a write lock over [start, start+len) from a new process: the first conflicting
 * lock as (type, start, len, pid), or type F_UNLCK. */
static struct flock probe_file(const char *file, off_t start, off_t len) {
    struct flock *out = mmap(NULL, sizeof *out, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(out != MAP_FAILED);
    pid_t pid = checked_fork();
    if (pid == 0) {
        int fd = open_rw(file);
        struct flock fl = range(F_WRLCK, start, len);
        CHECK(fcntl(fd, F_GETLK, &fl) == 0);
        *out = fl;
        _exit(0);
    }
    expect_clean_exit(pid);
    struct flock r = *out;
    munmap(out, sizeof *out);
    return r;
}

static struct flock probe(off_t start, off_t len) { return probe_file(path, start, len); }

static void expect_lock(off_t at, short type, off_t start, off_t len, pid_t pid) {
    struct flock g = probe(at, 1);
    if (g.l_type != type || (type != F_UNLCK && (g.l_start != start || g.l_len != len ||
                                                  g.l_pid != pid))) {
        fprintf(stderr, "at %ld: got type %d start %ld len %ld pid %d, want %d %ld %ld %d\n",
                (long)at, g.l_type, (long)g.l_start, (long)g.l_len, g.l_pid, type,
                (long)start, (long)len, pid);
        exit(1);
    }
}

static void ranges_and_getlk(void) {
    int fd = open_rw(path);
    pid_t me = getpid();
    /* Many calls first: a lease taken back for another process comes back only later. */
    for (int i = 0; i < 100; i++) {
        set(fd, F_WRLCK, 0, 100);
        set(fd, F_UNLCK, 40, 20);
        set(fd, F_RDLCK, 200, 10);
        set(fd, F_RDLCK, 210, 10);
        if (i != 99) set(fd, F_UNLCK, 0, 0);
    }
    struct flock own = range(F_WRLCK, 0, 0);
    CHECK(fcntl(fd, F_GETLK, &own) == 0 && own.l_type == F_UNLCK);
    own = range(F_WRLCK, 0, 10);
    own.l_whence = SEEK_CUR;
    CHECK(fcntl(fd, F_GETLK, &own) == 0 && own.l_type == F_UNLCK && own.l_start == 0);
    /* An invalid request is Linux's error whoever holds the file. */
    struct flock bad = range(F_WRLCK, -5, 1);
    CHECK(fcntl(fd, F_SETLK, &bad) == -1 && errno == EINVAL);
    bad = range(7, 0, 1);
    CHECK(fcntl(fd, F_SETLK, &bad) == -1 && errno == EINVAL);
    expect_lock(0, F_WRLCK, 0, 40, me);
    expect_lock(45, F_UNLCK, 0, 0, 0);
    expect_lock(60, F_WRLCK, 60, 40, me);
    expect_lock(215, F_RDLCK, 200, 20, me);
    /* A read-only descriptor cannot set a write lock. */
    int ro = open(path, O_RDONLY);
    CHECK(ro >= 0);
    struct flock w = range(F_WRLCK, 500, 1);
    CHECK(fcntl(ro, F_SETLK, &w) == -1 && errno == EBADF);
    /* Closing another descriptor of the file drops every lock of the process on it. */
    CHECK(close(ro) == 0);
    expect_lock(0, F_UNLCK, 0, 0, 0);
    warm(fd, 50);
    set(fd, F_WRLCK, 0, 10);
    int other = open_rw(path);
    CHECK(close(other) == 0);
    expect_lock(0, F_UNLCK, 0, 0, 0);
    /* lockf over the same locks. */
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    for (int i = 0; i < 50; i++) {
        CHECK(lockf(fd, F_TLOCK, 10) == 0);
        CHECK(lockf(fd, F_TEST, 10) == 0);
        CHECK(lockf(fd, F_ULOCK, 10) == 0);
    }
    CHECK(lockf(fd, F_LOCK, 10) == 0);
    expect_lock(5, F_WRLCK, 0, 10, me);
    CHECK(close(fd) == 0);
    expect_lock(5, F_UNLCK, 0, 0, 0);
}

/* Another process: EAGAIN right after the holder's local calls, and a waiter woken when the
 * holder unlocks. */
static void conflicts_and_waiters(void) {
    int fd = open_rw(path);
    warm(fd, 60);
    set(fd, F_WRLCK, 0, 10);
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        int cfd = open_rw(path);
        struct flock fl = range(F_WRLCK, 5, 1);
        CHECK(fcntl(cfd, F_SETLK, &fl) == -1 && (errno == EAGAIN || errno == EACCES));
        CHECK(write(ready[1], "r", 1) == 1);
        CHECK(fcntl(cfd, F_SETLKW, &fl) == 0);
        CHECK(write(done[1], "d", 1) == 1);
        _exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    usleep(100 * 1000);
    /* The waiter still waits: the holder's lock stands. */
    struct flock g = range(F_WRLCK, 0, 1);
    CHECK(fcntl(fd, F_GETLK, &g) == 0 && g.l_type == F_UNLCK);
    set(fd, F_UNLCK, 0, 10);
    CHECK(read(done[0], &c, 1) == 1);
    expect_clean_exit(pid);
    close(ready[0]), close(ready[1]), close(done[0]), close(done[1]);
    CHECK(close(fd) == 0);
}

/* A fork child has none of its parent's locks; the parent's stay through the child's calls
 * and closes. */
static void fork_child(void) {
    int fd = open_rw(path);
    warm(fd, 60);
    set(fd, F_WRLCK, 0, 10);
    pid_t pid = checked_fork();
    if (pid == 0) {
        struct flock fl = range(F_WRLCK, 0, 10);
        CHECK(fcntl(fd, F_SETLK, &fl) == -1 && (errno == EAGAIN || errno == EACCES));
        fl = range(F_UNLCK, 0, 10);
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        CHECK(close(fd) == 0);
        _exit(0);
    }
    expect_clean_exit(pid);
    expect_lock(0, F_WRLCK, 0, 10, getpid());
    CHECK(close(fd) == 0);
}

/* A holder's exit, or its SIGKILL in the middle of its lock calls, frees its locks. */
static void holder_exit(int kill9) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        int fd = open_rw(path);
        warm(fd, 60);
        set(fd, F_WRLCK, 100, 10);
        CHECK(write(ready[1], "r", 1) == 1);
        if (!kill9) _exit(0);
        for (;;) {
            set(fd, F_WRLCK, 0, 10);
            set(fd, F_UNLCK, 0, 10);
        }
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    if (kill9) {
        usleep(20 * 1000);
        CHECK(kill(pid, SIGKILL) == 0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
    } else {
        expect_clean_exit(pid);
    }
    CHECK(probe(0, 0).l_type == F_UNLCK);
    int fd = open_rw(path);
    set(fd, F_WRLCK, 0, 0);
    CHECK(close(fd) == 0);
    close(ready[0]), close(ready[1]);
}

/* The chaos run: `rounds` children, each stopped at a random point of its lock loop. */
static void chaos(int rounds) {
    volatile long *done = mmap(NULL, sizeof(long), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(done != MAP_FAILED);
    srand(getpid());
    for (int r = 0; r < rounds; r++) {
        *done = -1;
        pid_t pid = checked_fork();
        if (pid == 0) {
            int fd = open_rw(path);
            /* Call k locks [0, k % 7 + 1) for even k, unlocks everything for odd k. */
            for (long k = 0;; k++) {
                if (k % 2 == 0)
                    set(fd, F_WRLCK, 0, k / 2 % 7 + 1);
                else
                    set(fd, F_UNLCK, 0, 0);
                *done = k;
            }
        }
        while (*done < 80) sched_yield();
        usleep(rand() % 1500);
        CHECK(kill(pid, SIGSTOP) == 0);
        int st;
        CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
        long d = *done;
        struct flock g = probe(0, 0);
        /* After call d (finished) or d + 1 (in flight): a lock of call k covers k/2%7+1. */
        long after[2] = {d, d + 1};
        int ok = 0;
        for (int i = 0; i < 2; i++) {
            long k = after[i];
            if (k % 2 == 1)
                ok |= g.l_type == F_UNLCK;
            else
                ok |= g.l_type == F_WRLCK && g.l_start == 0 && g.l_len == k / 2 % 7 + 1 &&
                      g.l_pid == pid;
        }
        if (!ok) {
            fprintf(stderr, "round %d: after call %ld saw type %d start %ld len %ld pid %d\n",
                    r, d, g.l_type, (long)g.l_start, (long)g.l_len, g.l_pid);
            exit(1);
        }
        CHECK(kill(pid, SIGKILL) == 0);
        CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
        expect_lock(0, F_UNLCK, 0, 0, 0);
    }
}

/* A descriptor number of a leased file, closed in each way a program can close it (close,
 * dup2 over it, syscall(SYS_close), close_range) and given to another file: a lock through it
 * is the other file's, and the leased file has none. Under uipc the library remembers each
 * descriptor's file and access mode; any close must make it ask the kernel again. Two files
 * of its own, so that no other process's call has taken the lease back. */
static void number_reused(void) {
    char leased[96], other[96];
    snprintf(leased, sizeof leased, "%s-leased", path);
    snprintf(other, sizeof other, "%s-other", path);
    create_empty(leased);
    create_empty(other);
    /* Another descriptor of the leased file stays open throughout, and locks it again after
     * each close (the close may have ended the lease). */
    int keep = open_rw(leased);
    for (int how = 0; how < 4; how++) {
        int a = open_rw(leased);
        warm(a, 100);
        int n = renumber(a, other, how);
        warm(keep, 100);
        set(n, F_WRLCK, 0, 10);
        struct flock g = probe_file(other, 0, 1);
        CHECK(g.l_type == F_WRLCK && g.l_pid == getpid());
        CHECK(probe_file(leased, 0, 1).l_type == F_UNLCK);
        set(n, F_UNLCK, 0, 10);
        CHECK(probe_file(other, 0, 1).l_type == F_UNLCK);
        CHECK(close(n) == 0);
    }
    CHECK(close(keep) == 0);
    unlink(leased);
    unlink(other);
}

int main(int argc, char **argv) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-lease-%d", getpid());
    create_empty(path);
    /* First: the process holds no lease yet, so the one it is given is the test's. */
    number_reused();
    ranges_and_getlk();
    conflicts_and_waiters();
    fork_child();
    holder_exit(0);
    holder_exit(1);
    chaos(argc > 1 ? atoi(argv[1]) : 100);
    unlink(path);
    printf("locks_lease: ok\n");
    return 0;
}
