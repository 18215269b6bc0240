/* flock of a description that alone locks a file (under `uipc run --locks` these complete in
 * the caller's process, on the file's flock lease) seen by other descriptions and processes:
 * two descriptions of one process conflict; dup'd descriptors share a lock; a descriptor
 * number closed and reopened on another file locks that file; a fork child
 * unlocks its parent's description's lock; the last close releases, the close of one of two
 * dups does not; a holder's exit while a child keeps the description keeps the lock; LOCK_NB;
 * conversion (not atomic: a failed upgrade leaves no lock); EINVAL and EBADF; EINTR of a
 * blocked flock without SA_RESTART and its restart with it. Then (argument: rounds) a
 * SIGKILL storm of holders and waiters on one file, each with its own description, under a
 * mutual-exclusion check; a chaos run where a lone holder (its description kept open by a
 * grandchild) is killed inside its loop, and the lock must be the one of its last finished
 * call or of the one in flight; and processes contending with a shared counter. Runs the same
 * on the host kernel. */
#include "check.h"
#include <sys/file.h>
#include <sys/mman.h>

static char path[64];

/* Many pairs first: under uipc the lease is granted after a daemon call, and one taken back
 * for another description comes back only later. */
static void warm(int fd) {
    for (int i = 0; i < 100; i++) {
        CHECK(flock(fd, LOCK_EX) == 0);
        CHECK(flock(fd, LOCK_UN) == 0);
    }
}

/* Warms `fd` up (above), then takes `how` (LOCK_EX or LOCK_SH) through it. */
static void take_warm(int fd, int how) {
    warm(fd);
    CHECK(flock(fd, how) == 0);
}

/* Whether a new description can take `how` at once (it is dropped again). */
static int free_for(int how) {
    int fd = open_rw(path);
    int r = flock(fd, how | LOCK_NB);
    CHECK(r == 0 || errno == EWOULDBLOCK);
    close(fd);
    return r == 0;
}

static int free_ex(void) { return free_for(LOCK_EX); }

/* free_ex, waited for up to 5 s (a description whose last holder was killed goes when the
 * daemon sees the exit). */
static int becomes_free(void) {
    for (int i = 0; i < 500; i++) {
        if (free_ex())
            return 1;
        usleep(10000);
    }
    return 0;
}

static void two_descriptions(void) {
    int a = open_rw(path), b = open_rw(path);
    take_warm(a, LOCK_EX);
    CHECK(flock(b, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(flock(b, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(flock(a, LOCK_UN) == 0);
    CHECK(flock(b, LOCK_EX | LOCK_NB) == 0);
    CHECK(flock(a, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    close(b);
    take_warm(a, LOCK_SH);
    CHECK(flock(a, LOCK_SH) == 0);
    CHECK(free_for(LOCK_SH) && !free_ex());
    close(a);
    CHECK(free_ex());
}

static void dups_share(void) {
    int a = open_rw(path);
    take_warm(a, LOCK_EX);
    int d = dup(a);
    CHECK(d >= 0);
    CHECK(flock(d, LOCK_EX | LOCK_NB) == 0);
    CHECK(!free_ex());
    CHECK(flock(d, LOCK_UN) == 0);
    CHECK(free_ex());
    CHECK(close(d) == 0);
    CHECK(flock(a, LOCK_EX) == 0);
    /* The close of one of two dups keeps the lock, the last close drops it. */
    expect_freed_at_last_close(a, 1, free_ex);
}

static void fork_child_unlocks(void) {
    int a = open_rw(path);
    take_warm(a, LOCK_EX);
    pid_t pid = checked_fork();
    if (pid == 0) {
        /* The same description: the parent's lock is this one. */
        CHECK(flock(a, LOCK_EX | LOCK_NB) == 0);
        CHECK(flock(a, LOCK_UN) == 0);
        _exit(0);
    }
    expect_clean_exit(pid);
    CHECK(free_ex());
    CHECK(flock(a, LOCK_SH) == 0);
    /* The child's exit drops nothing of the description it shared. */
    pid = checked_fork();
    if (pid == 0)
        _exit(0);
    expect_clean_exit(pid);
    CHECK(!free_ex() && free_for(LOCK_SH));
    close(a);
    CHECK(free_ex());
}

/* A descriptor number whose description was a lease member, closed in each way a program
 * can close it (close, dup2 over it, syscall(SYS_close), close_range) while a dup keeps the
 * description open, and given to another file: its next flock locks the other file, and
 * the first file stays free. Under uipc the
 * library remembers which member a descriptor was proven to be; any close must make it
 * prove the descriptor again. */
static void number_reused(void) {
    char other[96];
    snprintf(other, sizeof other, "%s-other", path);
    create_empty(other);
    for (int how = 0; how < 4; how++) {
        /* `keep` holds the first description open, and is made before `a` is proven, so
         * that the close of `a` is not the description's last (the daemon hears of none). */
        int keep = open_rw(path);
        int a = dup(keep);
        CHECK(a > keep);
        warm(a);
        int n = renumber(a, other, how);
        CHECK(flock(n, LOCK_EX) == 0);
        CHECK(free_ex());
        int probe = open_rw(other);
        CHECK(flock(probe, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
        CHECK(flock(n, LOCK_UN) == 0);
        CHECK(flock(probe, LOCK_EX | LOCK_NB) == 0);
        close(probe);
        close(n);
        close(keep);
    }
    unlink(other);
}

/* A holder exits while a child keeps its description: the lock stays until the child goes. */
static void exit_with_child_keeping(void) {
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t holder = checked_fork();
    if (holder == 0) {
        int a = open_rw(path);
        take_warm(a, LOCK_EX);
        pid_t keeper = checked_fork();
        if (keeper == 0) {
            char c;
            CHECK(write(ready[1], "k", 1) == 1);
            CHECK(read(done[0], &c, 1) == 1);
            _exit(0);
        }
        _exit(0);
    }
    expect_clean_exit(holder);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK(!free_ex());
    CHECK(write(done[1], "d", 1) == 1);
    CHECK(becomes_free());
    close(ready[0]), close(ready[1]), close(done[0]), close(done[1]);
}

static void conversion_and_errors(void) {
    int a = open_rw(path), b = open_rw(path);
    warm(a);
    /* Alone: SH -> EX -> SH in place. */
    CHECK(flock(a, LOCK_SH) == 0);
    CHECK(flock(a, LOCK_EX | LOCK_NB) == 0);
    CHECK(!free_for(LOCK_SH));
    CHECK(flock(a, LOCK_SH | LOCK_NB) == 0);
    CHECK(free_for(LOCK_SH) && !free_ex());
    /* With another reader, a failed upgrade drops the lock it had. */
    CHECK(flock(b, LOCK_SH | LOCK_NB) == 0);
    CHECK(flock(a, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(flock(b, LOCK_UN) == 0);
    CHECK(free_ex());
    /* Bad commands and descriptors, on a leased description too. */
    take_warm(a, LOCK_EX);
    errno = 0;
    CHECK(flock(a, 0) == -1 && errno == EINVAL);
    CHECK(flock(a, LOCK_SH | LOCK_EX) == -1 && errno == EINVAL);
    CHECK(flock(a, LOCK_NB) == -1 && errno == EINVAL);
    CHECK(flock(-1, LOCK_EX) == -1 && errno == EBADF);
    CHECK(flock(b, LOCK_UN) == 0);
    close(b);
    CHECK(flock(b, LOCK_UN) == -1 && errno == EBADF);
    int p = open(path, O_PATH);
    CHECK(p >= 0);
    CHECK(flock(p, LOCK_EX) == -1 && errno == EBADF);
    close(p);
    /* errno is kept by a successful call. */
    errno = 1234;
    CHECK(flock(a, LOCK_UN) == 0 && errno == 1234);
    close(a);
}

static volatile sig_atomic_t handled;
static void on_usr1(int sig) {
    (void)sig;
    handled = 1;
}

/* A flock blocked behind another description, hit by a signal: EINTR without SA_RESTART;
 * with it the wait goes on and ends when the holder unlocks. */
static void eintr(int restart) {
    int a = open_rw(path);
    take_warm(a, LOCK_EX);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        handle_signal(SIGUSR1, on_usr1, restart ? SA_RESTART : 0);
        int b = open_rw(path);
        CHECK(write(ready[1], "r", 1) == 1);
        int r = flock(b, LOCK_EX);
        if (restart)
            CHECK(r == 0 && handled);
        else
            CHECK(r == -1 && errno == EINTR && handled);
        _exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    usleep(200000);
    CHECK(kill(pid, SIGUSR1) == 0);
    usleep(200000);
    CHECK(flock(a, LOCK_UN) == 0);
    expect_clean_exit(pid);
    close(a), close(ready[0]), close(ready[1]);
}

struct shared {
    volatile int owner;
    volatile long counter;
    volatile long conflicts;
    volatile int stop;
    volatile int state, intent;
    volatile int ndead;
    volatile pid_t dead[4096];
};
static struct shared *sh;

/* One contender: own description, lock, check that nobody else is inside (a killed holder's
 * mark is stale), count without atomics, unlock. */
static void contend(long rounds) {
    int fd = open_rw(path);
    int me = getpid();
    for (long i = 0; rounds < 0 || i < rounds; i++) {
        if (rounds < 0 && sh->stop)
            break;
        CHECK(flock(fd, LOCK_EX) == 0);
        int o = sh->owner;
        if (o != 0 && !pid_among(sh->dead, sh->ndead, o))
            __atomic_fetch_add(&sh->conflicts, 1, __ATOMIC_SEQ_CST);
        sh->owner = me;
        long v = sh->counter;
        for (volatile int k = 0; k < 50; k++)
            ;
        sh->counter = v + 1;
        if (sh->owner != me)
            __atomic_fetch_add(&sh->conflicts, 1, __ATOMIC_SEQ_CST);
        sh->owner = 0;
        CHECK(flock(fd, LOCK_UN) == 0);
    }
    exit(0);
}

/* Processes contending on one file, each through its own description, the file first locked
 * alone by the parent (under uipc its flock lease: the others join it, and sleep on it). */
static void counter(int procs, long rounds) {
    memset((void *)sh, 0, sizeof *sh);
    int a = open_rw(path);
    warm(a);
    pid_t pids[64];
    for (int i = 0; i < procs; i++)
        if ((pids[i] = checked_fork()) == 0)
            contend(rounds);
    for (int i = 0; i < procs; i++)
        expect_clean_exit(pids[i]);
    CHECK(sh->conflicts == 0);
    CHECK(sh->counter == procs * rounds);
    CHECK(free_ex());
    close(a);
}

static void storm(int kills) {
    memset((void *)sh, 0, sizeof *sh);
    enum { N = 6 };
    pid_t pids[N];
    for (int i = 0; i < N; i++)
        if ((pids[i] = checked_fork()) == 0)
            contend(-1);
    srand(42);
    for (int k = 0; k < kills && sh->ndead < 4096; k++) {
        usleep(500 + rand() % 3000);
        int i = rand() % N;
        sh->dead[sh->ndead] = pids[i];
        __atomic_fetch_add(&sh->ndead, 1, __ATOMIC_SEQ_CST);
        CHECK(kill(pids[i], SIGKILL) == 0);
        CHECK(waitpid(pids[i], NULL, 0) == pids[i]);
        if ((pids[i] = checked_fork()) == 0)
            contend(-1);
    }
    sh->stop = 1;
    for (int i = 0; i < N; i++)
        expect_clean_exit(pids[i]);
    CHECK(sh->conflicts == 0);
    CHECK(becomes_free());
}

/* A lone holder, its description also held by a sleeping grandchild, killed at a random point
 * of its EX/UN loop: the lock is the one of its last finished call or of the one in flight. */
static void chaos(int rounds) {
    srand(7);
    for (int r = 0; r < rounds; r++) {
        sh->state = sh->intent = LOCK_UN;
        int ready[2];
        CHECK(pipe(ready) == 0);
        int a = open_rw(path);
        pid_t keeper = checked_fork();
        if (keeper == 0) {
            close(ready[1]);
            char c;
            CHECK(read(ready[0], &c, 1) == 0);
            _exit(0);
        }
        pid_t holder = checked_fork();
        if (holder == 0) {
            close(ready[0]);
            for (unsigned i = 0;; i++) {
                int how = i % 2 ? LOCK_UN : LOCK_EX;
                sh->intent = how;
                CHECK(flock(a, how) == 0);
                sh->state = how;
            }
        }
        close(a);
        close(ready[0]);
        usleep(200 + rand() % 2000);
        CHECK(kill(holder, SIGKILL) == 0);
        CHECK(waitpid(holder, NULL, 0) == holder);
        int was_free = free_ex();
        int st = sh->state, in = sh->intent;
        int ok = was_free ? (st == LOCK_UN || in == LOCK_UN) : (st == LOCK_EX || in == LOCK_EX);
        if (!ok) {
            fprintf(stderr, "round %d: free %d, last done %d, in flight %d\n", r, was_free, st,
                    in);
            exit(1);
        }
        close(ready[1]);
        expect_clean_exit(keeper);
        CHECK(becomes_free());
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    snprintf(path, sizeof path, "/tmp/uipc-flock-fast-%d", getpid());
    create_empty(path);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    two_descriptions();
    dups_share();
    number_reused();
    fork_child_unlocks();
    exit_with_child_keeping();
    conversion_and_errors();
    eintr(0);
    eintr(1);
    counter(8, 500);
    storm(rounds);
    chaos(rounds / 2);
    unlink(path);
    printf("flock_fast: ok\n");
    return 0;
}
