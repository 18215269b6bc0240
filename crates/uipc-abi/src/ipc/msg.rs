//! Message queues: `struct msqid64_ds`, the fields IPC_SET reads, and `struct msginfo`.

use super::IpcPermStat;

/// `struct msqid64_ds` as IPC_STAT and MSG_STAT fill it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MsqidDs {
    /// Owner, creator, mode, key and sequence number.
    pub perm: IpcPermStat,
    /// Time of the last msgsnd (0 = never).
    pub stime: i64,
    /// Time of the last msgrcv (0 = never).
    pub rtime: i64,
    /// Time of creation or the last IPC_SET.
    pub ctime: i64,
    /// Bytes queued (`msg_cbytes`).
    pub cbytes: u64,
    /// Messages queued (`msg_qnum`).
    pub qnum: u64,
    /// Byte (and message count) limit (`msg_qbytes`).
    pub qbytes: u64,
    /// Pid of the last msgsnd.
    pub lspid: i32,
    /// Pid of the last msgrcv.
    pub lrpid: i32,
}

/// The fields IPC_SET reads from the caller's `msqid_ds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsqidSet {
    /// New owner uid.
    pub uid: u32,
    /// New owner gid.
    pub gid: u32,
    /// New permission bits (low 9 kept).
    pub mode: u32,
    /// New `msg_qbytes`.
    pub qbytes: u64,
}

/// `struct msginfo` as IPC_INFO and MSG_INFO fill it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgInfo {
    /// IPC_INFO: MSGPOOL. MSG_INFO: queues in use.
    pub msgpool: i32,
    /// IPC_INFO: MSGMAP. MSG_INFO: messages queued in the namespace.
    pub msgmap: i32,
    /// msgmax.
    pub msgmax: i32,
    /// msgmnb.
    pub msgmnb: i32,
    /// msgmni.
    pub msgmni: i32,
    /// MSGSSZ.
    pub msgssz: i32,
    /// IPC_INFO: MSGTQL. MSG_INFO: bytes queued in the namespace.
    pub msgtql: i32,
    /// MSGSEG.
    pub msgseg: u16,
}
