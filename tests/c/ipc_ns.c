/* IPC namespaces: unshare(CLONE_NEWIPC), clone(CLONE_NEWIPC) and setns give a process a
 * namespace of its own (empty, ids from 0, default limits), shared with the children it makes
 * afterwards (it lives as long as any process is in it); the parent's is unaffected, and setns back to it sees its objects again. Run as
 * root on the host (in a private IPC namespace) and under `uipc run`, with the same result. */
#include "check.h"
#include <sched.h>

static long value(const char *name) {
    char path[128], buf[64];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n > 0);
    buf[n] = 0;
    close(fd);
    return strtol(buf, NULL, 10);
}

static int queues(void) {
    FILE *f = fopen("/proc/sysvipc/msg", "r");
    CHECK(f != NULL);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n++;
    fclose(f);
    return n - 1;
}

static void wait_ok(pid_t pid) {
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* In a fresh namespace: nothing of the parent's, ids from 0, default limits. */
static void fresh(int parent_q) {
    CHECK(msgget(0x51, 0) == -1 && errno == ENOENT);
    CHECK(msgctl(parent_q, IPC_STAT, &(struct msqid_ds){0}) == -1 && errno == EINVAL);
    CHECK(queues() == 0);
    CHECK(value("msgmni") == 32000);
    CHECK(msgget(0x52, IPC_CREAT | 0600) == 0);
    CHECK(semget(IPC_PRIVATE, 1, 0600) == 0);
    CHECK(queues() == 1);
}

static int child_main(void *arg) {
    fresh(*(int *)arg);
    return 0;
}

int main(void) {
    /* The parent's objects and limits. */
    CHECK(msgget(0x50, IPC_CREAT | 0600) == 0);
    int q = msgget(0x51, IPC_CREAT | 0600);
    CHECK(q == 1);
    CHECK(semget(0x53, 2, IPC_CREAT | 0600) == 0);
    int fd = open("/proc/sys/kernel/msgmni", O_WRONLY);
    CHECK(fd >= 0 && write(fd, "100", 3) == 3 && close(fd) == 0);
    int home = open("/proc/self/ns/ipc", O_RDONLY);
    CHECK(home >= 0);

    /* unshare in a child: a fresh namespace, shared with its own children. */
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(msgget(0x51, 0) == q); /* a connection made before the unshare */
        CHECK(unshare(CLONE_NEWIPC) == 0);
        /* A child forked before any call in the new namespace makes a segment and exits: the
         * namespace lives on in this process, and so does the segment. */
        pid_t first = fork();
        CHECK(first >= 0);
        if (first == 0) {
            CHECK(shmget(0x54, 4096, IPC_CREAT | 0600) == 0);
            _exit(0);
        }
        wait_ok(first);
        CHECK(shmget(0x54, 0, 0) == 0 && shmctl(0, IPC_RMID, NULL) == 0);
        fresh(q);
        pid_t grandchild = checked_fork();
        if (grandchild == 0) {
            CHECK(msgget(0x52, 0) == 0 && queues() == 1);
            CHECK(msgget(0x51, 0) == -1 && errno == ENOENT);
            /* setns back to the parent's namespace: its objects again. */
            CHECK(setns(home, CLONE_NEWIPC) == 0);
            CHECK(msgget(0x51, 0) == q && msgget(0x52, 0) == -1 && errno == ENOENT);
            CHECK(value("msgmni") == 100 && queues() == 2);
            _exit(0);
        }
        wait_ok(grandchild);
        CHECK(msgget(0x52, 0) == 0);
        _exit(0);
    }
    wait_ok(pid);

    /* clone with CLONE_NEWIPC: the same, for the new process only. */
    static char stack[256 * 1024];
    pid = clone(child_main, stack + sizeof stack, CLONE_NEWIPC | SIGCHLD, &q);
    CHECK(pid > 0);
    wait_ok(pid);

    /* The parent's namespace is as it was. */
    CHECK(msgget(0x51, 0) == q && msgget(0x52, 0) == -1 && errno == ENOENT);
    CHECK(queues() == 2 && value("msgmni") == 100);
    CHECK(semget(0x53, 0, 0) == 0);
    printf("ipc_ns: ok\n");
    return 0;
}
