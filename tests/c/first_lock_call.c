/* A process's first lock call: each case runs in a freshly forked child whose first call of
 * all is the lock call checked (under `uipc run --locks` it opens the child's session with the
 * daemon, and its Hello brings the lock area along), against locks other children hold:
 * flock and fcntl conflicts, F_GETLK's answer, a blocking call that waits for a release, bad
 * descriptors, and the calls that follow the first. */
#include "check.h"
#include <sys/file.h>

static char path[64];
/* A holder's pipes: it says it holds, then waits for the word to release. */
static int held[2], release_pipe[2];

static int open_file(int flags) {
    int fd = open(path, flags);
    CHECK(fd >= 0);
    return fd;
}

static void say(int fd) {
    char c = 1;
    CHECK(write(fd, &c, 1) == 1);
}

static void hear(int fd) {
    char c;
    CHECK(read(fd, &c, 1) == 1);
}

/* A child holding an exclusive flock lock and a whole-file POSIX write lock until told. */
static pid_t start_holder(void) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        int fd = open_file(O_RDWR);
        CHECK(flock(fd, LOCK_EX) == 0);
        struct flock fl = range(F_WRLCK, 0, 0);
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        say(held[1]);
        hear(release_pipe[0]);
        CHECK(flock(fd, LOCK_UN) == 0);
        fl.l_type = F_UNLCK;
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        _exit(0);
    }
    hear(held[0]);
    return pid;
}

static pid_t holder;

static void first_flock_conflicts(void) {
    int fd = open_file(O_RDWR);
    errno = 0;
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(flock(fd, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK);
}

static void first_getlk_names_the_holder(void) {
    int fd = open_file(O_RDWR);
    struct flock fl = range(F_WRLCK, 0, 0);
    CHECK(fcntl(fd, F_GETLK, &fl) == 0);
    CHECK(fl.l_type == F_WRLCK && fl.l_pid == holder && fl.l_start == 0 && fl.l_len == 0);
}

static void first_setlk_conflicts(void) {
    int fd = open_file(O_RDWR);
    struct flock fl = range(F_RDLCK, 5, 10);
    errno = 0;
    CHECK(fcntl(fd, F_SETLK, &fl) == -1 && (errno == EAGAIN || errno == EACCES));
    fl = range(F_WRLCK, 0, 0);
    errno = 0;
    CHECK(fcntl(fd, F_OFD_SETLK, &fl) == -1 && errno == EAGAIN);
}

static void first_ofd_conflicts(void) {
    int fd = open_file(O_RDWR);
    struct flock fl = range(F_WRLCK, 0, 1);
    errno = 0;
    CHECK(fcntl(fd, F_OFD_SETLK, &fl) == -1 && errno == EAGAIN);
}

static void first_calls_on_bad_descriptors(void) {
    errno = 0;
    CHECK(flock(-1, LOCK_EX) == -1 && errno == EBADF);
    int fd = open_file(O_PATH);
    errno = 0;
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == -1 && errno == EBADF);
    struct flock fl = range(F_WRLCK, 0, 0);
    errno = 0;
    CHECK(fcntl(fd, F_SETLK, &fl) == -1 && errno == EBADF);
    CHECK(close(fd) == 0);
    errno = 0;
    CHECK(fcntl(fd, F_SETLK, &fl) == -1 && errno == EBADF);
}

static void first_readonly_write_lock(void) {
    int fd = open_file(O_RDONLY);
    struct flock fl = range(F_WRLCK, 0, 0);
    errno = 0;
    CHECK(fcntl(fd, F_SETLK, &fl) == -1 && errno == EBADF);
    /* flock needs no access mode: it conflicts with the holder. */
    errno = 0;
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
}

/* The first call blocks until the holder lets go; then the calls after it work too. */
static void first_call_blocks_until_released(int posix) {
    int fd = open_file(O_RDWR);
    pid_t releaser = checked_fork();
    if (releaser == 0) {
        usleep(100 * 1000);
        say(release_pipe[1]);
        _exit(0);
    }
    struct flock fl = range(F_WRLCK, 0, 0);
    if (posix)
        CHECK(fcntl(fd, F_SETLKW, &fl) == 0);
    else
        CHECK(flock(fd, LOCK_EX) == 0);
    expect_clean_exit(releaser);
    if (posix) {
        fl.l_type = F_UNLCK;
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        fl.l_type = F_WRLCK;
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    } else {
        CHECK(flock(fd, LOCK_UN) == 0);
        CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);
    }
}

static void first_flock_blocks(void) {
    first_call_blocks_until_released(0);
}

static void first_setlkw_blocks(void) {
    first_call_blocks_until_released(1);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-first-lock-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789abcdef", 16) == 16);
    CHECK(close(fd) == 0);
    CHECK(pipe(held) == 0 && pipe(release_pipe) == 0);

    void (*against_holder[])(void) = {first_flock_conflicts, first_getlk_names_the_holder,
                                      first_setlk_conflicts, first_ofd_conflicts,
                                      first_calls_on_bad_descriptors,
                                      first_readonly_write_lock};
    holder = start_holder();
    for (size_t i = 0; i < sizeof against_holder / sizeof against_holder[0]; i++)
        in_child(against_holder[i]);
    say(release_pipe[1]);
    expect_clean_exit(holder);

    /* A holder, and a fresh waiter whose first call blocks until a child of its own tells
     * the holder to let go. */
    void (*blocking[])(void) = {first_flock_blocks, first_setlkw_blocks};
    for (size_t i = 0; i < sizeof blocking / sizeof blocking[0]; i++) {
        holder = start_holder();
        in_child(blocking[i]);
        expect_clean_exit(holder);
    }
    CHECK(unlink(path) == 0);
    printf("first_lock_call: ok\n");
    return 0;
}
