/* How long OFD and flock locks live: as long as any descriptor of their open file description
 * is open in any process. Each case takes a flock lock and an OFD lock through one
 * description, passes the description on (exec with and without close-on-exec, a fork whose
 * parent then exits, SCM_RIGHTS to another process) and checks from a new description of the
 * file whether the locks are still held at each point. */
#include "check.h"
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>

static char path[64];

static void lock_both(int fd) {
    struct flock fl = range(F_WRLCK, 0, 10);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);
    CHECK(fcntl(fd, F_OFD_SETLK, &fl) == 0);
}

/* Whether a new description gets the flock lock and the OFD lock without waiting; both
 * answers must agree (the two locks belong to one description). */
static int free_now(void) {
    int fd = open_rw(path);
    struct flock fl = range(F_WRLCK, 0, 10);
    int f = flock(fd, LOCK_EX | LOCK_NB);
    int fe = errno;
    int o = fcntl(fd, F_OFD_SETLK, &fl);
    int oe = errno;
    close(fd);
    CHECK(f == 0 || fe == EWOULDBLOCK);
    CHECK(o == 0 || oe == EAGAIN);
    CHECK((f == 0) == (o == 0));
    return f == 0;
}

/* The exec'd image: says it runs on descriptor `ready`, waits for a byte on `go`, exits. */
static int exec_child(char **argv) {
    int ready = atoi(argv[2]), go = atoi(argv[3]);
    char c;
    CHECK(write(ready, "r", 1) == 1);
    CHECK(read(go, &c, 1) == 1);
    return 0;
}

/* Forks a child that execs this program holding `fd` (closed by the exec if it is
 * close-on-exec); the parent closes `fd` before or after the exec, then checks whether the
 * locks are held while the new image runs and after it exits. */
static void through_exec(int cloexec, int close_first) {
    int fd = open(path, O_RDWR | (cloexec ? O_CLOEXEC : 0));
    CHECK(fd >= 0);
    lock_both(fd);
    int ready[2], go[2], start[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0 && pipe(start) == 0);
    pid_t pid = checked_fork();
    if (pid == 0) {
        char c, r[16], g[16];
        CHECK(read(start[0], &c, 1) == 1);
        snprintf(r, sizeof r, "%d", ready[1]);
        snprintf(g, sizeof g, "%d", go[0]);
        execl("/proc/self/exe", "locks_lifetime", "exec-child", r, g, (char *)NULL);
        _exit(127);
    }
    if (close_first) CHECK(close(fd) == 0);
    /* Before the exec the child holds the description too. */
    CHECK(!free_now());
    CHECK(write(start[1], "s", 1) == 1);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    if (!close_first) CHECK(close(fd) == 0);
    /* Now only the exec'd child can hold it: without close-on-exec it does. */
    CHECK(free_now() == cloexec);
    CHECK(write(go[1], "g", 1) == 1);
    expect_clean_exit(pid);
    CHECK(free_now());
    close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
    close(start[0]), close(start[1]);
}

/* A child locks through its own description and forks a grandchild that inherits it; the
 * child exits, then the grandchild: the locks live until the grandchild's exit. */
static void through_fork_and_exit(void) {
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    int p[2], q[2];
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        int fd = open_rw(path);
        lock_both(fd);
        pid_t grandchild = checked_fork();
        if (grandchild == 0) {
            char c;
            CHECK(read(q[0], &c, 1) == 1);
            _exit(0);
        }
        /* Tell the test the grandchild's pid, then leave without closing anything. */
        CHECK(write(p[1], &grandchild, sizeof grandchild) == sizeof grandchild);
        _exit(0);
    }
    pid_t grandchild;
    CHECK(read(p[0], &grandchild, sizeof grandchild) == sizeof grandchild);
    expect_clean_exit(child);
    CHECK(!free_now());
    CHECK(write(q[1], "g", 1) == 1);
    /* This process is a subreaper: the orphaned grandchild is its child now. */
    expect_clean_exit(grandchild);
    CHECK(free_now());
    close(p[0]), close(p[1]), close(q[0]), close(q[1]);
}

/* One byte and room for one descriptor: a message SCM_RIGHTS sends or receives. */
struct fd_msg {
    char byte;
    struct iovec iov;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m;
};

static void fd_msg_init(struct fd_msg *f) {
    memset(f, 0, sizeof *f);
    f->byte = 'f';
    f->iov.iov_base = &f->byte;
    f->iov.iov_len = 1;
    f->m.msg_iov = &f->iov;
    f->m.msg_iovlen = 1;
    f->m.msg_control = f->u.buf;
    f->m.msg_controllen = sizeof f->u.buf;
}

/* A child locks through its own description, sends the descriptor to this process
 * (SCM_RIGHTS) and exits: the locks live until this process closes what it received. */
static void through_scm_rights(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        int fd = open_rw(path);
        lock_both(fd);
        struct fd_msg f;
        fd_msg_init(&f);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&f.m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        CHECK(sendmsg(sv[1], &f.m, 0) == 1);
        _exit(0);
    }
    struct fd_msg f;
    fd_msg_init(&f);
    CHECK(recvmsg(sv[0], &f.m, 0) == 1);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&f.m);
    CHECK(cm && cm->cmsg_type == SCM_RIGHTS);
    int got;
    memcpy(&got, CMSG_DATA(cm), sizeof got);
    expect_clean_exit(child);
    CHECK(!free_now());
    /* A dup of what was received, closed first, is not the last descriptor. */
    expect_freed_at_last_close(got, 1, free_now);
    close(sv[0]), close(sv[1]);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "exec-child") == 0) return exec_child(argv);
    snprintf(path, sizeof path, "/tmp/uipc-locks-lifetime-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(close(fd) == 0);
    for (int cloexec = 0; cloexec < 2; cloexec++)
        for (int close_first = 0; close_first < 2; close_first++) through_exec(cloexec, close_first);
    through_fork_and_exit();
    through_scm_rights();
    unlink(path);
    printf("locks_lifetime: ok\n");
    return 0;
}
