/* Differential run of SysV IPC calls that sleep: SEED picks N random actions of WORKERS
 * processes on one semaphore set and one message queue (semop that may wait, with and without
 * SEM_UNDO, wait-for-zero, semtimedop; msgrcv that may wait, in every type mode; msgsnd into
 * a small queue; SETVAL, SETALL; a signal or SIGKILL to a sleeper; removal of the set or the
 * queue, which are then created again). After each action the run waits until every worker
 * has answered or sleeps, and prints who answered what, the semaphore values and the queue's
 * count, with wake-ups in worker order. Linux hands semaphores and messages to sleepers in
 * the waker's own call, so what each sleeper gets does not depend on timing: the output on the
 * host kernel (a fresh IPC namespace) and under `uipc run` must be identical.
 *   diff_sleepers SEED N
 *
 * One thing would depend on timing, and is avoided: senders woken by room in the queue race
 * for it, so at most one msgsnd sleeps at a time. */
#include "diff.h"
#include <poll.h>

enum { WORKERS = 5, NSEMS = 3 };

enum { SEMOP, SEMTIMEDOP, MSGRCV, MSGSND };

struct call {
    int op, sem, msg;
    struct sembuf sops[2];
    int nsops;
    long type;
    size_t size;
    int flags;
};

struct answer {
    long r;
    int err;
    long type;
    size_t size;
};

static int busy[WORKERS];
static int sem, msg;


static void on_usr1(int sig) { (void)sig; }

static void worker(int w, int in, int out) {
    (void)w;
    struct sigaction sa = {.sa_handler = on_usr1}; /* no SA_RESTART: EINTR */
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    struct call c;
    while (read(in, &c, sizeof c) == sizeof c) {
        struct answer a = {0};
        struct { long mtype; char text[128]; } m = {c.type, ""};
        errno = 0;
        switch (c.op) {
        case SEMOP: a.r = semop(c.sem, c.sops, (size_t)c.nsops); break;
        case SEMTIMEDOP: {
            struct timespec ts = {100, 0};
            a.r = semtimedop(c.sem, c.sops, (size_t)c.nsops, &ts);
            break;
        }
        case MSGRCV:
            a.r = msgrcv(c.msg, &m, c.size, c.type, c.flags);
            a.type = a.r >= 0 ? m.mtype : 0;
            break;
        case MSGSND: a.r = msgsnd(c.msg, &m, c.size, c.flags); break;
        }
        a.err = a.r < 0 ? errno : 0;
        CHECK(write(out, &a, sizeof a) == sizeof a);
    }
    _exit(0);
}


/* Whether process `pid` is asleep ('S' in /proc/PID/stat). */
static int asleep(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n > 0 && close(fd) == 0);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    CHECK(p != NULL);
    return p[2] == 'S';
}

/* Waits until every busy worker has answered or has slept through five polls 10 ms apart
 * (under uipc a woken sleeper's answer comes from the daemon after the waker's), then prints
 * the answers in worker order. */
static void settle(void) {
    struct answer got[WORKERS];
    int answered[WORKERS] = {0};
    int quiet = 0;
    while (quiet < 5) {
        usleep(10000);
        int calm = 1;
        for (int w = 0; w < WORKERS; w++) {
            if (!busy[w] || answered[w])
                continue;
            struct pollfd p = {.fd = from_worker[w], .events = POLLIN};
            if (poll(&p, 1, 0) == 1) {
                CHECK(read(from_worker[w], &got[w], sizeof got[w]) == sizeof got[w]);
                answered[w] = 1;
                calm = 0;
            } else if (!asleep(pids[w])) {
                calm = 0;
            }
        }
        quiet = calm ? quiet + 1 : 0;
    }
    for (int w = 0; w < WORKERS; w++)
        if (answered[w]) {
            busy[w] = 0;
            printf("  w%d answered %ld errno %d", w, got[w].r, got[w].err);
            if (got[w].type)
                printf(" type %ld", got[w].type);
            printf("\n");
        }
    unsigned short v[NSEMS] = {0};
    struct msqid_ds ds = {0};
    int rs = semctl(sem, 0, GETALL, (union semun){.array = v});
    int rm = msgctl(msg, IPC_STAT, &ds);
    printf("  sems %d %u %u %u queue %d %lu sleeping", rs, v[0], v[1], v[2], rm, ds.msg_qnum);
    for (int w = 0; w < WORKERS; w++)
        if (busy[w])
            printf(" w%d", w);
    printf("\n");
}

static void spawn(int w) {
    spawn_worker(w, WORKERS, worker);
    busy[w] = 0;
}

static void send_call(int w, const struct call *c) {
    send_worker(w, c, sizeof *c);
    busy[w] = 1;
}

static int sender_asleep = -1; /* the worker whose msgsnd may sleep */

static void action(int i) {
    int w = (int)rnd(WORKERS);
    unsigned what = rnd(100);
    if (busy[w]) {
        /* A sleeper: a signal or a kill, or (mostly) nothing. */
        if (what < 15) {
            printf("%d: signal w%d\n", i, w);
            CHECK(kill(pids[w], SIGUSR1) == 0);
        } else if (what < 25) {
            printf("%d: kill w%d\n", i, w);
            CHECK(kill(pids[w], SIGKILL) == 0);
            int st;
            CHECK(waitpid(pids[w], &st, 0) == pids[w] && WIFSIGNALED(st));
            forget_worker(w);
            if (sender_asleep == w)
                sender_asleep = -1;
            spawn(w);
        } else {
            return;
        }
        settle();
        return;
    }
    struct call c = {.sem = sem, .msg = msg};
    if (what < 40) {
        c.op = rnd(4) == 0 ? SEMTIMEDOP : SEMOP;
        c.nsops = 1 + (int)rnd(2);
        for (int k = 0; k < c.nsops; k++) {
            c.sops[k].sem_num = (unsigned short)((k + rnd(NSEMS)) % NSEMS);
            c.sops[k].sem_op = (short)((int)rnd(5) - 2);
            c.sops[k].sem_flg = (short)((rnd(3) == 0 ? SEM_UNDO : 0) | (rnd(8) == 0 ? IPC_NOWAIT : 0));
        }
        if (c.nsops == 2 && c.sops[0].sem_num == c.sops[1].sem_num)
            c.nsops = 1;
        printf("%d: w%d %s", i, w, c.op == SEMOP ? "semop" : "semtimedop");
        for (int k = 0; k < c.nsops; k++)
            printf(" [%u %d %o]", c.sops[k].sem_num, c.sops[k].sem_op, c.sops[k].sem_flg);
        printf("\n");
    } else if (what < 60) {
        c.op = MSGRCV;
        c.type = (long)rnd(7) - 3;
        c.size = rnd(4) == 0 ? 4 : 100;
        c.flags = (rnd(4) == 0 ? MSG_EXCEPT : 0) | (rnd(2) ? MSG_NOERROR : 0) |
                  (rnd(8) == 0 ? IPC_NOWAIT : 0);
        printf("%d: w%d msgrcv type %ld size %zu flags %o\n", i, w, c.type, c.size, c.flags);
    } else if (what < 80) {
        c.op = MSGSND;
        c.type = 1 + (long)rnd(3);
        c.size = 10 + 30 * rnd(3);
        c.flags = sender_asleep >= 0 || rnd(8) == 0 ? IPC_NOWAIT : 0;
        printf("%d: w%d msgsnd type %ld size %zu flags %o\n", i, w, c.type, c.size, c.flags);
        if (!c.flags)
            sender_asleep = w;
    } else if (what < 88) {
        int num = (int)rnd(NSEMS), val = (int)rnd(4);
        long r = semctl(sem, num, SETVAL, (union semun){.val = val});
        printf("%d: setval %d %d = %ld\n", i, num, val, r);
        settle();
        return;
    } else if (what < 94) {
        unsigned short v[NSEMS] = {(unsigned short)rnd(3), (unsigned short)rnd(3),
                                   (unsigned short)rnd(3)};
        long r = semctl(sem, 0, SETALL, (union semun){.array = v});
        printf("%d: setall %u %u %u = %ld\n", i, v[0], v[1], v[2], r);
        settle();
        return;
    } else if (what < 97) {
        CHECK(semctl(sem, 0, IPC_RMID) == 0);
        printf("%d: remove the set\n", i);
        settle();
        sem = semget(IPC_PRIVATE, NSEMS, 0600);
        printf("  new set %d\n", sem);
        return;
    } else {
        CHECK(msgctl(msg, IPC_RMID, NULL) == 0);
        printf("%d: remove the queue\n", i);
        settle();
        if (sender_asleep >= 0 && !busy[sender_asleep])
            sender_asleep = -1;
        msg = msgget(IPC_PRIVATE, 0600);
        struct msqid_ds ds;
        CHECK(msgctl(msg, IPC_STAT, &ds) == 0);
        ds.msg_qbytes = 120;
        CHECK(msgctl(msg, IPC_SET, &ds) == 0);
        printf("  new queue %d\n", msg);
        return;
    }
    send_call(w, &c);
    settle();
    if (sender_asleep >= 0 && !busy[sender_asleep])
        sender_asleep = -1;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 10) * 2654435761ULL + 11;
    int n = atoi(argv[2]);
    sem = semget(IPC_PRIVATE, NSEMS, 0600);
    msg = msgget(IPC_PRIVATE, 0600);
    CHECK(sem >= 0 && msg >= 0);
    struct msqid_ds ds;
    CHECK(msgctl(msg, IPC_STAT, &ds) == 0);
    ds.msg_qbytes = 120;
    CHECK(msgctl(msg, IPC_SET, &ds) == 0);
    for (int w = 0; w < WORKERS; w++)
        spawn(w);
    for (int i = 0; i < n; i++)
        action(i);
    for (int w = 0; w < WORKERS; w++) {
        CHECK(kill(pids[w], SIGKILL) == 0);
        CHECK(waitpid(pids[w], NULL, 0) == pids[w]);
    }
    return 0;
}
