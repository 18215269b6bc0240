/* Two unrelated programs meet through keys: `key_peer wait` creates a queue and a semaphore
 * and sleeps on both; `key_peer post` finds them by key and wakes it. Run them under two
 * `uipc run --socket S` sharing one daemon. */
#include "check.h"

#define KEY 0x75490020

struct msg {
    long mtype;
    char text[16];
};

int main(int argc, char **argv) {
    CHECK(argc == 2);
    if (strcmp(argv[1], "wait") == 0) {
        int sem = semget(KEY, 1, IPC_CREAT | IPC_EXCL | 0600);
        int msq = msgget(KEY, IPC_CREAT | IPC_EXCL | 0600);
        CHECK(sem >= 0 && msq >= 0);
        struct msg m;
        CHECK(msgrcv(msq, &m, sizeof m.text, 1, 0) == 6 && strcmp(m.text, "hello") == 0);
        struct sembuf down = {0, -1, 0};
        CHECK(semop(sem, &down, 1) == 0);
        CHECK(semctl(sem, 0, IPC_RMID) == 0 && msgctl(msq, IPC_RMID, NULL) == 0);
        puts("key_peer wait: ok");
        return 0;
    }
    int sem = -1, msq = -1;
    for (int i = 0; i < 1000 && (sem < 0 || msq < 0); i++) {
        sem = semget(KEY, 1, 0);
        msq = msgget(KEY, 0);
        if (sem < 0 || msq < 0) {
            CHECK(errno == ENOENT);
            usleep(5000);
        }
    }
    CHECK(sem >= 0 && msq >= 0);
    struct msg m = {.mtype = 1, .text = "hello"};
    CHECK(msgsnd(msq, &m, 6, 0) == 0);
    struct sembuf up = {0, 1, 0};
    CHECK(semop(sem, &up, 1) == 0);
    puts("key_peer post: ok");
    return 0;
}
