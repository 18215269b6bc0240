/* Writing through an SHM_RDONLY attachment is SIGSEGV; reading works; the mapping cannot be
 * made writable with mprotect (EACCES). */
#include "check.h"
#include <sys/mman.h>

int main(void) {
    int shmid = shmget(IPC_PRIVATE, 4096, 0600);
    CHECK(shmid >= 0);
    char *w = shmat(shmid, NULL, 0);
    CHECK(w != (void *)-1);
    w[10] = 'r';
    char *ro = shmat(shmid, NULL, SHM_RDONLY);
    CHECK(ro != (void *)-1);
    CHECK(ro[10] == 'r');
    pid_t child = checked_fork();
    if (child == 0) {
        ro[10] = 'w';
        _exit(0);
    }
    int st;
    CHECK(waitpid(child, &st, 0) == child);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    CHECK(w[10] == 'r');
    CHECK(mprotect(ro, 4096, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
    CHECK(mprotect(w, 4096, PROT_READ) == 0 && mprotect(w, 4096, PROT_READ | PROT_WRITE) == 0);
    CHECK(shmdt(ro) == 0 && shmdt(w) == 0);
    CHECK(shmctl(shmid, IPC_RMID, NULL) == 0);
    puts("shm_rdonly_segv: ok");
    return 0;
}
