/* POSIX timer ids across exec and fork, numbered as Linux 6.18 numbers them: a process's id
 * counter survives execve (ids 0 and 1 before an exec, 2 after), whichever exec function
 * makes it (execl, execle, execlp, execv, execvp, execvpe, fexecve, execveat, execve and
 * syscall(SYS_execve)), also across an image that creates no timer; a failed exec changes
 * nothing (timers, counter, environment); a forked child starts at 0 and takes its own
 * counter into its exec; the new image of a vforked or posix_spawned child starts at 0.
 * Run on the host kernel and under `uipc run --timers`; no image sees the variable the
 * library carries the counter in.
 *
 * `timer_ids_exec` starts the chain; each image execs the next as
 * `timer_ids_exec STAGE EXPECT`, EXPECT being the id its first timer must get. */
#include "check.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <time.h>

extern char **environ;

static char self[4096];

static int new_timer(void) {
    struct sigevent ev = {.sigev_notify = SIGEV_NONE};
    timer_t t;
    CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0);
    return (int)(long)t;
}

static void environment_is_clean(void) {
    for (char **e = environ; *e; e++) CHECK(strncmp(*e, "UIPC_TIMER_NEXT_ID", 18) != 0);
    CHECK(getenv("UIPC_TIMER_NEXT_ID") == NULL);
}

/* A forked child starts at 0, whatever its parent or the parent's earlier images did, and
 * its exec carries the child's own counter. */
static void fork_child_starts_at_zero(void) {
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(new_timer() == 0);
        CHECK(new_timer() == 1);
        execl(self, self, "fresh", "2", (char *)NULL);
        _exit(120);
    }
    expect_clean_exit(pid);
}

/* The new image of a vforked child, and of a posix_spawn child, starts at 0. */
static void vfork_and_spawn_children_start_at_zero(void) {
    char *argv[] = {self, "fresh", "0", NULL};
    pid_t pid = vfork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execve(self, argv, environ);
        _exit(121);
    }
    expect_clean_exit(pid);
    CHECK(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
    expect_clean_exit(pid);
}

/* Failed execs leave the timers, the counter and the environment as they were. */
static void failed_execs_change_nothing(int live, int next) {
    int n = 0;
    while (environ[n]) n++;
    char **before = environ, *first = environ[0], *last = environ[n - 1];
    char *argv[] = {"x", NULL};
    char **volatile unmapped = (char **)8;
    CHECK(execve("/nonexistent/uipc", argv, environ) == -1 && errno == ENOENT);
    CHECK(execve(self, argv, unmapped) == -1 && errno == EFAULT);
    CHECK(execve(self, unmapped, environ) == -1 && errno == EFAULT);
    CHECK(execl("/nonexistent/uipc", "x", (char *)NULL) == -1 && errno == ENOENT);
    /* ENOENT, or EACCES when a directory of $PATH cannot be searched. */
    CHECK(execvp("uipc-no-such-program", argv) == -1 && (errno == ENOENT || errno == EACCES));
    CHECK(syscall(SYS_execve, "/nonexistent/uipc", argv, environ) == -1 && errno == ENOENT);
    CHECK(environ == before && environ[0] == first && environ[n - 1] == last && !environ[n]);
    environment_is_clean();
    struct itimerspec its;
    CHECK(timer_gettime((timer_t)(long)live, &its) == 0);
    int id = new_timer();
    CHECK(id == next);
    CHECK(timer_delete((timer_t)(long)id) == 0);
}

/* Execs stage `stage` with first id `expect`, through the exec function that stage names. */
static void exec_stage(int stage, int expect) {
    char s[16], e[16];
    snprintf(s, sizeof s, "%d", stage);
    snprintf(e, sizeof e, "%d", expect);
    char *argv[] = {self, s, e, NULL};
    fflush(stdout);
    switch (stage) {
    case 1: execl(self, self, s, e, (char *)NULL); break;
    case 2: {
        int n = 0;
        while (environ[n]) n++;
        char *env[n + 2];
        memcpy(env, environ, n * sizeof *env);
        env[n] = "TIMER_IDS_EXECLE=1";
        env[n + 1] = NULL;
        execle(self, self, s, e, (char *)NULL, env);
        break;
    }
    case 3: execlp(self, self, s, e, (char *)NULL); break;
    case 4: execv(self, argv); break;
    case 5: execvp(self, argv); break;
    case 6: execvpe(self, argv, environ); break;
    case 7: {
        int fd = open(self, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        fexecve(fd, argv, environ);
        break;
    }
    case 8: execveat(AT_FDCWD, self, argv, environ, 0); break;
    case 9: syscall(SYS_execve, self, argv, environ); break;
    default: execve(self, argv, environ); break;
    }
    CHECK(!"exec failed");
}

#define LAST_STAGE 11

int main(int argc, char **argv) {
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = 0;
    environment_is_clean();
    if (argc == 3 && strcmp(argv[1], "fresh") == 0) {
        CHECK(new_timer() == atoi(argv[2]));
        return 0;
    }
    if (argc == 1) {
        CHECK(new_timer() == 0);
        CHECK(new_timer() == 1);
        CHECK(timer_delete((timer_t)0) == 0);
        fork_child_starts_at_zero();
        vfork_and_spawn_children_start_at_zero();
        failed_execs_change_nothing(1, 2);
        printf("start: timer ids 0 and 1, 2 after failed execs\n");
        exec_stage(1, 3);
    }
    CHECK(argc == 3);
    int stage = atoi(argv[1]), expect = atoi(argv[2]);
    if (stage == 3) CHECK(getenv("TIMER_IDS_EXECLE") != NULL);
    if (stage == 4) {
        /* An image that inherited a counter: its children still start at 0. */
        fork_child_starts_at_zero();
        vfork_and_spawn_children_start_at_zero();
    }
    if (stage == 5) {
        /* No timer here: the counter passes through this image unchanged. */
        exec_stage(stage + 1, expect);
    }
    int id = new_timer();
    CHECK(id == expect);
    if (stage == 6) {
        failed_execs_change_nothing(id, id + 1);
        expect++;
    }
    printf("stage %d: first timer id %d\n", stage, id);
    if (stage == LAST_STAGE) {
        puts("timer_ids_exec: ok");
        return 0;
    }
    exec_stage(stage + 1, expect + 1);
}
