/* Whole-file POSIX write locks of many processes on one file (lockperf's posix01 shape: each
 * process F_SETLKW a write lock on the whole file, then unlocks it), and what must stay exact
 * around them however uipc serves the contended case:
 *   - mutual exclusion of many processes (a counter changed without atomics inside the lock);
 *   - F_GETLK of another process names a holder's pid, start 0, length 0, while they contend;
 *   - EDEADLK with two files and two processes, and a delayed deadlock (a waiter woken by a
 *     release finds itself blocked by a process that waits for it);
 *   - EINTR of a sleeper (handler without SA_RESTART), and a restart with SA_RESTART;
 *   - a SIGKILL storm of holders and sleepers: no lock granted in conflict, none lost, no hang;
 *   - fork (the child does not own its parent's lock), close of any descriptor of the file
 *     drops the process's locks, exec keeps them.
 * Every scenario starts after a burst of contention on its file. Runs the same on the host
 * kernel. Arguments: processes and rounds of the contention runs (default 32 200). A parent
 * alarm kills the children and exits 3 on a hang. */
#include "check.h"
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>

#define MAX_KIDS 256

static char path[64], path2[64];
static int nproc = 32, rounds = 200;

/* State shared by all processes of the test (anonymous shared mapping). */
struct shared {
    volatile long counter;    /* changed only inside the lock, without atomics */
    volatile pid_t holder;    /* the holder, written inside the lock; 0 when free */
    volatile int killed_n;    /* pids the storm decided to kill (before the kill) */
    volatile pid_t killed[4096];
    volatile int conflicts;   /* a lock found held by a live other process */
    volatile pid_t kids[MAX_KIDS];
};
static struct shared *sh;

static void on_watchdog(int sig) {
    (void)sig;
    for (int i = 0; i < MAX_KIDS; i++)
        if (sh && sh->kids[i] > 0)
            kill(sh->kids[i], SIGKILL);
    static const char msg[] = "posix_contend: hung\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    _exit(3);
}

static int whole(int fd, int cmd, short type) {
    struct flock fl = range(type, 0, 0);
    return fcntl(fd, cmd, &fl);
}

/* F_GETLK of a whole-file write lock from this process. */
static struct flock probe(int fd) {
    struct flock fl = range(F_WRLCK, 0, 0);
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    return fl;
}

/* One critical section: the lock, a check that nobody alive holds it, a counter bump that a
 * second holder would break, the unlock. */
static void critical(int fd) {
    CHECK(whole(fd, F_SETLKW, F_WRLCK) == 0);
    pid_t h = sh->holder;
    if (h != 0 && !pid_among(sh->killed, sh->killed_n, h))
        __atomic_fetch_add(&sh->conflicts, 1, __ATOMIC_SEQ_CST);
    sh->holder = getpid();
    long c = sh->counter;
    if ((c & 7) == 0)
        sched_yield();
    sh->counter = c + 1;
    sh->holder = 0;
    CHECK(whole(fd, F_SETLK, F_UNLCK) == 0);
}

static void remember_kid(pid_t p) {
    for (int i = 0; i < MAX_KIDS; i++)
        if (sh->kids[i] == 0) {
            sh->kids[i] = p;
            return;
        }
}

static void forget_kid(pid_t p) {
    for (int i = 0; i < MAX_KIDS; i++)
        if (sh->kids[i] == p)
            sh->kids[i] = 0;
}

/* Starts a worker: a child that runs `k` critical sections on `p`, then exits; returns its
 * pid, recorded as a kid. */
static pid_t worker(const char *p, int k) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        alarm(120);
        int fd = open_rw(p);
        for (int j = 0; j < k; j++)
            critical(fd);
        _exit(0);
    }
    remember_kid(pid);
    return pid;
}

/* `n` processes run `k` critical sections each on `p` while this process probes with F_GETLK:
 * every answer is F_UNLCK or a whole-file write lock of one of them. */
static void contend(const char *p, int n, int k) {
    long before = sh->counter;
    pid_t pids[MAX_KIDS];
    for (int i = 0; i < n; i++)
        pids[i] = worker(p, k);
    int fd = open_rw(p);
    long seen = 0;
    for (int j = 0; j < 200; j++) {
        struct flock g = probe(fd);
        if (g.l_type == F_UNLCK)
            continue;
        CHECK(g.l_type == F_WRLCK && g.l_whence == SEEK_SET && g.l_start == 0 && g.l_len == 0);
        int ours = 0;
        for (int i = 0; i < n; i++)
            ours |= g.l_pid == pids[i];
        CHECK(ours);
        seen++;
    }
    for (int i = 0; i < n; i++) {
        expect_clean_exit(pids[i]);
        forget_kid(pids[i]);
    }
    CHECK(close(fd) == 0);
    CHECK(sh->conflicts == 0);
    CHECK(sh->counter == before + (long)n * k);
    (void)seen;
}

/* A child holding a whole-file write lock on `p` until a byte comes on `go[0]` (it says
 * so on `ready[1]`); returns its pid. */
static pid_t holder_child(const char *p, int ready[2], int go[2]) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        alarm(60);
        int fd = open_rw(p);
        CHECK(whole(fd, F_SETLKW, F_WRLCK) == 0);
        CHECK(write(ready[1], "r", 1) == 1);
        char c;
        CHECK(read(go[0], &c, 1) == 1);
        CHECK(whole(fd, F_SETLK, F_UNLCK) == 0);
        _exit(0);
    }
    remember_kid(pid);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    return pid;
}

static void getlk_names_holder(void) {
    contend(path, 8, 50);
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid_t h = holder_child(path, ready, go);
    int fd = open_rw(path);
    struct flock g = probe(fd);
    CHECK(g.l_type == F_WRLCK && g.l_pid == h && g.l_start == 0 && g.l_len == 0);
    errno = 0;
    CHECK(whole(fd, F_SETLK, F_WRLCK) == -1 && (errno == EAGAIN || errno == EACCES));
    CHECK(write(go[1], "g", 1) == 1);
    expect_clean_exit(h);
    forget_kid(h);
    CHECK(whole(fd, F_SETLK, F_WRLCK) == 0);
    CHECK(whole(fd, F_SETLK, F_UNLCK) == 0);
    CHECK(close(fd) == 0);
    close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
}

/* Children that run a script: each step waits for a byte on the child's own pipe, then runs. */
struct kid {
    pid_t pid;
    int go[2], done[2];
};

static void kid_start(struct kid *k) {
    CHECK(pipe(k->go) == 0 && pipe(k->done) == 0);
}

static void kid_wait_go(struct kid *k) {
    char c;
    CHECK(read(k->go[0], &c, 1) == 1);
}

static void kid_say(struct kid *k) {
    CHECK(write(k->done[1], "d", 1) == 1);
}

/* Kid: waits for a whole-file write lock on `fd`, says it holds it, and waits for the go. */
static void kid_hold(struct kid *k, int fd) {
    CHECK(whole(fd, F_SETLKW, F_WRLCK) == 0);
    kid_say(k);
    kid_wait_go(k);
}

/* Parent: lets the kid take its next step. */
static void kid_go(struct kid *k) {
    CHECK(write(k->go[1], "g", 1) == 1);
}

/* Parent: waits for the kid's next report. */
static void kid_heard(struct kid *k) {
    char c;
    CHECK(read(k->done[0], &c, 1) == 1);
}

static void kid_end(struct kid *k) {
    expect_clean_exit(k->pid);
    forget_kid(k->pid);
    close(k->go[1]), close(k->done[0]);
}

#define KID(k, ...)                                                                       \
    do {                                                                                  \
        kid_start(k);                                                                     \
        (k)->pid = checked_fork();                                                        \
        if ((k)->pid == 0) {                                                              \
            alarm(60);                                                                    \
            __VA_ARGS__;                                                                  \
            _exit(0);                                                                     \
        }                                                                                 \
        remember_kid((k)->pid);                                                           \
        close((k)->go[0]);                                                                \
        close((k)->done[1]);                                                              \
    } while (0)

/* Gives a process time to fall asleep in a call. */
static void settle(void) {
    usleep(150000);
}

/* A holds F1, B holds F2; A waits for F2; B asking for F1 is a deadlock (EDEADLK at once, and
 * again on a retry); B's F_GETLK names A; B unlocks F2 and A gets it. */
static void deadlock_two_files(void) {
    contend(path, 8, 50);
    contend(path2, 8, 50);
    struct kid a, b;
    KID(&a, {
        int f1 = open_rw(path), f2 = open_rw(path2);
        kid_hold(&a, f1);
        CHECK(whole(f2, F_SETLKW, F_WRLCK) == 0);
        kid_say(&a);
    });
    KID(&b, {
        int f1 = open_rw(path), f2 = open_rw(path2);
        kid_hold(&b, f2);
        errno = 0;
        CHECK(whole(f1, F_SETLKW, F_WRLCK) == -1 && errno == EDEADLK);
        errno = 0;
        CHECK(whole(f1, F_SETLKW, F_WRLCK) == -1 && errno == EDEADLK);
        struct flock g = probe(f1);
        CHECK(g.l_type == F_WRLCK && g.l_pid == a.pid);
        CHECK(whole(f2, F_SETLK, F_UNLCK) == 0);
    });
    kid_heard(&a);
    kid_heard(&b);
    kid_go(&a);
    settle();
    kid_go(&b);
    kid_heard(&a);
    kid_end(&b);
    kid_end(&a);
}

/* A delayed deadlock. O holds F[0,10); X holds G and waits for all of F behind O; Z takes a
 * read lock on F[20,30) (a pending request blocks nobody) and waits for G behind X (no cycle:
 * X waits for O, who waits for nobody). O unlocks: X, woken, is now blocked by Z, who waits
 * for X: EDEADLK. X then unlocks G and Z gets it. */
static void delayed_deadlock(void) {
    contend(path, 8, 50);
    struct kid o, x, z;
    KID(&o, {
        int f = open_rw(path);
        struct flock fl = range(F_WRLCK, 0, 10);
        CHECK(fcntl(f, F_SETLK, &fl) == 0);
        kid_say(&o);
        kid_wait_go(&o);
        CHECK(whole(f, F_SETLK, F_UNLCK) == 0);
    });
    KID(&x, {
        int f = open_rw(path), g = open_rw(path2);
        CHECK(whole(g, F_SETLK, F_WRLCK) == 0);
        kid_say(&x);
        kid_wait_go(&x);
        errno = 0;
        int r = whole(f, F_SETLKW, F_WRLCK);
        if (!(r == -1 && errno == EDEADLK)) {
            fprintf(stderr, "X's F_SETLKW: %d (errno %d), expected EDEADLK\n", r, errno);
            _exit(1);
        }
        CHECK(whole(g, F_SETLK, F_UNLCK) == 0);
    });
    KID(&z, {
        int f = open_rw(path), g = open_rw(path2);
        kid_wait_go(&z);
        struct flock fl = range(F_RDLCK, 20, 10);
        CHECK(fcntl(f, F_SETLK, &fl) == 0);
        kid_say(&z);
        kid_wait_go(&z);
        CHECK(whole(g, F_SETLKW, F_WRLCK) == 0);
    });
    kid_heard(&o);
    kid_heard(&x);
    kid_go(&x);
    settle();
    kid_go(&z);
    kid_heard(&z);
    kid_go(&z);
    settle();
    kid_go(&o);
    kid_end(&o);
    kid_end(&x);
    kid_end(&z);
}

static volatile sig_atomic_t handled;
static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

/* A sleeper interrupted by a handler without SA_RESTART fails with EINTR; with SA_RESTART its
 * F_SETLKW goes on and gets the lock once the holder lets go (Linux restarts it). The parent
 * signals until the sleeper reports. */
static void eintr_of_sleeper(void) {
    contend(path, 8, 50);
    struct kid h, s;
    KID(&h, {
        int f = open_rw(path);
        kid_hold(&h, f);
        CHECK(whole(f, F_SETLK, F_UNLCK) == 0);
    });
    kid_heard(&h);
    KID(&s, {
        int f = open_rw(path);
        handle_signal(SIGUSR1, on_usr1, 0);
        errno = 0;
        CHECK(whole(f, F_SETLKW, F_WRLCK) == -1 && errno == EINTR && handled > 0);
        kid_say(&s);
        handle_signal(SIGUSR1, on_usr1, SA_RESTART);
        handled = 0;
        kid_say(&s);
        CHECK(whole(f, F_SETLKW, F_WRLCK) == 0 && handled > 0);
        CHECK(whole(f, F_SETLK, F_UNLCK) == 0);
    });
    settle();
    for (;;) {
        kill(s.pid, SIGUSR1);
        struct pollfd pfd = {.fd = s.done[0], .events = POLLIN};
        if (poll(&pfd, 1, 20) == 1)
            break;
    }
    kid_heard(&s);
    kid_heard(&s);
    settle();
    for (int i = 0; i < 5; i++) {
        kill(s.pid, SIGUSR1);
        usleep(30000);
    }
    kid_go(&h);
    kid_end(&h);
    kid_end(&s);
}

/* Workers lock and unlock in a loop; the parent SIGKILLs some (holding or sleeping) and starts
 * others. No live process finds the lock held by another live one, the survivors all finish
 * (nothing is left locked by the dead), and the file is free at the end. */
static void kill_storm(int workers, int kills) {
    contend(path, 8, 50);
    int k = rounds;
    long before = sh->counter;
    pid_t live[MAX_KIDS];
    int n = 0;
    unsigned seed = (unsigned)getpid();
    for (; n < workers; n++)
        live[n] = worker(path, k);
    for (int i = 0; i < kills; i++) {
        usleep(rand_r(&seed) % 3000);
        int v = rand_r(&seed) % n;
        pid_t p = live[v];
        sh->killed[sh->killed_n] = p;
        __atomic_fetch_add(&sh->killed_n, 1, __ATOMIC_SEQ_CST);
        CHECK(kill(p, SIGKILL) == 0);
        int st;
        CHECK(waitpid(p, &st, 0) == p);
        forget_kid(p);
        live[v] = worker(path, k);
    }
    for (int i = 0; i < n; i++) {
        expect_clean_exit(live[i]);
        forget_kid(live[i]);
    }
    CHECK(sh->conflicts == 0);
    CHECK(sh->counter - before >= (long)n * k);
    int fd = open_rw(path);
    CHECK(whole(fd, F_SETLK, F_WRLCK) == 0);
    CHECK(whole(fd, F_SETLK, F_UNLCK) == 0);
    CHECK(close(fd) == 0);
}

/* In a child of the holder P: F_GETLK names P, a lock attempt fails, an unlock and closes of
 * the child's descriptors drop nothing of P's. */
static void fork_child_owns_nothing(void) {
    contend(path, 8, 50);
    struct kid p;
    KID(&p, {
        int f = open_rw(path);
        CHECK(whole(f, F_SETLKW, F_WRLCK) == 0);
        pid_t c = checked_fork();
        if (c == 0) {
            struct flock g = probe(f);
            CHECK(g.l_type == F_WRLCK && g.l_pid == getppid());
            errno = 0;
            CHECK(whole(f, F_SETLK, F_WRLCK) == -1 && (errno == EAGAIN || errno == EACCES));
            CHECK(whole(f, F_SETLK, F_UNLCK) == 0);
            int f2 = open_rw(path);
            CHECK(close(f2) == 0 && close(f) == 0);
            _exit(0);
        }
        expect_clean_exit(c);
        c = checked_fork();
        if (c == 0) {
            int f3 = open_rw(path);
            struct flock g = probe(f3);
            CHECK(g.l_type == F_WRLCK && g.l_pid == getppid());
            _exit(0);
        }
        expect_clean_exit(c);
        /* A close of another descriptor of the file drops P's lock. */
        int f4 = open_rw(path);
        CHECK(close(f4) == 0);
        c = checked_fork();
        if (c == 0) {
            int f5 = open_rw(path);
            CHECK(probe(f5).l_type == F_UNLCK);
            CHECK(whole(f5, F_SETLK, F_WRLCK) == 0);
            _exit(0);
        }
        expect_clean_exit(c);
    });
    kid_end(&p);
}

/* The image after exec: its lock (taken before the exec, descriptor `fd`) is still its own. */
static int exec_holder(int fd) {
    pid_t c = checked_fork();
    if (c == 0) {
        int f = open_rw(path);
        struct flock g = probe(f);
        CHECK(g.l_type == F_WRLCK && g.l_pid == getppid() && g.l_len == 0);
        _exit(0);
    }
    expect_clean_exit(c);
    /* Our own F_GETLK: nothing conflicts. */
    CHECK(probe(fd).l_type == F_UNLCK);
    CHECK(whole(fd, F_SETLK, F_UNLCK) == 0);
    c = checked_fork();
    if (c == 0) {
        CHECK(probe(open_rw(path)).l_type == F_UNLCK);
        _exit(0);
    }
    expect_clean_exit(c);
    return 0;
}

static void exec_keeps_locks(const char *self) {
    contend(path, 8, 50);
    pid_t e = checked_fork();
    if (e == 0) {
        int f = open_rw(path);
        CHECK(whole(f, F_SETLKW, F_WRLCK) == 0);
        char fdarg[16];
        snprintf(fdarg, sizeof fdarg, "%d", f);
        execl(self, self, "--exec-holder", fdarg, path, (char *)NULL);
        _exit(2);
    }
    expect_clean_exit(e);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--exec-holder") == 0) {
        snprintf(path, sizeof path, "%s", argv[3]);
        return exec_holder(atoi(argv[2]));
    }
    if (argc > 1)
        nproc = atoi(argv[1]);
    if (argc > 2)
        rounds = atoi(argv[2]);
    CHECK(nproc > 0 && nproc <= 128 && rounds > 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    snprintf(path, sizeof path, "/tmp/uipc-posix-contend-%d", getpid());
    snprintf(path2, sizeof path2, "/tmp/uipc-posix-contend2-%d", getpid());
    for (int i = 0; i < 2; i++) {
        int fd = open(i ? path2 : path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && close(fd) == 0);
    }
    handle_signal(SIGALRM, on_watchdog, 0);
    alarm(150);
    contend(path, nproc, rounds);
    getlk_names_holder();
    deadlock_two_files();
    delayed_deadlock();
    eintr_of_sleeper();
    kill_storm(nproc < 16 ? nproc : 16, 60);
    fork_child_owns_nothing();
    exec_keeps_locks(argv[0]);
    alarm(0);
    CHECK(unlink(path) == 0 && unlink(path2) == 0);
    printf("posix_contend: ok\n");
    return 0;
}
