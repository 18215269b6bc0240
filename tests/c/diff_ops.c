/* Differential run: SEED picks N random SysV IPC calls (valid and invalid, bad pointers
 * included, never one that sleeps) and each call's result and errno is printed, with ids and
 * structure fields but no times or addresses. The output on the host kernel (in a fresh IPC
 * namespace) and under uipc run must be identical. The calls include counts, sizes, flags,
 * values and buffers just inside and outside the limits.
 *   diff_ops SEED N */
#include "diff.h"
#include <limits.h>
#include <stdint.h>


#define POOL 8
static int sems[POOL], msgs[POOL], shms[POOL];
static void *atts[POOL];

static void remember(int *pool, int id) {
    if (id >= 0)
        pool[rnd(POOL)] = id;
}

/* Keeps the new attachment `p` in a random slot, detaching the one it replaces. */
static void keep_attachment(void *p) {
    unsigned slot = rnd(POOL);
    if (atts[slot] && atts[slot] != p)
        shmdt(atts[slot]);
    atts[slot] = p;
}

static int pick(const int *pool) {
    switch (rnd(8)) {
    case 0: return -1;
    case 1: return 12345;
    case 2: return pool[rnd(POOL)] + 32768;
    default: return pool[rnd(POOL)];
    }
}

static key_t key(void) { return rnd(3) == 0 ? IPC_PRIVATE : (key_t)(0x7549a000 + rnd(4)); }
static int mode(void) { static const int m[] = {0600, 0400, 0200, 0666, 0}; return m[rnd(5)]; }
static int cflags(void) {
    static const int f[] = {0, IPC_CREAT, IPC_CREAT | IPC_EXCL};
    return f[rnd(3)] | mode();
}

#define OUT(fmt, ...) printf("%d: " fmt " = %ld errno %d\n", i, __VA_ARGS__, r, r < 0 ? errno : 0)

int main(int argc, char **argv) {
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 0) * 2654435761ULL + 1;
    int n = atoi(argv[2]);
    pid_t me = getpid();
    for (int i = 0; i < n; i++) {
        long r;
        errno = 0;
        unsigned what = rnd(31);
        switch (what) {
        case 0: {
            int ns = (int)rnd(5), k = key(), f = cflags();
            r = semget(k, ns, f);
            OUT("semget(%x, %d, %o)", k, ns, f);
            remember(sems, (int)r);
            break;
        }
        case 1: {
            struct sembuf ops[3];
            size_t cnt = 1 + rnd(3);
            for (size_t j = 0; j < cnt; j++) {
                ops[j].sem_num = (unsigned short)rnd(5);
                ops[j].sem_op = (short)((int)rnd(5) - 2);
                ops[j].sem_flg = (short)(IPC_NOWAIT | (rnd(2) ? SEM_UNDO : 0));
            }
            int id = pick(sems);
            int bad = rnd(10) == 0;
            r = semop(id, bad ? NULL : ops, cnt);
            OUT("semop(%d, %s, %zu)", id, bad ? "NULL" : "ops", cnt);
            break;
        }
        case 2: {
            int id = pick(sems), num = (int)rnd(5);
            static const int cmds[] = {GETVAL, GETNCNT, GETZCNT, GETPID, IPC_RMID, 99};
            int cmd = cmds[rnd(6)];
            r = semctl(id, num, cmd);
            if (cmd == GETPID && r > 0)
                r = r == me ? 1 : 2;
            OUT("semctl(%d, %d, %d)", id, num, cmd);
            break;
        }
        case 3: {
            int id = pick(sems), val = (int)rnd(40000);
            r = semctl(id, (int)rnd(5), SETVAL, (union semun){.val = val});
            OUT("semctl(%d, SETVAL, %d)", id, val);
            break;
        }
        case 4: {
            int id = pick(sems);
            unsigned short vals[4] = {(unsigned short)rnd(4), (unsigned short)rnd(4), 7, 40000};
            int get = (int)rnd(2), bad = rnd(8) == 0;
            r = semctl(id, 0, get ? GETALL : SETALL, (union semun){.array = bad ? NULL : vals});
            OUT("semctl(%d, %s%s)", id, get ? "GETALL" : "SETALL", bad ? " NULL" : "");
            if (get && r == 0)
                printf("  values %u %u\n", vals[0], vals[1]);
            break;
        }
        case 5: {
            int id = pick(sems);
            struct semid_ds ds;
            r = semctl(id, 0, IPC_STAT, (union semun){.buf = &ds});
            OUT("semctl(%d, IPC_STAT)", id);
            if (r == 0)
                printf("  key %x mode %o nsems %lu uid %u\n", ds.sem_perm.__key,
                       ds.sem_perm.mode, ds.sem_nsems, ds.sem_perm.uid);
            break;
        }
        case 6: {
            int k = key(), f = cflags();
            r = msgget(k, f);
            OUT("msgget(%x, %o)", k, f);
            remember(msgs, (int)r);
            break;
        }
        case 7: {
            struct { long mtype; char text[32]; } m;
            m.mtype = (long)rnd(5) - 1;
            size_t len = rnd(24);
            memset(m.text, 'a' + (int)rnd(26), sizeof m.text);
            int id = pick(msgs), bad = rnd(10) == 0;
            r = msgsnd(id, bad ? NULL : &m, len, IPC_NOWAIT);
            OUT("msgsnd(%d, %ld, %zu%s)", id, m.mtype, len, bad ? ", NULL" : "");
            break;
        }
        case 8: {
            struct { long mtype; char text[32]; } m;
            memset(&m, 0, sizeof m);
            long type = (long)rnd(7) - 3;
            size_t len = rnd(24);
            int flags = IPC_NOWAIT | (rnd(2) ? MSG_NOERROR : 0) | (rnd(4) == 0 ? MSG_EXCEPT : 0);
            int id = pick(msgs);
            r = msgrcv(id, &m, len, type, flags);
            OUT("msgrcv(%d, %zu, %ld, %o)", id, len, type, flags);
            if (r >= 0)
                printf("  type %ld text %.*s\n", m.mtype, (int)r, m.text);
            break;
        }
        case 9: {
            int id = pick(msgs);
            struct msqid_ds ds;
            int set = rnd(3) == 0;
            if (set) {
                memset(&ds, 0, sizeof ds);
                ds.msg_perm.uid = geteuid();
                ds.msg_perm.gid = getegid();
                ds.msg_perm.mode = (unsigned short)mode();
                ds.msg_qbytes = 20 + rnd(100);
            }
            r = msgctl(id, set ? IPC_SET : IPC_STAT, &ds);
            OUT("msgctl(%d, %s)", id, set ? "IPC_SET" : "IPC_STAT");
            if (!set && r == 0)
                printf("  key %x mode %o qnum %lu cbytes %lu qbytes %lu lspid %d lrpid %d\n",
                       ds.msg_perm.__key, ds.msg_perm.mode, ds.msg_qnum, ds.__msg_cbytes,
                       ds.msg_qbytes, ds.msg_lspid == me, ds.msg_lrpid == me);
            break;
        }
        case 10:
        case 15: {
            /* IPC_RMID of a queue or a segment, now and then an unknown command. */
            int shm = what == 15, id = pick(shm ? shms : msgs), bogus = rnd(4) == 0;
            if (shm)
                r = shmctl(id, bogus ? 99 : IPC_RMID, NULL);
            else
                r = msgctl(id, bogus ? 77 : IPC_RMID, NULL);
            OUT("%s(%d, %s)", shm ? "shmctl" : "msgctl", id, shm ? "IPC_RMID" : "RMID");
            break;
        }
        case 11: {
            static const size_t sizes[] = {0, 1, 4096, 5000, 1 << 20};
            size_t size = sizes[rnd(5)];
            int k = key(), f = cflags();
            r = shmget(k, size, f);
            OUT("shmget(%x, %zu, %o)", k, size, f);
            remember(shms, (int)r);
            break;
        }
        case 12: {
            int id = pick(shms), flags = rnd(2) ? SHM_RDONLY : 0;
            void *p = shmat(id, NULL, flags);
            r = p == (void *)-1 ? -1 : 0;
            OUT("shmat(%d, %o)", id, flags);
            if (p != (void *)-1)
                keep_attachment(p);
            break;
        }
        case 13: {
            unsigned slot = rnd(POOL);
            int bogus = !atts[slot] || rnd(5) == 0;
            r = shmdt(bogus ? (void *)4096 : atts[slot]);
            if (!bogus)
                atts[slot] = NULL;
            OUT("shmdt(%s)", bogus ? "bogus" : "attached");
            break;
        }
        case 14: {
            int id = pick(shms);
            struct shmid_ds ds;
            int bad = rnd(10) == 0;
            r = shmctl(id, IPC_STAT, bad ? NULL : &ds);
            OUT("shmctl(%d, IPC_STAT%s)", id, bad ? ", NULL" : "");
            if (!bad && r == 0)
                printf("  key %x mode %o size %zu nattch %lu cpid %d lpid %d\n",
                       ds.shm_perm.__key, ds.shm_perm.mode, ds.shm_segsz, ds.shm_nattch,
                       ds.shm_cpid == me, ds.shm_lpid == me);
            break;
        }
        case 16: {
            struct sembuf op = {(unsigned short)rnd(3), (short)(rnd(2) ? 32767 : -32768),
                                IPC_NOWAIT};
            struct timespec ts = {0, rnd(2) ? 1000 : 1000000000L};
            int id = pick(sems), bad = rnd(6) == 0;
            r = semtimedop(id, &op, 1, bad ? (struct timespec *)8 : &ts);
            OUT("semtimedop(%d, %d, %ld%s)", id, op.sem_op, ts.tv_nsec, bad ? ", bad" : "");
            break;
        }
        case 17: {
            struct seminfo si;
            int cmd = rnd(2) ? SEM_INFO : IPC_INFO;
            r = semctl(0, 0, cmd, (union semun){.__buf = &si});
            OUT("semctl(%s)", cmd == SEM_INFO ? "SEM_INFO" : "IPC_INFO");
            if (r >= 0)
                printf("  usz %d aem %d mni %d msl %d\n", si.semusz, si.semaem, si.semmni,
                       si.semmsl);
            break;
        }
        case 18: {
            struct msginfo mi;
            int cmd = rnd(2) ? MSG_INFO : IPC_INFO;
            r = msgctl(0, cmd, (struct msqid_ds *)&mi);
            OUT("msgctl(%s)", cmd == MSG_INFO ? "MSG_INFO" : "IPC_INFO");
            if (r >= 0)
                printf("  pool %d map %d tql %d max %d\n", mi.msgpool, mi.msgmap, mi.msgtql,
                       mi.msgmax);
            break;
        }
        case 19: {
            struct shm_info su;
            struct shminfo sl;
            int cmd = rnd(2) ? SHM_INFO : IPC_INFO;
            r = shmctl(0, cmd, cmd == SHM_INFO ? (struct shmid_ds *)&su : (struct shmid_ds *)&sl);
            OUT("shmctl(%s)", cmd == SHM_INFO ? "SHM_INFO" : "IPC_INFO");
            if (r >= 0 && cmd == SHM_INFO)
                printf("  used %d tot %lu\n", su.used_ids, su.shm_tot);
            else if (r >= 0)
                printf("  max %lu mni %lu all %lu\n", sl.shmmax, sl.shmmni, sl.shmall);
            break;
        }
        case 20: {
            int idx = (int)rnd(4);
            static const int kinds[] = {SEM_STAT, SEM_STAT_ANY, MSG_STAT, MSG_STAT_ANY,
                                        SHM_STAT, SHM_STAT_ANY};
            int k = (int)rnd(6);
            union {
                struct semid_ds s;
                struct msqid_ds m;
                struct shmid_ds h;
            } u;
            if (k < 2)
                r = semctl(idx, 0, kinds[k], (union semun){.buf = &u.s});
            else if (k < 4)
                r = msgctl(idx, kinds[k], &u.m);
            else
                r = shmctl(idx, kinds[k], &u.h);
            OUT("stat(kind %d, index %d)", k, idx);
            break;
        }
        case 21: {
            int id = pick(msgs);
            struct { long mtype; char text[32]; } m;
            long n = (long)rnd(3);
            int flags = IPC_NOWAIT | MSG_COPY | (rnd(5) == 0 ? MSG_EXCEPT : 0);
            r = msgrcv(id, &m, sizeof m.text, n, flags);
            OUT("msgrcv(%d, COPY %ld, %o)", id, n, flags);
            if (r >= 0)
                printf("  type %ld text %.*s\n", m.mtype, (int)r, m.text);
            break;
        }
        case 22: {
            int id = pick(shms);
            int cmd = rnd(2) ? SHM_LOCK : SHM_UNLOCK;
            r = shmctl(id, cmd, NULL);
            OUT("shmctl(%d, %s)", id, cmd == SHM_LOCK ? "LOCK" : "UNLOCK");
            break;
        }
        case 23:
        case 24: {
            /* Explicit addresses in a region left free on purpose, the same in both runs.
             * Without SHM_REMAP: Linux counts a segment's mappings (VMAs) in nattch, so a
             * remap over part of an attachment splits it, which uipc does not model. */
            char *base = (char *)0x500000000000UL;
            static const int fl[] = {0, SHM_RND, SHM_RDONLY, SHM_RND | SHM_RDONLY, SHM_RND};
            int flags = fl[rnd(5)], id = pick(shms);
            char *want = base + 4096 * rnd(64) + (rnd(3) == 0 ? 100 : 0);
            void *p = shmat(id, want, flags);
            r = p == (void *)-1 ? -1 : (long)((char *)p - base);
            OUT("shmat(%d, base+%ld, %o)", id, (long)(want - base), flags);
            if (p != (void *)-1)
                keep_attachment(p);
            break;
        }
        case 26: {
            /* semop's count checks against its pointer: E2BIG, EINVAL, EFAULT, in Linux's
             * order. */
            static const size_t counts[] = {0, 32, 33, 500, 501, 65536};
            size_t cnt = counts[rnd(6)];
            static struct sembuf many[600];
            for (size_t j = 0; j < 600; j++)
                many[j] = (struct sembuf){0, 0, IPC_NOWAIT};
            int id = pick(sems), bad = rnd(3) == 0;
            r = semop(id, bad ? NULL : many, cnt);
            OUT("semop(%d, %s, %zu)", id, bad ? "NULL" : "zeros", cnt);
            break;
        }
        case 27: {
            /* Sizes at and past the limits, for msgsnd and msgrcv. */
            static const size_t sizes[] = {0, 8192, 8193, 65536, (size_t)LONG_MAX + 1, SIZE_MAX};
            size_t len = sizes[rnd(6)];
            static struct { long mtype; char text[9000]; } big = {1, ""};
            int id = pick(msgs), send = (int)rnd(2), bad = rnd(4) == 0;
            if (send)
                r = msgsnd(id, bad ? NULL : &big, len, IPC_NOWAIT | (rnd(2) ? MSG_NOERROR : 0));
            else
                r = msgrcv(id, bad ? NULL : &big, len, 0, IPC_NOWAIT | MSG_NOERROR);
            OUT("%s(%d, %zu%s)", send ? "msgsnd" : "msgrcv", id, len, bad ? ", NULL" : "");
            break;
        }
        case 28: {
            /* shmat's other flags: SHM_EXEC, SHM_REMAP without an address. */
            static const int fl[] = {SHM_EXEC, SHM_REMAP, SHM_REMAP | SHM_RND, SHM_EXEC | SHM_RDONLY,
                                     0x7000};
            int flags = fl[rnd(5)], id = pick(shms);
            void *p = shmat(id, NULL, flags);
            r = p == (void *)-1 ? -1 : 0;
            OUT("shmat(%d, NULL, %o)", id, flags);
            if (p != (void *)-1)
                keep_attachment(p);
            break;
        }
        case 29: {
            /* The ctl calls with a NULL or unmapped buffer, and unknown commands. */
            static void *const bufs[] = {NULL, (void *)8};
            void *buf = bufs[rnd(2)];
            static const int cmds[] = {IPC_STAT, IPC_SET, IPC_INFO, 1000};
            int cmd = cmds[rnd(4)], kind = (int)rnd(3);
            int id = pick(kind == 0 ? sems : kind == 1 ? msgs : shms);
            if (kind == 0)
                r = semctl(id, 0, cmd, (union semun){.buf = buf});
            else if (kind == 1)
                r = msgctl(id, cmd, buf);
            else
                r = shmctl(id, cmd, buf);
            OUT("ctl(kind %d, %d, cmd %d, %s)", kind, id, cmd, buf ? "unmapped" : "NULL");
            break;
        }
        case 30: {
            /* SETVAL and SETALL just inside and outside a semaphore's range. */
            static const int vals[] = {-1, 0, 32767, 32768, 65535, 65536};
            int id = pick(sems), val = vals[rnd(6)];
            r = semctl(id, 0, SETVAL, (union semun){.val = val});
            OUT("semctl(%d, SETVAL, %d)", id, val);
            break;
        }
        default: {
            int id = pick(sems);
            struct semid_ds ds;
            memset(&ds, 0, sizeof ds);
            ds.sem_perm.uid = rnd(2) ? geteuid() : 4321;
            ds.sem_perm.gid = getegid();
            ds.sem_perm.mode = (unsigned short)mode();
            int bad = rnd(8) == 0;
            r = semctl(id, 0, IPC_SET, (union semun){.buf = bad ? NULL : &ds});
            OUT("semctl(%d, IPC_SET, uid %u%s)", id, ds.sem_perm.uid, bad ? ", NULL" : "");
            break;
        }
        }
    }
    return 0;
}
