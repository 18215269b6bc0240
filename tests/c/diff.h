/* Shared pieces of the differential runs (diff_*.c): the seeded generator that draws their
 * calls, and a pool of worker processes that each take one call at a time over a pipe and
 * answer over another, so the calls happen in one order on the host and under uipc. */
#include "check.h"

static unsigned long long rng;

/* A draw in [0, n) (xorshift64). */
static inline unsigned rnd(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

enum { MAX_WORKERS = 8 };
static pid_t pids[MAX_WORKERS];
static int to_worker[MAX_WORKERS], from_worker[MAX_WORKERS];

/* Forks worker `w` of `n`, which runs `body(w, in, out)` holding its own pipe ends and none of
 * the other workers'; the parent keeps `pids[w]`, `to_worker[w]` and `from_worker[w]`. */
static inline void spawn_worker(int w, int n, void (*body)(int w, int in, int out)) {
    int down[2], up[2];
    CHECK(pipe(down) == 0 && pipe(up) == 0);
    fflush(stdout);
    pid_t pid = checked_fork();
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        for (int o = 0; o < n; o++)
            if (o != w && pids[o]) {
                close(to_worker[o]);
                close(from_worker[o]);
            }
        body(w, down[0], up[1]);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    pids[w] = pid;
    to_worker[w] = down[1];
    from_worker[w] = up[0];
}

/* Sends worker `w` the `size` bytes of `call`. */
static inline void send_worker(int w, const void *call, size_t size) {
    CHECK(write(to_worker[w], call, size) == (ssize_t)size);
}

/* Sends worker `w` its call and reads its answer. */
static inline void ask_worker(int w, const void *call, size_t size, void *answer, size_t answer_size) {
    send_worker(w, call, size);
    CHECK(read(from_worker[w], answer, answer_size) == (ssize_t)answer_size);
}

/* Closes the pipes of worker `w`, which is gone. */
static inline void forget_worker(int w) {
    close(to_worker[w]);
    close(from_worker[w]);
}
