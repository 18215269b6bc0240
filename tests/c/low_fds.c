/* SysV IPC takes no descriptor, so it must not take a program's standard descriptors:
 * - a daemon-style child closes every descriptor, makes SysV calls, then opens /dev/null
 *   three times and must get 0, 1 and 2 (what daemonizing code relies on);
 * - a child whose standard output is closed (`prog >&-`) makes a SysV call, then writes to
 *   descriptor 1: EBADF, never bytes into something the call opened there.
 * Each child reports through its exit status (its standard error may be closed). */
#include "check.h"

static int daemon_style(void) {
    int q = msgget(IPC_PRIVATE, 0600);
    if (q < 0)
        return 10;
    for (int fd = 0; fd < 256; fd++)
        close(fd);
    int s = semget(IPC_PRIVATE, 1, 0600);
    struct sembuf up = {0, 1, 0};
    if (s < 0 || semop(s, &up, 1) != 0 || msgctl(q, IPC_RMID, NULL) != 0)
        return 11;
    if (open("/dev/null", O_RDWR) != 0 || open("/dev/null", O_RDWR) != 1 ||
        open("/dev/null", O_RDWR) != 2)
        return 12;
    if (semctl(s, 0, GETVAL) != 1 || semctl(s, 0, IPC_RMID) != 0)
        return 13;
    return 0;
}

static int stdout_closed(void) {
    close(1);
    int q = msgget(IPC_PRIVATE, 0600);
    if (q < 0)
        return 20;
    if (write(1, "stray bytes\n", 12) != -1 || errno != EBADF)
        return 21;
    struct msqid_ds ds;
    if (msgctl(q, IPC_STAT, &ds) != 0 || msgctl(q, IPC_RMID, NULL) != 0)
        return 22;
    return 0;
}

int main(void) {
    pid_t pid = checked_fork();
    if (pid == 0)
        _exit(daemon_style());
    CHECK(status_of(pid) == 0);
    pid = checked_fork();
    if (pid == 0)
        _exit(stdout_closed());
    CHECK(status_of(pid) == 0);
    puts("low_fds: passed");
    return 0;
}
