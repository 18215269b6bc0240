/* Differential run of SysV IPC between users: SEED picks N random calls (valid and invalid,
 * never one that sleeps) made by WORKERS processes that run as different users, on shared
 * semaphore sets, message queues and segments, and prints each call's result, errno and the
 * fields it reads. The output on the host kernel (in a fresh IPC namespace) and under
 * `uipc run` must be identical.
 *   diff_ipc_users SEED N
 *
 * The workers: root; uid 1000 (group 1000); uid 1001 (group 1001, supplementary 1000); and
 * nobody (65534). Their objects' modes, owners and groups are drawn at random, and IPC_SET
 * hands objects to other users, so the permission checks, the owner and creator rules and
 * the capability checks all decide results. Workers exit now and then (their semaphore undo
 * is applied and their attachments go) and are forked again, and exec themselves (their
 * attachments go, their undo stays). The controller sends one call
 * at a time over a pipe and waits for the answer. A pid is printed as the number of the
 * worker's fork (p0 to p3 are the first four workers, p4 the first one forked again, ...);
 * times and addresses never. */
#include "diff.h"
#include <grp.h>

enum { WORKERS = 4, POOL = 6, ATTS = 3, KNOWN = 256 };

static const uid_t uids[WORKERS] = {0, 1000, 1001, 65534};
static const gid_t gids[WORKERS] = {0, 1000, 1001, 65534};

enum {
    SEMGET, SEMOP, SEMCTL_GET, SEMCTL_SETVAL, SEMCTL_ALL, SEM_STATS, SEM_SET, MSGGET, MSGSND,
    MSGRCV, MSG_STATS, MSG_SET, SHMGET, SHMAT, SHMDT, SHM_STATS, SHM_SET, RMID, STAT_INDEX,
    EXEC, EXIT, KINDS
};

struct call {
    int op, id, num, value, flags, slot;
    key_t key;
    uid_t uid;
    gid_t gid;
    pid_t known[KNOWN]; /* every worker pid so far, by spawn order */
    int nknown;
};

struct answer {
    long r;
    int err;
    char text[240];
};

static pid_t known[KNOWN];
static int nknown;
static int sems[POOL], msgs[POOL], shms[POOL];


/* A pid as the number of its worker's fork (p3), 0 as 0, anything else as "?". */
static const char *who(const struct call *c, pid_t pid) {
    static char buf[4][16];
    static int turn;
    char *b = buf[turn++ % 4];
    if (pid == 0)
        return "0";
    for (int k = 0; k < c->nknown; k++)
        if (c->known[k] == pid) {
            snprintf(b, 16, "p%d", k);
            return b;
        }
    return "?";
}

static void *atts[ATTS];

/* Makes call `c` in this worker (not EXIT). */
static struct answer perform(const struct call *c) {
    struct answer a = {0};
    char *t = a.text;
    size_t tn = sizeof a.text;
    errno = 0;
    switch (c->op) {
    case SEMGET: a.r = semget(c->key, c->num, c->flags); break;
    case SEMOP: {
        struct sembuf ops[2] = {{(unsigned short)c->num, (short)c->value, (short)c->flags},
                                {(unsigned short)(c->num ^ 1), (short)-c->value,
                                 (short)c->flags}};
        a.r = semop(c->id, ops, 1 + (c->slot & 1));
        break;
    }
    case SEMCTL_GET: {
        static const int cmds[] = {GETVAL, GETNCNT, GETZCNT, GETPID};
        int cmd = cmds[c->value % 4];
        a.r = semctl(c->id, c->num, cmd);
        if (cmd == GETPID && a.r > 0) {
            snprintf(t, tn, " pid %s", who(c, (pid_t)a.r));
            a.r = 1;
        }
        break;
    }
    case SEMCTL_SETVAL: a.r = semctl(c->id, c->num, SETVAL, (union semun){.val = c->value}); break;
    case SEMCTL_ALL: {
        unsigned short v[3] = {(unsigned short)c->value, 1, 2};
        a.r = semctl(c->id, 0, c->flags ? SETALL : GETALL, (union semun){.array = v});
        if (!c->flags && a.r == 0)
            snprintf(t, tn, " values %u %u", v[0], v[1]);
        break;
    }
    case SEM_STATS: {
        struct semid_ds ds;
        a.r = semctl(c->id, 0, IPC_STAT, (union semun){.buf = &ds});
        if (a.r == 0)
            snprintf(t, tn, " key %x uid %u gid %u cuid %u cgid %u mode %o nsems %lu",
                     ds.sem_perm.__key, ds.sem_perm.uid, ds.sem_perm.gid, ds.sem_perm.cuid,
                     ds.sem_perm.cgid, ds.sem_perm.mode, ds.sem_nsems);
        break;
    }
    case SEM_SET: {
        struct semid_ds ds = {0};
        ds.sem_perm.uid = c->uid;
        ds.sem_perm.gid = c->gid;
        ds.sem_perm.mode = (unsigned short)c->value;
        a.r = semctl(c->id, 0, IPC_SET, (union semun){.buf = &ds});
        break;
    }
    case MSGGET: a.r = msgget(c->key, c->flags); break;
    case MSGSND: {
        struct { long mtype; char text[16]; } m = {c->num, "0123456789abcdef"};
        a.r = msgsnd(c->id, &m, (size_t)c->value, c->flags);
        break;
    }
    case MSGRCV: {
        struct { long mtype; char text[16]; } m = {0, ""};
        a.r = msgrcv(c->id, &m, (size_t)c->value, c->num, c->flags);
        if (a.r >= 0)
            snprintf(t, tn, " type %ld text %.*s", m.mtype, (int)a.r, m.text);
        break;
    }
    case MSG_STATS: {
        struct msqid_ds ds;
        a.r = msgctl(c->id, IPC_STAT, &ds);
        if (a.r == 0)
            snprintf(t, tn, " uid %u gid %u cuid %u cgid %u mode %o qnum %lu cbytes %lu "
                     "qbytes %lu lspid %s lrpid %s", ds.msg_perm.uid, ds.msg_perm.gid,
                     ds.msg_perm.cuid, ds.msg_perm.cgid, ds.msg_perm.mode, ds.msg_qnum,
                     ds.__msg_cbytes, ds.msg_qbytes, who(c, ds.msg_lspid), who(c, ds.msg_lrpid));
        break;
    }
    case MSG_SET: {
        struct msqid_ds ds = {0};
        ds.msg_perm.uid = c->uid;
        ds.msg_perm.gid = c->gid;
        ds.msg_perm.mode = (unsigned short)c->value;
        ds.msg_qbytes = (msglen_t)c->num;
        a.r = msgctl(c->id, IPC_SET, &ds);
        break;
    }
    case SHMGET: a.r = shmget(c->key, (size_t)c->num, c->flags); break;
    case SHMAT: {
        if (atts[c->slot])
            CHECK(shmdt(atts[c->slot]) == 0);
        atts[c->slot] = NULL;
        void *p = shmat(c->id, NULL, c->flags);
        a.r = p == (void *)-1 ? -1 : 0;
        if (p != (void *)-1) {
            atts[c->slot] = p;
            /* A read-only attachment is only read. */
            snprintf(t, tn, " first byte %d", *(volatile char *)p);
            if (!(c->flags & SHM_RDONLY))
                *(volatile char *)p = (char)c->value;
        }
        break;
    }
    case SHMDT:
        a.r = shmdt(atts[c->slot] ? atts[c->slot] : (void *)4096);
        atts[c->slot] = NULL;
        break;
    case SHM_STATS: {
        struct shmid_ds ds;
        a.r = shmctl(c->id, IPC_STAT, &ds);
        if (a.r == 0)
            snprintf(t, tn, " uid %u gid %u cuid %u cgid %u mode %o size %zu nattch %lu "
                     "cpid %s lpid %s", ds.shm_perm.uid, ds.shm_perm.gid, ds.shm_perm.cuid,
                     ds.shm_perm.cgid, ds.shm_perm.mode, ds.shm_segsz, ds.shm_nattch,
                     who(c, ds.shm_cpid), who(c, ds.shm_lpid));
        break;
    }
    case SHM_SET: {
        struct shmid_ds ds = {0};
        ds.shm_perm.uid = c->uid;
        ds.shm_perm.gid = c->gid;
        ds.shm_perm.mode = (unsigned short)c->value;
        static const int cmds[] = {IPC_SET, IPC_SET, SHM_LOCK, SHM_UNLOCK};
        a.r = shmctl(c->id, cmds[c->num % 4], &ds);
        break;
    }
    case RMID:
        if (c->num == 0)
            a.r = semctl(c->id, 0, IPC_RMID);
        else if (c->num == 1)
            a.r = msgctl(c->id, IPC_RMID, NULL);
        else
            a.r = shmctl(c->id, IPC_RMID, NULL);
        break;
    case STAT_INDEX: {
        static const int kinds[] = {SEM_STAT, SEM_STAT_ANY, MSG_STAT, MSG_STAT_ANY, SHM_STAT,
                                    SHM_STAT_ANY};
        union {
            struct semid_ds s;
            struct msqid_ds m;
            struct shmid_ds h;
        } u;
        int k = c->num % 6;
        if (k < 2)
            a.r = semctl(c->id, 0, kinds[k], (union semun){.buf = &u.s});
        else if (k < 4)
            a.r = msgctl(c->id, kinds[k], &u.m);
        else
            a.r = shmctl(c->id, kinds[k], &u.h);
        break;
    }
    }
    a.err = a.r < 0 ? errno : 0;
    return a;
}

/* The worker loop, as user `w` already. */
static void serve(int in, int out) {
    struct call c;
    while (read(in, &c, sizeof c) == sizeof c) {
        if (c.op == EXIT)
            _exit(0);
        if (c.op == EXEC) {
            /* The same worker in a new image: its attachments go, its undo stays. */
            char a[2][16];
            snprintf(a[0], sizeof a[0], "%d", in);
            snprintf(a[1], sizeof a[1], "%d", out);
            fflush(stdout);
            execl("/proc/self/exe", "diff_ipc_users", "worker", a[0], a[1], (char *)NULL);
            CHECK(!"exec");
        }
        struct answer a = perform(&c);
        CHECK(write(out, &a, sizeof a) == sizeof a);
    }
    _exit(0);
}

static void worker(int w, int in, int out) {
    gid_t groups[2] = {gids[w], 1000};
    CHECK(setgroups(w == 2 ? 2 : w == 0 ? 0 : 1, groups) == 0);
    CHECK(setresgid(gids[w], gids[w], gids[w]) == 0);
    CHECK(setresuid(uids[w], uids[w], uids[w]) == 0);
    serve(in, out);
}


/* Forks worker `w` and counts its pid among those printed as labels. */
static void spawn(int w) {
    spawn_worker(w, WORKERS, worker);
    CHECK(nknown < KNOWN);
    known[nknown++] = pids[w];
}

static int pick(const int *pool) {
    switch (rnd(10)) {
    case 0: return -1;
    case 1: return pool[rnd(POOL)] + 32768;
    default: return pool[rnd(POOL)];
    }
}

static key_t key(void) { return rnd(3) == 0 ? IPC_PRIVATE : (key_t)(0x5a1e000 + rnd(3)); }

static int mode(void) {
    static const int m[] = {0600, 0660, 0640, 0606, 0604, 0666, 0400, 0200, 0060, 0};
    return m[rnd(10)];
}

static int cflags(void) {
    static const int f[] = {0, IPC_CREAT, IPC_CREAT, IPC_CREAT | IPC_EXCL};
    return f[rnd(4)] | mode();
}

static void remember(int *pool, long id) {
    if (id >= 0)
        pool[rnd(POOL)] = (int)id;
}

/* Draws call `c` for a worker. */
static void draw(struct call *c) {
    c->op = (int)rnd(KINDS);
    c->uid = uids[rnd(WORKERS)];
    c->gid = rnd(5) == 0 ? 4242 : gids[rnd(WORKERS)];
    c->slot = (int)rnd(ATTS);
    switch (c->op) {
    case SEMGET: c->key = key(); c->num = (int)rnd(4); c->flags = cflags(); break;
    case SEMOP:
        c->id = pick(sems);
        c->num = (int)rnd(3);
        c->value = (int)rnd(5) - 2;
        c->flags = IPC_NOWAIT | (rnd(2) ? SEM_UNDO : 0);
        break;
    case SEMCTL_GET: c->id = pick(sems); c->num = (int)rnd(3); c->value = (int)rnd(4); break;
    case SEMCTL_SETVAL: c->id = pick(sems); c->num = (int)rnd(3); c->value = (int)rnd(4); break;
    case SEMCTL_ALL: c->id = pick(sems); c->flags = (int)rnd(2); c->value = (int)rnd(3); break;
    case SEM_STATS: c->id = pick(sems); break;
    case SEM_SET: c->id = pick(sems); c->value = mode(); break;
    case MSGGET: c->key = key(); c->flags = cflags(); break;
    case MSGSND:
        c->id = pick(msgs);
        c->num = (int)rnd(4);
        c->value = (int)rnd(17);
        c->flags = IPC_NOWAIT;
        break;
    case MSGRCV:
        c->id = pick(msgs);
        c->num = (int)rnd(5) - 2;
        c->value = (int)rnd(17);
        c->flags = IPC_NOWAIT | (rnd(2) ? MSG_NOERROR : 0) | (rnd(5) == 0 ? MSG_EXCEPT : 0);
        break;
    case MSG_STATS: c->id = pick(msgs); break;
    case MSG_SET:
        c->id = pick(msgs);
        c->value = mode();
        c->num = rnd(3) == 0 ? 16384 + 4096 * (int)rnd(2) : 10 + (int)rnd(40);
        break;
    case SHMGET:
        c->key = key();
        c->num = rnd(2) ? 4096 : 100;
        c->flags = cflags();
        break;
    case SHMAT:
        c->id = pick(shms);
        c->flags = rnd(2) ? SHM_RDONLY : 0;
        c->value = 1 + (int)rnd(100);
        break;
    case SHMDT: break;
    case SHM_STATS: c->id = pick(shms); break;
    case SHM_SET: c->id = pick(shms); c->value = mode(); c->num = (int)rnd(4); break;
    case RMID:
        c->num = (int)rnd(3);
        c->id = pick(c->num == 0 ? sems : c->num == 1 ? msgs : shms);
        break;
    case STAT_INDEX: c->num = (int)rnd(6); c->id = (int)rnd(4); break;
    }
}

static const char *const names[] = {
    "semget", "semop", "semctl get", "semctl setval", "semctl all", "sem stat", "sem set",
    "msgget", "msgsnd", "msgrcv", "msg stat", "msg set", "shmget", "shmat", "shmdt",
    "shm stat", "shm set", "rmid", "stat index", "exec", "exit"};

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "worker") == 0) {
        /* A worker after its exec: says so, then goes on. */
        int in = atoi(argv[2]), out = atoi(argv[3]);
        struct answer a = {0};
        CHECK(write(out, &a, sizeof a) == sizeof a);
        serve(in, out);
    }
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 10) * 2654435761ULL + 7;
    int n = atoi(argv[2]);
    for (int w = 0; w < WORKERS; w++)
        spawn(w);
    for (int i = 0; i < n; i++) {
        int w = (int)rnd(WORKERS);
        struct call c = {0};
        draw(&c);
        printf("%d: w%d %s id %d num %d value %d flags %o slot %d key %x uid %u gid %u", i, w,
               names[c.op], c.id, c.num, c.value, c.flags, c.slot, c.key, c.uid, c.gid);
        if (c.op == EXIT) {
            send_worker(w, &c, sizeof c);
            CHECK(status_of(pids[w]) == 0);
            forget_worker(w);
            spawn(w);
            printf("\n");
            continue;
        }
        memcpy(c.known, known, sizeof known);
        c.nknown = nknown;
        struct answer a = {0};
        ask_worker(w, &c, sizeof c, &a, sizeof a);
        printf(" = %ld errno %d%s\n", a.r, a.err, a.text);
        if (c.op == SEMGET)
            remember(sems, a.r);
        else if (c.op == MSGGET)
            remember(msgs, a.r);
        else if (c.op == SHMGET)
            remember(shms, a.r);
    }
    for (int w = 0; w < WORKERS; w++) {
        struct call c = {.op = EXIT};
        send_worker(w, &c, sizeof c);
        CHECK(status_of(pids[w]) == 0);
    }
    return 0;
}
