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
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__,     \
                    __LINE__, #cond, errno, strerror(errno));                         \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* CHECK for code that must not exit (signal handlers and what they call): returns the line
 * from the enclosing function when the failure condition `failed` holds. */
#define FAIL_LINE_IF(failed)                                                          \
    do {                                                                              \
        if (failed)                                                                   \
            return __LINE__;                                                          \
    } while (0)

/* fork(2), checked: 0 in the child, the child's pid in the parent. */
static inline pid_t checked_fork(void) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    return pid;
}

/* Waits for the child `pid`, which must exit, and returns its exit status. */
static inline int status_of(pid_t pid) {
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* A new private message queue (mode 0600), checked. */
static inline int new_queue(void) {
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(q >= 0);
    return q;
}

/* Runs the test part `part` on a new private queue, removes the queue (checked) and prints
 * `passed`. */
static inline void on_new_queue(void (*part)(int q), const char *passed) {
    int q = new_queue();
    part(q);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts(passed);
}

/* The IPC_STAT of message queue `q`, checked. */
static inline struct msqid_ds stat_of(int q) {
    struct msqid_ds ds;
    CHECK(msgctl(q, IPC_STAT, &ds) == 0);
    return ds;
}

/* Installs `fn` as the handler of `sig` with `flags` and an empty mask, checked. */
static inline void handle_signal(int sig, void (*fn)(int), int flags) {
    struct sigaction sa = {.sa_handler = fn, .sa_flags = flags};
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

/* A SIGEV_SIGNAL notification: signal `signo` carrying `value`. */
static inline struct sigevent signal_event(int signo, int value) {
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = signo};
    ev.sigev_value.sival_int = value;
    return ev;
}

/* Creates a POSIX timer in `*t` on `clock`, notifying as `ev` says, and arms it (relative) to
 * expire first after `first_ns` nanoseconds and then every `interval_ns` (0: once). `*t` is
 * written before the timer is armed, so a handler of its signal may read it. */
static inline void start_timer(timer_t *t, clockid_t clock, struct sigevent *ev,
                               long long first_ns, long long interval_ns) {
    CHECK(timer_create(clock, ev, t) == 0);
    struct itimerspec its = {
        .it_interval = {.tv_sec = interval_ns / 1000000000, .tv_nsec = interval_ns % 1000000000},
        .it_value = {.tv_sec = first_ns / 1000000000, .tv_nsec = first_ns % 1000000000},
    };
    CHECK(timer_settime(*t, 0, &its, NULL) == 0);
}

/* Opens the existing file `path` read-write (a new open file description), checked. */
static inline int open_rw(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    return fd;
}

/* Creates `path` (or empties it), a file of mode 0600, checked. */
static inline void create_empty(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(close(fd) == 0);
}

/* Closes descriptor `fd` in one of four ways (`how`: 0 close, 1 dup2 of a new descriptor of
 * `other` over it, 2 syscall(SYS_close), 3 close_range) and leaves the same number open on a
 * new description of the existing file `other` (the lowest free number, which `fd` must then
 * be); returns the number. */
static inline int renumber(int fd, const char *other, int how) {
    if (how == 1) {
        int b = open_rw(other);
        CHECK(dup2(b, fd) == fd);
        CHECK(close(b) == 0);
        return fd;
    }
    if (how == 0)
        CHECK(close(fd) == 0);
    else if (how == 2)
        CHECK(syscall(SYS_close, fd) == 0);
    else
        CHECK(syscall(SYS_close_range, fd, fd, 0) == 0);
    CHECK(open_rw(other) == fd);
    return fd;
}

/* Whether `pid` is one of the first `n` of `pids` (a list kept in memory shared between
 * processes, hence volatile). */
static inline int pid_among(const volatile pid_t *pids, int n, pid_t pid) {
    for (int i = 0; i < n; i++)
        if (pids[i] == pid)
            return 1;
    return 0;
}

/* A POSIX/OFD lock request for `len` bytes from `start` (SEEK_SET). */
static inline struct flock range(short type, off_t start, off_t len) {
    struct flock fl = {0};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    return fl;
}

/* Closes `fd` and a dup of it, the dup first if `dup_first`: `is_free()` must say no after
 * the first close and yes after the second (a lock of an open file description lasts until
 * the description's last descriptor closes). */
static inline void expect_freed_at_last_close(int fd, int dup_first, int (*is_free)(void)) {
    int d = dup(fd);
    CHECK(d >= 0);
    CHECK(close(dup_first ? d : fd) == 0);
    CHECK(!is_free());
    CHECK(close(dup_first ? fd : d) == 0);
    CHECK(is_free());
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
    pid_t pid = checked_fork();
    if (pid == 0) {
        f();
        _exit(0);
    }
    expect_clean_exit(pid);
}
