/* fcntl's record-lock commands and close run without malloc or free under `uipc run --locks`:
 * the program defines malloc and friends itself (the executable's definitions come first for
 * every library, the preload library and the C library included), counting calls made while
 * one of them is in progress. On Linux they are system calls and the count is zero; the
 * preload library must get there too, so that a call from a signal handler that interrupted
 * malloc is safe. Covered: F_SETLK, F_GETLK (answered with another process's lock) and F_UNLCK
 * through fcntl, F_OFD_SETLK and F_OFD_GETLK, their errors (a closed descriptor, an unreadable struct flock, a bad lock
 * type, a conflict), the first close of a locked file in the program image (the lock hints are
 * mapped by the library's constructor, not there), closes of unlocked files, the first calls
 * of a new thread, and the same calls from a signal handler. */
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>

#include "malloc_count.h"

static char path[64];
static pid_t holder;
static volatile sig_atomic_t handler_runs, handler_failed;

/* The counted calls on a fresh descriptor of the file; 0 or the failing line. */
static int calls(void) {
    int fd = open(path, O_RDWR);
    FAIL_LINE_IF(fd < 0);
    struct flock fl = range(F_WRLCK, 0, 10);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_SETLK, &fl)) != 0);
    fl = range(F_RDLCK, 100, 100);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_GETLK, &fl)) != 0 || fl.l_type != F_WRLCK ||
                 fl.l_pid != holder);
    fl = range(F_WRLCK, 150, 1);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_SETLK, &fl)) != -1 || (errno != EAGAIN && errno != EACCES));
    fl = range(F_UNLCK, 0, 10);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_SETLK, &fl)) != 0);
    fl = range(F_WRLCK, 0, 10);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_SETLK, &fl)) != 0);
    /* OFD locks, on the description. */
    fl = range(F_RDLCK, 20, 5);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_OFD_SETLK, &fl)) != 0);
    fl = range(F_WRLCK, 100, 1);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_OFD_GETLK, &fl)) != 0 || fl.l_type != F_WRLCK ||
                 fl.l_pid != holder);
    fl = range(F_UNLCK, 20, 5);
    FAIL_LINE_IF(NO_MALLOC(fcntl(fd, F_OFD_SETLK, &fl)) != 0);
    /* The close drops the lock just taken (and tells the daemon). */
    FAIL_LINE_IF(NO_MALLOC(close(fd)) != 0);
    return 0;
}

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    if (calls())
        handler_failed = 1;
    handler_runs++;
    errno = saved;
}

static void *in_a_thread(void *arg) {
    (void)arg;
    int line = calls();
    if (line) {
        fprintf(stderr, "locks_no_malloc: thread's calls failed at line %d\n", line);
        exit(1);
    }
    return NULL;
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/uipc-lnm-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
    int ready[2], release[2];
    CHECK(pipe(ready) == 0 && pipe(release) == 0);
    holder = checked_fork();
    if (holder == 0) {
        struct flock fl = range(F_WRLCK, 100, 100);
        CHECK(fcntl(fd, F_SETLK, &fl) == 0);
        CHECK(write(ready[1], "x", 1) == 1);
        /* Ends when the parent releases it or exits (its write end closes). */
        close(release[1]);
        char ch;
        ssize_t r = read(release[0], &ch, 1);
        _exit(r == 1 ? 0 : 1);
    }
    char ch;
    CHECK(read(ready[0], &ch, 1) == 1);
    /* The first close of the locked file in this image. */
    CHECK(NO_MALLOC(close(fd)) == 0);
    int line = calls();
    if (line) {
        fprintf(stderr, "locks_no_malloc: calls failed at line %d\n", line);
        return 1;
    }

    /* Errors. */
    struct flock fl = range(F_WRLCK, 0, 1);
    CHECK(NO_MALLOC(fcntl(1000, F_SETLK, &fl)) == -1 && errno == EBADF);
    fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(NO_MALLOC(fcntl(fd, F_SETLK, (struct flock *)8)) == -1 && errno == EFAULT);
    CHECK(NO_MALLOC(fcntl(fd, F_GETLK, (struct flock *)8)) == -1 && errno == EFAULT);
    fl.l_type = 77;
    CHECK(NO_MALLOC(fcntl(fd, F_SETLK, &fl)) == -1 && errno == EINVAL);
    CHECK(NO_MALLOC(close(fd)) == 0);
    /* Unlocked files: a pipe and a file nobody locked. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(NO_MALLOC(close(p[0])) == 0 && NO_MALLOC(close(p[1])) == 0);
    fd = open("/proc/self/status", O_RDONLY);
    CHECK(fd >= 0 && NO_MALLOC(close(fd)) == 0);

    pthread_t th;
    CHECK(pthread_create(&th, NULL, in_a_thread, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    for (int i = 0; i < 20; i++)
        CHECK(kill(getpid(), SIGUSR1) == 0);
    CHECK(handler_runs == 20 && !handler_failed);

    CHECK(write(release[1], "x", 1) == 1);
    expect_clean_exit(holder);
    unlink(path);
    printf("locks_no_malloc: ok\n");
    return 0;
}
