//! `/proc/sysvipc/shm` (`ipc/shm.c`: `sysvipc_shm_proc_show`), 64-bit format.
//!
//! One header line, then one row per segment in increasing index order: key as signed
//! decimal, perms `%4o` including SHM_DEST and SHM_LOCKED, size `%21lu`, two spaces before
//! nattch, rss and swap in bytes (`%21lu`). The listing holds the registry read lock while it
//! collects the segments, then each segment's lock while its row is formatted.

use super::super::consts::PAGE_SIZE;
use crate::ipc::IpcNamespace;
use std::fmt::Write;

/// The header line of the 64-bit format.
pub const SHM_PROC_HEADER: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n";

/// The values of one row.
struct ShmRow {
    key: i32,
    id: i32,
    mode: u32,
    size: u64,
    cpid: i32,
    lpid: i32,
    nattch: u64,
    ids: [u32; 4],
    times: [i64; 3],
    rss_pages: u64,
    swap_pages: u64,
}

/// Formats one row exactly as the kernel does.
fn format_row(out: &mut String, r: &ShmRow) {
    let [uid, gid, cuid, cgid] = r.ids;
    let [atime, dtime, ctime] = r.times;
    let _ = writeln!(
        out,
        "{:>10} {:>10}  {:>4o} {:>21} {:>5} {:>5}  {:>5} {:>5} {:>5} {:>5} {:>5} {:>10} {:>10} {:>10} {:>21} {:>21}",
        r.key,
        r.id,
        r.mode,
        r.size,
        r.cpid as u32,
        r.lpid as u32,
        r.nattch,
        uid,
        gid,
        cuid,
        cgid,
        atime as u64,
        dtime as u64,
        ctime as u64,
        r.rss_pages * PAGE_SIZE,
        r.swap_pages * PAGE_SIZE,
    );
}

impl IpcNamespace {
    /// `/proc/sysvipc/shm`, byte for byte as 64-bit Linux prints it.
    pub fn proc_sysvipc_shm(&self) -> String {
        self.proc_sysvipc_shm_as(&|pid| pid)
    }

    /// [`proc_sysvipc_shm`](Self::proc_sysvipc_shm) with cpid and lpid as `pid` numbers them
    /// (a reader in another pid namespace); `pid` runs after the segment's lock is released.
    pub fn proc_sysvipc_shm_as(&self, pid: &dyn Fn(i32) -> i32) -> String {
        let mut out = String::from(SHM_PROC_HEADER);
        for seg in self.shm.registry.snapshot() {
            let s = seg.lock();
            if s.deleted {
                continue;
            }
            let p = &s.perm;
            let row = ShmRow {
                key: seg.header.key().get(),
                id: seg.id(),
                mode: p.mode,
                size: seg.size,
                cpid: s.cpid,
                lpid: s.lpid,
                nattch: s.nattch,
                ids: [p.uid, p.gid, p.cuid, p.cgid],
                times: [s.atime, s.dtime, s.ctime],
                rss_pages: seg.memory.resident_pages(),
                swap_pages: seg.memory.swapped_pages(),
            };
            drop(s);
            let row = ShmRow {
                cpid: pid(row.cpid),
                lpid: pid(row.lpid),
                ..row
            };
            format_row(&mut out, &row);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_the_host_file() {
        let host = std::fs::read_to_string("/proc/sysvipc/shm").expect("procfs");
        assert_eq!(host.lines().next().unwrap(), SHM_PROC_HEADER.trim_end());
    }

    #[test]
    fn row_is_byte_identical_to_a_host_row() {
        // SAFETY: plain integer arguments; the segment is private and removed below.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 5000, 0o640) };
        assert!(id >= 0, "host shmget");
        let host = std::fs::read_to_string("/proc/sysvipc/shm").expect("procfs");
        // SAFETY: as above; a NULL buffer is fine for IPC_RMID.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        let line = host
            .lines()
            .skip(1)
            .find(|l| l.split_whitespace().nth(1) == Some(&id.to_string()))
            .expect("row of the new segment");
        let c: Vec<i64> = line
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        let mut out = String::new();
        format_row(
            &mut out,
            &ShmRow {
                key: c[0] as i32,
                id: c[1] as i32,
                mode: u32::from_str_radix(&c[2].to_string(), 8).unwrap(),
                size: c[3] as u64,
                cpid: c[4] as i32,
                lpid: c[5] as i32,
                nattch: c[6] as u64,
                ids: [c[7] as u32, c[8] as u32, c[9] as u32, c[10] as u32],
                times: [c[11], c[12], c[13]],
                rss_pages: c[14] as u64 / PAGE_SIZE,
                swap_pages: c[15] as u64 / PAGE_SIZE,
            },
        );
        assert_eq!(out, format!("{line}\n"));
    }

    #[test]
    fn row_matches_kernel_format_for_known_values() {
        let mut out = String::new();
        format_row(
            &mut out,
            &ShmRow {
                key: 0xdeadbeef_u32 as i32,
                id: 32769,
                mode: 0o1640,
                size: 5000,
                cpid: 812,
                lpid: 9,
                nattch: 2,
                ids: [0, 0, 4242, 4343],
                times: [1795359960, 0, 1795359961],
                rss_pages: 2,
                swap_pages: 0,
            },
        );
        // Built column by column from the kernel's format string.
        let expect = format!(
            "{}{}{}{}{}\n",
            "-559038737      32769  1640                  5000   812     9      2",
            "     0     0  4242  4343",
            " 1795359960          0 1795359961",
            "                  8192",
            "                     0"
        );
        assert_eq!(out, expect);
    }
}
