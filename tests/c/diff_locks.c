/* Differential run of file locks: SEED picks N random lock calls (valid and invalid) made by
 * WORKERS processes on two files, and each call's result, errno and F_GETLK answer is printed.
 * The output on the host kernel and under `uipc run --locks` must be identical.
 *   diff_locks SEED N
 *
 * The controller forks the workers and sends them one call at a time over a pipe, waiting for
 * each answer, so the calls happen in one order on both sides. Each worker keeps SLOTS
 * descriptor slots that the calls open (either file, any access mode), close, dup2 and seek;
 * two more descriptions are opened by the controller before the forks and so are shared by
 * every worker (their OFD locks and flocks have one owner across processes, and a worker's
 * close of one drops that worker's POSIX locks on its file). Workers also exit and are forked
 * again, which drops their POSIX locks, and one call in ten is made by a child the worker
 * forks, which then exits or is killed by SIGKILL before the worker answers. Workers exec
 * themselves too, which closes their close-on-exec descriptors.
 *
 * Calls: F_SETLK, F_GETLK, F_OFD_SETLK, F_OFD_GETLK (a NULL flock pointer, types, whences, starts and lengths in and
 * out of range, a nonzero l_pid for OFD calls), F_SETLKW and F_OFD_SETLKW only when the same
 * worker's GETLK just found no conflict or an error (so they never sleep), flock with LOCK_NB, LOCK_UN and
 * bad operations, descriptors that are closed, read-only or write-only, and ftruncate (which
 * moves SEEK_END). A lock's l_pid is printed as the worker's index, or -1. Nothing that
 * depends on time, addresses or pids is printed. */
#include "diff.h"
#include <limits.h>
#include <sys/file.h>

enum { WORKERS = 3, SLOTS = 4, SHARED = 2, FILES = 2 };

struct call {
    int op;
    int slot, other; /* descriptor slots (slot >= SLOTS: a shared description) */
    int file, mode;  /* for OPEN */
    int cloexec;     /* OPEN: with O_CLOEXEC */
    int cmd;         /* the fcntl command, or flock's operation */
    struct flock fl;
    off_t value; /* OPEN's lseek, SEEK's offset, TRUNCATE's size, LOCKF's length */
    int null;     /* FCNTL: a NULL pointer instead of the flock */
    int in_child; /* made by a child the worker forks, which then exits (1) or is killed (2) */
};

struct answer {
    long r;
    int err;
    struct flock fl;
};

enum { OPEN, CLOSE, DUP2, SEEK, TRUNCATE, FCNTL, FLOCK, LOCKF, EXEC, EXIT };

static char paths[FILES][64];
static int shared_fd[SHARED];


/* An OPEN of `slot` on a random file, access mode, close-on-exec flag and offset. */
static void random_open(struct call *c, int slot) {
    c->op = OPEN;
    c->slot = slot;
    c->file = rnd(FILES);
    c->mode = rnd(8) == 0 ? 3 : rnd(3);
    c->cloexec = rnd(4) == 0;
    c->value = rnd(12);
}

/* The descriptor a worker's slot names: its own slots (900 + slot), then the shared
 * descriptions. A closed slot names a number that is closed in the worker. */
static int worker_fd(int slot) { return slot < SLOTS ? 900 + slot : shared_fd[slot - SLOTS]; }

/* Makes call `c` (not EXIT) in this process. */
static struct answer perform(const struct call *c) {
    struct answer a = {0};
    errno = 0;
    int fd = worker_fd(c->slot);
    switch (c->op) {
    case OPEN: {
        static const int modes[] = {O_RDONLY, O_WRONLY, O_RDWR, O_PATH};
        int n = open(paths[c->file], modes[c->mode]);
        CHECK(n >= 0);
        CHECK(dup3(n, fd, c->cloexec ? O_CLOEXEC : 0) == fd);
        CHECK(close(n) == 0);
        a.r = c->mode == 3 ? 0 : lseek(fd, c->value, SEEK_SET);
        break;
    }
    case CLOSE: a.r = close(fd); break;
    case DUP2: a.r = dup2(fd, worker_fd(c->other)) < 0 ? -1 : 0; break;
    case SEEK: a.r = lseek(fd, c->value, SEEK_SET); break;
    case TRUNCATE: a.r = ftruncate(fd, c->value); break;
    case FCNTL:
        a.fl = c->fl;
        a.r = fcntl(fd, c->cmd, c->null ? NULL : &a.fl);
        break;
    case FLOCK: a.r = flock(fd, c->cmd); break;
    case LOCKF: a.r = lockf(fd, c->cmd, c->value); break;
    }
    a.err = a.r < 0 ? errno : 0;
    return a;
}

/* Runs this program again as worker (see main), with the same pipes, files and shared
 * descriptions. */
static void exec_worker(int in, int out) {
    char args[6][64];
    snprintf(args[0], 64, "%d", in);
    snprintf(args[1], 64, "%d", out);
    snprintf(args[2], 64, "%s", paths[0]);
    snprintf(args[3], 64, "%s", paths[1]);
    snprintf(args[4], 64, "%d", shared_fd[0]);
    snprintf(args[5], 64, "%d", shared_fd[1]);
    fflush(stdout);
    execl("/proc/self/exe", "diff_locks", "worker", args[0], args[1], args[2], args[3], args[4],
          args[5], (char *)NULL);
    CHECK(!"exec");
}

static void worker(int w, int in, int out) {
    (void)w;
    struct call c;
    while (read(in, &c, sizeof c) == sizeof c) {
        if (c.op == EXIT)
            _exit(0);
        if (c.op == EXEC)
            exec_worker(in, out);
        if (c.in_child) {
            /* A forked child makes the call and exits or is killed by SIGKILL (its POSIX locks
             * go with it: the kernel drops them before the parent can reap it).
             * The answer is passed on once the child is gone. */
            int p[2];
            CHECK(pipe(p) == 0);
            fflush(stdout);
            pid_t child = checked_fork();
            if (child == 0) {
                struct answer a = perform(&c);
                CHECK(write(p[1], &a, sizeof a) == sizeof a);
                if (c.in_child == 2)
                    kill(getpid(), SIGKILL);
                _exit(0);
            }
            int st;
            CHECK(waitpid(child, &st, 0) == child);
            CHECK(c.in_child == 2 ? WIFSIGNALED(st) : WIFEXITED(st) && WEXITSTATUS(st) == 0);
            struct answer a;
            CHECK(read(p[0], &a, sizeof a) == sizeof a);
            CHECK(close(p[0]) == 0 && close(p[1]) == 0);
            CHECK(write(out, &a, sizeof a) == sizeof a);
            continue;
        }
        struct answer a = perform(&c);
        CHECK(write(out, &a, sizeof a) == sizeof a);
    }
    _exit(0);
}

static struct answer ask(int w, const struct call *c) {
    struct answer a;
    ask_worker(w, c, sizeof *c, &a, sizeof a);
    return a;
}

/* l_pid as the worker's index (-1 stays -1; anything else is printed as "?"). */
static void print_owner(pid_t pid) {
    for (int w = 0; w < WORKERS; w++)
        if (pids[w] == pid) {
            printf(" pid w%d", w);
            return;
        }
    printf(pid == -1 ? " pid -1" : pid == 0 ? " pid 0" : " pid ?");
}

static void print_call(int i, int w, const struct call *c, const struct answer *a);

/* Forks worker `w` and opens each of its slots at random (printed as part of call `i`). */
static void start(int i, int w) {
    spawn_worker(w, WORKERS, worker);
    for (int s = 0; s < SLOTS; s++) {
        struct call c = {0};
        random_open(&c, s);
        struct answer a = ask(w, &c);
        print_call(i, w, &c, &a);
    }
}

static off_t rnd_start(void) {
    switch (rnd(10)) {
    case 0: return -(off_t)rnd(4) - 1;
    case 1: return LLONG_MAX - rnd(3);
    default: return rnd(24);
    }
}

static off_t rnd_len(void) {
    switch (rnd(10)) {
    case 0: return -(off_t)rnd(8) - 1;
    case 1: return LLONG_MAX - rnd(3);
    case 2:
    case 3: return 0;
    default: return rnd(10) + 1;
    }
}

static struct flock rnd_flock(void) {
    static const short types[] = {F_RDLCK, F_WRLCK, F_UNLCK, F_RDLCK, F_WRLCK, F_UNLCK, 7};
    static const short whences[] = {SEEK_SET, SEEK_SET, SEEK_CUR, SEEK_END, 5};
    struct flock fl = {.l_type = types[rnd(7)], .l_whence = whences[rnd(5)]};
    fl.l_start = rnd_start();
    fl.l_len = rnd_len();
    fl.l_pid = rnd(8) == 0 ? 12345 : 0;
    return fl;
}

static void print_call(int i, int w, const struct call *c, const struct answer *a) {
    printf("%d: w%d ", i, w);
    switch (c->op) {
    case OPEN:
        printf("open slot %d file %d mode %d%s at %lld", c->slot, c->file, c->mode,
               c->cloexec ? " cloexec" : "", (long long)c->value);
        break;
    case CLOSE: printf("close %d", c->slot); break;
    case DUP2: printf("dup2 %d to %d", c->slot, c->other); break;
    case SEEK: printf("seek %d to %lld", c->slot, (long long)c->value); break;
    case TRUNCATE: printf("truncate %d to %lld", c->slot, (long long)c->value); break;
    case FCNTL:
        printf("fcntl %d%s cmd %d type %d whence %d start %lld len %lld pid %d", c->slot, c->null ? " NULL" : "",
               c->cmd, c->fl.l_type, c->fl.l_whence, (long long)c->fl.l_start, (long long)c->fl.l_len,
               (int)c->fl.l_pid);
        break;
    case FLOCK: printf("flock %d op %d", c->slot, c->cmd); break;
    case LOCKF: printf("lockf %d cmd %d len %lld", c->slot, c->cmd, (long long)c->value); break;
    case EXEC: printf("exec"); break;
    case EXIT: printf("exit"); break;
    }
    static const char *const by[] = {"", " (child)", " (killed child)"};
    printf("%s = %ld errno %d", by[c->in_child], a->r, a->err);
    int getlk = c->cmd == F_GETLK || c->cmd == F_OFD_GETLK;
    if (c->op == FCNTL && getlk && a->r == 0 && !c->null) {
        printf(" -> type %d", a->fl.l_type);
        if (a->fl.l_type != F_UNLCK) {
            printf(" whence %d start %lld len %lld", a->fl.l_whence, (long long)a->fl.l_start,
                   (long long)a->fl.l_len);
            print_owner(a->fl.l_pid);
        }
    }
    printf("\n");
}

/* One random call by a random worker. */
static void step(int i) {
    int w = rnd(WORKERS);
    struct call c = {.slot = rnd(SLOTS + SHARED), .other = rnd(SLOTS)};
    struct answer a = {0};
    unsigned pick = rnd(100);
    if (pick < 4) {
        random_open(&c, rnd(SLOTS));
    } else if (pick < 6) {
        c.op = CLOSE;
        c.slot = rnd(SLOTS); /* a worker keeps the shared descriptions open */
    } else if (pick < 8) {
        c.op = DUP2;
    } else if (pick < 12) {
        c.op = SEEK;
        c.value = rnd(12);
    } else if (pick < 14) {
        c.op = TRUNCATE;
        c.value = rnd(16);
    } else if (pick < 15) {
        c.op = EXIT;
    } else if (pick < 16) {
        c.op = EXEC;
    } else if (pick < 20) {
        c.op = LOCKF;
        /* F_LOCK only when F_GETLK of the same write lock, by the same worker, finds the range
         * free (F_TEST only looks for write locks, F_LOCK waits for read locks too). */
        static const int cmds[] = {F_ULOCK, F_TLOCK, F_TEST, F_LOCK, 9};
        c.cmd = cmds[rnd(5)];
        c.value = rnd(3) == 0 ? -(off_t)rnd(6) : rnd(8);
        if (c.cmd == F_LOCK) {
            struct call probe = {.op = FCNTL, .slot = c.slot, .cmd = F_GETLK};
            probe.fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_len = c.value};
            struct answer pa = ask(w, &probe);
            if (pa.r == 0 && pa.fl.l_type != F_UNLCK)
                c.cmd = F_TEST;
        }
    } else if (pick < 30) {
        c.op = FLOCK;
        /* 32 is LOCK_MAND, which Linux ignores. */
        static const int ops[] = {LOCK_SH | LOCK_NB, LOCK_EX | LOCK_NB, LOCK_UN, LOCK_UN | LOCK_NB,
                                  LOCK_SH | LOCK_NB, LOCK_EX | LOCK_NB, LOCK_SH | LOCK_EX | LOCK_NB,
                                  LOCK_NB, 0, 32, 32 | LOCK_EX, 1 << 30 | LOCK_SH};
        c.cmd = ops[rnd(12)];
    } else {
        c.op = FCNTL;
        static const int cmds[] = {F_SETLK, F_SETLK, F_GETLK, F_OFD_SETLK, F_OFD_SETLK,
                                   F_OFD_GETLK, F_SETLKW, F_OFD_SETLKW};
        c.cmd = cmds[rnd(8)];
        c.fl = rnd_flock();
        c.null = rnd(40) == 0;
        if (c.cmd == F_SETLKW || c.cmd == F_OFD_SETLKW) {
            /* Only when the lock would be granted: GETLK first, by the same worker. */
            struct call probe = c;
            probe.cmd = c.cmd == F_SETLKW ? F_GETLK : F_OFD_GETLK;
            struct answer pa = ask(w, &probe);
            if (c.null || (pa.r == 0 && pa.fl.l_type != F_UNLCK))
                c.cmd = probe.cmd; /* it would sleep: the GETLK is printed instead */
        }
    }
    /* One call in ten (not an OPEN, DUP2, EXEC or EXIT) by a forked child of the worker, never one
     * that may sleep (its own POSIX locks are none: GETLK probes above were the worker's). */
    if (c.op != OPEN && c.op != DUP2 && c.op != EXIT && c.op != EXEC && rnd(10) == 0) {
        c.in_child = 1 + rnd(2);
        if (c.op == FCNTL && c.cmd == F_SETLKW)
            c.cmd = F_SETLK;
        if (c.op == FCNTL && c.cmd == F_OFD_SETLKW)
            c.cmd = F_OFD_SETLK;
        if (c.op == LOCKF && c.cmd == F_LOCK)
            c.cmd = F_TLOCK;
    }
    if (c.op == EXIT) {
        send_worker(w, &c, sizeof c);
        CHECK(status_of(pids[w]) == 0);
        forget_worker(w);
        print_call(i, w, &c, &a);
        start(i, w);
        return;
    }
    a = ask(w, &c);
    print_call(i, w, &c, &a);
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "worker") == 0) {
        /* A worker after its exec: says so, then goes on. */
        int in = atoi(argv[2]), out = atoi(argv[3]);
        snprintf(paths[0], sizeof paths[0], "%s", argv[4]);
        snprintf(paths[1], sizeof paths[1], "%s", argv[5]);
        shared_fd[0] = atoi(argv[6]);
        shared_fd[1] = atoi(argv[7]);
        struct answer a = {0};
        CHECK(write(out, &a, sizeof a) == sizeof a);
        worker(0, in, out);
    }
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 10) * 2654435761ULL + 1;
    int n = atoi(argv[2]);
    for (int f = 0; f < FILES; f++) {
        snprintf(paths[f], sizeof paths[f], "/tmp/uipc-diff-locks-%d-%d", (int)getpid(), f);
        int fd = open(paths[f], O_RDWR | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && ftruncate(fd, f == 0 ? 10 : 0) == 0 && close(fd) == 0);
    }
    for (int s = 0; s < SHARED; s++) {
        shared_fd[s] = open(paths[s % FILES], O_RDWR);
        CHECK(shared_fd[s] >= 0);
    }
    for (int w = 0; w < WORKERS; w++)
        start(-1, w);
    for (int i = 0; i < n; i++)
        step(i);
    for (int w = 0; w < WORKERS; w++) {
        struct call c = {.op = EXIT};
        send_worker(w, &c, sizeof c);
        CHECK(status_of(pids[w]) == 0);
    }
    for (int f = 0; f < FILES; f++)
        CHECK(unlink(paths[f]) == 0);
    return 0;
}
