/* Lock calls through descriptor numbers that other threads close and reuse at once. Each of
 * T threads has two files of its own; in each round it opens its first file twice (a
 * description and a dup), flocks and unlocks through the dup a few times (under `uipc run
 * --locks` the description becomes a flock lease member, and the library remembers the
 * dup's proof) and does the same with a whole-file POSIX write lock, closes the dup, opens
 * its second file (whose number may be one another thread just freed, or the dup's) and
 * locks that. Every lock must land on the file the thread means: a new description of that
 * file cannot take it, one of the other file can (for POSIX locks, which a process's own
 * descriptions do not see, an OFD lock is the probe). Runs the same on the host kernel.
 * Arguments: threads, rounds. */
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>

static char dir[64];

struct files {
    char a[96], b[96];
};

/* Whether a new description of `path` can take an exclusive flock now. */
static int flock_free(const char *path) {
    int p = open_rw(path);
    int r = flock(p, LOCK_EX | LOCK_NB);
    CHECK(r == 0 || errno == EWOULDBLOCK);
    close(p);
    return r == 0;
}

/* Whether a new description of `path` sees no conflicting lock over the whole file (F_OFD_GETLK:
 * it conflicts with this process's own POSIX locks too). */
static int posix_free(const char *path) {
    int p = open_rw(path);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(fcntl(p, F_OFD_GETLK, &fl) == 0);
    close(p);
    return fl.l_type == F_UNLCK;
}

static void posix_set(int fd, short type) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET};
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
}

/* Locks `fd` (of `mine`) both ways and checks that only `mine` is locked, not `other`. */
static void lock_and_check(int fd, const char *mine, const char *other) {
    CHECK(flock(fd, LOCK_EX) == 0);
    CHECK(!flock_free(mine));
    CHECK(flock_free(other));
    CHECK(flock(fd, LOCK_UN) == 0);
    posix_set(fd, F_WRLCK);
    CHECK(!posix_free(mine));
    CHECK(posix_free(other));
    posix_set(fd, F_UNLCK);
}

struct job {
    struct files f;
    int rounds;
};

static void *thread_main(void *arg) {
    struct job *j = arg;
    for (int r = 0; r < j->rounds; r++) {
        /* `keep` holds the first file's description, so that closing `fd` is not its last
         * close (the lease and the proof stay as they are). */
        int keep = open_rw(j->f.a);
        int fd = dup(keep);
        CHECK(fd >= 0);
        /* Enough calls for the lease to come back after the last round's probes took it
         * (the daemon waits 32 chances before granting a file's lease again). A file has a
         * flock lease or a POSIX one, never both, so the kind locked last, whose lease stays
         * at the close, alternates from round to round. */
        for (int kind = 0; kind < 2; kind++) {
            for (int i = 0; i < 25; i++) {
                if ((kind + r) % 2 == 0) {
                    CHECK(flock(fd, LOCK_EX) == 0);
                    CHECK(flock(fd, LOCK_UN) == 0);
                } else {
                    posix_set(fd, F_WRLCK);
                    posix_set(fd, F_UNLCK);
                }
            }
        }
        CHECK(close(fd) == 0);
        /* Any thread's freed number, maybe `fd`'s. */
        int other = open_rw(j->f.b);
        lock_and_check(other, j->f.b, j->f.a);
        CHECK(close(other) == 0);
        CHECK(close(keep) == 0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    int rounds = argc > 2 ? atoi(argv[2]) : 100;
    snprintf(dir, sizeof dir, "/tmp/uipc-reuse-threads-%d", getpid());
    CHECK(mkdir(dir, 0700) == 0);
    struct job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *tids = calloc(threads, sizeof *tids);
    CHECK(jobs && tids);
    for (int t = 0; t < threads; t++) {
        snprintf(jobs[t].f.a, sizeof jobs[t].f.a, "%s/%d-a", dir, t);
        snprintf(jobs[t].f.b, sizeof jobs[t].f.b, "%s/%d-b", dir, t);
        create_empty(jobs[t].f.a);
        create_empty(jobs[t].f.b);
        jobs[t].rounds = rounds;
    }
    for (int t = 0; t < threads; t++)
        CHECK(pthread_create(&tids[t], NULL, thread_main, &jobs[t]) == 0);
    for (int t = 0; t < threads; t++)
        CHECK(pthread_join(tids[t], NULL) == 0);
    for (int t = 0; t < threads; t++) {
        unlink(jobs[t].f.a);
        unlink(jobs[t].f.b);
    }
    rmdir(dir);
    printf("locks_reuse_threads: ok (%d threads x %d rounds)\n", threads, rounds);
    return 0;
}
