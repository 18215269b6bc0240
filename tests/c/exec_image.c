/* An exec of an image the loader will not preload into (a static binary, a set-user-ID one
 * that changes the effective uid): under `uipc run` the library says so in one line on
 * stderr before the first such exec of a process, and the exec happens all the same. On the
 * host kernel nothing is said. scripts/test-run.sh counts the lines.
 *
 *   exec_image run                      prints "image ran", exits 0
 *   exec_image exec IMAGE... NOEXEC     for each IMAGE and each of execv, execvp, execve
 *                                       (envp = {NULL}) and fexecve, a child execs
 *                                       "IMAGE run"; then one child execs NOEXEC (a static
 *                                       image without execute permission: the exec fails)
 *                                       and then the first IMAGE: one process, one line.
 */
#include "check.h"

static void exec_with(int how, const char *path) {
    char *argv[] = {(char *)path, "run", NULL};
    char *empty[] = {NULL};
    switch (how % 4) {
    case 0:
        execv(path, argv);
        break;
    case 1:
        execvp(path, argv);
        break;
    case 2:
        execve(path, argv, empty);
        break;
    default: {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        fexecve(fd, argv, empty);
    }
    }
    perror("exec");
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "run") == 0) {
        printf("image ran\n");
        return 0;
    }
    CHECK(argc >= 4 && strcmp(argv[1], "exec") == 0);
    int images = argc - 3;
    for (int how = 0; how < 4; how++) {
        for (int i = 0; i < images; i++) {
            fflush(stdout);
            pid_t pid = checked_fork();
            if (pid == 0)
                exec_with(how + i, argv[2 + i]);
            int status;
            CHECK(waitpid(pid, &status, 0) == pid);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
    }
    fflush(stdout);
    pid_t pid = checked_fork();
    if (pid == 0) {
        char *args[] = {argv[2], "run", NULL};
        CHECK(execv(argv[argc - 1], args) == -1 && errno == EACCES);
        execv(argv[2], args);
        _exit(127);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
}
