/* Processes SIGKILLed at random points of single-sop semop loops (the fast path under uipc
 * run), while the parent makes the daemon take the sets back (IPC_STAT, GETALL, SETVAL of
 * another semaphore): no operation lost or applied twice, no SEM_UNDO adjustment lost or
 * applied twice.
 *
 * Each worker life L owns semaphore L % 60 of set L / 60 and adds 1 to it, counting each
 * success in shared memory after the call returns; killed between the two, the semaphore is
 * one ahead of its count. So afterwards every semaphore is its count or its count + 1, and a
 * life that was never killed (none here: all end killed) would be exact.
 *
 * With "undo", each life has a set of its own (the fast path serves SEM_UNDO for the one
 * process holding a set's adjustments) and each round is +1, +1 and -1 with SEM_UNDO, then +2
 * without, counted; every third kill follows an IPC_STAT of the victim's own set (the daemon
 * takes its adjustments). The exits take back every SEM_UNDO operation whatever instruction
 * the kill hit, so afterwards every semaphore is twice its count, or twice its count + 2
 * (killed between the +2 and its count); an undo lost or applied twice leaves an odd value or
 * one out of that range.
 * Usage: [KILLS [undo]]. */
#include "check.h"
#include "sem_ops.h"
#include <sys/mman.h>

enum { PER_SET = 60, WORKERS = 4 };

/* Lives per set: PER_SET, or 1 with "undo"; semaphore `per_set` of each set is the parent's. */
static int per_set = PER_SET;

/* A worker for life `l`: adds 1 to its semaphore (in undo mode a round of SEM_UNDO operations
 * and +2), then counts it, until 10000. */
static pid_t spawn(const int *ids, volatile long *count, int l, int undo) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        int id = ids[l / per_set];
        unsigned short n = l % per_set;
        for (;;) {
            if (undo) {
                CHECK(sop(id, n, 1, SEM_UNDO) == 0);
                CHECK(sop(id, n, 1, SEM_UNDO) == 0);
                CHECK(sop(id, n, -1, SEM_UNDO) == 0);
            }
            CHECK(sop(id, n, undo ? 2 : 1, 0) == 0);
            count[l]++;
            if (count[l] >= 10000)
                pause();
        }
    }
    return pid;
}

int main(int argc, char **argv) {
    int kills = argc > 1 ? atoi(argv[1]) : 2000;
    int undo = argc > 2 && strcmp(argv[2], "undo") == 0;
    if (undo)
        per_set = 1;
    int lives = kills + WORKERS;
    int nsets = (lives + per_set - 1) / per_set;
    int *ids = calloc(nsets, sizeof *ids);
    CHECK(ids != NULL);
    for (int s = 0; s < nsets; s++) {
        ids[s] = semget(IPC_PRIVATE, per_set + 1, 0600);
        CHECK(ids[s] >= 0);
        CHECK(semctl(ids[s], per_set, SETVAL, 1) == 0);
    }
    volatile long *count = mmap(NULL, lives * sizeof(long), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(count != MAP_FAILED);
    pid_t pids[WORKERS];
    int life_of[WORKERS];
    int next = 0;
    unsigned seed = 12345;
    for (int w = 0; w < WORKERS; w++) {
        life_of[w] = next++;
    }
    for (int w = 0; w < WORKERS; w++) {
        int l = life_of[w];
        pids[w] = spawn(ids, count, l, undo);
    }
    for (int k = 0; k < kills; k++) {
        usleep(rand_r(&seed) % 1500);
        int w = rand_r(&seed) % WORKERS;
        int s = rand_r(&seed) % nsets;
        if (undo && k % 3 == 0)
            s = life_of[w] / per_set;
        switch (k % 3) {
        case 0: {
            struct semid_ds ds;
            union semun arg = {.buf = &ds};
            CHECK(semctl(ids[s], 0, IPC_STAT, arg) == 0);
            break;
        }
        case 1:
            CHECK(semctl(ids[s], per_set, SETVAL, k & 1) == 0);
            break;
        default:
            CHECK(semctl(ids[s], 0, GETVAL) >= 0);
        }
        CHECK(kill(pids[w], SIGKILL) == 0);
        int st;
        CHECK(waitpid(pids[w], &st, 0) == pids[w]);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        int l = next++;
        life_of[w] = l;
        pids[w] = spawn(ids, count, l, undo);
    }
    for (int w = 0; w < WORKERS; w++) {
        CHECK(kill(pids[w], SIGKILL) == 0);
        CHECK(waitpid(pids[w], NULL, 0) == pids[w]);
    }
    long total = 0, ahead = 0;
    for (int l = 0; l < next; l++) {
        int v = semctl(ids[l / per_set], l % per_set, GETVAL);
        long step = undo ? 2 : 1;
        if (v != step * count[l] && v != step * count[l] + step) {
            fprintf(stderr, "life %d: value %d, counted %ld\n", l, v, count[l]);
            return 1;
        }
        total += v / step;
        ahead += v / step - count[l];
    }
    for (int s = 0; s < nsets; s++)
        CHECK(semctl(ids[s], 0, IPC_RMID) == 0);
    fprintf(stderr,
            "sem_fast_chaos%s: %d kills, %ld counted operations, %ld killed between call and count\n",
            undo ? " undo" : "", kills, total, ahead);
    puts("sem_fast_chaos: ok");
    return 0;
}
