/* Each exported call's main commands and error paths, with Linux's errno (bad pointers
 * included). Runs on the host kernel and under uipc with the same expectations. */
#include "check.h"
#include <sys/mman.h>

static void sems(void) {
    key_t key = 0x75490001;
    int id = semget(key, 3, IPC_CREAT | IPC_EXCL | 0640);
    CHECK(id >= 0);
    CHECK(semget(key, 3, IPC_CREAT | IPC_EXCL | 0640) == -1 && errno == EEXIST);
    CHECK(semget(key, 4, 0) == -1 && errno == EINVAL);
    CHECK(semget(key, 2, 0) == id);
    CHECK(semget(0x75490002, 1, 0) == -1 && errno == ENOENT);
    CHECK(semctl(id, 1, SETVAL, (union semun){.val = 5}) == 0);
    CHECK(semctl(id, 1, GETVAL) == 5);
    CHECK(semctl(id, 1, SETVAL, (union semun){.val = 40000}) == -1 && errno == ERANGE);
    unsigned short in[3] = {1, 2, 3}, out[3] = {0};
    CHECK(semctl(id, 0, SETALL, (union semun){.array = in}) == 0);
    CHECK(semctl(id, 0, GETALL, (union semun){.array = out}) == 0);
    CHECK(out[0] == 1 && out[1] == 2 && out[2] == 3);
    CHECK(semctl(id, 0, SETALL, (union semun){.array = (unsigned short *)8}) == -1 &&
          errno == EFAULT);
    CHECK(semctl(id, 0, GETALL, (union semun){.array = (unsigned short *)8}) == -1 &&
          errno == EFAULT);
    struct semid_ds ds;
    CHECK(semctl(id, 0, IPC_STAT, (union semun){.buf = &ds}) == 0);
    CHECK(ds.sem_nsems == 3 && ds.sem_perm.__key == key && (ds.sem_perm.mode & 0777) == 0640);
    CHECK(ds.sem_perm.uid == geteuid());
    ds.sem_perm.mode = 0600;
    CHECK(semctl(id, 0, IPC_SET, (union semun){.buf = &ds}) == 0);
    CHECK(semctl(id, 0, IPC_STAT, (union semun){.buf = &ds}) == 0);
    CHECK((ds.sem_perm.mode & 0777) == 0600);
    CHECK(semctl(id, 0, IPC_SET, (union semun){.buf = (void *)8}) == -1 && errno == EFAULT);
    struct seminfo info;
    CHECK(semctl(id, 0, IPC_INFO, (union semun){.__buf = &info}) >= 0);
    CHECK(info.semmsl == 32000 && info.semopm == 500 && info.semvmx == 32767);
    int max = semctl(0, 0, SEM_INFO, (union semun){.__buf = &info});
    CHECK(max >= 0 && info.semusz >= 1);
    CHECK(semctl(id, 0, 12345) == -1 && errno == EINVAL);
    struct sembuf ops[2] = {{0, -1, 0}, {2, 1, 0}};
    CHECK(semop(id, ops, 2) == 0);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 2, GETVAL) == 4);
    struct sembuf bad = {7, 1, 0};
    CHECK(semop(id, &bad, 1) == -1 && errno == EFBIG);
    CHECK(semop(id, ops, 0) == -1 && errno == EINVAL);
    CHECK(semop(id, ops, 501) == -1 && errno == E2BIG);
    CHECK(semop(id, (struct sembuf *)8, 1) == -1 && errno == EFAULT);
    CHECK(semop(-1, ops, 1) == -1 && errno == EINVAL);
    struct sembuf nowait = {0, -1, IPC_NOWAIT};
    CHECK(semop(id, &nowait, 1) == -1 && errno == EAGAIN);
    struct timespec badts = {0, 2000000000L};
    CHECK(semtimedop(id, &nowait, 1, &badts) == -1 && errno == EINVAL);
    CHECK(semtimedop(id, &nowait, 1, (struct timespec *)8) == -1 && errno == EFAULT);
    CHECK(semctl(id, 0, GETZCNT) == 0 && semctl(id, 0, GETNCNT) == 0);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    CHECK(semctl(id, 0, GETVAL) == -1 && (errno == EINVAL || errno == EIDRM));
}

struct msgbuf8 {
    long mtype;
    char text[8];
};

static void msgs(void) {
    int id = msgget(IPC_PRIVATE, 0600);
    CHECK(id >= 0);
    struct msgbuf8 m = {.mtype = 3};
    memcpy(m.text, "abcdefgh", 8);
    CHECK(msgsnd(id, &m, 8, 0) == 0);
    m.mtype = 5;
    CHECK(msgsnd(id, &m, 4, 0) == 0);
    CHECK(msgsnd(id, &m, 4, 0) == 0);
    m.mtype = 0;
    CHECK(msgsnd(id, &m, 4, 0) == -1 && errno == EINVAL);
    CHECK(msgsnd(id, &m, 8193, 0) == -1 && errno == EINVAL);
    CHECK(msgsnd(id, (void *)8, 4, 0) == -1 && errno == EFAULT);
    struct msgbuf8 r;
    CHECK(msgrcv(id, &r, 4, 3, IPC_NOWAIT) == -1 && errno == E2BIG);
    CHECK(msgrcv(id, &r, 4, 3, IPC_NOWAIT | MSG_NOERROR) == 4);
    CHECK(r.mtype == 3 && memcmp(r.text, "abcd", 4) == 0);
    CHECK(msgrcv(id, &r, 8, 5, MSG_EXCEPT | IPC_NOWAIT) == -1 && errno == ENOMSG);
    /* MSG_COPY without IPC_NOWAIT is EINVAL before the queue is looked at, even with a
     * message at the index; with it, the message is copied and stays queued. */
    CHECK(msgrcv(id, &r, 8, 0, MSG_COPY) == -1 && errno == EINVAL);
    CHECK(msgrcv(id, &r, 8, 0, MSG_COPY | IPC_NOWAIT) == 4 && r.mtype == 5);
    CHECK(msgrcv(id, &r, 8, -6, IPC_NOWAIT) == 4 && r.mtype == 5);
    CHECK(msgrcv(id, (void *)8, 8, 0, IPC_NOWAIT) == -1 && errno == EFAULT);
    CHECK(msgrcv(id, &r, 8, 0, IPC_NOWAIT) == -1 && errno == ENOMSG);
    /* The type readable, the text not (it crosses into an unmapped page): the type's checks
     * come first, then EFAULT; a receive whose text cannot be written loses the message. */
    long page = sysconf(_SC_PAGESIZE);
    char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(two != MAP_FAILED && munmap(two + page, page) == 0);
    long *edge = (long *)(two + page - sizeof(long));
    *edge = 0;
    CHECK(msgsnd(id, edge, 4, IPC_NOWAIT) == -1 && errno == EINVAL);
    *edge = 1;
    CHECK(msgsnd(id, edge, 8193, IPC_NOWAIT) == -1 && errno == EINVAL);
    CHECK(msgsnd(id, edge, 4, IPC_NOWAIT) == -1 && errno == EFAULT);
    CHECK(msgsnd(id, edge, 0, IPC_NOWAIT) == 0);
    CHECK(msgrcv(id, edge, 8, 0, IPC_NOWAIT) == 0 && *edge == 1);
    m.mtype = 7;
    CHECK(msgsnd(id, &m, 4, 0) == 0);
    CHECK(msgrcv(id, edge, 8, 0, IPC_NOWAIT) == -1 && errno == EFAULT);
    CHECK(msgrcv(id, &r, 8, 0, IPC_NOWAIT) == -1 && errno == ENOMSG);
    CHECK(munmap(two, page) == 0);
    struct msqid_ds ds;
    CHECK(msgctl(id, IPC_STAT, &ds) == 0);
    CHECK(ds.msg_qnum == 0 && ds.msg_qbytes == 16384);
    ds.msg_qbytes = 100;
    CHECK(msgctl(id, IPC_SET, &ds) == 0);
    CHECK(msgctl(id, IPC_STAT, &ds) == 0 && ds.msg_qbytes == 100);
    CHECK(msgctl(id, IPC_SET, (void *)8) == -1 && errno == EFAULT);
    struct msginfo info;
    CHECK(msgctl(id, IPC_INFO, (struct msqid_ds *)&info) >= 0);
    CHECK(info.msgmax == 8192 && info.msgmnb == 16384);
    CHECK(msgctl(id, 12345, &ds) == -1 && errno == EINVAL);
    CHECK(msgctl(id, IPC_RMID, NULL) == 0);
    CHECK(msgget(0x75490003, 0) == -1 && errno == ENOENT);
}

static void shms(void) {
    CHECK(shmget(IPC_PRIVATE, 0, 0600) == -1 && errno == EINVAL);
    /* Past loff_t: EINVAL; more than the host can commit: ENOMEM (overcommit 0 or 2). */
    CHECK(shmget(IPC_PRIVATE, 1UL << 63, 0600) == -1 && errno == EINVAL);
    CHECK(shmget(IPC_PRIVATE, (1UL << 63) - 4096, 0600) == -1 && errno == ENOMEM);
    int id = shmget(0x75490004, 5000, IPC_CREAT | 0600);
    CHECK(id >= 0);
    CHECK(shmget(0x75490004, 9000, 0) == -1 && errno == EINVAL);
    CHECK(shmat(id, (void *)4097, 0) == (void *)-1 && errno == EINVAL);
    CHECK(shmat(-1, NULL, 0) == (void *)-1 && errno == EINVAL);
    CHECK(shmdt((void *)4096) == -1 && errno == EINVAL);
    struct shmid_ds ds;
    CHECK(shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_segsz == 5000 && ds.shm_nattch == 0);
    CHECK(ds.shm_cpid == getpid());
    ds.shm_perm.mode = 0640;
    CHECK(shmctl(id, IPC_SET, &ds) == 0);
    CHECK(shmctl(id, IPC_STAT, &ds) == 0 && (ds.shm_perm.mode & 0777) == 0640);
    CHECK(shmctl(id, IPC_STAT, (void *)8) == -1 && errno == EFAULT);
    struct shminfo info;
    CHECK(shmctl(0, IPC_INFO, (struct shmid_ds *)&info) >= 0 && info.shmmni == 4096);
    struct shm_info usage;
    CHECK(shmctl(0, SHM_INFO, (struct shmid_ds *)&usage) >= 0 && usage.used_ids >= 1);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(shmctl(id, IPC_STAT, &ds) == -1 && errno == EINVAL);
}

int main(void) {
    sems();
    msgs();
    shms();
    puts("calls_errno: ok");
    return 0;
}
