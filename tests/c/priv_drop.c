/* A root program's child drops to nobody (setgroups, setgid, setuid) before its first SysV IPC
 * call, then uses SysV IPC: it is judged by its new ids (EACCES on root's 0600 objects, EPERM
 * for their IPC_RMID, its own objects owned by 65534), and so are a grandchild it forks and a
 * new program image it executes (this program again, with the argument "nobody"). Under
 * `uipc run` each of them must still reach the private daemon, whatever its uid.
 * Runs as root; says "skipped" otherwise. */
#include "check.h"
#include <grp.h>

#define KEY_PRIVATE 0x75491010 /* root's, 0600 */
#define KEY_OPEN 0x75491011    /* root's, 0666 */
#define KEY_NOBODY 0x75491012  /* made by the nobody side, 0600 */

/* What any process running as nobody (no groups) finds. */
static void as_nobody(const char *who) {
    CHECK(geteuid() == 65534 && getegid() == 65534 && getgroups(0, NULL) == 0);
    int sem = semget(KEY_PRIVATE, 0, 0);
    CHECK(sem >= 0); /* no mode asked, none checked */
    CHECK(semget(KEY_PRIVATE, 1, 0600) == -1 && errno == EACCES);
    CHECK(semctl(sem, 0, GETVAL) == -1 && errno == EACCES);
    struct sembuf up = {0, 1, 0};
    CHECK(semop(sem, &up, 1) == -1 && errno == EACCES);
    CHECK(semctl(sem, 0, IPC_RMID) == -1 && errno == EPERM);
    struct semid_ds ds;
    CHECK(semctl(sem, 0, IPC_STAT, (union semun){.buf = &ds}) == -1 && errno == EACCES);
    CHECK(msgget(KEY_PRIVATE, 0400) == -1 && errno == EACCES);
    int shm = shmget(KEY_PRIVATE, 0, 0);
    CHECK(shm >= 0);
    CHECK(shmat(shm, NULL, SHM_RDONLY) == (void *)-1 && errno == EACCES);
    CHECK(shmctl(shm, IPC_RMID, NULL) == -1 && errno == EPERM);
    int open_sem = semget(KEY_OPEN, 1, 0666);
    CHECK(open_sem >= 0 && semop(open_sem, &up, 1) == 0);
    CHECK(semctl(open_sem, 0, IPC_RMID) == -1 && errno == EPERM);
    printf("%s: root's 0600 objects refused, 0666 one used\n", who);
}

/* The nobody side's own object: owned and created by 65534. */
static void make_own(void) {
    int mine = msgget(KEY_NOBODY, IPC_CREAT | IPC_EXCL | 0600);
    CHECK(mine >= 0);
    struct msqid_ds ds;
    CHECK(msgctl(mine, IPC_STAT, &ds) == 0);
    CHECK(ds.msg_perm.uid == 65534 && ds.msg_perm.cuid == 65534);
    CHECK(ds.msg_perm.gid == 65534 && ds.msg_perm.cgid == 65534);
    CHECK(msgsnd(mine, &(struct {
                     long t;
                     char c;
                 }){1, 'x'},
                 1, 0) == 0);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "nobody") == 0) {
        as_nobody("exec'd image");
        return 0;
    }
    if (geteuid() != 0) {
        puts("priv_drop: skipped (needs root)");
        return 0;
    }
    int sem = semget(KEY_PRIVATE, 1, IPC_CREAT | IPC_EXCL | 0600);
    int msq = msgget(KEY_PRIVATE, IPC_CREAT | IPC_EXCL | 0600);
    int shm = shmget(KEY_PRIVATE, 4096, IPC_CREAT | IPC_EXCL | 0600);
    int open_sem = semget(KEY_OPEN, 1, IPC_CREAT | IPC_EXCL | 0666);
    CHECK(sem >= 0 && msq >= 0 && shm >= 0 && open_sem >= 0);
    pid_t child = checked_fork();
    if (child == 0) {
        /* The first SysV IPC call of this process comes after the drop. */
        CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
        as_nobody("child");
        make_own();
        pid_t grandchild = checked_fork();
        if (grandchild == 0) {
            as_nobody("grandchild");
            exit(0);
        }
        expect_clean_exit(grandchild);
        pid_t image = checked_fork();
        if (image == 0) {
            /* Environment passed on as it is: the new image finds the daemon as we did. */
            execl("/proc/self/exe", argv[0], "nobody", (char *)NULL);
            _exit(127);
        }
        expect_clean_exit(image);
        exit(0);
    }
    expect_clean_exit(child);
    CHECK(semctl(open_sem, 0, GETVAL) == 3);
    int mine = msgget(KEY_NOBODY, 0);
    CHECK(mine >= 0);
    struct msqid_ds ds;
    CHECK(msgctl(mine, IPC_STAT, &ds) == 0 && ds.msg_qnum == 1 && ds.msg_lspid == child);
    CHECK(msgctl(mine, IPC_RMID, NULL) == 0);
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && semctl(open_sem, 0, IPC_RMID) == 0);
    CHECK(msgctl(msq, IPC_RMID, NULL) == 0 && shmctl(shm, IPC_RMID, NULL) == 0);
    puts("priv_drop: ok");
    return 0;
}
