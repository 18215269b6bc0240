/* SysV IPC through syscall(SYS_...): the same objects and errnos as through the C library's
 * functions, syscall(3)'s convention (-1 and errno; errno untouched on success), and other
 * system calls passed through with all six arguments. Under `uipc run` the objects live in
 * the daemon (test-run.sh checks the kernel has none afterwards). */
#include "check.h"
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

static void sems(void) {
    long id = syscall(SYS_semget, IPC_PRIVATE, 2, IPC_CREAT | 0600);
    CHECK(id >= 0);
    CHECK(syscall(SYS_semctl, id, 1, SETVAL, 3) == 0);
    CHECK(semctl(id, 1, GETVAL) == 3);
    struct sembuf op = {1, -2, 0};
    errno = 1234;
    CHECK(syscall(SYS_semop, id, &op, 1) == 0 && errno == 1234);
    CHECK(syscall(SYS_semctl, id, 1, GETVAL, 0) == 1);
    struct sembuf wait = {0, -1, 0};
    struct timespec ts = {0, 10000000};
    CHECK(syscall(SYS_semtimedop, id, &wait, 1, &ts) == -1 && errno == EAGAIN);
    CHECK(syscall(SYS_semop, id, &op, 0) == -1 && errno == EINVAL);
    CHECK(syscall(SYS_semop, id, (void *)8, 1) == -1 && errno == EFAULT);
    CHECK(syscall(SYS_semop, 0x7fff0000, &op, 1) == -1 && errno == EINVAL);
    struct semid_ds ds;
    CHECK(syscall(SYS_semctl, id, 0, IPC_STAT, &ds) == 0 && ds.sem_nsems == 2);
    CHECK(syscall(SYS_semctl, id, 0, IPC_RMID, 0) == 0);
    CHECK(syscall(SYS_semctl, id, 0, IPC_RMID, 0) == -1 && errno == EINVAL);
}

static void msgs(void) {
    long id = syscall(SYS_msgget, IPC_PRIVATE, IPC_CREAT | 0600);
    CHECK(id >= 0);
    struct {
        long type;
        char text[8];
    } m = {5, "hello"}, r = {0, ""};
    CHECK(syscall(SYS_msgsnd, id, &m, 6, 0) == 0);
    CHECK(syscall(SYS_msgrcv, id, &r, sizeof r.text, 7, IPC_NOWAIT) == -1 && errno == ENOMSG);
    CHECK(syscall(SYS_msgrcv, id, &r, sizeof r.text, 5, 0) == 6);
    CHECK(r.type == 5 && strcmp(r.text, "hello") == 0);
    CHECK(msgsnd(id, &m, 6, 0) == 0);
    struct msqid_ds ds;
    CHECK(syscall(SYS_msgctl, id, IPC_STAT, &ds) == 0 && ds.msg_qnum == 1);
    CHECK(syscall(SYS_msgctl, id, IPC_RMID, NULL) == 0);
    CHECK(syscall(SYS_msgsnd, id, &m, 6, 0) == -1 && errno == EINVAL);
}

static void shms(void) {
    long id = syscall(SYS_shmget, IPC_PRIVATE, 8192, IPC_CREAT | 0600);
    CHECK(id >= 0);
    char *p = (char *)syscall(SYS_shmat, id, NULL, 0);
    CHECK(p != (char *)-1);
    strcpy(p, "shared");
    char *q = shmat(id, NULL, SHM_RDONLY);
    CHECK(q != (char *)-1 && strcmp(q, "shared") == 0);
    struct shmid_ds ds;
    CHECK(syscall(SYS_shmctl, id, IPC_STAT, &ds) == 0 && ds.shm_nattch == 2);
    CHECK(syscall(SYS_shmdt, q) == 0);
    CHECK(syscall(SYS_shmdt, q) == -1 && errno == EINVAL);
    CHECK(shmdt(p) == 0);
    CHECK(syscall(SYS_shmctl, id, IPC_RMID, NULL) == 0);
    CHECK(syscall(SYS_shmat, id, NULL, 0) == -1 && errno == EINVAL);
}

/* Six arguments reach the kernel unchanged: mmap a memfd at an offset and read what is there. */
static void other_calls_pass_through(void) {
    CHECK(syscall(SYS_getpid) == getpid());
    int fd = (int)syscall(SYS_memfd_create, "six", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 8192) == 0);
    CHECK(pwrite(fd, "page two", 8, 4096) == 8);
    char *p = (char *)syscall(SYS_mmap, NULL, 4096, PROT_READ, MAP_SHARED, fd, 4096);
    CHECK(p != MAP_FAILED && memcmp(p, "page two", 8) == 0);
    CHECK(munmap(p, 4096) == 0);
    close(fd);
    CHECK(syscall(SYS_close, -1) == -1 && errno == EBADF);
}

int main(void) {
    sems();
    msgs();
    shms();
    other_calls_pass_through();
    printf("syscall_ipc: all checks passed\n");
    return 0;
}
