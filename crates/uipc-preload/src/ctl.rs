//! What msgctl, shmctl and semctl share: IPC_SET's fields read from the caller's `*id_ds`, and
//! the daemon's answer, whose `*_STAT`/`*_INFO` structure is written back to the caller's
//! buffer in C layout ([`crate::abi`]).
//!
//! Nothing here allocates (the structures are stack arrays).

use crate::abi;
use crate::conn::{call, check, enabled};
use crate::guard::guard;
use crate::user::{copy_in_to, copy_out, u32_at, u64_at};
use libc::{c_int, c_long, c_void};
use uipc::ipc::consts::IPC_SET;
use uipc::ipc::msg::MsqidSet;
use uipc::ipc::shm::ShmSet;
use uipc::Errno;
use uipc_proto::{Request, Response, SemArg};

/// msgctl and shmctl (`sys`, for the kernel's own call while the library is off): through the
/// daemon, the request `request` makes of the IPC_SET structure ([`ipc_set_ds`], `N` bytes at
/// `buf`), and its answer as [`reply`] gives it.
pub fn call_ctl<const N: usize>(
    sys: c_long,
    id: c_int,
    cmd: c_int,
    buf: *mut c_void,
    request: impl FnOnce(Option<SetDs<N>>) -> Request,
) -> c_int {
    if !enabled() {
        // SAFETY: the kernel's own call with the caller's arguments.
        return unsafe { libc::syscall(sys, id, cmd, buf) } as c_int;
    }
    let buf = buf as usize;
    guard(move || reply(call(&request(ipc_set_ds::<N>(cmd, buf)))?.0, buf)) as c_int
}

/// What IPC_SET reads from the caller's `*id_ds` of `N` bytes: the `ipc_perm` fields it
/// changes, and the whole structure (msgctl takes `msg_qbytes` from it too).
pub struct SetDs<const N: usize> {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub ds: [u8; N],
}

impl SetDs<{ abi::MSQID_DS }> {
    /// msgctl's IPC_SET values.
    pub fn msqid_set(self) -> MsqidSet {
        let qbytes = u64_at(&self.ds, abi::MSG_QBYTES);
        let (uid, gid, mode) = (self.uid, self.gid, self.mode);
        MsqidSet {
            uid,
            gid,
            mode,
            qbytes,
        }
    }
}

impl SetDs<{ abi::SHMID_DS }> {
    /// shmctl's IPC_SET values.
    pub fn shm_set(self) -> ShmSet {
        let (uid, gid, mode) = (self.uid, self.gid, self.mode);
        ShmSet { uid, gid, mode }
    }
}

impl SetDs<{ abi::SEMID_DS }> {
    /// semctl's IPC_SET values.
    pub fn sem_arg(self) -> SemArg {
        let (uid, gid, mode) = (self.uid, self.gid, self.mode);
        SemArg::Set { uid, gid, mode }
    }
}

/// The caller's `*id_ds` at `buf` for IPC_SET; `None` for another command, or when `buf`
/// cannot be read (the engine then answers IPC_SET with EFAULT, as Linux does).
pub fn ipc_set_ds<const N: usize>(cmd: c_int, buf: usize) -> Option<SetDs<N>> {
    let mut ds = [0u8; N];
    (cmd == IPC_SET && copy_in_to(buf, &mut ds).is_ok()).then(|| SetDs {
        uid: u32_at(&ds, abi::PERM_UID),
        gid: u32_at(&ds, abi::PERM_GID),
        mode: u32_at(&ds, abi::PERM_MODE),
        ds,
    })
}

/// A `*ctl` call's answer: its return value, with the structure a `*_STAT`, `*_INFO` or
/// SHM_INFO answer carries written to `buf` first (EFAULT if it cannot be).
pub fn reply(resp: Response, buf: usize) -> Result<i64, Errno> {
    let ret = match check(resp)? {
        Response::Ret(v) => return Ok(v),
        Response::SemStat { ret, ds } => copy_out(buf, &abi::semid_ds(&ds)).map(|()| ret),
        Response::SemInfo { ret, info } => copy_out(buf, &abi::seminfo(&info)).map(|()| ret),
        Response::MsgStat { ret, ds } => copy_out(buf, &abi::msqid_ds(&ds)).map(|()| ret),
        Response::MsgInfo { ret, info } => copy_out(buf, &abi::msginfo(&info)).map(|()| ret),
        Response::ShmStat { ret, ds } => copy_out(buf, &abi::shmid_ds(&ds)).map(|()| ret),
        Response::ShmInfo { ret, info } => copy_out(buf, &abi::shminfo(&info)).map(|()| ret),
        Response::ShmUsage { ret, usage } => copy_out(buf, &abi::shm_info(&usage)).map(|()| ret),
        _ => return Err(Errno::from_raw(libc::EIO)),
    }?;
    Ok(i64::from(ret))
}
