/* Every call is judged by the caller's identity at that moment, as the kernel judges it:
 * - capset() dropping CAP_IPC_OWNER from the effective set: semop on root's own 0400 set is
 *   EACCES from the next call on, and works again once the capability is raised back; dropping
 *   CAP_SYS_ADMIN: IPC_RMID of another user's set is EPERM;
 * - setgroups() with the effective ids unchanged: a group-only 0060 set is usable while the
 *   group is held, EACCES once it is dropped;
 * - a user namespace of one's own (what `unshare -Ur` makes): root inside it, with every
 *   capability there, gets no capability over the objects of the namespace it came from
 *   (EACCES on root's 0600 set, EPERM on its IPC_RMID).
 * Runs as root (says "skipped" otherwise). `ident_per_call make KEY` makes a 0600 set of KEY,
 * and `ident_per_call userns KEY` runs only the last part against it, for an unprivileged
 * caller (the script's case of a root daemon shared with other users). */
#include "check.h"
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static void set_effective(int cap, int on) {
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    CHECK(syscall(SYS_capget, &head, data) == 0);
    if (on)
        data[cap / 32].effective |= 1u << (cap % 32);
    else
        data[cap / 32].effective &= ~(1u << (cap % 32));
    CHECK(syscall(SYS_capset, &head, data) == 0);
}

static int semop_up(int sem) {
    struct sembuf up = {0, 1, 0};
    return semop(sem, &up, 1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

/* In a user namespace of our own, as root there with every capability: root's 0600 set of
 * `key` (made outside) is closed to us. */
static void in_own_user_ns(key_t key) {
    char map[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    /* A uid switch made us undumpable, and /proc/self root's: we write our own maps. */
    CHECK(prctl(PR_SET_DUMPABLE, 1) == 0);
    CHECK(unshare(CLONE_NEWUSER) == 0);
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1", uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "0 %u 1", gid);
    write_file("/proc/self/gid_map", map);
    CHECK(geteuid() == 0);
    int sem = semget(key, 0, 0);
    CHECK(sem >= 0);
    CHECK(semget(key, 1, 0600) == -1 && errno == EACCES);
    CHECK(semop_up(sem) == -1 && errno == EACCES);
    CHECK(semctl(sem, 0, IPC_RMID) == -1 && errno == EPERM);
    puts("user namespace of our own: no capability over the outer objects");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2 && strcmp(argv[1], "make") == 0) {
        CHECK(semget((key_t)strtol(argv[2], NULL, 0), 1, IPC_CREAT | IPC_EXCL | 0600) >= 0);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "userns") == 0) {
        in_own_user_ns((key_t)strtol(argv[2], NULL, 0));
        return 0;
    }
    if (geteuid() != 0) {
        puts("ident_per_call: skipped (needs root)");
        return 0;
    }
    /* A set made by user 1234 (created, not only owned: its creator keeps owner rights). */
    CHECK(seteuid(1234) == 0);
    int theirs = semget(IPC_PRIVATE, 1, 0600);
    CHECK(theirs >= 0 && seteuid(0) == 0);
    /* capset: CAP_IPC_OWNER overrides the owner's own 0400 mode only while effective. */
    int ro = semget(IPC_PRIVATE, 1, 0400);
    CHECK(ro >= 0 && semop_up(ro) == 0);
    set_effective(CAP_IPC_OWNER, 0);
    CHECK(semop_up(ro) == -1 && errno == EACCES);
    CHECK(semctl(ro, 0, GETVAL) == 1); /* reading is what 0400 grants */
    set_effective(CAP_IPC_OWNER, 1);
    CHECK(semop_up(ro) == 0 && semctl(ro, 0, GETVAL) == 2);
    /* CAP_SYS_ADMIN: IPC_RMID of a set that is not ours. */
    set_effective(CAP_SYS_ADMIN, 0);
    CHECK(semctl(theirs, 0, IPC_RMID) == -1 && errno == EPERM);
    set_effective(CAP_SYS_ADMIN, 1);
    CHECK(semctl(theirs, 0, IPC_RMID) == 0);
    CHECK(semctl(ro, 0, IPC_RMID) == 0);
    puts("capset: a dropped capability counts from the next call");

    /* setgroups with the same effective ids: a set owned by 1234:4321, mode 0060, made by
     * root (cgid 0); the caller runs as 65534:65534, in group 4321 or not. */
    int grp = semget(IPC_PRIVATE, 1, 0600);
    struct semid_ds gds = {.sem_perm = {.uid = 1234, .gid = 4321, .mode = 0060}};
    CHECK(grp >= 0 && semctl(grp, 0, IPC_SET, (union semun){.buf = &gds}) == 0);
    pid_t child = checked_fork();
    if (child == 0) {
        gid_t in[] = {4321};
        CHECK(setgroups(1, in) == 0 && setegid(65534) == 0 && seteuid(65534) == 0);
        CHECK(semop_up(grp) == 0);
        CHECK(seteuid(0) == 0 && setgroups(0, NULL) == 0 && seteuid(65534) == 0);
        CHECK(semop_up(grp) == -1 && errno == EACCES);
        CHECK(seteuid(0) == 0 && setgroups(1, in) == 0 && seteuid(65534) == 0);
        CHECK(semop_up(grp) == 0);
        exit(0);
    }
    expect_clean_exit(child);
    CHECK(semctl(grp, 0, GETVAL) == 2 && semctl(grp, 0, IPC_RMID) == 0);
    puts("setgroups: the groups of the moment count");

    /* A child that drops to nobody, then makes a user namespace of its own. */
    key_t key = 0x75492010;
    int closed = semget(key, 1, IPC_CREAT | IPC_EXCL | 0600);
    CHECK(closed >= 0);
    child = checked_fork();
    if (child == 0) {
        CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
        in_own_user_ns(key);
        exit(0);
    }
    expect_clean_exit(child);
    CHECK(semctl(closed, 0, GETVAL) == 0 && semctl(closed, 0, IPC_RMID) == 0);
    puts("ident_per_call: ok");
    return 0;
}
