/* A process that makes a user namespace and an IPC namespace in one unshare (what
 * `unshare -U -r -i` and rootless container tools do) uses SysV IPC before its uid_map is
 * written, while its ids map to nothing, and after. The namespace lives as long as the
 * process: a queue made by a child that exits is still there for the parent. Then the
 * parent writes its uid_map and gid_map (0 -> its own ids) and keeps using the namespace.
 * The check runs as root and, in a child that switched to nobody, as nobody (the user
 * namespace is made by an unprivileged user then); says "skipped" where user namespaces
 * cannot be made. */
#include "check.h"
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>

/* Writes `text` to /proc/self/FILE. */
static void write_self(const char *file, const char *text) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/%s", file);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(close(fd) == 0);
}

/* Runs in a process of its own; returns 2 if the user namespace cannot be made. */
static int in_new_namespaces(void) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWIPC) != 0)
        return 2;
    /* Unmapped ids: the kernel shows the overflow ids. */
    CHECK(geteuid() == 65534 && getegid() == 65534);
    CHECK(msgget(0x7549a001, 0) == -1 && errno == ENOENT);
    pid_t pid = checked_fork();
    if (pid == 0) {
        int q = msgget(0x7549a001, IPC_CREAT | 0666);
        CHECK(q == 0);
        CHECK(msgsnd(q, &(struct {
                         long type;
                         char text[4];
                     }){1, "abc"},
                     4, 0) == 0);
        _exit(0);
    }
    CHECK(status_of(pid) == 0);
    /* The child's queue outlives it: this process is still in the namespace. */
    int q = msgget(0x7549a001, 0);
    CHECK(q == 0);
    struct msqid_ds ds;
    CHECK(msgctl(q, IPC_STAT, &ds) == 0 && ds.msg_qnum == 1);
    /* Mapped: root in the user namespace, which owns the IPC namespace. */
    char map[64];
    snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
    write_self("uid_map", map);
    write_self("setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
    write_self("gid_map", map);
    CHECK(geteuid() == 0 && getegid() == 0);
    struct {
        long type;
        char text[4];
    } msg;
    CHECK(msgrcv(q, &msg, sizeof msg.text, 0, IPC_NOWAIT) == 4 && strcmp(msg.text, "abc") == 0);
    CHECK(semget(IPC_PRIVATE, 1, 0600) == 0);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
    CHECK(msgget(0x7549a001, 0) == -1 && errno == ENOENT);
    return 0;
}

static int run_as(uid_t uid) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        if (uid != 0) {
            CHECK(setgroups(0, NULL) == 0);
            CHECK(setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0);
            /* The id change made the process undumpable, its /proc files root's. */
            CHECK(prctl(PR_SET_DUMPABLE, 1) == 0);
        }
        _exit(in_new_namespaces());
    }
    return status_of(pid);
}

int main(void) {
    if (geteuid() != 0) {
        puts("userns_ipc: skipped (needs root)");
        return 0;
    }
    int r = run_as(0);
    if (r == 2) {
        puts("userns_ipc: skipped (no user namespaces)");
        return 0;
    }
    CHECK(r == 0);
    CHECK(run_as(65534) == 0);
    puts("userns_ipc: passed");
    return 0;
}
