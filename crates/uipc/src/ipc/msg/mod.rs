//! SysV message queues (`ipc/msg.c`; msgget(2), msgsnd(2), msgrcv(2), msgctl(2)).
//!
//! A queue is a [`MsgQueue`]: its header (id, key) plus one mutex over `QueueState`: the
//! permissions, counters, times, the messages (`store::MessageStore`, indexed by type so
//! that a typed receive never walks messages of other types) and the two FIFO lists of
//! sleepers: senders waiting for room and receivers waiting for a matching message.
//!
//! - [`IpcNamespace::msgget`] follows `ipcget` (`Registry::get_or_create`).
//! - `msgsnd` / `msgrcv` ([`ops`]) look the id up without any registry lock, then take the
//!   queue's lock; a send first offers the message to sleeping receivers in FIFO order
//!   (Linux's pipelined send) and only queues it if none takes it.
//! - `msgctl` ([`ctl`]): IPC_SET and IPC_RMID take the registry write lock first.
//!
//! Lock order: registry state (rwsem) -> queue lock -> a sleeper's `Waiter` state. Sleepers
//! are queued and dequeued under the queue lock; nothing sleeps while holding it.
//!
//! Process lifecycle (§9): queues belong to the namespace and survive fork, exec and exit.
//! A process that exits while asleep in msgsnd/msgrcv is dequeued by the embedder raising
//! its [`crate::Interrupt`] (or cancelling its parked call); there is no per-process msg state
//! to clean up.
//!
//! Pids: `lspid` is the sender's tgid; `lrpid` is the receiver's tgid, except that a
//! message handed directly to a sleeping receiver records that receiver's thread id, as
//! Linux's `pipelined_send` does (`task_pid`, checked on a 6.x host).
//!
//! Timeouts: Linux's msgsnd/msgrcv have none. A [`crate::WaitCtx`] deadline is treated as
//! a signal arriving at that instant (as `alarm()` would): the call returns EINTR.
//!
//! ## Not supported
//! - LSM hooks (`security_msg_*`) always allow.
//! - EFAULT / ENOMEM paths of user-memory copies: the engine gets slices.
//! - The old (non-IPC_64) `msqid_ds` layout: as on x86-64, there is one layout and a command
//!   carrying IPC_64 is EINVAL.

pub mod ctl;
pub mod fast;
mod fast_inside;
mod fast_sleep;
pub mod ops;
mod parked;
pub(crate) mod store;
#[cfg(test)]
mod tests;

use super::namespace::{HasRegistry, IpcNamespace};
use super::perm::IpcPerm;
use super::registry::{IpcHeader, IpcObject, Registry};
use crate::sync::{lock, AtomicI64, Mutex, MutexGuard, Ordering};
use crate::table::IdLayout;
use crate::wait::Waiter;
use crate::{Cred, Errno, IpcId, IpcKey, Result};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use store::{MessageStore, Selector};

pub use ctl::{MsgInfo, MsgctlArg, MsgctlOut, MsqidDs, MsqidSet};
pub use parked::{ParkedMsgrcv, ParkedMsgsnd};

/// What a sleeping receiver is woken with.
#[derive(Debug)]
pub(crate) enum RecvWake {
    /// A sender handed it this message (mtype, full text; the receiver truncates).
    Message(i64, Vec<u8>),
    /// E2BIG from a pipelined send, or EIDRM from removal.
    Fail(Errno),
    /// Look again (IPC_SET changed something): Linux's `expunge_all(-EAGAIN)`.
    Retry,
}

/// A receiver asleep in msgrcv.
pub(crate) struct SleepingReceiver {
    pub(crate) waiter: Arc<Waiter<RecvWake>>,
    pub(crate) selector: Selector,
    /// The buffer size; `u64::MAX`-like (i64::MAX) with MSG_NOERROR.
    pub(crate) max_size: i64,
    /// The receiver's thread id: a pipelined send records it as lrpid (`task_pid`).
    pub(crate) tid: i32,
    /// The most bytes it can be handed (a receive adopted from the fast path: its mailbox);
    /// a message it would take that is longer wakes it to look again instead.
    pub(crate) cap: i64,
}

/// A sender asleep in msgsnd, waiting for room.
pub(crate) struct SleepingSender {
    pub(crate) waiter: Arc<Waiter<()>>,
    pub(crate) size: u64,
}

/// The lock-protected part of a queue (`struct msg_queue`).
pub(crate) struct QueueState {
    pub(crate) perm: IpcPerm,
    /// Set by IPC_RMID under this lock: holders of the `Arc` get EIDRM.
    pub(crate) deleted: bool,
    pub(crate) qbytes: u64,
    pub(crate) cbytes: u64,
    pub(crate) lspid: i32,
    pub(crate) lrpid: i32,
    pub(crate) stime: i64,
    pub(crate) rtime: i64,
    pub(crate) ctime: i64,
    pub(crate) messages: MessageStore,
    pub(crate) senders: VecDeque<SleepingSender>,
    pub(crate) receivers: VecDeque<SleepingReceiver>,
}

impl QueueState {
    /// `msg_fits_inqueue`: bytes and the count are both capped by qbytes.
    pub(crate) fn fits(&self, size: u64) -> bool {
        self.cbytes.saturating_add(size) <= self.qbytes
            && (self.messages.len() as u64).saturating_add(1) <= self.qbytes
    }

    /// `ss_wakeup` without kill: wakes every sleeping sender whose message fits now; the
    /// others keep their order. The woken ones re-check under the lock.
    pub(crate) fn wake_senders_that_fit(&mut self) {
        let mut keep = VecDeque::with_capacity(self.senders.len());
        while let Some(s) = self.senders.pop_front() {
            if self.fits(s.size) {
                s.waiter.complete(());
            } else {
                keep.push_back(s);
            }
        }
        self.senders = keep;
    }
}

/// One message queue.
pub struct MsgQueue {
    header: IpcHeader,
    state: Mutex<QueueState>,
}

impl MsgQueue {
    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueState> {
        lock(&self.state)
    }

    /// Locks the queue and fails with EIDRM if it was removed since the lookup.
    pub(crate) fn lock_valid(&self) -> Result<MutexGuard<'_, QueueState>> {
        let st = self.lock();
        if st.deleted {
            return Err(Errno::EIDRM);
        }
        Ok(st)
    }
}

impl IpcObject for MsgQueue {
    /// msgget checks only the permissions.
    type KeyInfo = ();
    fn header(&self) -> &IpcHeader {
        &self.header
    }
}

/// The namespace's message queues, and the namespace-wide totals MSG_INFO reports.
pub struct MsgIds {
    registry: Registry<MsgQueue>,
    /// Messages queued in all queues (`percpu_msg_hdrs`).
    pub(crate) total_messages: AtomicI64,
    /// Bytes queued in all queues (`percpu_msg_bytes`).
    pub(crate) total_bytes: AtomicI64,
    /// The fast path's region, if the embedder gave one (`fast`).
    pub(crate) arena: Option<Arc<fast::owner::MsgArena>>,
}

impl MsgIds {
    pub(crate) fn new(layout: IdLayout, arena: Option<Arc<fast::owner::MsgArena>>) -> MsgIds {
        MsgIds {
            registry: Registry::new(layout),
            total_messages: AtomicI64::new(0),
            total_bytes: AtomicI64::new(0),
            arena,
        }
    }

    /// Accounts `count` messages of `bytes` total (negative to remove).
    pub(crate) fn account(&self, count: i64, bytes: i64) {
        self.total_messages.fetch_add(count, Ordering::Relaxed);
        self.total_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl HasRegistry<MsgQueue> for MsgIds {
    fn registry(&self) -> &Registry<MsgQueue> {
        &self.registry
    }
}

impl IpcNamespace {
    /// msgget(2): the id of the queue for `key`, creating it per `flag` (IPC_CREAT,
    /// IPC_EXCL, mode bits). Order: IPC_PRIVATE creates; ENOENT; create (ENOSPC at msgmni);
    /// EEXIST; EACCES by `ipcperms(flag)`.
    pub fn msgget(&self, cred: &Cred, key: i32, flag: i32) -> Result<i32> {
        let reg = &self.msg.registry;
        let key = IpcKey::new(key);
        reg.get_or_create(
            key,
            flag,
            |free| {
                let limit = self.limits.msgmni();
                let qbytes = self.limits.msgmnb().max(0) as u64;
                let ctime = self.now();
                let perm = IpcPerm::new(cred, flag);
                let queue = |id| MsgQueue {
                    header: IpcHeader::new(id, key),
                    state: Mutex::new(QueueState {
                        perm: perm.clone(),
                        deleted: false,
                        qbytes,
                        cbytes: 0,
                        lspid: 0,
                        lrpid: 0,
                        stime: 0,
                        rtime: 0,
                        ctime,
                        messages: MessageStore::default(),
                        senders: VecDeque::new(),
                        receivers: VecDeque::new(),
                    }),
                };
                free.add_then(limit, (&perm, ()), queue, |q| q.header.id())
            },
            |entry| entry.perm.check(cred, flag),
        )
        .map(IpcId::get)
    }

    /// `/proc/sysvipc/msg`: header, then one row per queue in increasing index order.
    pub fn proc_sysvipc_msg(&self) -> String {
        self.proc_sysvipc_msg_as(&|pid| pid)
    }

    /// [`proc_sysvipc_msg`](Self::proc_sysvipc_msg) with lspid and lrpid as `pid` numbers
    /// them (a reader in another pid namespace). `pid` runs with no lock held: the rows are
    /// copied first.
    pub fn proc_sysvipc_msg_as(&self, pid: &dyn Fn(i32) -> i32) -> String {
        let rows: Vec<MsgRow> = {
            let _inside = self.msg_fast_enter_all();
            self.msg
                .registry
                .snapshot()
                .iter()
                .filter_map(|q| {
                    let st = q.lock();
                    (!st.deleted).then(|| MsgRow {
                        key: q.header.key().get(),
                        id: q.header.id().get(),
                        perm: st.perm.clone(),
                        cbytes: st.cbytes,
                        qnum: st.messages.len(),
                        pids: [st.lspid, st.lrpid],
                        times: [st.stime, st.rtime, st.ctime],
                    })
                })
                .collect()
        };
        let mut out = String::from(PROC_HEADER);
        for row in &rows {
            render_row(&mut out, row, pid);
        }
        out
    }
}

/// The values of one row of `/proc/sysvipc/msg`.
struct MsgRow {
    key: i32,
    id: i32,
    perm: IpcPerm,
    cbytes: u64,
    qnum: usize,
    pids: [i32; 2],
    times: [i64; 3],
}

const PROC_HEADER: &str = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime\n";

fn render_row(out: &mut String, r: &MsgRow, pid: &dyn Fn(i32) -> i32) {
    let _ = writeln!(
        out,
        "{:>10} {:>10}  {:>4o}  {:>10} {:>10} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>10} {:>10} {:>10}",
        r.key,
        r.id,
        r.perm.mode,
        r.cbytes,
        r.qnum,
        pid(r.pids[0]),
        pid(r.pids[1]),
        r.perm.uid,
        r.perm.gid,
        r.perm.cuid,
        r.perm.cgid,
        r.times[0],
        r.times[1],
        r.times[2]
    );
}
