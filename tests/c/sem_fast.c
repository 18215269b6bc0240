/* Semaphore calls the fast path serves (single-sop semop, GETVAL, GETPID, GETNCNT, GETZCNT)
 * interleaved with what makes the daemon take a set back (blocking and multi-sop operations,
 * SEM_UNDO, SETVAL, IPC_SET, IPC_RMID, IPC_STAT): values, errnos, sempid, otime, waiter counts
 * and permissions as Linux gives them, and a final sum after many processes hammer one set.
 * Runs as root (the permission part switches the effective uid); prints one line per part. */
#include "check.h"
#include <sys/syscall.h>
#include <time.h>
#include <sys/mman.h>
#include <string.h>

static int sop(int id, unsigned short n, short op, short flg) {
    struct sembuf b = {n, op, flg};
    return semop(id, &b, 1);
}

static void wait_count(int id, int n, int cmd, int want) {
    for (int i = 0; i < 5000 && semctl(id, n, cmd) != want; i++)
        usleep(1000);
    CHECK(semctl(id, n, cmd) == want);
}

static void basic(void) {
    int id = semget(IPC_PRIVATE, 3, 0600);
    CHECK(id >= 0);
    struct semid_ds ds;
    union semun arg = {.buf = &ds};
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0 && ds.sem_otime == 0);
    CHECK(semctl(id, 0, SETVAL, 2) == 0);
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0 && ds.sem_otime == 0);
    time_t t0 = time(NULL);
    for (int i = 0; i < 1000; i++) {
        CHECK(sop(id, 0, -1, 0) == 0);
        CHECK(sop(id, 0, 1, 0) == 0);
    }
    CHECK(sop(id, 1, 0, 0) == 0); /* wait-for-zero that proceeds */
    CHECK(semctl(id, 0, GETVAL) == 2);
    CHECK(semctl(id, 0, GETPID) == getpid());
    CHECK(semctl(id, 1, GETPID) == getpid());
    CHECK(semctl(id, 2, GETPID) == 0);
    CHECK(semctl(id, 0, GETNCNT) == 0 && semctl(id, 0, GETZCNT) == 0);
    CHECK(sop(id, 0, -3, IPC_NOWAIT) == -1 && errno == EAGAIN);
    CHECK(sop(id, 0, 0, IPC_NOWAIT) == -1 && errno == EAGAIN);
    CHECK(sop(id, 0, 32767, 0) == -1 && errno == ERANGE);
    CHECK(sop(id, 3, 1, 0) == -1 && errno == EFBIG);
    CHECK(semctl(id, 3, GETVAL) == -1 && errno == EINVAL);
    CHECK(semctl(id, 0, GETVAL) == 2);
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0);
    /* The kernel stamps ktime_get_real_seconds(); time() reads the vDSO copy, which the tick
     * updates a moment later: a second either way is the same stamp. */
    CHECK(ds.sem_otime >= t0 - 1 && ds.sem_otime <= time(NULL) + 1);
    struct timespec ts = {0, 1000};
    struct sembuf b = {0, -1, 0};
    CHECK(semtimedop(id, &b, 1, &ts) == 0);
    ts.tv_nsec = -1;
    CHECK(semtimedop(id, &b, 1, &ts) == -1 && errno == EINVAL);
    CHECK(semop(id, (struct sembuf *)8, 1) == -1 && errno == EFAULT);
    CHECK(semctl(id, 0, GETVAL) == 1);
    /* Operations and timeouts outside the stack: a readable page, one made unreadable, one
     * unmapped, and a struct straddling into an unreadable page. */
    long pg = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    struct sembuf *heap = (struct sembuf *)m;
    *heap = (struct sembuf){0, 1, 0};
    CHECK(semop(id, heap, 1) == 0 && semctl(id, 0, GETVAL) == 2);
    struct sembuf *edge = (struct sembuf *)(m + pg - 2);
    memcpy(edge, &(struct sembuf){0, -1, 0}, 2);
    CHECK(mprotect(m + pg, pg, PROT_NONE) == 0);
    CHECK(semop(id, edge, 1) == -1 && errno == EFAULT);
    struct timespec *far = (struct timespec *)(m + pg);
    CHECK(semtimedop(id, heap, 1, far) == -1 && errno == EFAULT);
    CHECK(mprotect(m, pg, PROT_NONE) == 0);
    CHECK(semop(id, heap, 1) == -1 && errno == EFAULT);
    CHECK(munmap(m, 2 * pg) == 0);
    CHECK(semop(id, heap, 1) == -1 && errno == EFAULT);
    CHECK(semctl(id, 0, GETVAL) == 2);
    b.sem_op = -1;
    CHECK(semop(id, &b, 1) == 0 && semctl(id, 0, GETVAL) == 1);
    /* Another process's operation: its pid. */
    pid_t c = checked_fork();
    if (c == 0) {
        CHECK(sop(id, 0, 1, 0) == 0);
        _exit(0);
    }
    expect_clean_exit(c);
    CHECK(semctl(id, 0, GETVAL) == 2 && semctl(id, 0, GETPID) == c);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    CHECK(sop(id, 0, 1, 0) == -1 && errno == EINVAL);
    CHECK(semctl(id, 0, GETVAL) == -1 && errno == EINVAL);
    puts("basic: ok");
}

/* Sleepers (GETNCNT, GETZCNT), woken by a single-sop operation; SETVAL and multi-sop and
 * SEM_UNDO operations in between; fast operations afterwards. */
static void waiters(void) {
    int id = semget(IPC_PRIVATE, 2, 0600);
    CHECK(id >= 0);
    pid_t c = checked_fork();
    if (c == 0) {
        CHECK(sop(id, 0, -1, 0) == 0);
        _exit(0);
    }
    wait_count(id, 0, GETNCNT, 1);
    CHECK(sop(id, 0, 1, 0) == 0);
    expect_clean_exit(c);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 0, GETPID) == c);
    CHECK(semctl(id, 1, SETVAL, 1) == 0);
    c = checked_fork();
    if (c == 0) {
        CHECK(sop(id, 1, 0, 0) == 0);
        _exit(0);
    }
    wait_count(id, 1, GETZCNT, 1);
    CHECK(sop(id, 1, -1, 0) == 0);
    expect_clean_exit(c);
    CHECK(semctl(id, 1, GETZCNT) == 0);
    struct sembuf two[2] = {{0, 2, 0}, {1, 3, 0}};
    CHECK(semop(id, two, 2) == 0);
    CHECK(sop(id, 0, -1, 0) == 0 && sop(id, 1, -1, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 1 && semctl(id, 1, GETVAL) == 2);
    c = checked_fork();
    if (c == 0) {
        CHECK(sop(id, 0, 5, SEM_UNDO) == 0);
        CHECK(semctl(id, 0, GETVAL) == 6);
        _exit(0);
    }
    expect_clean_exit(c);
    CHECK(semctl(id, 0, GETVAL) == 1);
    CHECK(sop(id, 0, 1, 0) == 0 && semctl(id, 0, GETVAL) == 2);
    CHECK(semctl(id, 0, SETVAL, 7) == 0 && sop(id, 0, -7, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 0);
    /* Removal with sleepers: EIDRM. */
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0) {
            int r = sop(id, i == 2, i == 2 ? 0 : -1, 0);
            _exit(r == -1 && errno == EIDRM ? 0 : 3);
        }
    }
    wait_count(id, 0, GETNCNT, 2);
    wait_count(id, 1, GETZCNT, 1);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    for (int i = 0; i < 3; i++)
        expect_clean_exit(kids[i]);
    puts("waiters: ok");
}

/* IPC_SET and the caller's effective uid decide the next call. */
static void permissions(void) {
    int id = semget(IPC_PRIVATE, 1, 0600);
    CHECK(id >= 0);
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(syscall(SYS_setresuid, -1, 65534, -1) == 0);
    CHECK(sop(id, 0, 1, 0) == -1 && errno == EACCES);
    CHECK(semctl(id, 0, GETVAL) == -1 && errno == EACCES);
    CHECK(syscall(SYS_setresuid, -1, 0, -1) == 0);
    CHECK(sop(id, 0, 1, 0) == 0 && semctl(id, 0, GETVAL) == 2);
    struct semid_ds ds;
    union semun arg = {.buf = &ds};
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0);
    ds.sem_perm.mode = 0644;
    CHECK(semctl(id, 0, IPC_SET, arg) == 0);
    CHECK(syscall(SYS_setresuid, -1, 65534, -1) == 0);
    CHECK(semctl(id, 0, GETVAL) == 2);
    CHECK(sop(id, 0, 1, 0) == -1 && errno == EACCES);
    CHECK(syscall(SYS_setresuid, -1, 0, -1) == 0);
    ds.sem_perm.mode = 0666;
    CHECK(semctl(id, 0, IPC_SET, arg) == 0);
    CHECK(syscall(SYS_setresuid, -1, 65534, -1) == 0);
    CHECK(sop(id, 0, 1, 0) == 0 && semctl(id, 0, GETPID) == getpid());
    CHECK(syscall(SYS_setresuid, -1, 0, -1) == 0);
    ds.sem_perm.mode = 0200; /* the owner may write, nobody may read */
    CHECK(semctl(id, 0, IPC_SET, arg) == 0);
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(syscall(SYS_setresuid, -1, 65534, -1) == 0);
    CHECK(sop(id, 0, 0, IPC_NOWAIT) == -1 && errno == EACCES);
    CHECK(syscall(SYS_setresuid, -1, 0, -1) == 0);
    CHECK(semctl(id, 0, GETVAL) == 4); /* root: CAP_IPC_OWNER */
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    puts("permissions: ok");
}

/* Many processes: +1/-1 pairs on semaphore 0 and +1 on semaphore 1, with IPC_STAT, GETALL
 * and multi-sop operations taking the set back now and then. */
static void hammer(void) {
    enum { PROCS = 8, ROUNDS = 3000 };
    int id = semget(IPC_PRIVATE, 2, 0600);
    CHECK(id >= 0);
    CHECK(semctl(id, 0, SETVAL, 4) == 0);
    pid_t kids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        kids[p] = fork();
        CHECK(kids[p] >= 0);
        if (kids[p] == 0) {
            for (int i = 0; i < ROUNDS; i++) {
                CHECK(sop(id, 0, -1, 0) == 0);
                CHECK(sop(id, 1, 1, 0) == 0);
                CHECK(sop(id, 0, 1, 0) == 0);
                if (i % 500 == 0) {
                    struct sembuf two[2] = {{0, -1, 0}, {0, 1, 0}};
                    CHECK(semop(id, two, 2) == 0);
                    struct semid_ds ds;
                    union semun arg = {.buf = &ds};
                    CHECK(semctl(id, 0, IPC_STAT, arg) == 0);
                }
            }
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++)
        expect_clean_exit(kids[p]);
    unsigned short v[2];
    union semun arg = {.array = v};
    CHECK(semctl(id, 0, GETALL, arg) == 0);
    CHECK(v[0] == 4 && v[1] == PROCS * ROUNDS);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("hammer: ok (%d operations)\n", PROCS * ROUNDS * 3);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    basic();
    waiters();
    if (geteuid() == 0)
        permissions();
    else
        puts("permissions: ok");
    hammer();
    return 0;
}
