/* Differential run of the IPC sysctls: SEED picks N random writes of random texts (numbers in
 * and out of range, several numbers, blanks, signs, garbage, empty) to /proc/sys/kernel's IPC
 * files, at position 0 or further on, each followed by a read of the file back and a call
 * whose result the limits decide (a message of some size, a segment of some size, a set of
 * some semaphores, an object's id after a *_next_id write). The output in a fresh IPC
 * namespace on the host and under `uipc run` (a fresh daemon) must be identical.
 *   diff_sysctl SEED N */
#include "diff.h"


static const char *const files[] = {"shmmax",      "shmall",      "shmmni",     "shm_rmid_forced",
                                    "msgmax",      "msgmnb",      "msgmni",     "sem",
                                    "msg_next_id", "sem_next_id", "shm_next_id"};
enum { FILES = sizeof files / sizeof files[0] };

static const char *const texts[] = {
    "0", "1", "-1", "100", "8192", "16384", "32000", "65536", "2147483647", "2147483648",
    "-2147483648", "9223372036854775807", "18446744073709551615", "18446744073709551616", "abc",
    "", "\n", " 5", "5 ", "5\n", "5 6", "250 32000 32 128", "1 2 3", "1 2 3 4 5", "-5 1 1 1",
    "0x10", "010", "+7", "7abc", "  ", "4096\n\n", "10\t20\t30\t40", "32001 32000 32 128",
    "250 1024000001 500 32000", "250 32000 1001 128", "250 32000 32 32001", "3", "7", "12"};
enum { TEXTS = sizeof texts / sizeof texts[0] };

/* Prints the file's content, blanks made visible. */
static void print_file(const char *name) {
    char path[128], buf[256];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n >= 0 && close(fd) == 0);
    buf[n] = 0;
    printf("  %s now:", name);
    for (char *p = buf; *p; p++)
        printf(*p == '\t' ? "\\t" : *p == '\n' ? "\\n" : "%c", *p);
    printf("\n");
}

/* A call the limits decide, printed with its result. */
static void probe(void) {
    long r;
    errno = 0;
    switch (rnd(4)) {
    case 0: {
        static const size_t sizes[] = {1, 100, 8192, 8193, 20000, 70000};
        size_t size = sizes[rnd(6)];
        int q = msgget(IPC_PRIVATE, 0600);
        static char m[sizeof(long) + 70000];
        *(long *)m = 1;
        r = q < 0 ? q : msgsnd(q, m, size, IPC_NOWAIT);
        printf("  msgget %s, msgsnd %zu = %ld errno %d\n", q < 0 ? "failed" : "ok", size, r,
               r < 0 ? errno : 0);
        if (q >= 0)
            CHECK(msgctl(q, IPC_RMID, NULL) == 0);
        break;
    }
    case 1: {
        static const size_t sizes[] = {1, 4096, 100000, 1 << 20, 1 << 24};
        size_t size = sizes[rnd(5)];
        r = shmget(IPC_PRIVATE, size, 0600);
        printf("  shmget %zu = %ld errno %d\n", size, r, r < 0 ? errno : 0);
        if (r >= 0)
            CHECK(shmctl((int)r, IPC_RMID, NULL) == 0);
        break;
    }
    case 2: {
        static const int counts[] = {1, 3, 250, 251, 32000};
        int count = counts[rnd(5)];
        r = semget(IPC_PRIVATE, count, 0600);
        printf("  semget %d = %ld errno %d\n", count, r, r < 0 ? errno : 0);
        if (r >= 0)
            CHECK(semctl((int)r, 0, IPC_RMID) == 0);
        break;
    }
    default: {
        /* A semop of more operations than semopm allows? One of 33 on a new set. */
        int s = semget(IPC_PRIVATE, 1, 0600);
        struct sembuf ops[40];
        for (int k = 0; k < 40; k++)
            ops[k] = (struct sembuf){0, 0, IPC_NOWAIT};
        size_t count = rnd(2) ? 32 : 33;
        r = s < 0 ? s : semop(s, ops, count);
        printf("  semget %s, semop of %zu = %ld errno %d\n", s < 0 ? "failed" : "ok", count, r,
               r < 0 ? errno : 0);
        if (s >= 0)
            CHECK(semctl(s, 0, IPC_RMID) == 0);
        break;
    }
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    rng = strtoull(argv[1], NULL, 10) * 2654435761ULL + 5;
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        const char *name = files[rnd(FILES)];
        const char *text = texts[rnd(TEXTS)];
        off_t at = rnd(6) == 0 ? 1 + rnd(3) : 0;
        char path[128];
        snprintf(path, sizeof path, "/proc/sys/kernel/%s", name);
        int fd = open(path, O_WRONLY);
        CHECK(fd >= 0);
        errno = 0;
        ssize_t r = at ? pwrite(fd, text, strlen(text), at) : write(fd, text, strlen(text));
        int err = r < 0 ? errno : 0;
        CHECK(close(fd) == 0);
        printf("%d: write \"", i);
        for (const char *p = text; *p; p++)
            printf(*p == '\t' ? "\\t" : *p == '\n' ? "\\n" : "%c", *p);
        printf("\" to %s at %lld = %zd errno %d\n", name, (long long)at, r, err);
        print_file(name);
        probe();
    }
    return 0;
}
