/* pthread_cancel of a thread asleep in msgrcv (a cancellation point): the thread goes, its
 * receive is withdrawn, and the process goes on using the queue. Twice: on a new queue, and
 * on one a msgctl has been made on (under `uipc run` the receiver then sleeps on the message
 * fast path). */
#include "check.h"
#include <pthread.h>

static int q;

struct msg {
    long mtype;
    int v;
};

static void *receiver(void *arg) {
    (void)arg;
    struct msg m;
    msgrcv(q, &m, sizeof m.v, 1, 0);
    return (void *)1;
}

static void once(int touched) {
    q = new_queue();
    struct msqid_ds ds;
    if (touched)
        CHECK(msgctl(q, IPC_STAT, &ds) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, receiver, NULL) == 0);
    usleep(200000);
    CHECK(pthread_cancel(t) == 0);
    void *ret;
    CHECK(pthread_join(t, &ret) == 0);
    CHECK(ret == PTHREAD_CANCELED);
    struct msg m = {1, 42};
    CHECK(msgsnd(q, &m, sizeof m.v, 0) == 0);
    CHECK(msgctl(q, IPC_STAT, &ds) == 0 && ds.msg_qnum == 1); /* nobody took it */
    CHECK(msgrcv(q, &m, sizeof m.v, 1, IPC_NOWAIT) == sizeof m.v && m.v == 42);
    CHECK(msgctl(q, IPC_RMID, NULL) == 0);
}

int main(void) {
    alarm(60);
    once(0);
    once(1);
    puts("cancel_thread: ok");
    return 0;
}
