//! msgctl(2): IPC_STAT, MSG_STAT, MSG_STAT_ANY, IPC_SET, IPC_RMID, IPC_INFO, MSG_INFO
//! (`ksys_msgctl`, `msgctl_stat`, `msgctl_down`, `msgctl_info`, `freeque` in `ipc/msg.c`).
//!
//! Order: `msqid < 0` or `cmd < 0` is EINVAL before anything; an unknown command is EINVAL,
//! and that includes any command carrying IPC_64, as on x86-64 (see `consts::IPC_64`).
//!
//! Locks: IPC_SET and IPC_RMID take the registry write lock, look the id up (EINVAL), lock
//! the queue and check ownership (EPERM). The stat commands take no registry lock (MSG_STAT
//! looks up by index); the info commands take it for reading. Removal marks the queue
//! deleted and wakes every sleeper under the queue lock, then unpublishes the id while
//! still holding the registry write lock.

use super::RecvWake;
use crate::ipc::consts::{
    IPC_INFO, IPC_RMID, IPC_SET, IPC_STAT, MSGMAP, MSGPOOL, MSGSEG, MSGSSZ, MSGTQL, MSG_INFO,
    MSG_STAT, MSG_STAT_ANY,
};
use crate::ipc::namespace::IpcNamespace;
use crate::ipc::perm::PERM_READ;
use crate::sync::Ordering;
use crate::{Cap, Cred, Errno, IpcId, Result};

pub use uipc_abi::ipc::msg::{MsgInfo, MsqidDs, MsqidSet};

/// msgctl's fourth argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgctlArg {
    /// No buffer (IPC_RMID), or an output buffer (the stat and info commands).
    None,
    /// IPC_SET's input.
    Set(MsqidSet),
}

/// What msgctl returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsgctlOut {
    /// IPC_SET, IPC_RMID: returns 0.
    Done,
    /// IPC_STAT (returns 0) or MSG_STAT / MSG_STAT_ANY (return `id`).
    Stat {
        /// The call's return value.
        ret: i32,
        /// The filled buffer.
        ds: MsqidDs,
    },
    /// IPC_INFO / MSG_INFO: returns the highest index in use (0 when empty).
    Info {
        /// The call's return value.
        max_idx: i32,
        /// The filled buffer.
        info: MsgInfo,
    },
}

impl MsgctlOut {
    /// The value the system call returns.
    pub fn ret(&self) -> i32 {
        match self {
            MsgctlOut::Done => 0,
            MsgctlOut::Stat { ret, .. } => *ret,
            MsgctlOut::Info { max_idx, .. } => *max_idx,
        }
    }
}

impl IpcNamespace {
    /// msgctl(2) with every command of the man page; see the module doc for the order.
    pub fn msgctl(&self, cred: &Cred, msqid: i32, cmd: i32, arg: MsgctlArg) -> Result<MsgctlOut> {
        if msqid < 0 || cmd < 0 {
            return Err(Errno::EINVAL);
        }
        // The fast path's queues come back into the engine first (MSG_INFO's totals count
        // every queue's messages; MSG_STAT names an index).
        let _inside = match cmd {
            MSG_INFO => self.msg_fast_enter_all(),
            IPC_INFO => Vec::new(),
            MSG_STAT | MSG_STAT_ANY => {
                let reg = &self.msg.registry;
                vec![self.msg_fast_enter_index(reg.layout().idx(IpcId::new(msqid)).get())]
            }
            _ => vec![self.msg_fast_enter(msqid)],
        };
        let id = IpcId::new(msqid);
        match cmd {
            IPC_INFO | MSG_INFO => Ok(self.msgctl_info(cmd)),
            IPC_STAT | MSG_STAT | MSG_STAT_ANY => self.msgctl_stat(cred, id, cmd),
            IPC_SET => match arg {
                MsgctlArg::Set(set) => self.msgctl_down(cred, id, Some(set)),
                MsgctlArg::None => Err(Errno::EFAULT),
            },
            IPC_RMID => self.msgctl_down(cred, id, None),
            _ => Err(Errno::EINVAL),
        }
    }

    fn msgctl_info(&self, cmd: i32) -> MsgctlOut {
        let l = &self.limits;
        let mut info = MsgInfo {
            msgmax: l.msgmax(),
            msgmnb: l.msgmnb(),
            msgmni: l.msgmni(),
            msgssz: MSGSSZ,
            msgseg: MSGSEG as u16,
            ..MsgInfo::default()
        };
        let rs = self.msg.registry.read();
        let clamp = |v: i64| v.clamp(0, i64::from(i32::MAX)) as i32;
        if cmd == MSG_INFO {
            info.msgpool = rs.in_use() as i32;
            info.msgmap = clamp(self.msg.total_messages.load(Ordering::Relaxed));
            info.msgtql = clamp(self.msg.total_bytes.load(Ordering::Relaxed));
        } else {
            info.msgpool = MSGPOOL;
            info.msgmap = MSGMAP;
            info.msgtql = MSGTQL;
        }
        MsgctlOut::Info {
            max_idx: rs.max_idx(),
            info,
        }
    }

    /// IPC_STAT of queue `id`; MSG_STAT and MSG_STAT_ANY take the index part of the number.
    fn msgctl_stat(&self, cred: &Cred, id: IpcId, cmd: i32) -> Result<MsgctlOut> {
        let reg = &self.msg.registry;
        let q = if cmd == IPC_STAT {
            reg.lookup(id)?
        } else {
            // MSG_STAT takes an index; Linux masks whatever it gets down to one.
            reg.lookup_index(reg.layout().idx(id))?
        };
        let st = q.lock();
        if cmd != MSG_STAT_ANY {
            st.perm.check(cred, PERM_READ)?;
        }
        if st.deleted {
            return Err(Errno::EIDRM);
        }
        let id = q.header.id();
        let ds = MsqidDs {
            perm: st.perm.stat(q.header.key().get(), reg.layout().seq(id)),
            stime: st.stime,
            rtime: st.rtime,
            ctime: st.ctime,
            cbytes: st.cbytes,
            qnum: st.messages.len() as u64,
            qbytes: st.qbytes,
            lspid: st.lspid,
            lrpid: st.lrpid,
        };
        let ret = if cmd == IPC_STAT { 0 } else { id.get() };
        Ok(MsgctlOut::Stat { ret, ds })
    }

    /// IPC_SET (`set` is `Some`) or IPC_RMID.
    fn msgctl_down(&self, cred: &Cred, id: IpcId, set: Option<MsqidSet>) -> Result<MsgctlOut> {
        let reg = &self.msg.registry;
        let mut rs = reg.write();
        let q = reg.lookup(id)?;
        let mut st = q.lock_valid().map_err(|_| Errno::EINVAL)?;
        st.perm.check_owner(cred)?;
        match set {
            Some(set) => {
                let msgmnb = self.limits.msgmnb().max(0) as u64;
                if set.qbytes > msgmnb && !cred.has_cap(Cap::SYS_RESOURCE) {
                    return Err(Errno::EPERM);
                }
                st.perm.set(set.uid, set.gid, set.mode)?;
                reg.set_key_perm(&mut rs, &q.header, &st.perm);
                st.qbytes = set.qbytes;
                st.ctime = self.now();
                // Receivers re-check (their permission may be gone); senders may fit now.
                for r in std::mem::take(&mut st.receivers) {
                    r.waiter.complete(RecvWake::Retry);
                }
                st.wake_senders_that_fit();
            }
            None => {
                st.deleted = true;
                for r in std::mem::take(&mut st.receivers) {
                    r.waiter.complete(RecvWake::Fail(Errno::EIDRM));
                }
                for s in std::mem::take(&mut st.senders) {
                    s.waiter.complete(());
                }
                let (count, bytes) = st.messages.clear();
                st.cbytes = 0;
                self.msg.account(-(count as i64), -(bytes as i64));
                drop(st);
                reg.remove(&mut rs, &q);
            }
        }
        Ok(MsgctlOut::Done)
    }
}
