/* Which file locks an exec drops. A child takes POSIX locks through a close-on-exec
 * descriptor and through ordinary ones on several files, OFD and flock locks through
 * close-on-exec descriptors whose open file description is or is not held elsewhere (a dup
 * without close-on-exec, a forked grandchild), and an O_PATH close-on-exec descriptor of a
 * locked file, then execs: first a path that does not exist
 * (ENOENT: nothing changes), then this program. The parent, which holds no lock, checks from
 * new descriptions at each step which locks are held and by whom.
 *
 * Linux: the exec closes the close-on-exec descriptors, and a close of any descriptor of a
 * file drops all the closing process's POSIX locks on it (also those taken through another
 * descriptor); an OFD or flock lock goes only with the last descriptor of its description. */
#include "check.h"
#include <sys/file.h>

enum { PA, PB, PW, OD, OE, OF, NFILES };
static char paths[NFILES][64];

/* The pid holding a POSIX lock that conflicts with a write lock of `len` bytes from `start`
 * of file `f` (F_GETLK from a new descriptor), or 0. */
static pid_t posix_holder(int f, off_t start, off_t len) {
    int fd = open_rw(paths[f]);
    struct flock fl = range(F_WRLCK, start, len);
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    CHECK(close(fd) == 0);
    return fl.l_type == F_UNLCK ? 0 : fl.l_pid;
}

/* Whether file `f` has an OFD lock, asked from a new description. */
static int ofd_locked(int f) {
    int fd = open_rw(paths[f]);
    struct flock fl = range(F_WRLCK, 0, 10);
    CHECK(fcntl(fd, F_OFD_GETLK, &fl) == 0);
    CHECK(close(fd) == 0);
    return fl.l_type != F_UNLCK;
}

/* Whether file `f` has an OFD lock and a flock lock (both or neither: they are taken and
 * dropped together), asked from a new description while no exit is dropping them. */
static int desc_locked(int f) {
    int ofd = ofd_locked(f);
    int fd = open_rw(paths[f]);
    int r = flock(fd, LOCK_EX | LOCK_NB);
    CHECK(r == 0 || errno == EWOULDBLOCK);
    CHECK(close(fd) == 0);
    CHECK(ofd == (r != 0));
    return ofd;
}

static int open_file(int f, int cloexec) {
    int fd = open(paths[f], O_RDWR | (cloexec ? O_CLOEXEC : 0));
    CHECK(fd >= 0);
    return fd;
}

static void posix_lock(int fd, off_t start, off_t len) {
    struct flock fl = range(F_WRLCK, start, len);
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
}

static void desc_lock(int fd) {
    struct flock fl = range(F_WRLCK, 0, 10);
    CHECK(fcntl(fd, F_OFD_SETLK, &fl) == 0);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);
}

/* Every lock the child took, held by `child`. */
static void expect_all(pid_t child) {
    CHECK(posix_holder(PA, 0, 5) == child);
    CHECK(posix_holder(PA, 5, 5) == child);
    CHECK(posix_holder(PB, 0, 10) == child);
    CHECK(posix_holder(PW, 100, 1) == child);
    CHECK(desc_locked(OD) && desc_locked(OE) && desc_locked(OF));
}

static void put(int fd, char c) { CHECK(write(fd, &c, 1) == 1); }

static void get(int fd, char want) {
    char c;
    CHECK(read(fd, &c, 1) == 1 && c == want);
}

/* The exec'd image: says it runs, waits for the word, exits. */
static int exec_child(char **argv) {
    put(atoi(argv[2]), 'E');
    get(atoi(argv[3]), 'g');
    return 0;
}

/* The child: takes the locks (OF's description is shared with a grandchild that waits on
 * `hold`), reports, execs a missing path, reports, execs this program. */
static void locker(int up, int down, int ready, int go, int hold) {
    int of = open_file(OF, 1);
    desc_lock(of);
    if (checked_fork() == 0) {
        get(hold, 'x');
        _exit(0);
    }
    /* PA: a lock through the close-on-exec descriptor and one through an ordinary one. */
    posix_lock(open_file(PA, 1), 0, 5);
    posix_lock(open_file(PA, 0), 5, 5);
    posix_lock(open_file(PB, 0), 0, 10);
    /* PB's close-on-exec descriptor is O_PATH, whose close drops nothing. */
    CHECK(open(paths[PB], O_PATH | O_CLOEXEC) >= 0);
    posix_lock(open_file(PW, 1), 0, 0);
    int od = open_file(OD, 1);
    desc_lock(od);
    CHECK(dup(od) >= 0); /* no close-on-exec on the dup */
    desc_lock(open_file(OE, 1));
    put(up, 'L');
    get(down, '1');
    CHECK(execl("/nonexistent/uipc-exec-cloexec", "x", (char *)NULL) == -1 && errno == ENOENT);
    put(up, 'F');
    get(down, '2');
    char r[16], g[16];
    snprintf(r, sizeof r, "%d", ready);
    snprintf(g, sizeof g, "%d", go);
    execl("/proc/self/exe", "exec_cloexec_locks", "exec-child", r, g, (char *)NULL);
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "exec-child") == 0) return exec_child(argv);
    for (int f = 0; f < NFILES; f++) {
        snprintf(paths[f], sizeof paths[f], "/tmp/uipc-exec-cloexec-%d-%d", getpid(), f);
        create_empty(paths[f]);
    }
    int up[2], down[2], ready[2], go[2], hold[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0 && pipe(ready) == 0 && pipe(go) == 0);
    CHECK(pipe(hold) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        /* Only the parent writes these: the child and grandchild see EOF if it dies. */
        CHECK(close(up[0]) == 0 && close(down[1]) == 0 && close(ready[0]) == 0);
        CHECK(close(go[1]) == 0 && close(hold[1]) == 0);
        locker(up[1], down[0], ready[1], go[0], hold[0]);
    }
    get(up[0], 'L');
    expect_all(child);
    put(down[1], '1');
    /* A failed exec changes nothing. */
    get(up[0], 'F');
    expect_all(child);
    put(down[1], '2');
    get(ready[0], 'E');
    /* After the exec: PA lost both locks (one of its descriptors was close-on-exec), PB kept
     * its lock (its O_PATH descriptor's close counts for nothing), PW's went with its descriptor; OD's description lives on in the dup, OF's in
     * the grandchild, OE's is gone. */
    CHECK(posix_holder(PA, 0, 5) == 0);
    CHECK(posix_holder(PA, 5, 5) == 0);
    CHECK(posix_holder(PB, 0, 10) == child);
    CHECK(posix_holder(PW, 0, 0) == 0);
    CHECK(desc_locked(OD));
    CHECK(!desc_locked(OE));
    CHECK(desc_locked(OF));
    put(go[1], 'g');
    expect_clean_exit(child);
    CHECK(posix_holder(PB, 0, 10) == 0);
    CHECK(!desc_locked(OD));
    CHECK(desc_locked(OF));
    /* The grandchild, orphaned by the child's exit, closes OF's last descriptor at its exit. */
    put(hold[1], 'x');
    for (int i = 0; i < 2000 && ofd_locked(OF); i++) usleep(1000);
    CHECK(!desc_locked(OF));
    for (int f = 0; f < NFILES; f++) unlink(paths[f]);
    printf("exec_cloexec_locks: ok\n");
    return 0;
}
