/* /proc/sys/kernel's IPC files and /proc/sysvipc in a fresh IPC namespace: reads give the
 * namespace's values (Linux's defaults), writes change them with Linux's checks, and the
 * objects follow the new limits. Run as root, on the host in a private IPC namespace and
 * under `uipc run` (whose daemon is a fresh namespace); the same checks pass on both. */
#include "check.h"
#include <sys/stat.h>
#include <sys/syscall.h>

static char *slurp(const char *path) {
    static char buf[4096];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n >= 0);
    buf[n] = 0;
    CHECK(close(fd) == 0);
    return buf;
}

static long value(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    return strtol(slurp(path), NULL, 10);
}

/* One write(2) to a fresh descriptor: its result, errno in *err. */
static ssize_t put(const char *name, const char *text, int *err) {
    char path[128];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    int fd = open(path, O_WRONLY);
    if (fd < 0) {
        *err = errno;
        return -2;
    }
    errno = 0;
    ssize_t n = write(fd, text, strlen(text));
    *err = errno;
    CHECK(close(fd) == 0);
    return n;
}

static int lines(const char *path) {
    const char *s = slurp(path);
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A write the library does not see (a raw system call) to a fresh O_WRONLY descriptor. */
static int raw_put(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(syscall(SYS_write, fd, text, strlen(text)) == (long)strlen(text));
    return fd;
}

int main(int argc, char **argv) {
    int err;
    if (argc == 3) {
        /* The new image of a process that kept a sysctl descriptor across execve: writes
         * through it (without the C library's write) and exits without closing it. */
        const char *text = argv[2];
        CHECK(syscall(SYS_write, atoi(argv[1]), text, strlen(text)) == (long)strlen(text));
        return 0;
    }
    /* Linux's defaults in a new IPC namespace. */
    CHECK(value("msgmni") == 32000);
    CHECK(value("msgmax") == 8192);
    CHECK(value("msgmnb") == 16384);
    CHECK(value("shmmni") == 4096);
    CHECK(value("shm_rmid_forced") == 0);
    CHECK(value("shm_next_id") == -1);
    CHECK(strcmp(slurp("/proc/sys/kernel/sem"), "32000\t1024000000\t500\t32000\n") == 0);
    CHECK(strcmp(slurp("/proc/sys/kernel/shmmax"), "18446744073692774399\n") == 0);
    CHECK(lines("/proc/sysvipc/msg") == 1 && lines("/proc/sysvipc/shm") == 1);

    /* Writes: the value, then Linux's EINVAL, then a write past position 0 (ignored). */
    CHECK(put("msgmni", "2\n", &err) == 2);
    CHECK(value("msgmni") == 2);
    /* A write returns the bytes taken: the file's numbers and the spaces after the last. */
    CHECK(put("msgmni", "2 \t5", &err) == 3 && put("msgmni", "2\n7\n", &err) == 2);
    CHECK(value("msgmni") == 2);
    CHECK(put("msgmni", "-1", &err) == -1 && err == EINVAL);
    CHECK(put("msgmni", "abc", &err) == -1 && err == EINVAL);
    CHECK(value("msgmni") == 2);
    int fd = open("/proc/sys/kernel/msgmnb", O_WRONLY);
    CHECK(fd >= 0);
    CHECK(write(fd, "1000", 4) == 4 && write(fd, "2000", 4) == 4);
    CHECK(close(fd) == 0);
    CHECK(value("msgmnb") == 1000);

    /* The limit holds: two queues, then ENOSPC. */
    CHECK(msgget(IPC_PRIVATE, 0600) >= 0 && msgget(IPC_PRIVATE, 0600) >= 0);
    CHECK(msgget(IPC_PRIVATE, 0600) == -1 && errno == ENOSPC);
    CHECK(lines("/proc/sysvipc/msg") == 3);
    struct msqid_ds ds;
    CHECK(msgctl(0, IPC_STAT, &ds) == 0 && ds.msg_qbytes == 1000);

    /* stdio: fopen for writing, fprintf, fclose report the write's errno. */
    FILE *f = fopen("/proc/sys/kernel/shmmni", "w");
    CHECK(f != NULL);
    CHECK(fprintf(f, "7\n") == 2 && fclose(f) == 0);
    CHECK(value("shmmni") == 7);
    f = fopen("/proc/sys/kernel/shm_rmid_forced", "w");
    CHECK(f != NULL);
    fprintf(f, "5\n");
    CHECK(fclose(f) == EOF && errno == EINVAL);
    f = fopen("/proc/sys/kernel/sem", "r");
    char line[128];
    CHECK(f != NULL && fgets(line, sizeof line, f) && fclose(f) == 0);
    CHECK(strcmp(line, "32000\t1024000000\t500\t32000\n") == 0);

    /* sem takes four values; *_next_id chooses the next id. */
    CHECK(put("sem", "10 20 30 40", &err) == 11);
    CHECK(strcmp(slurp("/proc/sys/kernel/sem"), "10\t20\t30\t40\n") == 0);
    CHECK(put("sem", "10 20 30 40 50 60", &err) == 12);
    CHECK(strcmp(slurp("/proc/sys/kernel/sem"), "10\t20\t30\t40\n") == 0);
    CHECK(put("shm_next_id", "5", &err) == 1);
    CHECK(value("shm_next_id") == 5);
    CHECK(shmget(IPC_PRIVATE, 4096, 0600) == 5);
    CHECK(value("shm_next_id") == -1);

    /* A shell's redirection (stdio writes inside libc). */
    CHECK(system("echo 123 > /proc/sys/kernel/msgmax") == 0);
    CHECK(value("msgmax") == 123);
    CHECK(system("bash -c 'echo 321 > /proc/sys/kernel/msgmax'") == 0);
    CHECK(value("msgmax") == 321);

    /* A descriptor kept across execve: the new image's writes are applied. */
    CHECK(system("sh -c 'exec /bin/echo 4000 > /proc/sys/kernel/msgmnb'") == 0);
    CHECK(value("msgmnb") == 4000);
    CHECK(system("bash -c 'exec 3>/proc/sys/kernel/msgmnb; /bin/echo 4100 >&3'") == 0);
    CHECK(value("msgmnb") == 4100);
    pid_t child = checked_fork();
    if (child == 0) {
        int fd = open("/proc/sys/kernel/msgmnb", O_WRONLY);
        CHECK(fd >= 0);
        char fdtext[16];
        snprintf(fdtext, sizeof fdtext, "%d", fd);
        execl("/proc/self/exe", argv[0], fdtext, "4150\n", (char *)NULL);
        _exit(127);
    }
    int cst;
    CHECK(waitpid(child, &cst, 0) == child && WIFEXITED(cst) && WEXITSTATUS(cst) == 0);
    CHECK(value("msgmnb") == 4150);

    /* close_range and closefrom close like close: what was written is applied. */
    fd = raw_put("msgmnb", "4200\n");
    CHECK(close_range(fd, fd, 0) == 0);
    CHECK(value("msgmnb") == 4200);
    fd = raw_put("msgmnb", "4300\n");
    closefrom(fd);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    CHECK(value("msgmnb") == 4300);

    /* pwrite: applied at offset 0, ignored (and reported done) at any other; the position
     * stays. */
    fd = open("/proc/sys/kernel/msgmnb", O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "4400", 4, 2) == 4 && value("msgmnb") == 4300);
    CHECK(pwrite(fd, "4500 9\n", 7, 0) == 5 && value("msgmnb") == 4500);
    CHECK(lseek(fd, 0, SEEK_CUR) == 0);
    CHECK(close(fd) == 0);
    CHECK(value("msgmnb") == 4500);

    /* Views opened for reading are read-only descriptors, with the kernel's file modes. */
    const char *views[] = {"/proc/sysvipc/msg", "/proc/sys/kernel/msgmax"};
    const mode_t modes[] = {0444, 0644};
    for (int i = 0; i < 2; i++) {
        fd = open(views[i], O_RDONLY);
        CHECK(fd >= 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
        CHECK(write(fd, "1", 1) == -1 && errno == EBADF);
        struct stat st;
        CHECK(fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == modes[i]);
        CHECK(close(fd) == 0);
    }

    /* Another user reads, but may not open for writing. */
    pid_t pid = checked_fork();
    if (pid == 0) {
        CHECK(value("msgmni") == 2);
        CHECK(setgid(65534) == 0 && setuid(65534) == 0);
        CHECK(value("msgmni") == 2);
        CHECK(open("/proc/sys/kernel/msgmni", O_WRONLY) == -1 && errno == EACCES);
        CHECK(open("/proc/sys/kernel/shm_next_id", O_RDWR) == -1 && errno == EACCES);
        CHECK(fopen("/proc/sys/kernel/msgmni", "w") == NULL && errno == EACCES);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("proc_sysctl: ok\n");
    return 0;
}
