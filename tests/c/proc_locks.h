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

/* Waits (at most 10 s) until /proc/locks, opened through the C library (under `uipc run
 * --locks` the library shows uipc's locks), lists a request of process `pid` blocked behind
 * another ("-> "): the request is asleep in the lock's queue, not merely not answered yet. */
static inline void wait_blocked(pid_t pid) {
    char want[32];
    snprintf(want, sizeof want, " %d ", (int)pid);
    for (int tries = 0; tries < 10000; tries++) {
        FILE *f = fopen("/proc/locks", "r");
        CHECK(f != NULL);
        char line[512];
        int found = 0;
        while (fgets(line, sizeof line, f))
            if (strstr(line, "-> ") && strstr(line, want)) found = 1;
        fclose(f);
        if (found) return;
        usleep(1000);
    }
    CHECK(!"the request was never listed as blocked");
}

#endif
