/* A grandchild orphaned (its parent exits) and then killed must be gone soon after, as Linux's
 * init or a subreaper reaps it: kill(pid, 0) reports ESRCH within 5 seconds, not a zombie
 * that looks alive. Under `uipc run` the program's orphans are reparented to `uipc run` (a
 * subreaper), which must reap them while the program still runs. */
#include "check.h"
#include <time.h>

int main(void) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t middle = checked_fork();
    if (middle == 0) {
        pid_t grandchild = checked_fork();
        if (grandchild == 0) {
            close(pipefd[0]);
            close(pipefd[1]);
            for (;;)
                pause();
        }
        CHECK(write(pipefd[1], &grandchild, sizeof grandchild) == sizeof grandchild);
        _exit(0);
    }
    close(pipefd[1]);
    pid_t orphan;
    CHECK(read(pipefd[0], &orphan, sizeof orphan) == sizeof orphan);
    expect_clean_exit(middle);
    CHECK(kill(orphan, 0) == 0);
    CHECK(kill(orphan, SIGKILL) == 0);
    struct timespec start, now, pause_ = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (kill(orphan, 0) == -1) {
            CHECK(errno == ESRCH);
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= 5) {
            fprintf(stderr, "orphan_reap: killed orphan %d still there after 5 s\n", orphan);
            return 1;
        }
        nanosleep(&pause_, NULL);
    }
    puts("orphan_reap: ok");
    return 0;
}
