/* The `lock:` lines of /proc/PID/fdinfo/FD: the flock lock of FD's description first, then
 * the POSIX locks of PID on the file and the description's OFD locks, numbered from 1, in
 * /proc/locks's format; read through /proc/self and through another process's pid; a forked
 * child sees the description's flock lock on its inherited descriptor but not its parent's
 * POSIX locks; blocked requests and released locks are not listed. */
#include "check.h"
#include "proc_locks.h"
#include <sys/file.h>
#include <sys/sysmacros.h>

static char path[64];
static char file_id[40]; /* "MAJ:MIN:INO" as /proc/locks prints it */

/* The `lock:` lines of /proc/`who`/fdinfo/`fd`, concatenated. */
static void lock_lines(const char *who, int fd, char *out, size_t size) {
    char name[64];
    snprintf(name, sizeof name, "/proc/%s/fdinfo/%d", who, fd);
    FILE *f = fopen(name, "r");
    CHECK(f != NULL);
    char line[256];
    out[0] = 0;
    int seen_ino = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "ino:", 4) == 0) seen_ino = 1;
        if (strncmp(line, "lock:", 5) == 0) {
            CHECK(seen_ino); /* after the ino: line */
            CHECK(strlen(out) + strlen(line) < size);
            strcat(out, line);
        }
    }
    fclose(f);
    CHECK(seen_ino);
}

/* Checks that /proc/`who`/fdinfo/`fd` lists no lock. */
static void expect_none(const char *who, int fd) {
    char got[1024];
    lock_lines(who, fd, got, sizeof got);
    if (got[0]) {
        fprintf(stderr, "/proc/%s/fdinfo/%d lists locks:\n%s", who, fd, got);
        exit(1);
    }
}

static int lk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = range(type, start, len);
    return fcntl(fd, cmd, &fl);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-locks-fdinfo-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    snprintf(file_id, sizeof file_id, "%02x:%02x:%lu", major(st.st_dev), minor(st.st_dev),
             (unsigned long)st.st_ino);
    pid_t me = getpid();
    char me_s[16];
    snprintf(me_s, sizeof me_s, "%d", (int)me);

    /* No lock: no lines. */
    expect_none("self", fd);

    CHECK(lk(fd, F_SETLK, F_WRLCK, 10, 5) == 0);
    CHECK(lk(fd, F_SETLK, F_RDLCK, 0, 5) == 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    CHECK(lk(fd, F_OFD_SETLK, F_RDLCK, 100, 0) == 0);
    char all_fixed[1024];
    snprintf(all_fixed, sizeof all_fixed,
             "lock:\t1: FLOCK  ADVISORY  WRITE %d %s 0 EOF\n"
             "lock:\t2: POSIX  ADVISORY  READ %d %s 0 4\n"
             "lock:\t3: POSIX  ADVISORY  WRITE %d %s 10 14\n"
             "lock:\t4: OFDLCK ADVISORY  READ -1 %s 100 EOF\n",
             (int)me, file_id, (int)me, file_id, (int)me, file_id, file_id);
    char got[1024];
    lock_lines("self", fd, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);
    lock_lines("thread-self", fd, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);
    lock_lines(me_s, fd, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);
    /* A dup shares the description. */
    int d = dup(fd);
    CHECK(d >= 0);
    lock_lines("self", d, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);
    /* Closing it drops the process's POSIX locks, not the description's. */
    CHECK(close(d) == 0);
    /* The description's own locks: its flock (taken by this process) and its OFD lock. */
    char left[512];
    snprintf(left, sizeof left,
             "lock:\t1: FLOCK  ADVISORY  WRITE %d %s 0 EOF\n"
             "lock:\t2: OFDLCK ADVISORY  READ -1 %s 100 EOF\n",
             (int)me, file_id, file_id);
    lock_lines("self", fd, got, sizeof got);
    CHECK(strcmp(got, left) == 0);
    CHECK(lk(fd, F_OFD_SETLK, F_UNLCK, 0, 0) == 0);
    CHECK(lk(fd, F_SETLK, F_WRLCK, 10, 5) == 0);
    CHECK(lk(fd, F_SETLK, F_RDLCK, 0, 5) == 0);
    CHECK(lk(fd, F_OFD_SETLK, F_RDLCK, 100, 0) == 0);
    lock_lines("self", fd, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);

    /* A forked child: the description's flock and OFD locks, not its parent's POSIX locks;
     * the parent reads the child's file by pid, and the child its parent's. */
    int p[2], q[2];
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    pid_t c = checked_fork();
    if (c == 0) {
        lock_lines("self", fd, got, sizeof got);
        CHECK(strcmp(got, left) == 0);
        char parent[16];
        snprintf(parent, sizeof parent, "%d", (int)me);
        lock_lines(parent, fd, got, sizeof got);
        CHECK(strcmp(got, all_fixed) == 0);
        /* A description of its own with an OFD write lock and a POSIX lock of the child. */
        int o = open_rw(path);
        CHECK(lk(o, F_OFD_SETLK, F_WRLCK, 50, 10) == 0);
        CHECK(dup2(o, 40) == 40 && close(o) == 0);
        CHECK(write(p[1], "r", 1) == 1);
        char ch;
        CHECK(read(q[0], &ch, 1) == 1);
        _exit(0);
    }
    char ch;
    CHECK(read(p[0], &ch, 1) == 1);
    char child_s[16], want[1024];
    snprintf(child_s, sizeof child_s, "%d", (int)c);
    snprintf(want, sizeof want, "lock:\t1: OFDLCK ADVISORY  WRITE -1 %s 50 59\n", file_id);
    lock_lines(child_s, 40, got, sizeof got);
    CHECK(strcmp(got, want) == 0);

    /* A request blocked behind the child's lock is not listed. */
    pid_t w = checked_fork();
    if (w == 0) {
        CHECK(lk(fd, F_OFD_SETLKW, F_WRLCK, 55, 1) == 0);
        _exit(0);
    }
    wait_blocked(-1);
    lock_lines("self", fd, got, sizeof got);
    CHECK(strcmp(got, all_fixed) == 0);
    CHECK(write(q[1], "g", 1) == 1);
    expect_clean_exit(c);
    expect_clean_exit(w);
    snprintf(want, sizeof want,
             "lock:\t1: FLOCK  ADVISORY  WRITE %d %s 0 EOF\n"
             "lock:\t2: POSIX  ADVISORY  READ %d %s 0 4\n"
             "lock:\t3: POSIX  ADVISORY  WRITE %d %s 10 14\n"
             "lock:\t4: OFDLCK ADVISORY  WRITE -1 %s 55 55\n"
             "lock:\t5: OFDLCK ADVISORY  READ -1 %s 100 EOF\n",
             (int)me, file_id, (int)me, file_id, (int)me, file_id, file_id, file_id);
    lock_lines("self", fd, got, sizeof got);
    CHECK(strcmp(got, want) == 0);

    /* Released locks go from the listing. */
    CHECK(flock(fd, LOCK_UN) == 0);
    CHECK(lk(fd, F_SETLK, F_UNLCK, 0, 0) == 0);
    CHECK(lk(fd, F_OFD_SETLK, F_UNLCK, 0, 0) == 0);
    expect_none("self", fd);

    CHECK(unlink(path) == 0);
    puts("locks_fdinfo: ok");
    return 0;
}
