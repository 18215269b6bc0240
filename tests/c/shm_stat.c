/* IPC_STAT of a segment as its attachments come and go: shm_nattch, shm_atime, shm_dtime,
 * shm_lpid and shm_cpid after shmat and shmdt at an address the system picks (repeated, as
 * programs attach one segment again and again), in a forked child, across exec and at exit;
 * and an id that names a new segment of another size after the old one was removed
 * (kernel/shm_next_id), whose attachment maps exactly its own size. Run as root, on the host in
 * a private IPC namespace and under `uipc run`; the same checks pass on both. */
#include "check.h"
#include <sys/mman.h>

#define PAGE 4096

static struct shmid_ds shm_stat_of(int id) {
    struct shmid_ds ds;
    CHECK(shmctl(id, IPC_STAT, &ds) == 0);
    return ds;
}

/* The length of the mapping that starts at `p` in /proc/self/maps, 0 if none does. */
static unsigned long mapping_len(const char *p) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    unsigned long lo, hi, len = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo == (unsigned long)p)
            len = hi - lo;
    CHECK(fclose(f) == 0);
    return len;
}

static void set_next_id(int id) {
    int fd = open("/proc/sys/kernel/shm_next_id", O_WRONLY);
    CHECK(fd >= 0);
    char text[32];
    int n = snprintf(text, sizeof text, "%d", id);
    CHECK(write(fd, text, n) == n);
    CHECK(close(fd) == 0);
}

/* Attaches a segment created with id `id` (kernel/shm_next_id) and `pages` pages, checks that
 * exactly those pages are mapped, and leaves it attached; returns the address. */
static char *attach_new(int id, int pages) {
    set_next_id(id);
    CHECK(shmget(IPC_PRIVATE, pages * PAGE, 0600) == id);
    char *p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    CHECK(mapping_len(p) == (unsigned long)pages * PAGE);
    p[pages * PAGE - 1] = 1;
    CHECK(shm_stat_of(id).shm_nattch == 1 && shm_stat_of(id).shm_segsz == (size_t)pages * PAGE);
    return p;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "exec") == 0) {
        /* The image before this exec had an attachment: the exec detached it. */
        struct shmid_ds ds = shm_stat_of(atoi(argv[2]));
        CHECK(ds.shm_nattch == 1 && ds.shm_lpid == getpid());
        return 0;
    }
    pid_t me = getpid();
    int id = shmget(IPC_PRIVATE, 3 * PAGE + 100, 0600);
    CHECK(id >= 0);
    struct shmid_ds ds = shm_stat_of(id);
    CHECK(ds.shm_nattch == 0 && ds.shm_atime == 0 && ds.shm_dtime == 0);
    CHECK(ds.shm_lpid == 0 && ds.shm_cpid == me && ds.shm_segsz == 3 * PAGE + 100);
    time_t t0 = time(NULL);

    /* The same segment attached and detached again and again. */
    for (int i = 0; i < 5; i++) {
        char *p = shmat(id, NULL, 0);
        CHECK(p != (void *)-1 && ((unsigned long)p & (PAGE - 1)) == 0);
        CHECK(mapping_len(p) == 4 * PAGE);
        p[3 * PAGE + 99] = (char)(i + 1);
        ds = shm_stat_of(id);
        CHECK(ds.shm_nattch == 1 && ds.shm_atime >= t0 && ds.shm_lpid == me);
        CHECK(i == 0 ? ds.shm_dtime == 0 : ds.shm_dtime >= t0);
        char *q = shmat(id, NULL, SHM_RDONLY);
        CHECK(q != (void *)-1 && q != p && q[3 * PAGE + 99] == (char)(i + 1));
        CHECK(shm_stat_of(id).shm_nattch == 2);
        CHECK(shmdt(q) == 0 && shm_stat_of(id).shm_nattch == 1);
        CHECK(shmdt(p) == 0);
        CHECK(shmdt(p) == -1 && errno == EINVAL);
        CHECK(mapping_len(p) == 0);
        ds = shm_stat_of(id);
        CHECK(ds.shm_nattch == 0 && ds.shm_dtime >= t0 && ds.shm_lpid == me);
        CHECK(ds.shm_dtime <= time(NULL) && ds.shm_atime <= ds.shm_dtime);
    }
    /* Refused attaches change nothing. */
    CHECK(shmat(id, NULL, SHM_REMAP) == (void *)-1 && errno == EINVAL);
    CHECK(shmat(id + 1, NULL, 0) == (void *)-1 && errno == EINVAL);
    CHECK(shm_stat_of(id).shm_nattch == 0);

    /* fork: the child's inherited attachment counts (lpid stays the parent's); the child's own
     * shmat and shmdt are its; its exit detaches what it still has. */
    char *p = shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    pid_t child = checked_fork();
    if (child == 0) {
        ds = shm_stat_of(id);
        CHECK(ds.shm_nattch == 2 && ds.shm_lpid == me);
        char *q = shmat(id, NULL, 0);
        CHECK(q != (void *)-1 && q != p);
        ds = shm_stat_of(id);
        CHECK(ds.shm_nattch == 3 && ds.shm_lpid == getpid());
        CHECK(shmdt(p) == 0 && shm_stat_of(id).shm_nattch == 2);
        _exit(0); /* q still attached */
    }
    CHECK(status_of(child) == 0);
    ds = shm_stat_of(id);
    CHECK(ds.shm_nattch == 1 && ds.shm_lpid == child);

    /* exec detaches the image's attachments (its inherited one and its own). */
    child = checked_fork();
    if (child == 0) {
        CHECK(shmat(id, NULL, 0) != (void *)-1 && shm_stat_of(id).shm_nattch == 3);
        char text[32];
        snprintf(text, sizeof text, "%d", id);
        execl("/proc/self/exe", argv[0], "exec", text, (char *)NULL);
        _exit(127);
    }
    CHECK(status_of(child) == 0);
    ds = shm_stat_of(id);
    CHECK(ds.shm_nattch == 1 && ds.shm_lpid == child);
    CHECK(shmdt(p) == 0 && shm_stat_of(id).shm_nattch == 0);

    /* The id names a new segment, larger then smaller: each attach maps its own size. */
    CHECK(shmctl(id, IPC_RMID, NULL) == 0);
    p = attach_new(id, 9);
    CHECK(shmdt(p) == 0 && shmctl(id, IPC_RMID, NULL) == 0);
    p = attach_new(id, 1);
    CHECK(shmdt(p) == 0 && shmctl(id, IPC_RMID, NULL) == 0);
    printf("shm_stat: all checks passed\n");
    return 0;
}
