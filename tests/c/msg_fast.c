/* Message queue calls the fast path serves (msgsnd with room, msgrcv of the first message,
 * ENOMSG, EAGAIN and E2BIG) interleaved with what makes the daemon take a queue back (IPC_STAT,
 * IPC_SET, IPC_RMID, typed receives of later messages, blocking calls, MSG_INFO): messages,
 * errnos, qnum, cbytes, lspid, lrpid, stime, rtime and permissions as Linux gives them; a
 * sender and a receiver parked while the other side calls; removal during use; threads and
 * a signal handler using the queue the interrupted code is using; many processes at once.
 * Runs as root (the permission part switches the effective uid); prints one line per part. */
#include "check.h"
#include <pthread.h>
#include <sys/mman.h>
#include <sys/time.h>

struct msg {
    long mtype;
    char text[256];
};

static int snd(int q, long type, const char *text, size_t len, int flg) {
    struct msg m = {.mtype = type};
    memcpy(m.text, text, len);
    return msgsnd(q, &m, len, flg);
}

/* Receives into `got`, filled with '#' first; returns the length. */
static ssize_t rcv(int q, size_t max, long typ, int flg, struct msg *got) {
    memset(got, '#', sizeof *got);
    return msgrcv(q, got, max, typ, flg);
}

static void basic(int q) {
    struct msqid_ds ds = stat_of(q);
    CHECK(ds.msg_qnum == 0 && ds.msg_stime == 0 && ds.msg_rtime == 0 && ds.msg_lspid == 0);
    time_t t0 = time(NULL);
    struct msg got;
    for (int i = 0; i < 1000; i++) {
        CHECK(snd(q, 1 + i % 3, "0123456789abcdef", 1 + i % 16, 0) == 0);
        CHECK(rcv(q, 64, 0, 0, &got) == 1 + i % 16);
        CHECK(got.mtype == 1 + i % 3 && memcmp(got.text, "0123456789abcdef", 1 + i % 16) == 0);
        CHECK(got.text[1 + i % 16] == '#');
    }
    CHECK(snd(q, 9, "hello", 5, 0) == 0);
    CHECK(snd(q, 8, "", 0, IPC_NOWAIT) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 2 && ds.__msg_cbytes == 5);
    CHECK(ds.msg_lspid == getpid() && ds.msg_lrpid == getpid());
    CHECK(ds.msg_stime >= t0 - 1 && ds.msg_stime <= time(NULL) + 1);
    CHECK(ds.msg_rtime >= t0 - 1 && ds.msg_rtime <= time(NULL) + 1);
    CHECK(rcv(q, 64, 0, IPC_NOWAIT, &got) == 5 && got.mtype == 9);
    CHECK(rcv(q, 0, 0, IPC_NOWAIT, &got) == 0 && got.mtype == 8);
    CHECK(rcv(q, 64, 0, IPC_NOWAIT, &got) == -1 && errno == ENOMSG);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 0 && ds.__msg_cbytes == 0);
    /* A message queued through the daemon (after IPC_STAT) and taken by the fast path, and
     * the other way round, in order. */
    for (int i = 0; i < 100; i++) {
        CHECK(snd(q, 1, "a", 1, 0) == 0);
        stat_of(q);
        CHECK(snd(q, 1, "b", 1, 0) == 0);
        CHECK(rcv(q, 64, 0, 0, &got) == 1 && got.text[0] == 'a');
        stat_of(q);
        CHECK(rcv(q, 64, 0, 0, &got) == 1 && got.text[0] == 'b');
    }
}

static void modes(int q) {
    struct msg got;
    CHECK(snd(q, 5, "a", 1, 0) == 0);
    CHECK(snd(q, 2, "b", 1, 0) == 0);
    CHECK(snd(q, 7, "c", 1, 0) == 0);
    CHECK(snd(q, 2, "d", 1, 0) == 0);
    CHECK(rcv(q, 64, 9, IPC_NOWAIT, &got) == -1 && errno == ENOMSG);
    CHECK(rcv(q, 64, -1, IPC_NOWAIT, &got) == -1 && errno == ENOMSG);
    CHECK(rcv(q, 64, 5, MSG_EXCEPT, &got) == 1 && got.mtype == 2 && got.text[0] == 'b');
    CHECK(rcv(q, 64, -6, 0, &got) == 1 && got.mtype == 2 && got.text[0] == 'd');
    CHECK(rcv(q, 64, 7, 0, &got) == 1 && got.mtype == 7);
    CHECK(rcv(q, 64, 5, 0, &got) == 1 && got.mtype == 5);
    char big[200];
    memset(big, 'x', sizeof big);
    CHECK(snd(q, 3, big, 200, 0) == 0);
    CHECK(rcv(q, 199, 0, IPC_NOWAIT, &got) == -1 && errno == E2BIG);
    CHECK(stat_of(q).msg_qnum == 1);
    CHECK(rcv(q, 10, 0, MSG_NOERROR, &got) == 10 && got.mtype == 3);
    CHECK(got.text[9] == 'x' && got.text[10] == '#');
    CHECK(stat_of(q).msg_qnum == 0 && stat_of(q).__msg_cbytes == 0);
    /* MSG_EXCEPT with 0 and negative types: as msgtyp alone. */
    CHECK(snd(q, 4, "e", 1, 0) == 0);
    CHECK(rcv(q, 64, 0, MSG_EXCEPT, &got) == 1 && got.mtype == 4);
    CHECK(snd(q, 4, "f", 1, 0) == 0);
    CHECK(rcv(q, 64, -4, MSG_EXCEPT, &got) == 1 && got.mtype == 4);
}

static void errnos(void) {
    int q = new_queue();
    struct msg got;
    struct msg m = {.mtype = 0};
    CHECK(msgsnd(q, &m, 1, 0) == -1 && errno == EINVAL);
    m.mtype = -5;
    CHECK(msgsnd(q, &m, 1, IPC_NOWAIT) == -1 && errno == EINVAL);
    m.mtype = 1;
    CHECK(msgsnd(q, &m, 8193, 0) == -1 && errno == EINVAL);
    CHECK(msgsnd(-1, &m, 1, 0) == -1 && errno == EINVAL);
    CHECK(msgsnd(q, (void *)8, 1, 0) == -1 && errno == EFAULT);
    CHECK(msgrcv(q, &m, (size_t)-1, 0, IPC_NOWAIT) == -1 && errno == EINVAL);
    CHECK(msgrcv(q + 1, &m, 8, 0, IPC_NOWAIT) == -1 && (errno == EINVAL || errno == EIDRM));
    /* Text that cannot be read: EFAULT, nothing queued. */
    long pg = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    CHECK(mprotect(p + pg, pg, PROT_NONE) == 0);
    struct msg *edge = (struct msg *)(p + pg - 16);
    edge->mtype = 1;
    CHECK(msgsnd(q, edge, 100, 0) == -1 && errno == EFAULT);
    CHECK(stat_of(q).msg_qnum == 0);
    CHECK(msgsnd(q, edge, 8, 0) == 0);
    CHECK(msgrcv(q, edge, 100, 0, IPC_NOWAIT) == 8 && edge->mtype == 1);
    /* A buffer that cannot take the message: EFAULT, and the message is gone. */
    CHECK(snd(q, 1, "0123456789abcdefghij", 20, 0) == 0);
    CHECK(msgrcv(q, edge, 100, 0, IPC_NOWAIT) == -1 && errno == EFAULT);
    CHECK(stat_of(q).msg_qnum == 0);
    CHECK(snd(q, 1, "z", 1, 0) == 0);
    CHECK(msgrcv(q, (void *)8, 100, 0, IPC_NOWAIT) == -1 && errno == EFAULT);
    CHECK(stat_of(q).msg_qnum == 0);
    CHECK(munmap(p, 2 * pg) == 0);
    /* A heap message, sent and received outside the stack. */
    struct msg *h = malloc(sizeof *h);
    CHECK(h != NULL);
    h->mtype = 6;
    memset(h->text, 'h', 100);
    CHECK(msgsnd(q, h, 100, 0) == 0);
    memset(h, 0, sizeof *h);
    CHECK(msgrcv(q, h, 100, 0, 0) == 100 && h->mtype == 6 && h->text[99] == 'h');
    free(h);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &got) == -1 && errno == ENOMSG);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    CHECK(snd(q, 1, "x", 1, 0) == -1 && (errno == EINVAL || errno == EIDRM));
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &got) == -1 && (errno == EINVAL || errno == EIDRM));
    puts("errnos: EINVAL, EFAULT (send and receive), after removal");
}

static void limits(int q) {
    struct msg got;
    struct msqid_ds ds = stat_of(q);
    ds.msg_qbytes = 100;
    CHECK(msgctl(q, IPC_SET, &ds) == 0);
    char big[64];
    memset(big, 'q', sizeof big);
    CHECK(snd(q, 1, big, 64, 0) == 0);
    CHECK(snd(q, 1, big, 64, IPC_NOWAIT) == -1 && errno == EAGAIN);
    CHECK(snd(q, 1, big, 36, IPC_NOWAIT) == 0);
    CHECK(snd(q, 1, big, 1, IPC_NOWAIT) == -1 && errno == EAGAIN);
    CHECK(snd(q, 1, big, 0, IPC_NOWAIT) == 0); /* 100 + 0 <= 100, 3 messages <= 100 */
    /* A sender parked for room, woken by a receive. */
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(snd(q, 2, big, 50, 0) == 0);
        _exit(0);
    }
    usleep(50000);
    CHECK(rcv(q, 64, 0, 0, &got) == 64);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 3 && ds.__msg_cbytes == 86 && ds.msg_lspid == pid);
    CHECK(rcv(q, 64, 0, 0, &got) == 36);
    CHECK(rcv(q, 64, 0, 0, &got) == 0);
    CHECK(rcv(q, 64, 0, 0, &got) == 50 && got.mtype == 2);
    /* A receiver parked for a message, woken by a send. */
    pid = checked_fork();
    if (pid == 0) {
        CHECK(rcv(q, 64, 3, 0, &got) == 5 && got.mtype == 3);
        _exit(0);
    }
    usleep(50000);
    CHECK(snd(q, 1, "other", 5, 0) == 0);
    CHECK(snd(q, 3, "three", 5, 0) == 0);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 1 && ds.msg_lrpid == pid);
}

static void perms(int q) {
    struct msg got;
    CHECK(snd(q, 1, "x", 1, 0) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "x", 1, IPC_NOWAIT) == -1 && errno == EACCES);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &got) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0);
    struct msqid_ds ds = stat_of(q);
    ds.msg_perm.mode = 0622;
    CHECK(msgctl(q, IPC_SET, &ds) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "y", 1, IPC_NOWAIT) == 0);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &got) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0);
    ds.msg_perm.mode = 0644;
    CHECK(msgctl(q, IPC_SET, &ds) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "z", 1, IPC_NOWAIT) == -1 && errno == EACCES);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &got) == 1 && got.text[0] == 'x');
    CHECK(seteuid(0) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 1 && ds.msg_lspid == getpid() && ds.msg_lrpid == getpid());
}

static void removal(void) {
    for (int round = 0; round < 20; round++) {
        int q = new_queue();
        pid_t pid = checked_fork();
        if (pid == 0) {
            struct msg got;
            for (;;) {
                if (snd(q, 1, "r", 1, 0) != 0)
                    _exit(errno == EIDRM || errno == EINVAL ? 0 : 1);
                if (rcv(q, 8, 0, 0, &got) != 1)
                    _exit(errno == EIDRM || errno == EINVAL ? 0 : 2);
            }
        }
        usleep(2000 + round * 500);
        CHECK(msgctl(q, IPC_RMID, NULL) == 0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    puts("removal: a process in a send and receive loop gets EIDRM or EINVAL");
}

static int tq;
enum { THREADS = 4, PER_THREAD = 2000 };
static unsigned char seen[THREADS * PER_THREAD];

static void *sender(void *arg) {
    int t = (int)(long)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        int v = t * PER_THREAD + i;
        CHECK(snd(tq, 1, (char *)&v, sizeof v, 0) == 0);
    }
    return NULL;
}

static void *receiver(void *arg) {
    (void)arg;
    struct msg got;
    for (int i = 0; i < PER_THREAD; i++) {
        CHECK(rcv(tq, 64, 0, 0, &got) == 4);
        int v;
        memcpy(&v, got.text, 4);
        CHECK(v >= 0 && v < THREADS * PER_THREAD);
        CHECK(__atomic_fetch_add(&seen[v], 1, __ATOMIC_RELAXED) == 0);
    }
    return NULL;
}

static void threads(int q) {
    tq = q;
    pthread_t th[2 * THREADS];
    for (long t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&th[t], NULL, sender, (void *)t) == 0);
        CHECK(pthread_create(&th[THREADS + t], NULL, receiver, NULL) == 0);
    }
    for (int i = 0; i < 50; i++) {
        stat_of(tq);
        usleep(100);
    }
    for (int t = 0; t < 2 * THREADS; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    for (int v = 0; v < THREADS * PER_THREAD; v++)
        CHECK(seen[v] == 1);
    struct msqid_ds ds = stat_of(tq);
    CHECK(ds.msg_qnum == 0 && ds.__msg_cbytes == 0);
}

static int hq;
static volatile sig_atomic_t handled, handler_failed;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    struct msg m = {.mtype = 2};
    if (msgsnd(hq, &m, 8, IPC_NOWAIT) != 0 || msgrcv(hq, &m, 8, 2, IPC_NOWAIT) != 8)
        handler_failed = 1;
    handled++;
    errno = saved;
}

static void handler(int q) {
    hq = q;
    handle_signal(SIGALRM, on_alarm, SA_RESTART);
    struct itimerval it = {{0, 200}, {0, 200}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    struct msg got;
    for (int i = 0; i < 20000 && handled < 200; i++) {
        CHECK(snd(hq, 1, "main", 4, 0) == 0);
        CHECK(rcv(hq, 64, 1, 0, &got) == 4 && got.mtype == 1);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    CHECK(!handler_failed && handled > 0);
    CHECK(stat_of(hq).msg_qnum == 0);
}

static void processes(int q) {
    enum { PROCS = 4, EACH = 1000 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = checked_fork();
        if (pids[p] == 0) {
            struct msg got;
            for (int i = 0; i < EACH; i++) {
                CHECK(snd(q, 1 + p, "p", 1, 0) == 0);
                CHECK(rcv(q, 8, 0, 0, &got) == 1);
            }
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        CHECK(waitpid(pids[p], &st, 0) == pids[p] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    struct msqid_ds ds = stat_of(q);
    CHECK(ds.msg_qnum == 0 && ds.__msg_cbytes == 0);
    int found = 0;
    for (int p = 0; p < PROCS; p++)
        found |= ds.msg_lspid == pids[p];
    CHECK(found);
    struct msginfo info;
    CHECK(msgctl(0, MSG_INFO, (struct msqid_ds *)&info) >= 0);
}

int main(void) {
    on_new_queue(basic, "basic: messages, qnum, cbytes, pids and times");
    on_new_queue(modes, "modes: msgtyp 0, > 0, < 0, MSG_EXCEPT, MSG_NOERROR, E2BIG, ENOMSG");
    errnos();
    on_new_queue(limits, "limits: qbytes, EAGAIN, parked sender and receiver woken");
    on_new_queue(perms, "perms: owner, others, IPC_SET applies to the next call");
    removal();
    on_new_queue(threads, "threads: 4 senders, 4 receivers, every message once");
    on_new_queue(handler,
                 "handler: a signal handler's calls on the queue the interrupted code uses");
    on_new_queue(processes, "processes: 4 processes sending and receiving on one queue");
    return 0;
}
