//! `-l` (the limits, from each type's IPC_INFO), `-u` (the usage, from MSG_INFO, SHM_INFO and
//! SEM_INFO) and `-i ID` (one object in full), in util-linux's words.

use super::fmt::{alt_octal, size, time_col, Unit};
use uipc::ipc::msg::{MsgInfo, MsqidDs};
use uipc::ipc::sem::{SemInfo, SemidDs};
use uipc::ipc::shm::{ShmInfo, ShmUsage, ShmidDs};

const PAGE: u64 = 4096;

/// `-l` for message queues.
pub fn msg_limits(i: &MsgInfo, unit: Unit) -> String {
    let u = if unit == Unit::Default {
        Unit::Bytes
    } else {
        unit
    };
    format!(
        "------ Messages Limits --------\nmax queues system wide = {}\n",
        i.msgmni
    ) + &size(u, Some("max size of message"), i.msgmax as u64, "\n", 0)
        + &size(
            u,
            Some("default max size of queue"),
            i.msgmnb as u64,
            "\n",
            0,
        )
}

/// `-l` for shared memory.
pub fn shm_limits(i: &ShmInfo, unit: Unit) -> String {
    let mut s = format!(
        "------ Shared Memory Limits --------\nmax number of segments = {}\n",
        i.shmmni
    );
    let seg_unit = if unit == Unit::Default {
        Unit::Kb
    } else {
        unit
    };
    s += &size(seg_unit, Some("max seg size"), i.shmmax, "\n", 0);
    if matches!(unit, Unit::Default | Unit::Kb) {
        let per_page = PAGE / 1024;
        let total = i
            .shmall
            .checked_mul(per_page)
            .unwrap_or(u64::MAX - u64::MAX % per_page);
        s += &size(
            Unit::Default,
            Some("max total shared memory (kbytes)"),
            total,
            "\n",
            0,
        );
    } else {
        let total = i
            .shmall
            .checked_mul(PAGE)
            .unwrap_or(u64::MAX - u64::MAX % PAGE);
        s += &size(unit, Some("max total shared memory"), total, "\n", 0);
    }
    let min_unit = if unit == Unit::Default {
        Unit::Bytes
    } else {
        unit
    };
    s + &size(min_unit, Some("min seg size"), i.shmmin, "\n", 0)
}

/// `-l` for semaphores.
pub fn sem_limits(i: &SemInfo) -> String {
    format!(
        "------ Semaphore Limits --------\nmax number of arrays = {}\nmax semaphores per array = {}\n\
         max semaphores system wide = {}\nmax ops per semop call = {}\nsemaphore max value = {}\n",
        i.semmni, i.semmsl, i.semmns, i.semopm, i.semvmx
    )
}

/// `-u` for message queues (MSG_INFO).
pub fn msg_status(i: &MsgInfo, unit: Unit) -> String {
    let end = if unit == Unit::Default {
        " bytes\n"
    } else {
        "\n"
    };
    format!(
        "------ Messages Status --------\nallocated queues = {}\nused headers = {}\n",
        i.msgpool, i.msgmap
    ) + &size(unit, Some("used space"), i.msgtql as u64, end, 0)
}

/// `-u` for shared memory (SHM_INFO).
pub fn shm_status(u: &ShmUsage) -> String {
    format!(
        "------ Shared Memory Status --------\nsegments allocated {}\npages allocated {}\n\
         pages resident  {}\npages swapped   {}\nSwap performance: {} attempts\t {} successes\n",
        u.used_ids, u.shm_tot, u.shm_rss, u.shm_swp, u.swap_attempts, u.swap_successes
    )
}

/// `-u` for semaphores (SEM_INFO).
pub fn sem_status(i: &SemInfo) -> String {
    format!(
        "------ Semaphore Status --------\nused arrays = {}\nallocated semaphores = {}\n",
        i.semusz, i.semaem
    )
}

/// The detail's closing lines: `label=time` each (ctime's 24 characters padded to 26), then a
/// blank line.
fn times_lines(times: [(&str, i64); 3]) -> String {
    let mut s = String::new();
    for (label, t) in times {
        s += &format!("{label}={}\n", time_col(t, 0, 24, 26));
    }
    s + "\n"
}

/// `-q -i ID`.
pub fn msg_detail(id: i32, ds: &MsqidDs, unit: Unit) -> String {
    let p = &ds.perm;
    let human = unit == Unit::Human;
    format!(
        "\nMessage Queue msqid={id}\nuid={}\tgid={}\tcuid={}\tcgid={}\tmode={}\n",
        p.uid,
        p.gid,
        p.cuid,
        p.cgid,
        alt_octal(p.mode)
    ) + &size(
        unit,
        Some(if human { "csize=" } else { "cbytes=" }),
        ds.cbytes,
        "\t",
        0,
    ) + &size(
        unit,
        Some(if human { "qsize=" } else { "qbytes=" }),
        ds.qbytes,
        "\t",
        0,
    ) + &format!("qnum={}\tlspid={}\tlrpid={}\n", ds.qnum, ds.lspid, ds.lrpid)
        + &times_lines([
            ("send_time", ds.stime),
            ("rcv_time", ds.rtime),
            ("change_time", ds.ctime),
        ])
}

/// `-m -i ID`.
pub fn shm_detail(id: i32, ds: &ShmidDs, unit: Unit) -> String {
    let p = &ds.perm;
    let label = if unit == Unit::Human {
        "size="
    } else {
        "bytes="
    };
    format!(
        "\nShared memory Segment shmid={id}\nuid={}\tgid={}\tcuid={}\tcgid={}\nmode={}\taccess_perms={}\n",
        p.uid,
        p.gid,
        p.cuid,
        p.cgid,
        alt_octal(p.mode),
        alt_octal(p.mode & 0o777)
    ) + &size(unit, Some(label), ds.segsz, "\t", 0)
        + &format!("lpid={}\tcpid={}\tnattch={}\n", ds.lpid, ds.cpid, ds.nattch)
        + &times_lines([
            ("att_time", ds.atime),
            ("det_time", ds.dtime),
            ("change_time", ds.ctime),
        ])
}

/// One semaphore's line of `-s -i ID`: value, ncount, zcount, pid.
pub type SemLine = [i64; 4];

/// `-s -i ID`.
pub fn sem_detail(id: i32, ds: &SemidDs, sems: &[SemLine]) -> String {
    let p = &ds.perm;
    let mut s = format!(
        "\nSemaphore Array semid={id}\nuid={}\t gid={}\t cuid={}\t cgid={}\n\
         mode={}, access_perms={}\nnsems = {}\notime = {}\nctime = {}\n",
        p.uid,
        p.gid,
        p.cuid,
        p.cgid,
        alt_octal(p.mode),
        alt_octal(p.mode & 0o777),
        ds.nsems,
        time_col(ds.otime, 0, 24, 26),
        time_col(ds.ctime, 0, 24, 26)
    );
    s += &format!(
        "{:<10} {:<10} {:<10} {:<10} {:<10}\n",
        "semnum", "value", "ncount", "zcount", "pid"
    );
    for (n, [val, ncnt, zcnt, pid]) in sems.iter().enumerate() {
        s += &format!("{n:<10} {val:<10} {ncnt:<10} {zcnt:<10} {pid:<10}\n");
    }
    s + "\n"
}
