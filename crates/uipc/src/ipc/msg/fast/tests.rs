//! The message fast path against the engine: publishing, taking back, the selection modes,
//! the errors it gives itself, a holder that died inside, removal, and threads mixing fast
//! calls with engine calls without losing or duplicating a message.

use super::owner::MsgArena;
use super::{load_text, store_text, MsgView, LOCK, LOCKED, MSG_SLOTS, REGION_HEADER, SLOT_WORDS};
use crate::ipc::consts::*;
use crate::ipc::msg::{MsgctlArg, MsgctlOut, MsqidDs};
use crate::ipc::sem::fast::{Fast, TestCaller as Who};
use crate::ipc::{IpcNamespace, NamespaceOptions};
use crate::sync::{AtomicU64, Ordering::Relaxed};
use crate::{Cred, Errno, WaitCtx};
use std::sync::Arc;

pub(super) fn setup() -> (Arc<IpcNamespace>, Arc<MsgArena>, i32) {
    let arena = Arc::new(MsgArena::owned());
    let ns = IpcNamespace::with_options(NamespaceOptions {
        msg_arena: Some(arena.clone()),
        ..Default::default()
    });
    let id = ns.msgget(&Cred::root(1), IPC_PRIVATE, 0o600).unwrap();
    // The first engine call on the queue publishes it when it leaves.
    stat(&ns, id);
    (Arc::new(ns), arena, id)
}

pub(super) fn stat(ns: &IpcNamespace, id: i32) -> MsqidDs {
    match ns.msgctl(&Cred::root(1), id, IPC_STAT, MsgctlArg::None) {
        Ok(MsgctlOut::Stat { ds, .. }) => ds,
        other => panic!("IPC_STAT: {other:?}"),
    }
}

/// A client of queue `id` through its view `v` of the arena.
struct Client<'a> {
    v: MsgView<'a>,
    id: i32,
}

impl<'a> Client<'a> {
    fn new(arena: &'a MsgArena, id: i32) -> Client<'a> {
        Client {
            v: arena.view(),
            id,
        }
    }

    /// A fast msgsnd by process `pid`.
    fn send(&self, mtype: i64, text: &[u8], flags: i32, pid: u32) -> Fast<()> {
        let mut fill = |a: &[AtomicU64], b: &[AtomicU64]| {
            store_text(a, b, text);
            true
        };
        let who = &Who(pid);
        self.v
            .msgsnd(self.id, mtype, text.len(), flags, who, &mut fill)
    }

    /// A fast msgrcv by process 20 of up to `max` bytes.
    fn recv(&self, max: i64, typ: i64, flags: i32) -> Fast<(i64, Vec<u8>)> {
        let mut got = (0, Vec::new());
        let mut deliver = |mtype: i64, n: usize, a: &[AtomicU64], b: &[AtomicU64]| {
            got = (mtype, load_text(a, b, n));
            Ok(())
        };
        match self
            .v
            .msgrcv(self.id, max, typ, flags, &Who(20), &mut deliver)
        {
            Fast::Done(r) => Fast::Done(r.map(|n| {
                assert_eq!(n, got.1.len());
                got
            })),
            Fast::Slow => Fast::Slow,
        }
    }
}

fn engine_recv(ns: &IpcNamespace, id: i32, typ: i64) -> Result<(i64, Vec<u8>), Errno> {
    ns.msgrcv(&Cred::root(30), id, 100, typ, IPC_NOWAIT, &WaitCtx::FOREVER)
}

#[test]
fn fast_send_and_receive_with_stats_the_engine_reads_back() {
    let (ns, arena, id) = setup();
    let q = Client::new(&arena, id);
    assert_eq!(q.send(3, b"hello world", 0, 10), Fast::Done(Ok(())));
    assert_eq!(q.send(4, b"", 0, 11), Fast::Done(Ok(())));
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.cbytes, ds.lspid, ds.lrpid), (2, 11, 11, 0));
    assert_eq!(ds.stime, 1_700_000_000);
    // IPC_STAT took the queue back and published it again.
    assert_eq!(
        q.recv(100, 0, 0),
        Fast::Done(Ok((3, b"hello world".to_vec())))
    );
    let ds = stat(&ns, id);
    assert_eq!(
        (ds.qnum, ds.cbytes, ds.lrpid, ds.rtime),
        (1, 0, 20, 1_700_000_000)
    );
    assert_eq!(engine_recv(&ns, id, 0), Ok((4, Vec::new())));
    assert_eq!(q.recv(100, 0, IPC_NOWAIT), Fast::Done(Err(Errno::ENOMSG)));
    assert_eq!(q.recv(100, 0, 0), Fast::Slow, "would sleep: the daemon's");
}

#[test]
fn selection_modes_serve_the_first_message_and_leave_the_rest_to_the_daemon() {
    let (ns, arena, id) = setup();
    let q = Client::new(&arena, id);
    for (t, text) in [(5, b"a"), (2, b"b"), (7, b"c")] {
        assert_eq!(q.send(t, text, 0, 10), Fast::Done(Ok(())));
    }
    assert_eq!(q.recv(100, 2, 0), Fast::Slow, "type 2 is not the first");
    assert_eq!(
        q.recv(100, -4, 0),
        Fast::Slow,
        "lowest <= 4 is not the first"
    );
    assert_eq!(q.recv(100, 9, IPC_NOWAIT), Fast::Done(Err(Errno::ENOMSG)));
    assert_eq!(q.recv(100, -1, IPC_NOWAIT), Fast::Done(Err(Errno::ENOMSG)));
    assert_eq!(
        q.recv(100, 2, MSG_EXCEPT),
        Fast::Done(Ok((5, b"a".to_vec())))
    );
    assert_eq!(q.recv(100, -2, 0), Fast::Done(Ok((2, b"b".to_vec()))));
    assert_eq!(q.recv(100, 7, MSG_COPY | IPC_NOWAIT), Fast::Slow);
    assert_eq!(q.recv(100, 7, 0), Fast::Done(Ok((7, b"c".to_vec()))));
    let long = [9u8; 100];
    assert_eq!(q.send(1, &long, 0, 10), Fast::Done(Ok(())));
    assert_eq!(q.recv(99, 0, 0), Fast::Done(Err(Errno::E2BIG)));
    assert_eq!(q.recv(10, 0, MSG_NOERROR), Fast::Done(Ok((1, vec![9; 10]))));
    assert_eq!(
        stat(&ns, id).qnum,
        0,
        "the truncated message was taken whole"
    );
    assert_eq!(
        q.send(0, b"x", 0, 10),
        Fast::Slow,
        "mtype 0: the daemon's EINVAL"
    );
}

#[test]
fn a_full_queue_is_eagain_with_ipc_nowait_and_the_daemon_s_otherwise() {
    let (ns, arena, id) = setup();
    let q = Client::new(&arena, id);
    let set = crate::ipc::msg::MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
        qbytes: 10,
    };
    ns.msgctl(&Cred::root(1), id, IPC_SET, MsgctlArg::Set(set))
        .unwrap();
    assert_eq!(q.send(1, &[1; 8], 0, 10), Fast::Done(Ok(())));
    assert_eq!(
        q.send(1, &[1; 3], IPC_NOWAIT, 10),
        Fast::Done(Err(Errno::EAGAIN))
    );
    assert_eq!(q.send(1, &[1; 3], 0, 10), Fast::Slow);
    assert_eq!(q.send(1, &[1; 2], 0, 10), Fast::Done(Ok(())));
    assert_eq!(stat(&ns, id).cbytes, 10);
}

#[test]
fn removal_sends_every_call_to_the_daemon() {
    let (ns, arena, id) = setup();
    let q = Client::new(&arena, id);
    assert_eq!(q.send(1, b"x", 0, 10), Fast::Done(Ok(())));
    ns.msgctl(&Cred::root(1), id, IPC_RMID, MsgctlArg::None)
        .unwrap();
    assert_eq!(q.send(1, b"x", 0, 10), Fast::Slow);
    assert_eq!(q.recv(100, 0, IPC_NOWAIT), Fast::Slow);
    assert_eq!(
        ns.msgctl(&Cred::root(1), 0, MSG_INFO, MsgctlArg::None)
            .map(|o| o.ret()),
        Ok(0)
    );
}

#[test]
fn a_holder_that_died_inside_leaves_the_queue_as_before_and_is_let_go_at_its_exit() {
    let (ns, arena, id) = setup();
    let q = Client::new(&arena, id);
    assert_eq!(q.send(1, b"kept", 0, 10), Fast::Done(Ok(())));
    let idx = (id as usize & 0x7fff) % MSG_SLOTS;
    let lock = &arena.words()[REGION_HEADER + idx * SLOT_WORDS + LOCK];
    // Process 77 took the slot and died before its commit.
    let l = lock.load(Relaxed);
    lock.store(l | LOCKED | 77 << 8, Relaxed);
    assert_eq!(q.send(1, b"x", IPC_NOWAIT, 10), Fast::Slow);
    assert_eq!(stat(&ns, id).qnum, 1, "the daemon took the queue as it was");
    assert_eq!(
        q.send(1, b"x", IPC_NOWAIT, 10),
        Fast::Slow,
        "not published while held"
    );
    ns.process_exit(77);
    assert_eq!(q.recv(100, 0, 0), Fast::Done(Ok((1, b"kept".to_vec()))));
}

#[test]
fn threads_mixing_fast_and_engine_calls_lose_and_duplicate_nothing() {
    let (ns, arena, id) = setup();
    let per = 2000u32;
    let senders: Vec<_> = (0..2u32)
        .map(|t| {
            let (ns, arena) = (ns.clone(), arena.clone());
            std::thread::spawn(move || {
                let q = Client::new(&arena, id);
                for i in 0..per {
                    let text = (t * per + i).to_le_bytes();
                    if q.send(1, &text, 0, 10 + t) == Fast::Slow {
                        let cred = Cred::root(10 + t as i32);
                        ns.msgsnd(&cred, id, 1, &text, 0, &WaitCtx::FOREVER)
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    let receiver = {
        let (ns, arena) = (ns.clone(), arena.clone());
        std::thread::spawn(move || {
            let q = Client::new(&arena, id);
            let mut seen = vec![false; 2 * per as usize];
            for _ in 0..2 * per {
                let m = match q.recv(100, 0, 0) {
                    Fast::Done(r) => r.unwrap(),
                    Fast::Slow => ns
                        .msgrcv(&Cred::root(20), id, 100, 0, 0, &WaitCtx::FOREVER)
                        .unwrap(),
                };
                let k = u32::from_le_bytes(m.1.try_into().unwrap()) as usize;
                assert!(!seen[k], "message {k} twice");
                seen[k] = true;
            }
        })
    };
    for _ in 0..200 {
        stat(&ns, id);
        std::thread::yield_now();
    }
    for s in senders {
        s.join().unwrap();
    }
    receiver.join().unwrap();
    let ds = stat(&ns, id);
    assert_eq!((ds.qnum, ds.cbytes), (0, 0));
}
