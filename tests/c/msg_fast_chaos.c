/* Senders and receivers SIGKILLed at random points of msgsnd and msgrcv loops (the fast path
 * under uipc run), while the parent makes the daemon take the queue back (IPC_STAT, MSG_INFO,
 * IPC_SET): no message duplicated, none torn, none lost beyond what a killed receiver took.
 *
 * Each sender life L sends messages (L, i) for i = 0, 1, ... and counts each in shared
 * memory after msgsnd returns; killed between the two, message sent[L] may exist uncounted.
 * Each receiver marks every message it gets (a byte per (L, i)) after msgrcv returns; killed
 * between the two, that message is gone unmarked, as a message a killed process took in the
 * kernel. At the end the parent drains the queue. So: no mark above 1, no message (L, i) with
 * i > sent[L], a whole text in every message, and at most one counted message missing per
 * receiver killed.
 * Usage: [KILLS]. */
#include "check.h"
#include <sys/mman.h>

enum { SENDERS = 2, RECEIVERS = 2, WORKERS = SENDERS + RECEIVERS, MAX_PER_LIFE = 4096 };

struct msg {
    long mtype;
    int life, seq, check, pad;
};

static pid_t spawn_sender(int q, volatile int *sent, int l) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        for (int i = 0; i < MAX_PER_LIFE; i++) {
            struct msg m = {.mtype = 1 + i % 3, .life = l, .seq = i, .check = l ^ i ^ 0x5a5a5a5a};
            /* Blocking when the queue is full: the daemon parks the sender. */
            CHECK(msgsnd(q, &m, sizeof m - sizeof m.mtype, i % 2 ? IPC_NOWAIT : 0) == 0 ||
                  errno == EAGAIN);
            if (errno == EAGAIN) {
                errno = 0;
                i--;
                continue;
            }
            sent[l] = i + 1;
        }
        pause();
        _exit(0);
    }
    return pid;
}

static void mark(volatile unsigned char *got, const struct msg *m, int lives) {
    if (m->life < 0 || m->life >= lives || m->seq < 0 || m->seq >= MAX_PER_LIFE ||
        m->check != (m->life ^ m->seq ^ 0x5a5a5a5a) || m->mtype != 1 + m->seq % 3) {
        fprintf(stderr, "torn message: life %d seq %d check %x type %ld\n", m->life, m->seq,
                m->check, m->mtype);
        _exit(3);
    }
    got[(long)m->life * MAX_PER_LIFE + m->seq]++;
}

static pid_t spawn_receiver(int q, volatile unsigned char *got, int lives) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        for (;;) {
            struct msg m;
            ssize_t n = msgrcv(q, &m, sizeof m - sizeof m.mtype, 0, 0);
            CHECK(n == sizeof m - sizeof m.mtype);
            mark(got, &m, lives);
        }
    }
    return pid;
}

int main(int argc, char **argv) {
    int kills = argc > 1 ? atoi(argv[1]) : 2000;
    int lives = kills + WORKERS;
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(q >= 0);
    volatile int *sent = mmap(NULL, lives * sizeof(int), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sent != MAP_FAILED);
    volatile unsigned char *got = mmap(NULL, (size_t)lives * MAX_PER_LIFE,
                                       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(got != MAP_FAILED);
    pid_t pids[WORKERS];
    int next = 0, receiver_kills = 0;
    for (int w = 0; w < WORKERS; w++)
        pids[w] = w < SENDERS ? spawn_sender(q, sent, next++) : spawn_receiver(q, got, lives);
    unsigned seed = 4321;
    for (int k = 0; k < kills; k++) {
        usleep(rand_r(&seed) % 1500);
        int w = rand_r(&seed) % WORKERS;
        struct msqid_ds ds;
        switch (k % 4) {
        case 0:
            CHECK(msgctl(q, IPC_STAT, &ds) == 0);
            break;
        case 1: {
            struct msginfo info;
            CHECK(msgctl(0, MSG_INFO, (struct msqid_ds *)&info) >= 0);
            break;
        }
        case 2:
            CHECK(msgctl(q, IPC_STAT, &ds) == 0);
            ds.msg_qbytes = k % 8 == 2 ? 16384 : 8192;
            CHECK(msgctl(q, IPC_SET, &ds) == 0);
            break;
        default:
            break;
        }
        CHECK(kill(pids[w], SIGKILL) == 0);
        int st;
        CHECK(waitpid(pids[w], &st, 0) == pids[w]);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
            fprintf(stderr, "worker %d ended with status %x\n", w, st);
            return 1;
        }
        if (w < SENDERS) {
            pids[w] = spawn_sender(q, sent, next++);
        } else {
            receiver_kills++;
            pids[w] = spawn_receiver(q, got, lives);
        }
    }
    for (int w = 0; w < WORKERS; w++) {
        CHECK(kill(pids[w], SIGKILL) == 0);
        int st;
        CHECK(waitpid(pids[w], &st, 0) == pids[w]);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        receiver_kills += w >= SENDERS;
    }
    struct msg m;
    long drained = 0;
    while (msgrcv(q, &m, sizeof m - sizeof m.mtype, 0, IPC_NOWAIT) == sizeof m - sizeof m.mtype) {
        mark(got, &m, next);
        drained++;
    }
    CHECK(errno == ENOMSG);
    long counted = 0, missing = 0, extra = 0;
    for (int l = 0; l < next; l++) {
        for (int i = 0; i < MAX_PER_LIFE; i++) {
            unsigned char g = got[(long)l * MAX_PER_LIFE + i];
            if (g > 1) {
                fprintf(stderr, "message (%d, %d) received %d times\n", l, i, g);
                return 1;
            }
            if (i < sent[l]) {
                counted++;
                missing += g == 0;
            } else if (g) {
                if (i > sent[l]) {
                    fprintf(stderr, "message (%d, %d) received, %d counted\n", l, i, sent[l]);
                    return 1;
                }
                extra++;
            }
        }
    }
    if (missing > receiver_kills) {
        fprintf(stderr, "%ld counted messages missing, %d receivers killed\n", missing,
                receiver_kills);
        return 1;
    }
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    fprintf(stderr,
            "msg_fast_chaos: %d kills, %ld messages counted, %ld drained, %ld taken by killed "
            "receivers, %ld sent by killed senders before their count\n",
            kills, counted, drained, missing, extra);
    puts("msg_fast_chaos: ok");
    return 0;
}
