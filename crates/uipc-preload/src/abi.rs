//! The C structures of `<sys/sem.h>`, `<sys/msg.h>` and `<sys/shm.h>` on x86-64 (glibc's
//! layouts, the same as the kernel's `*64_ds`), written field by field into byte arrays on the
//! stack (nothing here allocates: these run in signal handlers too). Reserved fields are
//! zero, as the kernel leaves them. `struct sembuf` is read the other way
//! ([`sembufs`]).

use uipc::ipc::msg::{MsgInfo, MsqidDs};
use uipc::ipc::sem::{SemInfo, Sembuf, SemidDs};
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

/// `sizeof(struct sembuf)`: sem_num (unsigned short), sem_op and sem_flg (short).
pub const SEMBUF: usize = 6;

/// The operations in a copied array of `struct sembuf`, as they come.
pub fn sembufs(b: &[u8]) -> impl ExactSizeIterator<Item = Sembuf> + '_ {
    b.chunks_exact(SEMBUF).map(|c| {
        Sembuf::new(
            u16::from_le_bytes([c[0], c[1]]),
            i16::from_le_bytes([c[2], c[3]]),
            i16::from_le_bytes([c[4], c[5]]),
        )
    })
}

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
pub fn semid_ds(ds: &SemidDs) -> [u8; SEMID_DS] {
    let mut b = [0u8; SEMID_DS];
    perm(&mut b, &ds.perm);
    put(&mut b, 48, &ds.otime.to_le_bytes());
    put(&mut b, 64, &ds.ctime.to_le_bytes());
    put(&mut b, 80, &ds.nsems.to_le_bytes());
    b
}

/// `struct seminfo`: ten ints.
pub fn seminfo(i: &SemInfo) -> [u8; 40] {
    let mut b = [0u8; 40];
    for (k, v) in [
        i.semmap, i.semmni, i.semmns, i.semmnu, i.semmsl, i.semopm, i.semume, i.semusz, i.semvmx,
        i.semaem,
    ]
    .iter()
    .enumerate()
    {
        put(&mut b, 4 * k, &v.to_le_bytes());
    }
    b
}

/// `struct msqid_ds`.
pub fn msqid_ds(ds: &MsqidDs) -> [u8; MSQID_DS] {
    let mut b = [0u8; MSQID_DS];
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

/// `struct msginfo`: seven ints, then an unsigned short (and padding to 32 bytes).
pub fn msginfo(i: &MsgInfo) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (k, v) in [
        i.msgpool, i.msgmap, i.msgmax, i.msgmnb, i.msgmni, i.msgssz, i.msgtql,
    ]
    .iter()
    .enumerate()
    {
        put(&mut b, 4 * k, &v.to_le_bytes());
    }
    put(&mut b, 28, &i.msgseg.to_le_bytes());
    b
}

/// `struct shmid_ds`.
pub fn shmid_ds(ds: &ShmidDs) -> [u8; SHMID_DS] {
    let mut b = [0u8; SHMID_DS];
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

/// `struct shminfo` (IPC_INFO): five unsigned longs, then reserved space to 72 bytes.
pub fn shminfo(i: &ShmInfo) -> [u8; 72] {
    let mut b = [0u8; 72];
    for (k, v) in [i.shmmax, i.shmmin, i.shmmni, i.shmseg, i.shmall]
        .iter()
        .enumerate()
    {
        put(&mut b, 8 * k, &v.to_le_bytes());
    }
    b
}

/// `struct shm_info` (SHM_INFO).
pub fn shm_info(u: &ShmUsage) -> [u8; 48] {
    let mut b = [0u8; 48];
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
