/* A program that closes every descriptor it does not know (as daemons do) and then opens a
 * file of its own keeps working, and its file is not written to by anyone else. */
#include "check.h"
#include <fcntl.h>

int main(void) {
    int sem = semget(IPC_PRIVATE, 1, 0600);
    CHECK(sem >= 0);
    CHECK(semctl(sem, 0, SETVAL, (union semun){.val = 3}) == 0);
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    char path[] = "/tmp/uipc-closefrom-XXXXXX";
    int mine = mkstemp(path);
    CHECK(mine >= 3);
    unlink(path);
    CHECK(semctl(sem, 0, GETVAL) == 3);
    struct sembuf down = {0, -1, 0};
    CHECK(semop(sem, &down, 1) == 0);
    CHECK(lseek(mine, 0, SEEK_END) == 0); /* nothing was written to our file */
    CHECK(semctl(sem, 0, IPC_RMID) == 0);
    puts("closefrom: ok");
    return 0;
}
