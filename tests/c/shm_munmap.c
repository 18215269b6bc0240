/* munmap of a whole attachment detaches it, as shmdt does (Linux counts a segment's memory
 * areas in shm_nattch): nattch drops, shm_dtime and shm_lpid are set, shmdt at the address
 * then fails with EINVAL, a segment marked for removal goes with its last attachment, and a
 * length that is not a page multiple is rounded up as munmap rounds it, through the C
 * library's munmap and through syscall(SYS_munmap, ...). Run as root, on the
 * host in a private IPC namespace and under `uipc run`; the same checks pass on both.
 * (munmap of part of an attachment is not checked: uipc does not follow it.) */
#include "check.h"
#include <sys/mman.h>
#include <sys/syscall.h>

#define PAGE 4096

static struct shmid_ds shm_stat_of(int id) {
    struct shmid_ds ds;
    CHECK(shmctl(id, IPC_STAT, &ds) == 0);
    return ds;
}

static char *attach(int id) {
    char *p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    return p;
}

int main(void) {
    /* Two attachments of one segment; munmap of one leaves the other counted. */
    int id = shmget(IPC_PRIVATE, 3 * PAGE, 0600);
    CHECK(id >= 0);
    char *p = attach(id);
    char *q = attach(id);
    p[0] = 7;
    CHECK(shm_stat_of(id).shm_nattch == 2 && shm_stat_of(id).shm_dtime == 0);
    time_t before = time(NULL);
    CHECK(munmap(p, 3 * PAGE) == 0);
    struct shmid_ds ds = shm_stat_of(id);
    CHECK(ds.shm_nattch == 1);
    CHECK(ds.shm_dtime >= before && ds.shm_lpid == getpid());
    CHECK(q[0] == 7);
    errno = 0;
    CHECK(shmdt(p) == -1 && errno == EINVAL);
    CHECK(shm_stat_of(id).shm_nattch == 1);
    /* A length short of the last page covers it (munmap rounds up); through syscall(). */
    CHECK(syscall(SYS_munmap, q, 3 * PAGE - 100) == 0);
    CHECK(shm_stat_of(id).shm_nattch == 0);
    errno = 0;
    CHECK(shmdt(q) == -1 && errno == EINVAL);
    /* The address can be attached again, and shmdt still works there. */
    p = attach(id);
    CHECK(shm_stat_of(id).shm_nattch == 1);
    CHECK(shmdt(p) == 0 && shm_stat_of(id).shm_nattch == 0);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);

    /* A segment of a size that is not a page multiple, marked for removal while attached,
     * goes when its one attachment is unmapped with the size it was created with. */
    id = shmget(IPC_PRIVATE, PAGE + 100, 0600);
    CHECK(id >= 0);
    p = attach(id);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(shm_stat_of(id).shm_nattch == 1);
    CHECK(munmap(p, PAGE + 100) == 0);
    struct shmid_ds gone;
    errno = 0;
    CHECK(shmctl(id, IPC_STAT, &gone) == -1 && errno == EINVAL);

    /* munmap of memory that is no attachment is the kernel's as ever. */
    char *anon = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(anon != MAP_FAILED);
    CHECK(munmap(anon, 2 * PAGE) == 0);
    errno = 0;
    CHECK(munmap(anon + 1, PAGE) == -1 && errno == EINVAL);
    puts("shm_munmap: ok");
    return 0;
}
