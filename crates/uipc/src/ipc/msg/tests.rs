//! Tests that look inside a queue: the selection cost counter, the sleeper lists and the
//! renderer. Behaviour through the public API is tested in `tests/ipc_msg_*.rs`.

use super::*;
use crate::ipc::consts::{IPC_CREAT, IPC_NOWAIT, IPC_PRIVATE, MSG_EXCEPT};
use crate::wait::WaitCtx;
use std::thread;
use std::time::{Duration, Instant};

fn queue(ns: &IpcNamespace) -> i32 {
    ns.msgget(&Cred::root(1), IPC_PRIVATE, IPC_CREAT | 0o600)
        .unwrap()
}

#[test]
fn typed_receive_does_not_visit_ten_thousand_messages_of_another_type() {
    let ns = IpcNamespace::new();
    let root = Cred::root(1);
    let id = queue(&ns);
    for _ in 0..10_000 {
        ns.msgsnd(&root, id, 1, b"x", IPC_NOWAIT, &WaitCtx::FOREVER)
            .unwrap();
    }
    ns.msgsnd(&root, id, 9, b"last", IPC_NOWAIT, &WaitCtx::FOREVER)
        .unwrap();
    let q = ns.msg_queue(id).unwrap();
    q.lock().messages.visited = 0;
    let rcv = |typ, flags| ns.msgrcv(&root, id, 100, typ, flags | IPC_NOWAIT, &WaitCtx::FOREVER);
    assert_eq!(rcv(5, 0), Err(Errno::ENOMSG));
    assert_eq!(rcv(1, MSG_EXCEPT), Ok((9, b"last".to_vec())));
    assert_eq!(rcv(1, MSG_EXCEPT), Err(Errno::ENOMSG));
    assert_eq!(rcv(-0, 0).map(|m| m.0), Ok(1));
    assert_eq!(rcv(-1, 0).map(|m| m.0), Ok(1));
    let visited = q.lock().messages.visited;
    assert!(
        visited <= 8,
        "typed receives visited {visited} messages on a 10001-message queue"
    );
}

#[test]
fn proc_row_matches_the_kernel_format() {
    let ns = IpcNamespace::new();
    let id = ns
        .msgget(&Cred::root(1), -559_038_737, IPC_CREAT | 0o644)
        .unwrap();
    ns.msgsnd(&Cred::root(77), id, 3, b"hello", 0, &WaitCtx::FOREVER)
        .unwrap();
    let q = ns.msg_queue(id).unwrap();
    {
        let mut st = q.lock();
        st.stime = 1_795_345_190;
        st.ctime = 1_795_345_100;
    }
    let text = ns.proc_sysvipc_msg();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    // Produced by the shell's printf (C semantics) with the kernel's format string:
    // printf "%10d %10d  %4o  %10lu %10lu %5u %5u %5u %5u %5u %5u %10llu %10llu %10llu\n"
    //   -559038737 0 420 5 1 77 0 0 0 0 0 1795345190 0 1795345100
    assert_eq!(
        lines.next(),
        Some("-559038737          0   644           5          1    77     0     0     0     0     0 1795345190          0 1795345100")
    );
    assert_eq!(
        lines.next(),
        None,
        "one queue, one row, and the text ends in a newline"
    );
    assert!(text.ends_with('\n'));
    if let Ok(host) = std::fs::read_to_string("/proc/sysvipc/msg") {
        assert_eq!(host.lines().next(), Some(header), "header as the host's");
    }
}

#[test]
fn interrupted_sleepers_leave_no_entry_behind() {
    let ns = Arc::new(IpcNamespace::new());
    let id = queue(&ns);
    let irq = crate::Interrupt::new();
    let (ns2, irq2) = (ns.clone(), irq.clone());
    let t = thread::spawn(move || {
        ns2.msgrcv(
            &Cred::root(2),
            id,
            10,
            0,
            0,
            &WaitCtx::FOREVER.interruptible(&irq2),
        )
    });
    let q = ns.msg_queue(id).unwrap();
    let start = Instant::now();
    while q.lock().receivers.is_empty() && start.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(q.lock().receivers.len(), 1);
    irq.raise();
    assert_eq!(t.join().unwrap(), Err(Errno::EINTR));
    assert!(q.lock().receivers.is_empty());
    // A deadline acts like a signal at that instant.
    let r = ns.msgrcv(
        &Cred::root(2),
        id,
        10,
        0,
        0,
        &WaitCtx::timeout(Duration::from_millis(5)),
    );
    assert_eq!(r, Err(Errno::EINTR));
    assert!(q.lock().receivers.is_empty() && q.lock().senders.is_empty());
}
