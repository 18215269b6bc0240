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

/* Receives into a buffer filled with '#', returns the length; the type in *type. */
static ssize_t rcv(int q, size_t max, long typ, int flg, long *type, char *text) {
    struct msg m;
    memset(&m, '#', sizeof m);
    ssize_t n = msgrcv(q, &m, max, typ, flg);
    if (n >= 0) {
        *type = m.mtype;
        memcpy(text, m.text, sizeof m.text);
    }
    return n;
}

static void basic(void) {
    int q = new_queue();
    struct msqid_ds ds = stat_of(q);
    CHECK(ds.msg_qnum == 0 && ds.msg_stime == 0 && ds.msg_rtime == 0 && ds.msg_lspid == 0);
    time_t t0 = time(NULL);
    long type;
    char text[256];
    for (int i = 0; i < 1000; i++) {
        CHECK(snd(q, 1 + i % 3, "0123456789abcdef", 1 + i % 16, 0) == 0);
        CHECK(rcv(q, 64, 0, 0, &type, text) == 1 + i % 16);
        CHECK(type == 1 + i % 3 && memcmp(text, "0123456789abcdef", 1 + i % 16) == 0);
        CHECK(text[1 + i % 16] == '#');
    }
    CHECK(snd(q, 9, "hello", 5, 0) == 0);
    CHECK(snd(q, 8, "", 0, IPC_NOWAIT) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 2 && ds.__msg_cbytes == 5);
    CHECK(ds.msg_lspid == getpid() && ds.msg_lrpid == getpid());
    CHECK(ds.msg_stime >= t0 - 1 && ds.msg_stime <= time(NULL) + 1);
    CHECK(ds.msg_rtime >= t0 - 1 && ds.msg_rtime <= time(NULL) + 1);
    CHECK(rcv(q, 64, 0, IPC_NOWAIT, &type, text) == 5 && type == 9);
    CHECK(rcv(q, 0, 0, IPC_NOWAIT, &type, text) == 0 && type == 8);
    CHECK(rcv(q, 64, 0, IPC_NOWAIT, &type, text) == -1 && errno == ENOMSG);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 0 && ds.__msg_cbytes == 0);
    /* A message queued through the daemon (after IPC_STAT) and taken by the fast path, and
     * the other way round, in order. */
    for (int i = 0; i < 100; i++) {
        CHECK(snd(q, 1, "a", 1, 0) == 0);
        stat_of(q);
        CHECK(snd(q, 1, "b", 1, 0) == 0);
        CHECK(rcv(q, 64, 0, 0, &type, text) == 1 && text[0] == 'a');
        stat_of(q);
        CHECK(rcv(q, 64, 0, 0, &type, text) == 1 && text[0] == 'b');
    }
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts("basic: messages, qnum, cbytes, pids and times");
}

static void modes(void) {
    int q = new_queue();
    long type;
    char text[256];
    CHECK(snd(q, 5, "a", 1, 0) == 0);
    CHECK(snd(q, 2, "b", 1, 0) == 0);
    CHECK(snd(q, 7, "c", 1, 0) == 0);
    CHECK(snd(q, 2, "d", 1, 0) == 0);
    CHECK(rcv(q, 64, 9, IPC_NOWAIT, &type, text) == -1 && errno == ENOMSG);
    CHECK(rcv(q, 64, -1, IPC_NOWAIT, &type, text) == -1 && errno == ENOMSG);
    CHECK(rcv(q, 64, 5, MSG_EXCEPT, &type, text) == 1 && type == 2 && text[0] == 'b');
    CHECK(rcv(q, 64, -6, 0, &type, text) == 1 && type == 2 && text[0] == 'd');
    CHECK(rcv(q, 64, 7, 0, &type, text) == 1 && type == 7);
    CHECK(rcv(q, 64, 5, 0, &type, text) == 1 && type == 5);
    char big[200];
    memset(big, 'x', sizeof big);
    CHECK(snd(q, 3, big, 200, 0) == 0);
    CHECK(rcv(q, 199, 0, IPC_NOWAIT, &type, text) == -1 && errno == E2BIG);
    CHECK(stat_of(q).msg_qnum == 1);
    CHECK(rcv(q, 10, 0, MSG_NOERROR, &type, text) == 10 && type == 3);
    CHECK(text[9] == 'x' && text[10] == '#');
    CHECK(stat_of(q).msg_qnum == 0 && stat_of(q).__msg_cbytes == 0);
    /* MSG_EXCEPT with 0 and negative types: as msgtyp alone. */
    CHECK(snd(q, 4, "e", 1, 0) == 0);
    CHECK(rcv(q, 64, 0, MSG_EXCEPT, &type, text) == 1 && type == 4);
    CHECK(snd(q, 4, "f", 1, 0) == 0);
    CHECK(rcv(q, 64, -4, MSG_EXCEPT, &type, text) == 1 && type == 4);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts("modes: msgtyp 0, > 0, < 0, MSG_EXCEPT, MSG_NOERROR, E2BIG, ENOMSG");
}

static void errnos(void) {
    int q = new_queue();
    long type;
    char text[256];
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
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &type, text) == -1 && errno == ENOMSG);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    CHECK(snd(q, 1, "x", 1, 0) == -1 && (errno == EINVAL || errno == EIDRM));
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &type, text) == -1 && (errno == EINVAL || errno == EIDRM));
    puts("errnos: EINVAL, EFAULT (send and receive), after removal");
}

static void limits(void) {
    int q = new_queue();
    long type;
    char text[256];
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
    CHECK(rcv(q, 64, 0, 0, &type, text) == 64);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 3 && ds.__msg_cbytes == 86 && ds.msg_lspid == pid);
    CHECK(rcv(q, 64, 0, 0, &type, text) == 36);
    CHECK(rcv(q, 64, 0, 0, &type, text) == 0);
    CHECK(rcv(q, 64, 0, 0, &type, text) == 50 && type == 2);
    /* A receiver parked for a message, woken by a send. */
    pid = checked_fork();
    if (pid == 0) {
        CHECK(rcv(q, 64, 3, 0, &type, text) == 5 && type == 3);
        _exit(0);
    }
    usleep(50000);
    CHECK(snd(q, 1, "other", 5, 0) == 0);
    CHECK(snd(q, 3, "three", 5, 0) == 0);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 1 && ds.msg_lrpid == pid);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts("limits: qbytes, EAGAIN, parked sender and receiver woken");
}

static void perms(void) {
    int q = new_queue();
    long type;
    char text[256];
    CHECK(snd(q, 1, "x", 1, 0) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "x", 1, IPC_NOWAIT) == -1 && errno == EACCES);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &type, text) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0);
    struct msqid_ds ds = stat_of(q);
    ds.msg_perm.mode = 0622;
    CHECK(msgctl(q, IPC_SET, &ds) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "y", 1, IPC_NOWAIT) == 0);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &type, text) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0);
    ds.msg_perm.mode = 0644;
    CHECK(msgctl(q, IPC_SET, &ds) == 0);
    CHECK(seteuid(65534) == 0);
    CHECK(snd(q, 1, "z", 1, IPC_NOWAIT) == -1 && errno == EACCES);
    CHECK(rcv(q, 8, 0, IPC_NOWAIT, &type, text) == 1 && text[0] == 'x');
    CHECK(seteuid(0) == 0);
    ds = stat_of(q);
    CHECK(ds.msg_qnum == 1 && ds.msg_lspid == getpid() && ds.msg_lrpid == getpid());
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts("perms: owner, others, IPC_SET applies to the next call");
}

static void removal(void) {
    for (int round = 0; round < 20; round++) {
        int q = msgget(IPC_PRIVATE, 0600);
        CHECK(q >= 0);
        pid_t pid = checked_fork();
        if (pid == 0) {
            long type;
            char text[256];
            for (;;) {
                if (snd(q, 1, "r", 1, 0) != 0)
                    _exit(errno == EIDRM || errno == EINVAL ? 0 : 1);
                if (rcv(q, 8, 0, 0, &type, text) != 1)
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
    long type;
    char text[256];
    for (int i = 0; i < PER_THREAD; i++) {
        CHECK(rcv(tq, 64, 0, 0, &type, text) == 4);
        int v;
        memcpy(&v, text, 4);
        CHECK(v >= 0 && v < THREADS * PER_THREAD);
        CHECK(__atomic_fetch_add(&seen[v], 1, __ATOMIC_RELAXED) == 0);
    }
    return NULL;
}

static void threads(void) {
    tq = new_queue();
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
    CHECK(msgctl(tq, IPC_RMID, NULL) == 0);
    puts("threads: 4 senders, 4 receivers, every message once");
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

static void handler(void) {
    hq = new_queue();
    handle_signal(SIGALRM, on_alarm, SA_RESTART);
    struct itimerval it = {{0, 200}, {0, 200}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    long type;
    char text[256];
    for (int i = 0; i < 20000 && handled < 200; i++) {
        CHECK(snd(hq, 1, "main", 4, 0) == 0);
        CHECK(rcv(hq, 64, 1, 0, &type, text) == 4 && type == 1);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    CHECK(!handler_failed && handled > 0);
    CHECK(stat_of(hq).msg_qnum == 0);
    CHECK(msgctl(hq, IPC_RMID, NULL) == 0);
    puts("handler: a signal handler's calls on the queue the interrupted code uses");
}

static void processes(void) {
    int q = new_queue();
    enum { PROCS = 4, EACH = 1000 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = checked_fork();
        if (pids[p] == 0) {
            long type;
            char text[256];
            for (int i = 0; i < EACH; i++) {
                CHECK(snd(q, 1 + p, "p", 1, 0) == 0);
                CHECK(rcv(q, 8, 0, 0, &type, text) == 1);
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
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    puts("processes: 4 processes sending and receiving on one queue");
}

int main(void) {
    basic();
    modes();
    errnos();
    limits();
    perms();
    removal();
    threads();
    handler();
    processes();
    return 0;
}
