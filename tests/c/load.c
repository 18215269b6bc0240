/* Load: NPROC processes in a ring, OPS rounds each. A round is a SEM_UNDO lock/unlock of a
 * shared semaphore, a msgsnd to the next process (typed by its rank) and a msgrcv of the
 * previous one's message, checked for sender and sequence: no error, no lost or reordered
 * message. Prints the throughput in system calls per second.
 *   load NPROC OPS */
#include "check.h"
#include <time.h>

struct msg {
    long mtype;
    int from;
    int seq;
};

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int nproc = atoi(argv[1]), ops = atoi(argv[2]);
    CHECK(nproc >= 2 && ops >= 1);
    int sem = semget(IPC_PRIVATE, 2, 0600); /* 0: the lock, 1: the start gate */
    int q = msgget(IPC_PRIVATE, 0600);
    CHECK(sem >= 0 && q >= 0);
    CHECK(semctl(sem, 0, SETVAL, (union semun){.val = 1}) == 0);
    for (int i = 0; i < nproc; i++) {
        pid_t pid = checked_fork();
        if (pid > 0)
            continue;
        struct sembuf gate = {1, -1, 0}, lock = {0, -1, SEM_UNDO}, unlock = {0, 1, SEM_UNDO};
        CHECK(semop(sem, &gate, 1) == 0);
        int next = (i + 1) % nproc, prev = (i + nproc - 1) % nproc;
        for (int k = 0; k < ops; k++) {
            CHECK(semop(sem, &lock, 1) == 0);
            CHECK(semop(sem, &unlock, 1) == 0);
            struct msg m = {.mtype = next + 1, .from = i, .seq = k};
            CHECK(msgsnd(q, &m, sizeof m - sizeof m.mtype, 0) == 0);
            CHECK(msgrcv(q, &m, sizeof m - sizeof m.mtype, i + 1, 0) ==
                  (ssize_t)(sizeof m - sizeof m.mtype));
            CHECK(m.from == prev && m.seq == k);
        }
        _exit(0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct sembuf open_gate = {1, (short)nproc, 0};
    CHECK(semop(sem, &open_gate, 1) == 0);
    for (int i = 0; i < nproc; i++) {
        int st;
        pid_t pid = wait(&st);
        CHECK(pid > 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "load: a client failed (status 0x%x)\n", st);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct msqid_ds ds;
    CHECK(msgctl(q, IPC_STAT, &ds) == 0 && ds.msg_qnum == 0);
    CHECK(semctl(sem, 0, GETVAL) == 1 && semctl(sem, 1, GETVAL) == 0);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    long calls = 4L * nproc * ops;
    printf("load: %d processes x %d rounds: %ld calls in %.3f s, %.0f calls/s\n", nproc, ops,
           calls, secs, (double)calls / secs);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && msgctl(q, IPC_RMID, NULL) == 0);
    return 0;
}
