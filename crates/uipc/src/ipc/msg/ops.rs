//! msgsnd(2) and msgrcv(2) (`do_msgsnd`, `do_msgrcv`, `pipelined_send` in `ipc/msg.c`).
//!
//! Both look the id up lock-free, then loop under the queue's lock: permission (EACCES),
//! removal (EIDRM), then the attempt; if it cannot proceed and IPC_NOWAIT is clear the
//! caller queues a [`crate::Waiter`], drops the lock and sleeps.
//!
//! - A sender sleeps until a receive or IPC_SET wakes it ("there may be room now"); it then
//!   re-runs the whole loop, so it re-checks permission, removal and room. Any interruption
//!   seen after waking wins (EINTR), as Linux checks `signal_pending` before retrying.
//! - A receiver sleeps until a sender hands it a message directly (the message is never
//!   queued), a sender finds its buffer too small (E2BIG), the queue is removed (EIDRM) or
//!   IPC_SET asks it to look again. A delivered result wins over a racing interruption.
//!
//! Each call is a start (`*_start`: checks, then one attempt that either finishes or queues a
//! waiter) and a parked call ([`super::ParkedMsgsnd`], [`super::ParkedMsgrcv`]) that finishes it: the synchronous calls sleep
//! on the waiter, an embedder that parks calls polls or cancels them after a notification.
//!
//! Entry and exit: no lock held. The queue lock is held only between lookup and queueing the
//! waiter, and again after waking to dequeue it.

use super::parked::{ParkedMsgrcv, ParkedMsgsnd};
use super::store::{Message, Selector};
use super::{MsgQueue, QueueState, RecvWake, SleepingReceiver, SleepingSender};
use crate::ipc::consts::{IPC_NOWAIT, MSG_COPY, MSG_EXCEPT, MSG_NOERROR};
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::perm::{PERM_READ, PERM_WRITE};
use crate::sync::MutexGuard;
use crate::wait::{ParkCtx, Progress, WaitCtx, Waiter};
use crate::{Cred, Errno, IpcId, Result};
use std::sync::Arc;

/// What one attempt of msgsnd did.
pub(super) enum SendStep {
    Sent,
    /// No room: this sender's waiter is queued.
    Queued(Arc<Waiter<()>>),
}

/// What one attempt of msgrcv did.
pub(super) enum RecvStep {
    Got((i64, Vec<u8>)),
    /// Nothing matches: this receiver's waiter is queued.
    Queued(Arc<Waiter<RecvWake>>),
}

/// msgrcv's arguments once checked, kept by a parked receive to try again.
#[derive(Clone, Copy)]
pub(super) struct RecvArgs {
    pub(super) maxsize: i64,
    pub(super) flags: i32,
    pub(super) selector: Selector,
    /// MSG_COPY's buffer, capped at msgmax when the call started (`prepare_copy`).
    pub(super) copy_cap: i64,
}

impl RecvArgs {
    /// The text cut to the caller's buffer (MSG_NOERROR).
    pub(super) fn truncate(&self, (mtype, mut text): (i64, Vec<u8>)) -> (i64, Vec<u8>) {
        text.truncate(usize::try_from(self.maxsize).unwrap_or(usize::MAX));
        (mtype, text)
    }
}

impl IpcNamespace {
    /// msgsnd(2): queues `text` with type `mtype` on `msqid`, or hands it to a sleeping
    /// receiver. Errors in Linux's order: EINVAL (size > msgmax, msqid < 0), EINVAL
    /// (mtype < 1), EINVAL (lookup), EACCES (write), EIDRM; no room: EAGAIN with IPC_NOWAIT,
    /// else sleep (EIDRM on removal, EINTR on interrupt or deadline).
    pub fn msgsnd(
        &self,
        cred: &Cred,
        msqid: i32,
        mtype: i64,
        text: &[u8],
        flags: i32,
        ctx: &WaitCtx<'_>,
    ) -> Result<()> {
        match self.msgsnd_start(cred, msqid, mtype, text, flags, &ParkCtx::default()) {
            Progress::Done(r) => r,
            Progress::Parked(p) => p.wait(self, ctx),
        }
    }

    /// [`IpcNamespace::msgsnd`] without sleeping: if the queue has no room (and IPC_NOWAIT is
    /// clear), the sender is queued and returned as a [`ParkedMsgsnd`] (holding a copy of the
    /// text) whose waiter runs `park`'s notifier when there may be room.
    pub fn msgsnd_start(
        &self,
        cred: &Cred,
        msqid: i32,
        mtype: i64,
        text: &[u8],
        flags: i32,
        park: &ParkCtx,
    ) -> Progress<(), ParkedMsgsnd> {
        let size = text.len() as u64;
        if size > self.limits.msgmax().max(0) as u64 || msqid < 0 {
            return Progress::Done(Err(Errno::EINVAL));
        }
        if mtype < 1 {
            return Progress::Done(Err(Errno::EINVAL));
        }
        let _inside = self.msg_fast_enter(msqid);
        let q = match self.msg.registry.lookup(IpcId::new(msqid)) {
            Ok(q) => q,
            Err(e) => return Progress::Done(Err(e)),
        };
        let st = q.lock();
        match self.msgsnd_locked(st, cred, mtype, text, flags, park) {
            Ok(SendStep::Sent) => Progress::Done(Ok(())),
            Ok(SendStep::Queued(waiter)) => Progress::Parked(ParkedMsgsnd::new(
                q.clone(),
                waiter,
                park,
                (cred.clone(), mtype, text.to_vec(), flags),
            )),
            Err(e) => Progress::Done(Err(e)),
        }
    }

    /// One pass of msgsnd's loop, with the queue locked (`st`): permission, removal, room;
    /// then the send, or the sender's waiter queued. Releases the lock.
    pub(super) fn msgsnd_locked(
        &self,
        mut st: MutexGuard<'_, QueueState>,
        cred: &Cred,
        mtype: i64,
        text: &[u8],
        flags: i32,
        park: &ParkCtx,
    ) -> Result<SendStep> {
        let size = text.len() as u64;
        st.perm.check(cred, PERM_WRITE)?;
        if st.deleted {
            return Err(Errno::EIDRM);
        }
        if !st.fits(size) {
            if flags & IPC_NOWAIT != 0 {
                return Err(Errno::EAGAIN);
            }
            let waiter = park.waiter();
            st.senders.push_back(SleepingSender {
                waiter: waiter.clone(),
                size,
            });
            return Ok(SendStep::Queued(waiter));
        }
        st.lspid = cred.tgid.get();
        st.stime = self.now();
        let msg = Message {
            mtype,
            text: text.to_vec(),
        };
        if let Some(msg) = self.pipelined_send(&mut st, msg) {
            st.cbytes += size;
            st.messages.push(msg);
            self.msg.account(1, size as i64);
        }
        Ok(SendStep::Sent)
    }

    /// Offers `msg` to the sleeping receivers in FIFO order: a matching one whose buffer is
    /// too small gets E2BIG and the search goes on; the first that can take it gets it.
    /// Returns the message if nobody took it. Queue lock held.
    fn pipelined_send(&self, st: &mut QueueState, msg: Message) -> Option<Message> {
        let len = msg.text.len() as i64;
        let mut i = 0;
        while i < st.receivers.len() {
            let r = &st.receivers[i];
            if !r.selector.matches(msg.mtype) {
                i += 1;
                continue;
            }
            let r = st.receivers.remove(i).expect("index in range");
            if r.max_size < len {
                r.waiter.complete(RecvWake::Fail(Errno::E2BIG));
                continue;
            }
            if len.min(r.max_size) > r.cap {
                r.waiter.complete(RecvWake::Retry);
                continue;
            }
            // A receiver that was aborted (interrupted) cannot take it: keep searching.
            if r.waiter
                .complete(RecvWake::Message(msg.mtype, msg.text.clone()))
            {
                st.lrpid = r.tid;
                st.rtime = self.now();
                return None;
            }
        }
        Some(msg)
    }

    /// msgrcv(2): takes (or with MSG_COPY copies) a message from `msqid` and returns its type
    /// and at most `maxsize` bytes of its text. Errors in Linux's order: EINVAL (msqid < 0,
    /// maxsize < 0), EINVAL (MSG_COPY without IPC_NOWAIT or with MSG_EXCEPT), EINVAL (lookup),
    /// EACCES (read), EIDRM, E2BIG (too big without MSG_NOERROR; the message stays), ENOMSG
    /// (nothing matches, IPC_NOWAIT), else sleep (EIDRM, E2BIG, EINTR).
    pub fn msgrcv(
        &self,
        cred: &Cred,
        msqid: i32,
        maxsize: i64,
        msgtyp: i64,
        flags: i32,
        ctx: &WaitCtx<'_>,
    ) -> Result<(i64, Vec<u8>)> {
        match self.msgrcv_start(cred, msqid, maxsize, msgtyp, flags, &ParkCtx::default()) {
            Progress::Done(r) => r,
            Progress::Parked(p) => p.wait(self, ctx),
        }
    }

    /// [`IpcNamespace::msgrcv`] without sleeping: if nothing matches (and IPC_NOWAIT is clear),
    /// the receiver is queued and returned as a [`ParkedMsgrcv`] whose waiter runs `park`'s
    /// notifier when a sender hands it a message (or an error, or asks it to look again).
    pub fn msgrcv_start(
        &self,
        cred: &Cred,
        msqid: i32,
        maxsize: i64,
        msgtyp: i64,
        flags: i32,
        park: &ParkCtx,
    ) -> Progress<(i64, Vec<u8>), ParkedMsgrcv> {
        if msqid < 0 || maxsize < 0 {
            return Progress::Done(Err(Errno::EINVAL));
        }
        let copy = flags & MSG_COPY != 0;
        if copy && (flags & MSG_EXCEPT != 0 || flags & IPC_NOWAIT == 0) {
            return Progress::Done(Err(Errno::EINVAL));
        }
        let args = RecvArgs {
            maxsize,
            flags,
            selector: Selector::from_call(msgtyp, copy, flags & MSG_EXCEPT != 0),
            copy_cap: maxsize.min(i64::from(self.limits.msgmax())),
        };
        let _inside = self.msg_fast_enter(msqid);
        let q = match self.msg.registry.lookup(IpcId::new(msqid)) {
            Ok(q) => q,
            Err(e) => return Progress::Done(Err(e)),
        };
        match self.msgrcv_once(&q, cred, &args, park) {
            Ok(RecvStep::Got(m)) => Progress::Done(Ok(m)),
            Ok(RecvStep::Queued(w)) => {
                Progress::Parked(ParkedMsgrcv::new(q, w, park, cred.clone(), args))
            }
            Err(e) => Progress::Done(Err(e)),
        }
    }

    /// One pass of msgrcv's loop: takes the queue's lock, checks permission and removal, then
    /// takes (or copies) a matching message or queues the receiver's waiter. Releases the lock.
    pub(super) fn msgrcv_once(
        &self,
        q: &MsgQueue,
        cred: &Cred,
        args: &RecvArgs,
        park: &ParkCtx,
    ) -> Result<RecvStep> {
        let copy = args.flags & MSG_COPY != 0;
        let noerror = args.flags & MSG_NOERROR != 0;
        let maxsize = args.maxsize;
        let mut st = q.lock();
        st.perm.check(cred, PERM_READ)?;
        if st.deleted {
            return Err(Errno::EIDRM);
        }
        if let Some(seq) = st.messages.select(args.selector) {
            let msg = st.messages.get(seq).expect("selected message exists");
            let len = msg.text.len() as i64;
            if maxsize < len && !noerror {
                return Err(Errno::E2BIG);
            }
            if copy {
                // `copy_msg` refuses a message larger than the copy buffer with EINVAL
                // (reachable with MSG_NOERROR, or when msgmax shrank).
                if args.copy_cap < len {
                    return Err(Errno::EINVAL);
                }
                return Ok(RecvStep::Got((msg.mtype, msg.text.clone())));
            }
            let msg = st
                .messages
                .remove_head(seq)
                .expect("selected message exists");
            st.cbytes -= msg.text.len() as u64;
            st.rtime = self.now();
            st.lrpid = cred.tgid.get();
            self.msg.account(-1, -len);
            st.wake_senders_that_fit();
            return Ok(RecvStep::Got(args.truncate((msg.mtype, msg.text))));
        }
        if args.flags & IPC_NOWAIT != 0 {
            return Err(Errno::ENOMSG);
        }
        let waiter = park.waiter();
        st.receivers.push_back(SleepingReceiver {
            waiter: waiter.clone(),
            selector: args.selector,
            max_size: if noerror { i64::MAX } else { maxsize },
            tid: cred.tid,
            cap: i64::MAX,
        });
        Ok(RecvStep::Queued(waiter))
    }

    /// The queue for `msqid`, for code outside this module (tests).
    #[cfg(test)]
    pub(crate) fn msg_queue(&self, msqid: i32) -> Result<Arc<super::MsgQueue>> {
        self.msg.registry.lookup(IpcId::new(msqid))
    }
}
