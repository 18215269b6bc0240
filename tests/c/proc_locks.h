/* The kernel's /proc/locks as the lock tests read it. Include after check.h. */
#include <sys/stat.h>
#include <sys/syscall.h>
#ifndef UIPC_TEST_PROC_LOCKS_H
#define UIPC_TEST_PROC_LOCKS_H

/* How many lines of the kernel's /proc/locks are about inode `ino` (opened by a system call:
 * under `uipc run --locks` the library's open shows uipc's locks there too). */
static inline int kernel_lines(ino_t ino) {
    int fd = syscall(SYS_openat, AT_FDCWD, "/proc/locks", O_RDONLY);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "r");
    CHECK(f != NULL);
    char line[512], want[64];
    snprintf(want, sizeof want, ":%lu ", (unsigned long)ino);
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, want)) n++;
    fclose(f);
    return n;
}

#endif
