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
//! Entry and exit: no lock held. The queue lock is held only between lookup and sleep, and
//! again after waking to dequeue the sleeper.

use super::store::{Message, Selector};
use super::{QueueState, RecvWake, SleepingReceiver, SleepingSender};
use crate::ipc::consts::{IPC_NOWAIT, MSG_COPY, MSG_EXCEPT, MSG_NOERROR};
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::perm::{PERM_READ, PERM_WRITE};
use crate::wait::{WaitCtx, Waiter};
use crate::{Cred, Errno, Result};
use std::sync::Arc;

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
        let size = text.len() as u64;
        if size > self.limits.msgmax().max(0) as u64 || msqid < 0 {
            return Err(Errno::EINVAL);
        }
        if mtype < 1 {
            return Err(Errno::EINVAL);
        }
        let q = self.msg.registry.lookup(msqid)?;
        let mut st = q.lock();
        loop {
            st.perm.check(cred, PERM_WRITE)?;
            if st.deleted {
                return Err(Errno::EIDRM);
            }
            if st.fits(size) {
                break;
            }
            if flags & IPC_NOWAIT != 0 {
                return Err(Errno::EAGAIN);
            }
            let waiter = Waiter::new();
            st.senders.push_back(SleepingSender {
                waiter: waiter.clone(),
                size,
            });
            drop(st);
            let woke = waiter.sleep(ctx);
            st = q.lock();
            if woke.is_err() {
                waiter.abort();
            }
            st.senders.retain(|s| !Arc::ptr_eq(&s.waiter, &waiter));
            if woke.is_err() || ctx.interrupted() {
                return Err(Errno::EINTR);
            }
        }
        st.lspid = cred.tgid;
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
        Ok(())
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
        if msqid < 0 || maxsize < 0 {
            return Err(Errno::EINVAL);
        }
        let copy = flags & MSG_COPY != 0;
        if copy && (flags & MSG_EXCEPT != 0 || flags & IPC_NOWAIT == 0) {
            return Err(Errno::EINVAL);
        }
        // MSG_COPY's buffer is capped at msgmax when the call starts (`prepare_copy`).
        let copy_cap = maxsize.min(i64::from(self.limits.msgmax()));
        let selector = Selector::from_call(msgtyp, copy, flags & MSG_EXCEPT != 0);
        let noerror = flags & MSG_NOERROR != 0;
        let q = self.msg.registry.lookup(msqid)?;
        let truncate = |(mtype, mut text): (i64, Vec<u8>)| {
            text.truncate(usize::try_from(maxsize).unwrap_or(usize::MAX));
            (mtype, text)
        };
        loop {
            let mut st = q.lock();
            st.perm.check(cred, PERM_READ)?;
            if st.deleted {
                return Err(Errno::EIDRM);
            }
            if let Some(seq) = st.messages.select(selector) {
                let msg = st.messages.get(seq).expect("selected message exists");
                let len = msg.text.len() as i64;
                if maxsize < len && !noerror {
                    return Err(Errno::E2BIG);
                }
                if copy {
                    // `copy_msg` refuses a message larger than the copy buffer with EINVAL
                    // (reachable with MSG_NOERROR, or when msgmax shrank).
                    if copy_cap < len {
                        return Err(Errno::EINVAL);
                    }
                    return Ok((msg.mtype, msg.text.clone()));
                }
                let msg = st
                    .messages
                    .remove_head(seq)
                    .expect("selected message exists");
                st.cbytes -= msg.text.len() as u64;
                st.rtime = self.now();
                st.lrpid = cred.tgid;
                self.msg.account(-1, -len);
                st.wake_senders_that_fit();
                return Ok(truncate((msg.mtype, msg.text)));
            }
            if flags & IPC_NOWAIT != 0 {
                return Err(Errno::ENOMSG);
            }
            let waiter = Waiter::new();
            st.receivers.push_back(SleepingReceiver {
                waiter: waiter.clone(),
                selector,
                max_size: if noerror { i64::MAX } else { maxsize },
                tid: cred.tid,
            });
            drop(st);
            let woke = match waiter.sleep(ctx) {
                Ok(w) => Some(w),
                Err(_) => {
                    let mut st = q.lock();
                    let late = waiter.abort();
                    st.receivers.retain(|r| !Arc::ptr_eq(&r.waiter, &waiter));
                    late
                }
            };
            match woke {
                Some(RecvWake::Message(mtype, text)) => return Ok(truncate((mtype, text))),
                Some(RecvWake::Fail(e)) => return Err(e),
                Some(RecvWake::Retry) | None => {
                    if ctx.interrupted() || woke.is_none() || deadline_passed(ctx) {
                        return Err(Errno::EINTR);
                    }
                }
            }
        }
    }

    /// The queue for `msqid`, for code outside this module (tests).
    #[cfg(test)]
    pub(crate) fn msg_queue(&self, msqid: i32) -> Result<Arc<super::MsgQueue>> {
        self.msg.registry.lookup(msqid)
    }
}

fn deadline_passed(ctx: &WaitCtx<'_>) -> bool {
    ctx.deadline.is_some_and(|d| std::time::Instant::now() >= d)
}
