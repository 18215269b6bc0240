/* remap_file_pages(2) and mremap(2) on SysV shared memory. Linux emulates remap_file_pages
 * with an mmap of the segment's file over the range: the old mapping of the range is closed
 * first, so when it held the last mapped pages of a segment removed with IPC_RMID the
 * segment is destroyed, and mapping it again fails with EINVAL (the range is left unmapped).
 * A program that loops "while remap succeeds" ends at that call. While another attachment
 * (here, or a forked child's) or other pages of the same attachment still map the segment,
 * the remap succeeds. An attachment moved whole by mremap is found by shmdt at its new
 * address, not at the old one. */
#include "check.h"
#include <sys/mman.h>
#include <sys/syscall.h>

#define PS 4096L

static int mapped(void *p) {
    unsigned char v;
    return mincore(p, PS, &v) == 0;
}

static int gone(int id) {
    struct shmid_ds ds;
    return shmctl(id, IPC_STAT, &ds) == -1 && errno == EINVAL;
}

static int nattch(int id) {
    struct shmid_ds ds;
    CHECK(shmctl(id, IPC_STAT, &ds) == 0);
    return (int)ds.shm_nattch;
}

/* Remaps [p, p+len) to page `pgoff` until it fails (at most `max` times): the successes. */
static int remap_while_ok(char *p, long len, long pgoff, int max) {
    int n = 0;
    while (n < max && remap_file_pages(p, len, 0, pgoff, 0) == 0)
        n++;
    return n;
}

int main(void) {
    /* Before IPC_RMID: pages move, bad arguments are refused, the raw system call too. */
    int id = shmget(IPC_PRIVATE, 4 * PS, 0600);
    CHECK(id >= 0);
    char *p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    for (int i = 0; i < 4; i++)
        sprintf(p + i * PS, "page%d", i);
    CHECK(remap_file_pages(p, PS, 0, 2, 0) == 0);
    CHECK(strcmp(p, "page2") == 0);
    CHECK(syscall(SYS_remap_file_pages, p, PS, 0, 3, 0) == 0);
    CHECK(strcmp(p, "page3") == 0);
    errno = 0;
    CHECK(remap_file_pages(p, PS, PROT_READ, 0, 0) == -1 && errno == EINVAL);
    CHECK(remap_file_pages(p, 5 * PS, 0, 0, 0) == -1 && errno == EINVAL);
    CHECK(remap_file_pages(p, 4 * PS, 0, 0, 0) == 0);
    CHECK(strcmp(p, "page0") == 0 && strcmp(p + 3 * PS, "page3") == 0);
    CHECK(nattch(id) == 1);
    CHECK(shmdt(p) == 0);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);

    /* The race test's loop: attach, IPC_RMID, remap while it succeeds. */
    id = shmget(IPC_PRIVATE, PS, 0600);
    p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    errno = 0;
    CHECK(remap_while_ok(p, PS, 0, 1000) == 0);
    CHECK(errno == EINVAL);
    CHECK(gone(id));
    CHECK(!mapped(p));
    CHECK(shmdt(p) == -1 && errno == EINVAL);
    CHECK(remap_file_pages(p, PS, 0, 0, 0) == -1 && errno == EINVAL);

    /* Through syscall(): the same. */
    id = shmget(IPC_PRIVATE, PS, 0600);
    p = shmat(id, NULL, 0);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(syscall(SYS_remap_file_pages, p, PS, 0, 0, 0) == -1 && errno == EINVAL);
    CHECK(gone(id) && !mapped(p));

    /* Another attachment keeps the segment; its detach makes the next remap fail. */
    id = shmget(IPC_PRIVATE, PS, 0600);
    p = shmat(id, NULL, 0);
    char *q = shmat(id, NULL, 0);
    CHECK(p != (void *)-1 && q != (void *)-1);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(remap_while_ok(p, PS, 0, 100) == 100);
    CHECK(nattch(id) == 2);
    CHECK(shmdt(q) == 0);
    CHECK(remap_while_ok(p, PS, 0, 100) == 0 && errno == EINVAL);
    CHECK(gone(id));

    /* Other pages of the same attachment keep it; remapping them all at once does not. */
    id = shmget(IPC_PRIVATE, 2 * PS, 0600);
    p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    strcpy(p + PS, "second");
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(remap_while_ok(p, PS, 1, 100) == 100);
    CHECK(strcmp(p, "second") == 0);
    CHECK(remap_while_ok(p + PS, PS, 0, 100) == 100);
    CHECK(remap_while_ok(p, 2 * PS, 0, 100) == 0 && errno == EINVAL);
    CHECK(gone(id) && !mapped(p) && !mapped(p + PS));

    /* A forked child's inherited attachment keeps it until the child exits. */
    id = shmget(IPC_PRIVATE, PS, 0600);
    p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        char c;
        close(go[1]);
        CHECK(read(go[0], &c, 1) == 0);
        _exit(0);
    }
    close(go[0]);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    CHECK(remap_while_ok(p, PS, 0, 100) == 100);
    close(go[1]);
    expect_clean_exit(child);
    CHECK(remap_while_ok(p, PS, 0, 100) == 0 && errno == EINVAL);
    CHECK(gone(id));

    /* mremap: an attachment moved whole is detached at its new address; one resized in
     * place is detached whole at its start; after IPC_RMID the moved one still holds it. */
    id = shmget(IPC_PRIVATE, 4 * PS, 0600);
    p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    strcpy(p, "moved");
    char *dst = mmap(NULL, 8 * PS, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(dst != MAP_FAILED);
    char *n = mremap(p, 4 * PS, 4 * PS, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    CHECK(n == dst && strcmp(n, "moved") == 0);
    CHECK(nattch(id) == 1);
    CHECK(shmdt(p) == -1 && errno == EINVAL);
    CHECK(shmdt(n) == 0);
    CHECK(nattch(id) == 0);
    p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    CHECK(mremap(p, 4 * PS, 2 * PS, 0) == p);
    CHECK(shmdt(p) == 0 && !mapped(p));
    CHECK(nattch(id) == 0);
    p = shmat(id, NULL, 0);
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    n = (char *)syscall(SYS_mremap, p, 4 * PS, 4 * PS, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 4 * PS);
    CHECK(n == dst + 4 * PS && !gone(id));
    CHECK(remap_while_ok(n, 4 * PS, 0, 10) == 0 && errno == EINVAL);
    CHECK(gone(id) && !mapped(n));
    printf("shm_remap: ok\n");
    return 0;
}
