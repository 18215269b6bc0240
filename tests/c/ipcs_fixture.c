/* Creates a fixed set of SysV objects (keys, private ones, a segment marked for removal while
 * attached, a locked one, queued messages, an object given to nobody), then runs the shell
 * command in argv[1] (with FIXTURE_PID set to this process's pid): `ipcs`/`ipcrm` on the host
 * kernel, `uipc ipcs`/`uipc ipcrm` under uipc. The two outputs must be the same.
 *
 * The command replaces the pid by a marker, so the pid must be a number nothing else in the
 * output can equal (a pid of 666 once turned the mode 666 into the marker). As root the
 * fixture first moves into a child whose pid it picks through ns_last_pid: five digits, above
 * every size, mode and count the objects show and below every limit `ipcs -l` prints. */
#include "check.h"

/* Pids between these bounds equal no other number of the fixture's output. */
enum { PID_LOW = 27000, PID_HIGH = 27999 };

/* Continues in a child with a pid in [PID_LOW, PID_HIGH] when ns_last_pid lets it pick one
 * (another process may take the number first: three tries); the parent exits with the child's
 * status. Without the permission the fixture keeps its own pid. */
static void distinctive_pid(void) {
    for (int attempt = 0; attempt < 3; attempt++) {
        FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
        if (!f)
            return;
        int wrote = fprintf(f, "%d", PID_LOW + attempt * 300) > 0;
        if (fclose(f) != 0 || !wrote)
            return;
        fflush(stdout);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            pid_t me = getpid();
            if (me >= PID_LOW && me <= PID_HIGH)
                return;
            _exit(0);
        }
        int st;
        CHECK(waitpid(child, &st, 0) == child);
        if (child < PID_LOW || child > PID_HIGH)
            continue;
        exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    fprintf(stderr, "ipcs_fixture: no pid between %d and %d\n", PID_LOW, PID_HIGH);
    exit(1);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    distinctive_pid();
    int q1 = msgget(0x99, IPC_CREAT | 0600);
    int q2 = msgget(0x12345678, IPC_CREAT | 0644);
    CHECK(q1 >= 0 && q2 >= 0);
    struct {
        long mtype;
        char text[10];
    } m = {1, "abc"};
    CHECK(msgsnd(q1, &m, 10, 0) == 0 && msgsnd(q1, &m, 5, 0) == 0);
    int s1 = shmget(0x1234, 5000, IPC_CREAT | 0640);
    int s2 = shmget(IPC_PRIVATE, 100, 0600);
    CHECK(s1 >= 0 && s2 >= 0);
    CHECK(shmat(s1, NULL, 0) != (void *)-1);
    CHECK(shmctl(s1, IPC_RMID, NULL) == 0);
    CHECK(shmctl(s2, SHM_LOCK, NULL) == 0);
    int m1 = semget(0x4321, 3, IPC_CREAT | 0666);
    int m2 = semget(IPC_PRIVATE, 1, 0600);
    CHECK(m1 >= 0 && m2 >= 0);
    struct semid_ds ds;
    CHECK(semctl(m2, 0, IPC_STAT, (union semun){.buf = &ds}) == 0);
    ds.sem_perm.uid = 65534;
    CHECK(semctl(m2, 0, IPC_SET, (union semun){.buf = &ds}) == 0);
    struct sembuf up = {1, 2, 0};
    CHECK(semop(m1, &up, 1) == 0);
    /* The command may hide this process's pid (it differs from run to run). */
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    CHECK(setenv("FIXTURE_PID", pid, 1) == 0);
    fflush(stdout);
    int st = system(argv[1]);
    CHECK(WIFEXITED(st));
    return WEXITSTATUS(st);
}
