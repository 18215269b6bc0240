/* Shared memory written by one process is read by another: a forked child (inherited
 * attachment, nattch counts it) and an unrelated process started by exec. */
#include "check.h"

static int nattch(int shmid) {
    struct shmid_ds ds;
    CHECK(shmctl(shmid, IPC_STAT, &ds) == 0);
    return (int)ds.shm_nattch;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "reader") == 0) {
        int shmid = atoi(argv[2]);
        char *p = shmat(shmid, NULL, SHM_RDONLY);
        CHECK(p != (void *)-1);
        CHECK(strcmp(p, "child wrote this") == 0);
        CHECK(p[9999] == 'z');
        CHECK(nattch(shmid) == 2);
        CHECK(shmdt(p) == 0);
        return 0;
    }
    int shmid = shmget(IPC_PRIVATE, 10000, 0600);
    CHECK(shmid >= 0);
    char *p = shmat(shmid, NULL, 0);
    CHECK(p != (void *)-1);
    CHECK(((unsigned long)p & 4095) == 0);
    CHECK(p[0] == 0 && p[9999] == 0);
    strcpy(p, "parent wrote this");
    p[9999] = 'z';
    CHECK(nattch(shmid) == 1);
    pid_t child = checked_fork();
    if (child == 0) {
        CHECK(strcmp(p, "parent wrote this") == 0);
        CHECK(nattch(shmid) == 2); /* the inherited attachment counts */
        char *q = shmat(shmid, NULL, 0);
        CHECK(q != (void *)-1 && q != p);
        CHECK(nattch(shmid) == 3);
        strcpy(q, "child wrote this");
        CHECK(shmdt(q) == 0);
        CHECK(shmdt(q) == -1 && errno == EINVAL);
        CHECK(shmdt(p) == 0);
        CHECK(nattch(shmid) == 1);
        exit(0);
    }
    expect_clean_exit(child);
    CHECK(strcmp(p, "child wrote this") == 0);
    CHECK(nattch(shmid) == 1);
    char id[32];
    snprintf(id, sizeof id, "%d", shmid);
    pid_t reader = checked_fork();
    if (reader == 0) {
        execl("/proc/self/exe", argv[0], "reader", id, (char *)NULL);
        _exit(127);
    }
    expect_clean_exit(reader);
    CHECK(nattch(shmid) == 1);
    /* An explicit address: taken at an occupied one only with SHM_REMAP. */
    CHECK(shmat(shmid, p, 0) == (void *)-1 && errno == EINVAL);
    CHECK(shmat(shmid, p + 1, 0) == (void *)-1 && errno == EINVAL);
    char *r = shmat(shmid, p + 1, SHM_RND | SHM_REMAP);
    CHECK(r == p);
    CHECK(strcmp(r, "child wrote this") == 0);
    CHECK(nattch(shmid) == 1);
    CHECK(shmctl(shmid, IPC_RMID, NULL) == 0);
    struct shmid_ds ds;
    CHECK(shmctl(shmid, IPC_STAT, &ds) == 0 && (ds.shm_perm.mode & SHM_DEST));
    CHECK(shmdt(r) == 0);
    CHECK(shmctl(shmid, IPC_STAT, &ds) == -1 && errno == EINVAL);
    puts("shm_share: ok");
    return 0;
}
