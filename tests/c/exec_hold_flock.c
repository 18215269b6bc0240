/* A flock lock whose description's last descriptor an exec closes. The parent opens a file
 * close-on-exec, takes flock LOCK_EX through it and forks a child, which shares the
 * description and execs. The parent traces the child and stops it at the entry of its execve
 * (after anything the C library or a preload does first), takes LOCK_EX again through the
 * description (many times), closes its own descriptor and lets the exec go on to the exec event stop (the
 * new image has not run). Then a new description of the file must get LOCK_EX at once.
 *
 * Linux: the exec closes the child's close-on-exec descriptor, the description's last one, and
 * that drops its flock lock. */
#include "check.h"
#include <stddef.h>
#include <sys/file.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

/* Lets the stopped tracee `pid` run to its next stop (a system call's entry or exit, an event,
 * a signal, which is passed on) and returns the status. */
static int next_stop(pid_t pid, int sig) {
    CHECK(ptrace(PTRACE_SYSCALL, pid, 0, (void *)(long)sig) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFSTOPPED(st));
    return st;
}

/* Whether the tracee stopped with status `st` is at the entry of execve or execveat. */
static int at_exec_entry(pid_t pid, int st) {
    if (WSTOPSIG(st) != (SIGTRAP | 0x80)) return 0;
    struct __ptrace_syscall_info info;
    CHECK(ptrace(PTRACE_GET_SYSCALL_INFO, pid, (void *)sizeof info, &info) > 0);
    return info.op == PTRACE_SYSCALL_INFO_ENTRY &&
           (info.entry.nr == SYS_execve || info.entry.nr == SYS_execveat);
}

/* The signal a stop with status `st` delivers when the tracee goes on (none for a system
 * call or event stop). */
static int signal_of(int st) {
    int sig = WSTOPSIG(st);
    return sig == (SIGTRAP | 0x80) || (st >> 16) != 0 || sig == SIGTRAP ? 0 : sig;
}

/* Whether a new description of `path` gets LOCK_EX without waiting (it is dropped again). */
static int free_to_lock(const char *path) {
    int fd = open_rw(path);
    int r = flock(fd, LOCK_EX | LOCK_NB);
    CHECK(r == 0 || errno == EWOULDBLOCK);
    CHECK(close(fd) == 0);
    return r == 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "image") == 0) return 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/uipc-exec-hold-flock-%d", getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        CHECK(ptrace(PTRACE_TRACEME, 0, 0, 0) == 0);
        CHECK(raise(SIGSTOP) == 0);
        execl("/proc/self/exe", "exec_hold_flock", "image", (char *)NULL);
        _exit(127);
    }
    int st;
    CHECK(waitpid(child, &st, 0) == child && WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
    long opts = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL;
    CHECK(ptrace(PTRACE_SETOPTIONS, child, 0, (void *)opts) == 0);
    st = next_stop(child, 0);
    while (!at_exec_entry(child, st)) st = next_stop(child, signal_of(st));
    /* The child is about to exec: its descriptor still refers to the description. */
    CHECK(!free_to_lock(path));
    /* Many times over, as a program that locks in a loop would (more than any number of
     * calls an implementation might let pass before it changes how it serves the file). */
    for (int i = 0; i < 100; i++) CHECK(flock(fd, LOCK_EX) == 0);
    CHECK(close(fd) == 0);
    /* On to the exec event: the exec closed the description's last descriptor. */
    st = next_stop(child, 0);
    while ((st >> 8) != (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) st = next_stop(child, signal_of(st));
    CHECK(free_to_lock(path));
    CHECK(ptrace(PTRACE_DETACH, child, 0, 0) == 0);
    expect_clean_exit(child);
    CHECK(unlink(path) == 0);
    printf("exec_hold_flock: ok\n");
    return 0;
}
