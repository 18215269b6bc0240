//! Many blocking senders and receivers on one small queue: nothing lost, nothing duplicated,
//! each sender's messages seen in order by every receiver, the queue empty at the end.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use uipc::ipc::consts::*;
use uipc::ipc::msg::{MsgctlArg, MsgctlOut, MsqidSet};
use uipc::ipc::IpcNamespace;
use uipc::{Cred, WaitCtx};

const SENDERS: usize = 4;
const RECEIVERS: usize = 4;
const PER_SENDER: usize = 400;

#[test]
fn four_senders_four_receivers_lose_and_duplicate_nothing() {
    let ns = Arc::new(IpcNamespace::new());
    let root = Cred::root(1);
    let id = ns.msgget(&root, IPC_PRIVATE, 0o600).unwrap();
    // Room for about three messages: both sides block often.
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode: 0o600,
        qbytes: 24,
    });
    ns.msgctl(&root, id, IPC_SET, arg).unwrap();
    let ctx = || WaitCtx::timeout(Duration::from_secs(30));

    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let ns = ns.clone();
            thread::spawn(move || {
                let cred = Cred::root(10 + s as i32);
                for n in 0..PER_SENDER {
                    let text = [s as u8, (n >> 8) as u8, n as u8, 0, 0, 0, 0, 0];
                    ns.msgsnd(&cred, id, s as i64 + 1, &text, 0, &ctx())
                        .unwrap();
                }
            })
        })
        .collect();
    // Half take any message, half the lowest type <= SENDERS: every receive can complete.
    let receivers: Vec<_> = (0..RECEIVERS)
        .map(|r| {
            let ns = ns.clone();
            thread::spawn(move || {
                let cred = Cred::root(20 + r as i32);
                let typ = if r % 2 == 0 { 0 } else { -(SENDERS as i64) };
                let mut got = Vec::with_capacity(PER_SENDER);
                for _ in 0..SENDERS * PER_SENDER / RECEIVERS {
                    let (mtype, text) = ns.msgrcv(&cred, id, 8, typ, 0, &ctx()).unwrap();
                    assert_eq!(mtype, i64::from(text[0]) + 1, "type matches the sender");
                    got.push((text[0], usize::from(text[1]) << 8 | usize::from(text[2])));
                }
                got
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let mut seen = HashSet::new();
    for r in receivers {
        let got = r.join().unwrap();
        for s in 0..SENDERS as u8 {
            let order: Vec<_> = got.iter().filter(|m| m.0 == s).map(|m| m.1).collect();
            assert!(order.windows(2).all(|w| w[0] < w[1]), "per-sender FIFO");
        }
        for m in got {
            assert!(seen.insert(m), "duplicate {m:?}");
        }
    }
    assert_eq!(seen.len(), SENDERS * PER_SENDER, "nothing lost");
    match ns.msgctl(&root, 0, MSG_INFO, MsgctlArg::None).unwrap() {
        MsgctlOut::Info { info, .. } => assert_eq!((info.msgmap, info.msgtql), (0, 0)),
        other => panic!("{other:?}"),
    }
}
