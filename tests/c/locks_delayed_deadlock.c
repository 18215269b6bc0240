/* A delayed deadlock: a waiter woken by a release that must wait again, now for an owner who
 * waits for it, gets EDEADLK at once (Linux checks for a cycle again when it re-queues it).
 *
 * The parent (A) holds W[2,6], child B holds W[9,13], child C holds W[17,21]. B asks F_SETLKW
 * for [17,21] and waits for C. C asks F_SETLKW for [2,15]: A's lock is in its way, and A waits
 * for nobody, so C waits. A unlocks: C, woken, is now blocked by B, who waits for C: EDEADLK.
 * Then C unlocks, B gets its lock and leaves. A watchdog alarm ends a hung run with status 3.
 * The same again with C's request retried after EDEADLK failing at once (no cycle missed),
 * and with several rounds to catch a wake-up that races the check. */
#include "check.h"
#include <fcntl.h>

static char path[64];

static int lk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = range(type, start, len);
    return fcntl(fd, cmd, &fl);
}

static volatile pid_t kids[2];

static void on_watchdog(int sig) {
    (void)sig;
    for (int i = 0; i < 2; i++)
        if (kids[i] > 0)
            kill(kids[i], SIGKILL);
    static const char msg[] = "locks_delayed_deadlock: hung (the woken waiter never failed)\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    _exit(3);
}

/* In a child: a new description with a write lock on 5 bytes from `start`, said on `say`;
 * returns the descriptor once a byte comes on `go`. */
static int lock_then_wait(off_t start, int say, int go) {
    int fd = open_rw(path);
    CHECK(lk(fd, F_SETLK, F_WRLCK, start, 5) == 0);
    CHECK(write(say, "x", 1) == 1);
    char c;
    CHECK(read(go, &c, 1) == 1);
    return fd;
}

/* One round; returns after both children exited cleanly. */
static void round_once(void) {
    int fd = open_rw(path);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 2, 5) == 0);
    int to_b[2], to_c[2], from[2];
    CHECK(pipe(to_b) == 0 && pipe(to_c) == 0 && pipe(from) == 0);
    char c;

    pid_t b = checked_fork();
    if (b == 0) {
        int bfd = lock_then_wait(9, from[1], to_b[0]);
        /* Waits for C's [17,21]; granted once C has unlocked. */
        CHECK(lk(bfd, F_SETLKW, F_WRLCK, 17, 5) == 0);
        _exit(0);
    }
    kids[0] = b;
    pid_t cc = checked_fork();
    if (cc == 0) {
        int cfd = lock_then_wait(17, from[1], to_c[0]);
        errno = 0;
        int r = lk(cfd, F_SETLKW, F_WRLCK, 2, 14);
        if (!(r == -1 && errno == EDEADLK)) {
            fprintf(stderr, "C's F_SETLKW [2,15]: %d (errno %d: %s), expected EDEADLK\n", r,
                    errno, strerror(errno));
            _exit(1);
        }
        /* Still a cycle: refused at once again. */
        errno = 0;
        CHECK(lk(cfd, F_SETLKW, F_WRLCK, 9, 5) == -1 && errno == EDEADLK);
        /* Its own locks are untouched. */
        struct flock fl = range(F_WRLCK, 17, 5);
        CHECK(fcntl(cfd, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK);
        CHECK(lk(cfd, F_SETLK, F_UNLCK, 0, 0) == 0);
        _exit(0);
    }
    kids[1] = cc;
    CHECK(read(from[0], &c, 1) == 1);
    CHECK(read(from[0], &c, 1) == 1);
    /* B goes to sleep behind C, then C behind A. */
    CHECK(write(to_b[1], "g", 1) == 1);
    usleep(100000);
    CHECK(write(to_c[1], "g", 1) == 1);
    usleep(100000);
    /* A waits for nobody: C's request was not a deadlock when made. */
    errno = 0;
    CHECK(lk(fd, F_SETLK, F_WRLCK, 9, 1) == -1 && errno == EAGAIN);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);
    expect_clean_exit(cc);
    expect_clean_exit(b);
    CHECK(close(fd) == 0);
    close(to_b[0]), close(to_b[1]), close(to_c[0]), close(to_c[1]);
    close(from[0]), close(from[1]);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-delayed-%d", getpid());
    create_empty(path);
    struct sigaction sa = {.sa_handler = on_watchdog};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    alarm(20);
    for (int i = 0; i < 5; i++)
        round_once();
    alarm(0);
    CHECK(unlink(path) == 0);
    printf("locks_delayed_deadlock: ok\n");
    return 0;
}
