/* An open file description goes when its last descriptor closes, even after flock calls
 * through it: nothing else keeps the file open. Seen with inotify, whose IN_CLOSE_WRITE comes
 * when a description opened for writing is released (and a deleted file's blocks with it).
 * Cases: a process that flocks (often, so that under uipc the calls run on the file's flock
 * lease) and exits without closing; several such processes contending on one file; a holder
 * whose forked child keeps the description (the lock stays until the child goes); a member
 * whose description a child that never locked keeps, and which that child then locks. Runs
 * the same on the host kernel. */
#include "check.h"
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>

static char path[64];
static int watch;

/* Takes and drops LOCK_EX `n` times through `fd`. */
static void cycle(int fd, int n) {
    for (int i = 0; i < n; i++) {
        CHECK(flock(fd, LOCK_EX) == 0);
        CHECK(flock(fd, LOCK_UN) == 0);
    }
}

/* The IN_CLOSE_WRITE events that come within `ms` milliseconds, up to `want` of them. */
static int closes_within(int want, int ms) {
    int seen = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (seen < want) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {.fd = watch, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        char buf[4096] __attribute__((aligned(8)));
        ssize_t n = read(watch, buf, sizeof buf);
        CHECK(n > 0);
        for (char *e = buf; e < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)e;
            if (ev->mask & IN_CLOSE_WRITE)
                seen++;
            e += sizeof *ev + ev->len;
        }
    }
    return seen;
}

/* Whether a new description (read-only: no IN_CLOSE_WRITE of its own) gets LOCK_EX now. */
static int free_now(void) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    int r = flock(fd, LOCK_EX | LOCK_NB);
    CHECK(r == 0 || errno == EWOULDBLOCK);
    close(fd);
    return r == 0;
}

/* One process flocks its own description of the file and exits without closing it. */
static void lone_exit(void) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        cycle(open_rw(path), 200);
        _exit(0);
    }
    CHECK(status_of(pid) == 0);
    CHECK(closes_within(1, 5000) == 1);
}

/* `n` processes contend on the file, each through its own description, then exit one at a
 * time (inotify merges a close with the one queued before it if they look the same). */
static void contenders_exit(int n) {
    pid_t pids[16];
    int go[2];
    CHECK(pipe(go) == 0);
    for (int i = 0; i < n; i++) {
        pids[i] = checked_fork();
        if (pids[i] == 0) {
            close(go[1]);
            cycle(open_rw(path), 300);
            char c;
            CHECK(read(go[0], &c, 1) == 1);
            _exit(0);
        }
    }
    close(go[0]);
    for (int i = 0; i < n; i++) {
        CHECK(write(go[1], "x", 1) == 1);
        pid_t gone = wait(NULL);
        CHECK(pid_among(pids, n, gone));
        CHECK(closes_within(1, 5000) == 1);
    }
    close(go[1]);
}

/* A holder exits while its child keeps the description: the lock and the description stay
 * until the child exits. The child, which never calls flock, is reaped here (this process is
 * a subreaper): its exit has released the description by then. */
static void holder_with_child(void) {
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        close(go[1]);
        int fd = open_rw(path);
        cycle(fd, 200);
        CHECK(flock(fd, LOCK_EX) == 0);
        if (checked_fork() == 0) {
            char c;
            CHECK(read(go[0], &c, 1) == 0);
            _exit(0);
        }
        _exit(0);
    }
    close(go[0]);
    CHECK(status_of(pid) == 0);
    CHECK(closes_within(1, 300) == 0);
    CHECK(!free_now());
    close(go[1]);
    int st;
    CHECK(wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(free_now());
    CHECK(closes_within(1, 5000) == 1);
}

/* A member's process exits while a child that never locked keeps its description; the child
 * then locks through it (it still works, and excludes others), and exits. */
static void child_locks_later(void) {
    int go[2], done[2];
    CHECK(pipe(go) == 0 && pipe(done) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        close(go[1]);
        close(done[0]);
        int fd = open_rw(path);
        cycle(fd, 200);
        if (checked_fork() == 0) {
            char c;
            CHECK(read(go[0], &c, 1) == 1);
            cycle(fd, 100);
            CHECK(flock(fd, LOCK_EX) == 0);
            CHECK(write(done[1], "l", 1) == 1);
            CHECK(read(go[0], &c, 1) == 0);
            _exit(0);
        }
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    CHECK(status_of(pid) == 0);
    CHECK(closes_within(1, 300) == 0);
    CHECK(free_now());
    char c;
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(read(done[0], &c, 1) == 1);
    CHECK(!free_now());
    close(go[1]);
    CHECK(closes_within(1, 5000) == 1);
    CHECK(free_now());
    close(done[0]);
    int st; /* the child, ours since its parent exited */
    CHECK(wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-release-%d", getpid());
    int made = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(made >= 0);
    close(made);
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    watch = inotify_init1(IN_CLOEXEC);
    CHECK(watch >= 0);
    CHECK(inotify_add_watch(watch, path, IN_CLOSE_WRITE) >= 0);
    for (int round = 0; round < 3; round++) {
        lone_exit();
        contenders_exit(8);
        holder_with_child();
        child_locks_later();
    }
    unlink(path);
    puts("locks_release: ok");
    return 0;
}
