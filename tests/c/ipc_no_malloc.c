/* Every SysV IPC call runs without malloc: the program defines malloc and friends itself (the
 * executable's definitions come first for every library, the preload library and the C
 * library included), forwarding to glibc's and counting calls made while a SysV IPC call is in
 * progress. On Linux these calls are system calls and the count is zero; under uipc the
 * preload library must get there too, so that a call from a signal handler that interrupted
 * malloc is safe. Covered: each call and command, a first call in a new thread (its session
 * is set up inside the call), data past the library's 64 KiB per-thread buffer (a SETALL of
 * 32000 values, a msgsnd of 100 000 bytes), the first calls in a forked child, and calls from
 * a signal handler that interrupted a sleeping semtimedop (a second connection, opened in the
 * handler). */
#include "check.h"
#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>

#include "malloc_count.h"

#define BIG_SEMS 32000
#define BIG_TEXT 100000

struct small_msg {
    long mtype;
    char text[16];
};

static unsigned short values[BIG_SEMS];
static char big_msg[sizeof(long) + BIG_TEXT];

/* One of each call, with its result checked. */
static void every_call(void) {
    int sem = NO_MALLOC(semget(IPC_PRIVATE, 3, 0600));
    CHECK(sem >= 0);
    struct sembuf ops[2] = {{0, 2, 0}, {1, 1, SEM_UNDO}};
    CHECK(NO_MALLOC(semop(sem, ops, 2)) == 0);
    struct timespec ts = {0, 1000};
    struct sembuf take = {2, -1, 0};
    CHECK(NO_MALLOC(semtimedop(sem, &take, 1, &ts)) == -1 && errno == EAGAIN);
    CHECK(NO_MALLOC(semctl(sem, 0, GETVAL)) == 2);
    CHECK(NO_MALLOC(semctl(sem, 2, SETVAL, 5)) == 0);
    unsigned short all[3];
    CHECK(NO_MALLOC(semctl(sem, 0, GETALL, all)) == 0 && all[0] == 2 && all[1] == 1 &&
          all[2] == 5);
    unsigned short set[3] = {7, 8, 9};
    CHECK(NO_MALLOC(semctl(sem, 0, SETALL, set)) == 0);
    CHECK(NO_MALLOC(semctl(sem, 1, GETVAL)) == 8);
    struct semid_ds sds;
    CHECK(NO_MALLOC(semctl(sem, 0, IPC_STAT, &sds)) == 0 && sds.sem_nsems == 3);
    sds.sem_perm.mode = 0640;
    CHECK(NO_MALLOC(semctl(sem, 0, IPC_SET, &sds)) == 0);
    struct seminfo si;
    CHECK(NO_MALLOC(semctl(0, 0, IPC_INFO, &si)) >= 0 && si.semmsl > 0);
    CHECK(NO_MALLOC(semctl(sem, 0, IPC_RMID)) == 0);

    int big = NO_MALLOC(semget(IPC_PRIVATE, BIG_SEMS, 0600));
    CHECK(big >= 0);
    for (int i = 0; i < BIG_SEMS; i++)
        values[i] = (unsigned short)(i % 1000);
    CHECK(NO_MALLOC(semctl(big, 0, SETALL, values)) == 0);
    memset(values, 0, sizeof values);
    CHECK(NO_MALLOC(semctl(big, 0, GETALL, values)) == 0);
    for (int i = 0; i < BIG_SEMS; i++)
        CHECK(values[i] == i % 1000);
    CHECK(NO_MALLOC(semctl(big, 0, IPC_RMID)) == 0);

    int q = NO_MALLOC(msgget(IPC_PRIVATE, 0600));
    CHECK(q >= 0);
    struct small_msg m = {3, "fifteen chars.."}, r;
    CHECK(NO_MALLOC(msgsnd(q, &m, sizeof m.text, 0)) == 0);
    CHECK(NO_MALLOC(msgrcv(q, &r, sizeof r.text, 3, 0)) == sizeof r.text);
    CHECK(r.mtype == 3 && memcmp(r.text, m.text, sizeof m.text) == 0);
    CHECK(NO_MALLOC(msgrcv(q, &r, sizeof r.text, 0, IPC_NOWAIT)) == -1 && errno == ENOMSG);
    /* Past msgmax (8192): EINVAL, after the library carried the text in a mapping. */
    *(long *)big_msg = 1;
    CHECK(NO_MALLOC(msgsnd(q, big_msg, BIG_TEXT, 0)) == -1 && errno == EINVAL);
    struct msqid_ds mds;
    CHECK(NO_MALLOC(msgctl(q, IPC_STAT, &mds)) == 0 && mds.msg_qnum == 0);
    CHECK(NO_MALLOC(msgctl(q, IPC_SET, &mds)) == 0);
    struct msginfo mi;
    CHECK(NO_MALLOC(msgctl(0, IPC_INFO, (struct msqid_ds *)&mi)) >= 0 && mi.msgmax > 0);
    CHECK(NO_MALLOC(msgctl(q, IPC_RMID, NULL)) == 0);

    int shm = NO_MALLOC(shmget(IPC_PRIVATE, 8192, 0600));
    CHECK(shm >= 0);
    char *p = NO_MALLOC((char *)shmat(shm, NULL, 0));
    CHECK(p != (char *)-1);
    p[8191] = 'x';
    char *q2 = NO_MALLOC((char *)shmat(shm, NULL, SHM_RDONLY));
    CHECK(q2 != (char *)-1 && q2[8191] == 'x');
    struct shmid_ds shds;
    CHECK(NO_MALLOC(shmctl(shm, IPC_STAT, &shds)) == 0 && shds.shm_nattch == 2);
    CHECK(NO_MALLOC(shmdt(q2)) == 0 && NO_MALLOC(shmdt(p)) == 0);
    CHECK(NO_MALLOC(shmdt(p)) == -1 && errno == EINVAL);
    struct shminfo shi;
    CHECK(NO_MALLOC(shmctl(0, IPC_INFO, (struct shmid_ds *)&shi)) >= 0 && shi.shmmax > 0);
    struct shm_info shu;
    CHECK(NO_MALLOC(shmctl(0, SHM_INFO, (struct shmid_ds *)&shu)) >= 0);
    CHECK(NO_MALLOC(shmctl(shm, IPC_RMID, NULL)) == 0);
}

/* A handler's calls, counted on their own; the count of the call it interrupted is kept. */
static int handler_sem;
static volatile sig_atomic_t handler_rounds;

static void on_alarm(int sig) {
    (void)sig;
    int saved_errno = errno, was_counting = counting;
    long was_allocations = allocations;
    struct sembuf up = {0, 1, 0};
    CHECK(NO_MALLOC(semop(handler_sem, &up, 1)) == 0);
    CHECK(NO_MALLOC(semctl(handler_sem, 0, GETVAL)) == handler_rounds + 1);
    struct small_msg m = {2, "from a handler"};
    int q = NO_MALLOC(msgget(IPC_PRIVATE, 0600));
    CHECK(q >= 0 && NO_MALLOC(msgsnd(q, &m, sizeof m.text, 0)) == 0);
    CHECK(NO_MALLOC(msgrcv(q, &m, sizeof m.text, 2, 0)) == sizeof m.text);
    CHECK(NO_MALLOC(msgctl(q, IPC_RMID, NULL)) == 0);
    handler_rounds++;
    counting = was_counting;
    allocations = was_allocations;
    errno = saved_errno;
}

/* A handler that interrupts a sleeping semtimedop (its thread's connection mid-exchange) and
 * calls the library itself: on another connection, made inside the handler the first time. */
static void from_a_handler(void) {
    handler_sem = semget(IPC_PRIVATE, 1, 0600);
    int waited = semget(IPC_PRIVATE, 1, 0600);
    CHECK(handler_sem >= 0 && waited >= 0);
    struct sigaction sa = {.sa_handler = on_alarm};
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    handler_rounds = 0;
    for (int i = 0; i < 3; i++) {
        struct itimerval in_20ms = {.it_value = {.tv_usec = 20000}};
        CHECK(setitimer(ITIMER_REAL, &in_20ms, NULL) == 0);
        struct timespec ts = {5, 0};
        struct sembuf take = {0, -1, 0};
        CHECK(NO_MALLOC(semtimedop(waited, &take, 1, &ts)) == -1 && errno == EINTR);
        CHECK(handler_rounds == i + 1);
    }
    CHECK(semctl(handler_sem, 0, IPC_RMID) == 0 && semctl(waited, 0, IPC_RMID) == 0);
}

static void *in_a_new_thread(void *arg) {
    (void)arg;
    every_call();
    return NULL;
}

int main(void) {
    every_call();
    from_a_handler();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, in_a_new_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    in_child(every_call);
    printf("ipc_no_malloc: ok\n");
    return 0;
}
