/* SysV IPC calls from a handler that runs on a small alternate signal stack (SA_ONSTACK), as
 * a program that guards against stack overflow sets up. Each round's calls are checked; the
 * first round in the handler is also the thread's first call (its session is set up there).
 *
 * Usage: handler_altstack [stack bytes]  (default 8192, glibc's SIGSTKSZ; the preload's doc
 * quotes the smallest size that worked, found with this argument) */
#include "check.h"

static int sem, q, shm;
static volatile sig_atomic_t rounds;

struct small_msg {
    long mtype;
    char text[32];
};

static void on_usr1(int sig) {
    (void)sig;
    int saved = errno;
    struct sembuf up = {0, 1, 0};
    struct small_msg m = {1, "hello"};
    struct semid_ds ds;
    int *p;
    if (semop(sem, &up, 1) != 0 || semctl(sem, 0, GETVAL) != rounds + 1)
        _exit(2);
    if (msgsnd(q, &m, 6, 0) != 0 || msgrcv(q, &m, sizeof m.text, 0, 0) != 6 ||
        memcmp(m.text, "hello", 6) != 0)
        _exit(3);
    p = shmat(shm, NULL, 0);
    if (p == (void *)-1 || p[0] != rounds)
        _exit(4);
    p[0] = rounds + 1;
    if (shmdt(p) != 0 || semctl(sem, 0, IPC_STAT, &ds) != 0)
        _exit(5);
    rounds++;
    errno = saved;
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? (size_t)atol(argv[1]) : 8192;
    sem = semget(IPC_PRIVATE, 1, 0600);
    q = msgget(IPC_PRIVATE, 0600);
    shm = shmget(IPC_PRIVATE, 4096, 0600);
    CHECK(sem >= 0 && q >= 0 && shm >= 0);
    stack_t ss = {.ss_sp = malloc(size), .ss_size = size};
    CHECK(ss.ss_sp != NULL && sigaltstack(&ss, NULL) == 0);
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(raise(SIGUSR1) == 0);
    CHECK(rounds == 3 && semctl(sem, 0, GETVAL) == 3);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && msgctl(q, IPC_RMID, NULL) == 0 &&
          shmctl(shm, IPC_RMID, NULL) == 0);
    printf("handler_altstack: ok (%zu-byte alternate stack)\n", size);
    return 0;
}
