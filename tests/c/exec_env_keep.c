/* exec with an environment that lacks the library's variables (envp = {NULL}, `env -i`) keeps
 * the new image where the old one was: its SysV IPC calls find the same objects. The program
 * makes a set of a fixed key and executes itself ("child KEY") with envp = {NULL} through
 * execve, then through execle, then runs `env -i` on itself; each new image must find the
 * set, on the host kernel as under uipc run (where a new image without the library would ask
 * the kernel and find nothing). */
#include "check.h"

#define KEY 0x75493010

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int sem = semget(KEY, 0, 0);
        CHECK(sem >= 0);
        struct sembuf up = {0, 1, 0};
        CHECK(semop(sem, &up, 1) == 0);
        return 0;
    }
    int sem = semget(KEY, 1, IPC_CREAT | IPC_EXCL | 0600);
    CHECK(sem >= 0);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = 0;
    char *const empty[] = {NULL};
    char *const args[] = {argv[0], "child", NULL};
    for (int how = 0; how < 3; how++) {
        pid_t pid = checked_fork();
        if (pid == 0) {
            if (how == 0)
                execve(self, args, empty);
            else if (how == 1)
                execle(self, argv[0], "child", (char *)NULL, empty);
            else
                execlp("env", "env", "-i", self, "child", (char *)NULL);
            _exit(127);
        }
        expect_clean_exit(pid);
    }
    CHECK(semctl(sem, 0, GETVAL) == 3);
    CHECK(semctl(sem, 0, IPC_RMID) == 0);
    puts("exec_env_keep: ok");
    return 0;
}
