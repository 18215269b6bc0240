/* Run without the preload library, in the IPC namespace the tests used: proves that the
 * kernel created no SysV object there. /proc/sysvipc must list nothing, and the kernel's next
 * ids must still be the first ones: it allocates ids cyclically, so an object created and
 * removed earlier would move the next id on. */
#include "check.h"
#include <sys/syscall.h>

static int lines(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

int main(void) {
    CHECK(lines("/proc/sysvipc/sem") == 1);
    CHECK(lines("/proc/sysvipc/msg") == 1);
    CHECK(lines("/proc/sysvipc/shm") == 1);
    long sem = syscall(SYS_semget, IPC_PRIVATE, 1, 0600);
    long msg = syscall(SYS_msgget, IPC_PRIVATE, 0600);
    long shm = syscall(SYS_shmget, IPC_PRIVATE, 4096, 0600);
    syscall(SYS_semctl, sem, 0, IPC_RMID, 0);
    syscall(SYS_msgctl, msg, IPC_RMID, 0);
    syscall(SYS_shmctl, shm, IPC_RMID, 0);
    if (sem != 0 || msg != 0 || shm != 0) {
        fprintf(stderr, "kernel SysV objects were created here before: next ids %ld %ld %ld\n",
                sem, msg, shm);
        return 1;
    }
    puts("kernel_probe: no kernel SysV object was created");
    return 0;
}
