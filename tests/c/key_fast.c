/* Opening existing keys (semget, msgget, shmget), the calls the key table answers in the
 * caller's process under `uipc run`: EEXIST, then EINVAL for too many semaphores or too large
 * a size, then EACCES, in Linux's order; IPC_SET narrowing the mode, a setresuid, a group
 * change and a capset that drops CAP_IPC_OWNER in the caller, each seen at the next call; a
 * key removed and created again (a new id); semmsl lowered below a set's size. As root the
 * privileged parts run; prints one line. Under UIPC_FASTPATH_STATS the table must have served
 * the opens (scripts/test-run.sh counts them). */
#include "check.h"
#include <sys/syscall.h>
#include <linux/capability.h>
#include <grp.h>

enum { SKEY = 0x6b657901, QKEY = 0x6b657902, MKEY = 0x6b657903 };

static void opens(int sid, int qid, int mid) {
    for (int i = 0; i < 500; i++) {
        CHECK(semget(SKEY, 2, 0600) == sid);
        CHECK(msgget(QKEY, 0600) == qid);
        CHECK(shmget(MKEY, 4096, 0600) == mid);
    }
}

static void errors(void) {
    CHECK(semget(SKEY, 1, IPC_CREAT | IPC_EXCL | 0600) == -1 && errno == EEXIST);
    /* nsems < 0 is EINVAL before the lookup, even with IPC_EXCL. */
    CHECK(semget(SKEY, -1, IPC_CREAT | IPC_EXCL) == -1 && errno == EINVAL);
    CHECK(semget(SKEY, 3, 0) == -1 && errno == EINVAL);
    CHECK(semget(SKEY, 3, IPC_CREAT | IPC_EXCL) == -1 && errno == EEXIST);
    CHECK(msgget(QKEY, IPC_CREAT | IPC_EXCL) == -1 && errno == EEXIST);
    CHECK(shmget(MKEY, 8192, 0) == -1 && errno == EINVAL);
    CHECK(shmget(MKEY, 8192, IPC_CREAT | IPC_EXCL) == -1 && errno == EEXIST);
    CHECK(semget(0x6b6579ff, 1, 0) == -1 && errno == ENOENT);
}

/* Drops CAP_IPC_OWNER from the effective set (raw capget/capset: no libcap). */
static void drop_ipc_owner(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    CHECK(syscall(SYS_capget, &h, d) == 0);
    d[0].effective &= ~(1u << CAP_IPC_OWNER);
    CHECK(syscall(SYS_capset, &h, d) == 0);
}

static void set_sem(int id, uid_t uid, gid_t gid, int mode) {
    struct semid_ds ds;
    union semun arg = {.buf = &ds};
    CHECK(semctl(id, 0, IPC_STAT, arg) == 0);
    ds.sem_perm.uid = uid;
    ds.sem_perm.gid = gid;
    ds.sem_perm.mode = mode;
    CHECK(semctl(id, 0, IPC_SET, arg) == 0);
}

static void set_msg(int id, uid_t uid, gid_t gid, int mode) {
    struct msqid_ds ds;
    CHECK(msgctl(id, IPC_STAT, &ds) == 0);
    ds.msg_perm.uid = uid;
    ds.msg_perm.gid = gid;
    ds.msg_perm.mode = mode;
    CHECK(msgctl(id, IPC_SET, &ds) == 0);
}

static void as_child(void (*f)(int, int), int sid, int qid) {
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        f(sid, qid);
        _exit(0);
    }
    int st;
    CHECK(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Root, owner of 0400 objects: the owner class denies write, CAP_IPC_OWNER lifts it until
 * capset drops it; then setresuid to nobody (other class, nothing granted). */
static void owner_then_capset_then_setresuid(int sid, int qid) {
    CHECK(semget(SKEY, 0, 0600) == sid);
    CHECK(msgget(QKEY, 0600) == qid);
    drop_ipc_owner();
    CHECK(semget(SKEY, 0, 0600) == -1 && errno == EACCES);
    CHECK(msgget(QKEY, 0200) == -1 && errno == EACCES);
    CHECK(semget(SKEY, 0, 0400) == sid);
    CHECK(msgget(QKEY, 0400) == qid);
    /* EINVAL (too many semaphores) comes before EACCES. */
    CHECK(semget(SKEY, 5, 0600) == -1 && errno == EINVAL);
    CHECK(setresuid(65534, 65534, 65534) == 0);
    CHECK(semget(SKEY, 0, 0400) == -1 && errno == EACCES);
    CHECK(msgget(QKEY, 0400) == -1 && errno == EACCES);
    /* Asking for no permission opens anything. */
    CHECK(semget(SKEY, 0, 0) == sid);
    CHECK(msgget(QKEY, 0) == qid);
}

/* 0640 with group 4321: a member by egid, then by a supplementary group only, reads but does
 * not write; a non-member gets the other class (nothing). Through raw system calls too. */
static void groups(int sid, int qid) {
    CHECK(setgroups(0, NULL) == 0);
    CHECK(syscall(SYS_setresgid, 4321, 4321, 4321) == 0);
    CHECK(syscall(SYS_setresuid, 0, 1000, 0) == 0);
    CHECK(semget(SKEY, 0, 0400) == sid);
    CHECK(semget(SKEY, 0, 0600) == -1 && errno == EACCES);
    CHECK(msgget(QKEY, 0040) == qid);
    CHECK(syscall(SYS_setresuid, 0, 0, 0) == 0);
    gid_t g = 4321;
    CHECK(setgroups(1, &g) == 0);
    CHECK(setresgid(100, 100, 100) == 0);
    CHECK(setresuid(1000, 1000, 1000) == 0);
    CHECK(semget(SKEY, 0, 0440) == sid);
    CHECK(msgget(QKEY, 0600) == -1 && errno == EACCES);
}

static void stranger(int sid, int qid) {
    CHECK(setgroups(0, NULL) == 0);
    CHECK(setresgid(100, 100, 100) == 0);
    CHECK(setresuid(1000, 1000, 1000) == 0);
    CHECK(semget(SKEY, 0, 0004) == -1 && errno == EACCES);
    CHECK(msgget(QKEY, 0400) == -1 && errno == EACCES);
    CHECK(semget(SKEY, 0, 0) == sid && msgget(QKEY, 0) == qid);
}

static void write_sem_sysctl(const char *text) {
    int fd = open("/proc/sys/kernel/sem", O_WRONLY);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(close(fd) == 0);
}

int main(void) {
    int sid = semget(SKEY, 2, IPC_CREAT | IPC_EXCL | 0600);
    int qid = msgget(QKEY, IPC_CREAT | IPC_EXCL | 0600);
    int mid = shmget(MKEY, 4096, IPC_CREAT | IPC_EXCL | 0600);
    CHECK(sid >= 0 && qid >= 0 && mid >= 0);
    CHECK(semget(SKEY, 2, IPC_CREAT | 0600) == sid);
    CHECK(semget(SKEY, 0, 0) == sid);
    CHECK(shmget(MKEY, 0, 0) == mid);
    opens(sid, qid, mid);
    errors();

    /* Removed, then created again: the key opens the new object. */
    CHECK(semctl(sid, 0, IPC_RMID) == 0);
    CHECK(msgctl(qid, IPC_RMID, NULL) == 0);
    CHECK(semget(SKEY, 2, 0600) == -1 && errno == ENOENT);
    CHECK(msgget(QKEY, 0600) == -1 && errno == ENOENT);
    int sid2 = semget(SKEY, 2, IPC_CREAT | 0600);
    int qid2 = msgget(QKEY, IPC_CREAT | 0600);
    CHECK(sid2 >= 0 && sid2 != sid && qid2 >= 0 && qid2 != qid);
    opens(sid2, qid2, mid);
    /* A segment removed while attached keeps its id but its key no longer opens it. */
    void *at = shmat(mid, NULL, 0);
    CHECK(at != (void *)-1);
    CHECK(shmctl(mid, IPC_RMID, NULL) == 0);
    CHECK(shmget(MKEY, 4096, 0600) == -1 && errno == ENOENT);
    CHECK(shmdt(at) == 0);

    if (geteuid() == 0) {
        set_sem(sid2, 0, 0, 0400);
        set_msg(qid2, 0, 0, 0400);
        as_child(owner_then_capset_then_setresuid, sid2, qid2);
        set_sem(sid2, 0, 4321, 0640);
        set_msg(qid2, 0, 4321, 0640);
        as_child(groups, sid2, qid2);
        as_child(stranger, sid2, qid2);
        /* semmsl below the set's size: EINVAL before the lookup. */
        write_sem_sysctl("1 32000 500 32000");
        CHECK(semget(SKEY, 2, 0) == -1 && errno == EINVAL);
        CHECK(semget(SKEY, 1, 0) == sid2);
        write_sem_sysctl("32000 1024000000 500 32000");
        CHECK(semget(SKEY, 2, 0) == sid2);
    }
    CHECK(semctl(sid2, 0, IPC_RMID) == 0);
    CHECK(msgctl(qid2, IPC_RMID, NULL) == 0);
    printf("key_fast: ok\n");
    return 0;
}
