/* Children made without the C library's fork(), so without its atfork handlers: glibc's
 * _Fork and clone() (no CLONE_VM). Each is a process of its own: the pid recorded by its
 * semop (sempid) is its own, its SEM_UNDO is applied when it exits, and it and its parent
 * calling at the same time each get their own answers. The library caches the caller's pid
 * while no such child can exist; these calls must end that. */
#include "check.h"
#include <sched.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define HAVE_UFORK 1
#endif

static int sem_new(int val) {
    int id = semget(IPC_PRIVATE, 1, 0600);
    CHECK(id >= 0);
    CHECK(semctl(id, 0, SETVAL, val) == 0);
    return id;
}

/* In the child: an undoable +1, then calls racing the parent's on another set. */
static int child_work(int undo_set, int mine, int want) {
    struct sembuf up = {0, 1, SEM_UNDO};
    if (semop(undo_set, &up, 1) != 0) return 1;
    if (semctl(undo_set, 0, GETPID) != getpid()) return 2;
    for (int k = 0; k < 2000; k++)
        if (semctl(mine, 0, GETVAL) != want) return 3;
    return 0;
}

static void parent_side(pid_t pid, int undo_set, int a, int b, const char *what) {
    (void)b;
    CHECK(pid > 0);
    int wrong = 0;
    for (int k = 0; k < 2000; k++)
        if (semctl(a, 0, GETVAL) != 11) wrong++;
    expect_clean_exit(pid);
    CHECK(wrong == 0);
    /* The child's +1 was undone at its exit; the last semop was its (the undo is not one). */
    CHECK(semctl(undo_set, 0, GETVAL) == 0);
    CHECK(semctl(undo_set, 0, GETPID) == pid);
    printf("%s: the child's calls are its own (sempid, SEM_UNDO, answers)\n", what);
}

static int sets[3];

static int clone_child(void *arg) {
    (void)arg;
    return child_work(sets[0], sets[2], 22);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    /* A child that talked on its parent's session would cross their replies: a hang. */
    alarm(60);
    /* The parent talks to the daemon first, so that a child could wrongly reuse its session. */
    for (int round = 0; round < 2; round++) {
        sets[0] = sem_new(0);
        sets[1] = sem_new(11);
        sets[2] = sem_new(22);
        pid_t pid;
        const char *what;
        if (round == 0) {
#ifdef HAVE_UFORK
            what = "_Fork";
            pid = _Fork();
            if (pid == 0) _exit(child_work(sets[0], sets[2], 22));
#else
            what = "fork (no _Fork in this C library)";
            pid = fork();
            if (pid == 0) _exit(child_work(sets[0], sets[2], 22));
#endif
        } else {
            what = "clone";
            static char stack[256 * 1024] __attribute__((aligned(16)));
            pid = clone(clone_child, stack + sizeof stack, SIGCHLD, NULL);
        }
        parent_side(pid, sets[0], sets[1], sets[2], what);
        for (int i = 0; i < 3; i++) CHECK(semctl(sets[i], 0, IPC_RMID) == 0);
    }
    printf("unseen_children: ok\n");
    return 0;
}
