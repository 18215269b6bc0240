/* Who took the locks: `locks_visible kernel [CMD]` checks that its POSIX, OFD and flock locks
 * are in the host's /proc/locks (run natively); `locks_visible uipc [CMD]` checks that they are
 * not (the kernel never saw them under `uipc run --locks`). Either then runs the shell command
 * CMD while holding them, with $HOLDER set to its pid and $LOCKPATH to the file (to list them
 * with lslocks or `uipc locks`). */
#include "check.h"
#include "proc_locks.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    int kernel = strcmp(argv[1], "kernel") == 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/uipc-locks-visible-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789", 10) == 10);
    int fd2 = open(path, O_RDWR);
    CHECK(fd2 >= 0);
    struct flock px = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
    CHECK(fcntl(fd, F_SETLK, &px) == 0);
    struct flock o = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 6, .l_len = 0};
    CHECK(fcntl(fd2, F_OFD_SETLK, &o) == 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    int n = kernel_lines(st.st_ino);
    CHECK(n == (kernel ? 3 : 0));
    if (argc >= 3) {
        char pid[16];
        snprintf(pid, sizeof pid, "%d", getpid());
        setenv("HOLDER", pid, 1);
        setenv("LOCKPATH", path, 1);
        CHECK(system(argv[2]) == 0);
    }
    unlink(path);
    puts("locks_visible: ok");
    return 0;
}
