/* Every call is judged by the caller's effective ids at that moment, however they changed
 * (the library keeps the ids it sends and must see each change):
 * - seteuid / setegid through the C library, in this thread and seen by another thread;
 * - syscall(SYS_setresuid) and syscall(SYS_setresgid), which change the calling thread only
 *   (a thread's egid; uids in the main thread, whose capabilities the daemon reads);
 * - a setresuid made with the process's own system call instruction (x86-64), dropping root
 *   for good: the ids the library kept are no longer held, and the next call is judged by the
 *   new ones.
 * Runs as root (says "skipped" otherwise). */
#include "check.h"
#include <pthread.h>
#include <sys/syscall.h>

static key_t key;

/* 0 if semget of root's 0600 set works, else the errno. */
static int open_set(void) {
    return semget(key, 1, 0600) >= 0 ? 0 : errno;
}

static pthread_barrier_t step;

/* A second thread: opens the set before and after the main thread's seteuid. */
static void *other_thread(void *arg) {
    (void)arg;
    CHECK(open_set() == 0);
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step); /* main: seteuid(1234) */
    CHECK(open_set() == EACCES);
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step); /* main: seteuid(0) */
    CHECK(open_set() == 0);
    return NULL;
}

/* A thread that changes its own egid with syscall() (to its saved gid 4321, as euid 1234):
 * only it may use the group's set. */
static void *thread_own_ids(void *arg) {
    int grp = *(int *)arg;
    CHECK(semctl(grp, 0, GETVAL) == -1 && errno == EACCES);
    CHECK(syscall(SYS_setresgid, -1, 4321, -1) == 0);
    CHECK(semctl(grp, 0, GETVAL) == 0);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (geteuid() != 0) {
        puts("ids_cached: skipped (needs root)");
        return 0;
    }
    key = (key_t)(0x1d5c0000 + getpid() % 0xffff);
    int sem = semget(key, 1, IPC_CREAT | IPC_EXCL | 0600);
    CHECK(sem >= 0);
    /* A group-only set made with egid 4321 (its creator's and owner's gid): usable by egid
     * 4321 alone (as euid 1234). */
    CHECK(setegid(4321) == 0);
    int grp = semget(IPC_PRIVATE, 1, 0060);
    CHECK(grp >= 0 && setegid(0) == 0);

    CHECK(open_set() == 0);
    CHECK(seteuid(1234) == 0);
    CHECK(open_set() == EACCES);
    CHECK(semctl(grp, 0, GETVAL) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0 && setegid(4321) == 0 && seteuid(1234) == 0);
    CHECK(semctl(grp, 0, GETVAL) == 0);
    CHECK(seteuid(0) == 0 && setegid(0) == 0);
    CHECK(open_set() == 0);
    puts("seteuid / setegid: the next call is judged by the new ids");

    pthread_t t;
    CHECK(pthread_barrier_init(&step, NULL, 2) == 0);
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_barrier_wait(&step);
    CHECK(seteuid(1234) == 0);
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    CHECK(seteuid(0) == 0);
    pthread_barrier_wait(&step);
    CHECK(pthread_join(t, NULL) == 0);
    puts("seteuid in one thread: another thread's next call is judged by the new ids");

    CHECK(setresgid(-1, -1, 4321) == 0 && seteuid(1234) == 0);
    CHECK(pthread_create(&t, NULL, thread_own_ids, &grp) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(semctl(grp, 0, GETVAL) == -1 && errno == EACCES);
    CHECK(seteuid(0) == 0 && setresgid(0, 0, 0) == 0);
    CHECK(open_set() == 0);
    CHECK(syscall(SYS_setresgid, -1, 4321, -1) == 0 && syscall(SYS_setresuid, -1, 1234, -1) == 0);
    CHECK(semctl(grp, 0, GETVAL) == 0 && open_set() == EACCES);
    CHECK(syscall(SYS_setresuid, -1, 0, -1) == 0 && syscall(SYS_setresgid, -1, 0, -1) == 0);
    CHECK(open_set() == 0);
    puts("syscall(SYS_setres[ug]id): the calling thread's next call is judged by its new ids");

#if defined(__x86_64__)
    pid_t child = checked_fork();
    if (child == 0) {
        CHECK(open_set() == 0);
        long r;
        /* setresgid, then setresuid, by the process's own instruction: nobody sees it. */
        __asm__ volatile("syscall"
                         : "=a"(r)
                         : "0"((long)SYS_setresgid), "D"(4321L), "S"(4321L), "d"(4321L)
                         : "rcx", "r11", "memory");
        CHECK(r == 0);
        __asm__ volatile("syscall"
                         : "=a"(r)
                         : "0"((long)SYS_setresuid), "D"(1234L), "S"(1234L), "d"(1234L)
                         : "rcx", "r11", "memory");
        CHECK(r == 0);
        CHECK(open_set() == EACCES);
        CHECK(semctl(grp, 0, GETVAL) == 0);
        _exit(0);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    puts("a drop by raw system call: the next call is judged by the ids now held");
#endif
    CHECK(semctl(sem, 0, IPC_RMID) == 0 && semctl(grp, 0, IPC_RMID) == 0);
    puts("ids_cached: ok");
    return 0;
}
