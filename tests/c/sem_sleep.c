/* Single-sop semops that sleep, as Linux gives them: a +1 hands off to the sleeper before it
 * returns (a third process's IPC_NOWAIT -1 then sees EAGAIN, GETPID is the sleeper's pid),
 * GETNCNT/GETZCNT count a sleeper, a signal handler gives EINTR even with SA_RESTART,
 * semtimedop times out with EAGAIN, IPC_RMID gives EIDRM, SETVAL wakes the sleeper, two
 * sleepers are served in arrival order, a SIGKILLed sleeper swallows no later +1, a sleeper
 * that times out while posts arrive loses none of them, sleepers killed at random points
 * lose no +1, and a ping-pong keeps its count.
 * Under `uipc run` these sleep on the fast path (futexes in the arena); prints one line per
 * part. */
#include "check.h"
#include "sem_ops.h"

static int new_set(int nsems) {
    int id = semget(IPC_PRIVATE, nsems, 0600);
    CHECK(id >= 0);
    return id;
}

/* A child that makes one semop (n, op) and exits with 0 on success, 10 + errno otherwise. */
static pid_t sleeper(int id, unsigned short n, short op) {
    pid_t pid = checked_fork();
    if (pid == 0)
        _exit(sop(id, n, op, 0) == 0 ? 0 : 10 + errno);
    return pid;
}

/* A sleeper (above) that semaphore `n` counts: the `waiting`th in its semncnt, or in its
 * semzcnt for a wait for zero. */
static pid_t asleep(int id, unsigned short n, short op, int waiting) {
    pid_t pid = sleeper(id, n, op);
    wait_count(id, n, op == 0 ? GETZCNT : GETNCNT, waiting);
    return pid;
}

static void handoff(void) {
    int id = new_set(2);
    pid_t c = asleep(id, 0, -1, 1);
    CHECK(semctl(id, 0, GETZCNT) == 0 && semctl(id, 1, GETNCNT) == 0);
    CHECK(sop(id, 0, 1, 0) == 0);
    /* Performed before our +1 returned: nothing left for anyone else. */
    CHECK(sop(id, 0, -1, IPC_NOWAIT) == -1 && errno == EAGAIN);
    CHECK(semctl(id, 0, GETVAL) == 0);
    CHECK(semctl(id, 0, GETPID) == c);
    CHECK(semctl(id, 0, GETNCNT) == 0);
    expect_clean_exit(c);
    /* A wait for zero, completed by a -1. */
    CHECK(semctl(id, 1, SETVAL, 1) == 0);
    c = asleep(id, 1, 0, 1);
    CHECK(semctl(id, 1, GETNCNT) == 0);
    CHECK(sop(id, 1, -1, 0) == 0);
    expect_clean_exit(c);
    CHECK(semctl(id, 1, GETZCNT) == 0 && semctl(id, 1, GETVAL) == 0);
    /* A +2 for a -3 sleeper leaves it asleep; a further +1 wakes it. */
    c = asleep(id, 0, -3, 1);
    CHECK(sop(id, 0, 2, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 2 && semctl(id, 0, GETPID) == getpid());
    CHECK(semctl(id, 0, GETNCNT) == 1);
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 0, GETPID) == c);
    expect_clean_exit(c);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("handoff: ok\n");
}

static void on_usr1(int sig) {
    (void)sig;
}

static void eintr_and_timeout(void) {
    int id = new_set(1);
    pid_t c = checked_fork();
    if (c == 0) {
        handle_signal(SIGUSR1, on_usr1, SA_RESTART);
        int r = sop(id, 0, -1, 0);
        _exit(r == -1 && errno == EINTR ? 0 : 1);
    }
    wait_count(id, 0, GETNCNT, 1);
    CHECK(kill(c, SIGUSR1) == 0);
    expect_clean_exit(c);
    CHECK(semctl(id, 0, GETNCNT) == 0);
    /* The withdrawn operation takes nothing later. */
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 1 && semctl(id, 0, GETPID) == getpid());
    struct sembuf b = {0, -2, 0};
    struct timespec ts = {0, 50 * 1000 * 1000};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(semtimedop(id, &b, 1, &ts) == -1 && errno == EAGAIN);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(ms >= 45);
    ts.tv_nsec = 0;
    CHECK(semtimedop(id, &b, 1, &ts) == -1 && errno == EAGAIN);
    CHECK(semctl(id, 0, GETNCNT) == 0 && semctl(id, 0, GETVAL) == 1);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("eintr and timeout: ok\n");
}

static void daemon_calls(void) {
    /* IPC_RMID wakes a sleeper with EIDRM. */
    int id = new_set(1);
    pid_t c = asleep(id, 0, -1, 1);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    CHECK(status_of(c) == 10 + EIDRM);
    /* SETVAL performs the sleeper's operation before it returns. */
    id = new_set(1);
    c = asleep(id, 0, -1, 1);
    CHECK(semctl(id, 0, SETVAL, 1) == 0);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 0, GETPID) == c);
    expect_clean_exit(c);
    /* SETALL too; IPC_SET leaves a sleeper asleep. */
    c = asleep(id, 0, -2, 1);
    struct semid_ds ds;
    union semun arg = {.buf = &ds};
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0);
    ds.sem_perm.mode = 0660;
    CHECK(semctl(id, 0, IPC_SET, arg) == 0);
    CHECK(semctl(id, 0, GETNCNT) == 1);
    unsigned short v[1] = {3};
    union semun all = {.array = v};
    CHECK(semctl(id, 0, SETALL, all) == 0);
    CHECK(semctl(id, 0, GETVAL) == 1 && semctl(id, 0, GETPID) == c);
    expect_clean_exit(c);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("rmid, setval, setall, ipc_set: ok\n");
}

static void fifo_and_kill(void) {
    int id = new_set(1);
    pid_t a = asleep(id, 0, -1, 1);
    pid_t b = asleep(id, 0, -1, 2);
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(semctl(id, 0, GETPID) == a);
    expect_clean_exit(a);
    CHECK(semctl(id, 0, GETNCNT) == 1);
    int st;
    CHECK(waitpid(b, &st, WNOHANG) == 0);
    CHECK(sop(id, 0, 1, 0) == 0);
    expect_clean_exit(b);
    /* A sleeper killed: a later +1 stays. */
    pid_t k = asleep(id, 0, -1, 1);
    CHECK(kill(k, SIGKILL) == 0);
    CHECK(waitpid(k, &st, 0) == k && WIFSIGNALED(st));
    CHECK(sop(id, 0, 1, 0) == 0);
    CHECK(semctl(id, 0, GETVAL) == 1 && semctl(id, 0, GETPID) == getpid());
    CHECK(semctl(id, 0, GETNCNT) == 0);
    /* Killed while the set is with the daemon (a second waiter queued behind it). */
    CHECK(semctl(id, 0, SETVAL, 0) == 0);
    k = asleep(id, 0, -1, 1);
    b = asleep(id, 0, -1, 2);
    CHECK(kill(k, SIGKILL) == 0);
    CHECK(waitpid(k, &st, 0) == k && WIFSIGNALED(st));
    wait_count(id, 0, GETNCNT, 1);
    CHECK(sop(id, 0, 1, 0) == 0);
    expect_clean_exit(b);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 0, GETNCNT) == 0);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("fifo and kill: ok\n");
}

/* A sleeper that times out again and again while +1s arrive: every +1 is either taken by one
 * of its successful waits or still in the value (a cancel and a hand-off never both win). */
static void cancel_race(int posts) {
    int id = new_set(2);
    pid_t c = checked_fork();
    if (c == 0) {
        int got = 0;
        struct sembuf b = {0, -1, 0};
        while (sop(id, 1, 0, IPC_NOWAIT) == -1) {
            struct timespec ts = {0, (got % 7) * 20 * 1000};
            if (semtimedop(id, &b, 1, &ts) == 0)
                got++;
            else if (errno != EAGAIN)
                _exit(255);
        }
        _exit(got % 200);
    }
    /* sem 1 is 1 while the child must go on. */
    CHECK(semctl(id, 1, SETVAL, 1) == 0);
    for (int i = 0; i < posts; i++) {
        CHECK(sop(id, 0, 1, 0) == 0);
        if (i % 16 == 0)
            usleep(50);
    }
    usleep(20000);
    CHECK(semctl(id, 1, SETVAL, 0) == 0);
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st));
    int left = semctl(id, 0, GETVAL);
    /* The child's count is known modulo 200; the sum must be the posts. */
    CHECK((left + WEXITSTATUS(st)) % 200 == posts % 200);
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("cancel race: ok (%d posts, %d left)\n", posts, left);
}

/* Sleepers SIGKILLed at random points of their semop (before, while or after arming, asleep),
 * with a +1 after the kill was reaped (it must stay: value 1) or before the kill (taken by
 * the sleeper or left: 0 or 1, never lost twice); nobody is left counted as waiting. */
static void kill_storm(int rounds) {
    int id = new_set(1);
    unsigned seed = 12345;
    for (int i = 0; i < rounds; i++) {
        CHECK(semctl(id, 0, SETVAL, 0) == 0);
        pid_t c = sleeper(id, 0, -1);
        seed = seed * 1103515245 + 12345;
        usleep((seed >> 16) % 300);
        int post_first = (seed >> 8) & 1;
        if (post_first)
            CHECK(sop(id, 0, 1, 0) == 0);
        CHECK(kill(c, SIGKILL) == 0);
        int st;
        CHECK(waitpid(c, &st, 0) == c);
        if (!post_first) {
            CHECK(sop(id, 0, 1, 0) == 0);
            CHECK(semctl(id, 0, GETVAL) == 1);
        } else {
            int v = semctl(id, 0, GETVAL);
            CHECK(v == 0 || v == 1);
        }
        CHECK(semctl(id, 0, GETNCNT) == 0);
    }
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("kill storm: ok (%d sleepers killed)\n", rounds);
}

static void pingpong(int rounds) {
    int id = new_set(2);
    pid_t c = checked_fork();
    if (c == 0) {
        for (int i = 0; i < rounds; i++)
            if (sop(id, 0, -1, 0) != 0 || sop(id, 1, 1, 0) != 0)
                _exit(1);
        _exit(0);
    }
    for (int i = 0; i < rounds; i++) {
        CHECK(sop(id, 0, 1, 0) == 0);
        CHECK(sop(id, 1, -1, 0) == 0);
    }
    expect_clean_exit(c);
    CHECK(semctl(id, 0, GETVAL) == 0 && semctl(id, 1, GETVAL) == 0);
    CHECK(semctl(id, 1, GETPID) == getpid());
    CHECK(semctl(id, 0, IPC_RMID) == 0);
    printf("ping-pong: ok (%d rounds)\n", rounds);
}

int main(void) {
    alarm(120);
    setvbuf(stdout, NULL, _IONBF, 0);
    handoff();
    eintr_and_timeout();
    daemon_calls();
    fifo_and_kill();
    cancel_race(3000);
    kill_storm(400);
    pingpong(20000);
    return 0;
}
