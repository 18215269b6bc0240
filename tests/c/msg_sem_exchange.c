/* Two processes exchange 200 messages and hand a semaphore back and forth. */
#include "check.h"

struct msg {
    long mtype;
    char text[64];
};

int main(void) {
    int semid = semget(IPC_PRIVATE, 2, 0600);
    CHECK(semid >= 0);
    int msqid = msgget(IPC_PRIVATE, 0600);
    CHECK(msqid >= 0);
    pid_t child = checked_fork();
    if (child == 0) {
        for (int i = 0; i < 200; i++) {
            struct msg m;
            ssize_t n = msgrcv(msqid, &m, sizeof m.text, 1, 0);
            CHECK(n > 0);
            int v = atoi(m.text);
            m.mtype = 2;
            n = snprintf(m.text, sizeof m.text, "%d", v + 1);
            CHECK(msgsnd(msqid, &m, (size_t)n + 1, 0) == 0);
            struct sembuf wait0 = {0, -1, 0}, post1 = {1, 1, 0};
            CHECK(semop(semid, &wait0, 1) == 0);
            CHECK(semop(semid, &post1, 1) == 0);
        }
        exit(0);
    }
    for (int i = 0; i < 200; i++) {
        struct msg m = {.mtype = 1};
        int n = snprintf(m.text, sizeof m.text, "%d", i * 7);
        CHECK(msgsnd(msqid, &m, (size_t)n + 1, 0) == 0);
        memset(&m, 0, sizeof m);
        CHECK(msgrcv(msqid, &m, sizeof m.text, 2, 0) == n + 1 || atoi(m.text) == i * 7 + 1);
        CHECK(m.mtype == 2 && atoi(m.text) == i * 7 + 1);
        struct sembuf post0 = {0, 1, 0}, wait1 = {1, -1, 0};
        CHECK(semop(semid, &post0, 1) == 0);
        CHECK(semop(semid, &wait1, 1) == 0);
    }
    expect_clean_exit(child);
    struct msqid_ds ds;
    CHECK(msgctl(msqid, IPC_STAT, &ds) == 0);
    CHECK(ds.msg_qnum == 0);
    CHECK(ds.msg_lspid == child && ds.msg_lrpid == getpid());
    CHECK(semctl(semid, 1, GETPID) == getpid());
    CHECK(semctl(semid, 0, GETPID) == child);
    unsigned short vals[2] = {9, 9};
    CHECK(semctl(semid, 0, GETALL, (union semun){.array = vals}) == 0);
    CHECK(vals[0] == 0 && vals[1] == 0);
    /* A bad buffer is EFAULT, not a crash. */
    CHECK(msgctl(msqid, IPC_STAT, (struct msqid_ds *)8) == -1 && errno == EFAULT);
    CHECK(msgctl(msqid, IPC_RMID, NULL) == 0);
    CHECK(semctl(semid, 0, IPC_RMID) == 0);
    CHECK(msgsnd(msqid, &(struct msg){.mtype = 1}, 1, 0) == -1 && errno == EINVAL);
    puts("msg_sem_exchange: ok");
    return 0;
}
