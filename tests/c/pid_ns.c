/* PID namespaces: the pids SysV IPC and F_GETLK report (sempid, msg_lspid/lrpid,
 * shm_cpid/lpid, l_pid) are numbered in the caller's pid namespace, 0 for a process it cannot
 * see. A grandchild in a new pid namespace (pid 1 there) looks at objects and a lock of its
 * grandparent (invisible: 0), at its own operations (1) and at a lock of its child (2), and
 * at `/proc/sysvipc/{msg,shm}` of a /proc it mounts for its namespace (what `unshare -pf
 * --mount-proc` and container runtimes do), whose pids are numbered the same way. Run as
 * root on the host and under `uipc run --locks`, with the same result. */
#include "check.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>

/* Fields `first` and `first + 1` (counted from 0: msg's lspid and lrpid are 5 and 6, shm's
 * cpid and lpid 4 and 5) of the row of `id` in the /proc/sysvipc file `path`. */
static void proc_pids(const char *path, int id, int first, long pids[2]) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        long field[8];
        int n = 0;
        for (char *save, *t = strtok_r(line, " \n", &save); t && n < 8;
             t = strtok_r(NULL, " \n", &save))
            field[n++] = strtol(t, NULL, 10);
        if (n == 8 && field[1] == id) {
            pids[0] = field[first];
            pids[1] = field[first + 1];
            found = 1;
        }
    }
    fclose(f);
    CHECK(found);
}

static void wait_ok(pid_t pid) {
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static pid_t lock_holder(int fd) {
    struct flock fl = {0};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 10;
    CHECK(fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_WRLCK);
    return fl.l_pid;
}

int main(void) {
    char path[] = "/tmp/uipc-pid-ns-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, 100) == 0);
    unlink(path);
    struct flock fl = range(F_WRLCK, 0, 10);
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    int sem = semget(IPC_PRIVATE, 1, 0600);
    CHECK(sem >= 0 && semop(sem, &(struct sembuf){0, 1, 0}, 1) == 0);
    int q = msgget(IPC_PRIVATE, 0600);
    struct {
        long mtype;
        char text[4];
    } m = {1, "abc"};
    CHECK(q >= 0 && msgsnd(q, &m, 4, 0) == 0);
    int shm = shmget(IPC_PRIVATE, 4096, 0600);
    CHECK(shm >= 0);
    pid_t *grandchild = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(grandchild != MAP_FAILED);

    pid_t child = checked_fork();
    if (child == 0) {
        CHECK(unshare(CLONE_NEWPID) == 0);
        pid_t g = checked_fork();
        if (g == 0) {
            CHECK(getpid() == 1);
            struct msqid_ds mds;
            struct shmid_ds sds;
            /* The grandparent is invisible here. */
            CHECK(semctl(sem, 0, GETPID) == 0);
            CHECK(msgctl(q, IPC_STAT, &mds) == 0 && mds.msg_lspid == 0);
            CHECK(shmctl(shm, IPC_STAT, &sds) == 0 && sds.shm_cpid == 0);
            CHECK(lock_holder(fd) == 0);
            /* Our own operations: pid 1. */
            CHECK(semop(sem, &(struct sembuf){0, 1, 0}, 1) == 0);
            CHECK(semctl(sem, 0, GETPID) == 1);
            CHECK(msgrcv(q, &m, 4, 0, 0) == 4);
            CHECK(msgctl(q, IPC_STAT, &mds) == 0 && mds.msg_lrpid == 1 && mds.msg_lspid == 0);
            /* A /proc of this namespace numbers them alike. */
            CHECK(unshare(CLONE_NEWNS) == 0);
            CHECK(mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
            CHECK(mount("proc", "/proc", "proc", 0, NULL) == 0);
            long pids[2];
            proc_pids("/proc/sysvipc/msg", q, 5, pids);
            CHECK(pids[0] == 0 && pids[1] == 1);
            void *at = shmat(shm, NULL, 0);
            CHECK(at != (void *)-1 && shmdt(at) == 0);
            proc_pids("/proc/sysvipc/shm", shm, 4, pids);
            CHECK(pids[0] == 0 && pids[1] == 1);
            /* A child's lock: pid 2. */
            int ready[2];
            CHECK(pipe(ready) == 0);
            pid_t h = checked_fork();
            if (h == 0) {
                struct flock hl = range(F_WRLCK, 20, 10);
                CHECK(fcntl(fd, F_SETLK, &hl) == 0);
                CHECK(write(ready[1], "x", 1) == 1);
                pause();
                _exit(0);
            }
            CHECK(h == 2);
            char c;
            CHECK(read(ready[0], &c, 1) == 1);
            struct flock gl = range(F_WRLCK, 20, 10);
            CHECK(fcntl(fd, F_GETLK, &gl) == 0 && gl.l_type == F_WRLCK && gl.l_pid == 2);
            kill(h, SIGKILL);
            waitpid(h, NULL, 0);
            _exit(0);
        }
        *grandchild = g;
        wait_ok(g);
        _exit(0);
    }
    wait_ok(child);
    /* The grandparent sees the grandchild by its own number for it. */
    CHECK(semctl(sem, 0, GETPID) == *grandchild);
    struct msqid_ds mds;
    CHECK(msgctl(q, IPC_STAT, &mds) == 0 && mds.msg_lrpid == *grandchild);
    CHECK(mds.msg_lspid == getpid());
    semctl(sem, 0, IPC_RMID);
    msgctl(q, IPC_RMID, NULL);
    shmctl(shm, IPC_RMID, NULL);
    printf("pid_ns: ok\n");
    return 0;
}
