//! The C structures of `<sys/sem.h>`, `<sys/msg.h>` and `<sys/shm.h>` on x86-64 (glibc's
//! layouts, the same as the kernel's `*64_ds`), written field by field into byte buffers.
//! Reserved fields are zero, as the kernel leaves them.

use uipc::ipc::msg::{MsgInfo, MsqidDs};
use uipc::ipc::sem::{SemInfo, SemidDs};
use uipc::ipc::shm::{ShmInfo, ShmUsage, ShmidDs};
use uipc::ipc::IpcPermStat;

/// `sizeof(struct semid_ds)`.
pub const SEMID_DS: usize = 104;
/// `sizeof(struct msqid_ds)`.
pub const MSQID_DS: usize = 120;
/// `sizeof(struct shmid_ds)`.
pub const SHMID_DS: usize = 112;
/// Where `struct ipc_perm`'s uid, gid and mode are (IPC_SET reads these).
pub const PERM_UID: usize = 4;
/// Offset of `ipc_perm.gid`.
pub const PERM_GID: usize = 8;
/// Offset of `ipc_perm.mode`.
pub const PERM_MODE: usize = 20;
/// Offset of `msqid_ds.msg_qbytes`.
pub const MSG_QBYTES: usize = 88;

fn put(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

fn perm(b: &mut [u8], p: &IpcPermStat) {
    put(b, 0, &p.key.to_le_bytes());
    put(b, 4, &p.uid.to_le_bytes());
    put(b, 8, &p.gid.to_le_bytes());
    put(b, 12, &p.cuid.to_le_bytes());
    put(b, 16, &p.cgid.to_le_bytes());
    put(b, 20, &p.mode.to_le_bytes());
    put(b, 24, &(p.seq as u16).to_le_bytes());
}

/// `struct semid_ds`.
pub fn semid_ds(ds: &SemidDs) -> Vec<u8> {
    let mut b = vec![0u8; SEMID_DS];
    perm(&mut b, &ds.perm);
    put(&mut b, 48, &ds.otime.to_le_bytes());
    put(&mut b, 64, &ds.ctime.to_le_bytes());
    put(&mut b, 80, &ds.nsems.to_le_bytes());
    b
}

/// `struct seminfo`.
pub fn seminfo(i: &SemInfo) -> Vec<u8> {
    [
        i.semmap, i.semmni, i.semmns, i.semmnu, i.semmsl, i.semopm, i.semume, i.semusz, i.semvmx,
        i.semaem,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect()
}

/// `struct msqid_ds`.
pub fn msqid_ds(ds: &MsqidDs) -> Vec<u8> {
    let mut b = vec![0u8; MSQID_DS];
    perm(&mut b, &ds.perm);
    put(&mut b, 48, &ds.stime.to_le_bytes());
    put(&mut b, 56, &ds.rtime.to_le_bytes());
    put(&mut b, 64, &ds.ctime.to_le_bytes());
    put(&mut b, 72, &ds.cbytes.to_le_bytes());
    put(&mut b, 80, &ds.qnum.to_le_bytes());
    put(&mut b, 88, &ds.qbytes.to_le_bytes());
    put(&mut b, 96, &ds.lspid.to_le_bytes());
    put(&mut b, 100, &ds.lrpid.to_le_bytes());
    b
}

/// `struct msginfo`.
pub fn msginfo(i: &MsgInfo) -> Vec<u8> {
    let mut b: Vec<u8> = [
        i.msgpool, i.msgmap, i.msgmax, i.msgmnb, i.msgmni, i.msgssz, i.msgtql,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect();
    b.extend_from_slice(&i.msgseg.to_le_bytes());
    b.resize(32, 0);
    b
}

/// `struct shmid_ds`.
pub fn shmid_ds(ds: &ShmidDs) -> Vec<u8> {
    let mut b = vec![0u8; SHMID_DS];
    perm(&mut b, &ds.perm);
    put(&mut b, 48, &ds.segsz.to_le_bytes());
    put(&mut b, 56, &ds.atime.to_le_bytes());
    put(&mut b, 64, &ds.dtime.to_le_bytes());
    put(&mut b, 72, &ds.ctime.to_le_bytes());
    put(&mut b, 80, &ds.cpid.to_le_bytes());
    put(&mut b, 84, &ds.lpid.to_le_bytes());
    put(&mut b, 88, &ds.nattch.to_le_bytes());
    b
}

/// `struct shminfo` (IPC_INFO).
pub fn shminfo(i: &ShmInfo) -> Vec<u8> {
    let mut b: Vec<u8> = [i.shmmax, i.shmmin, i.shmmni, i.shmseg, i.shmall]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    b.resize(72, 0);
    b
}

/// `struct shm_info` (SHM_INFO).
pub fn shm_info(u: &ShmUsage) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    put(&mut b, 0, &u.used_ids.to_le_bytes());
    for (k, v) in [
        u.shm_tot,
        u.shm_rss,
        u.shm_swp,
        u.swap_attempts,
        u.swap_successes,
    ]
    .iter()
    .enumerate()
    {
        put(&mut b, 8 + 8 * k, &v.to_le_bytes());
    }
    b
}
