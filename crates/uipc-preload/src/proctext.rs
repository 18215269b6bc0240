//! The text of a `/proc` view: the daemon's (with the kernel's own `/proc/locks` lines after
//! uipc's), and the memfd that holds it. Used by the views opened for reading
//! (`procview.rs`) and for writing (`procwrite.rs`).

use crate::kernel::kernel_sys;
use libc::c_int;
use std::ffi::CStr;
use uipc::ipc::Sysctl;
use uipc::Errno;
use uipc_proto::{ProcFile, ProcRequest, Request, Response};

/// The daemon's text of `file`.
pub(crate) fn fetch(file: ProcFile) -> Result<Vec<u8>, Errno> {
    match crate::conn::call(&Request::Proc(ProcRequest::Read(file)))?.0 {
        Response::Text(t) if file == ProcFile::Locks => Ok(with_kernel_locks(t)),
        Response::Text(t) => Ok(t),
        Response::Error(e) => Err(Errno::from_raw(e)),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}

/// uipc's `/proc/locks` lines, then the kernel's with their ordinals moved past uipc's.
fn with_kernel_locks(mut ours: Vec<u8>) -> Vec<u8> {
    let ordinal = |line: &[u8]| -> Option<(u64, usize)> {
        let colon = line.iter().position(|&b| b == b':')?;
        let n = std::str::from_utf8(&line[..colon]).ok()?.parse().ok()?;
        Some((n, colon))
    };
    let last = ours
        .split(|&b| b == b'\n')
        .filter_map(ordinal)
        .map(|(n, _)| n)
        .max()
        .unwrap_or(0);
    let kernel = read_kernel_file(c"/proc/locks").unwrap_or_default();
    for line in kernel.split_inclusive(|&b| b == b'\n') {
        match ordinal(line) {
            Some((n, colon)) => {
                ours.extend_from_slice((n + last).to_string().as_bytes());
                ours.extend_from_slice(&line[colon..]);
            }
            None => ours.extend_from_slice(line),
        }
    }
    ours
}

/// The kernel's own file at `path`, read with system calls.
pub(crate) fn read_kernel_file(path: &CStr) -> Option<Vec<u8>> {
    let fd = kernel_sys!(
        libc::SYS_openat,
        libc::AT_FDCWD,
        path.as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC
    );
    if fd < 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = kernel_sys!(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    kernel_sys!(libc::SYS_close, fd);
    Some(out)
}

/// The mode of the kernel's file: 0644 for the sysctls root may write, 0444 for the rest
/// (`/proc/sysvipc/*`, `/proc/locks`, the `*_next_id` sysctls).
pub(crate) fn kernel_mode(file: ProcFile) -> libc::mode_t {
    match file {
        ProcFile::Sysctl(Sysctl::SemNextId | Sysctl::MsgNextId | Sysctl::ShmNextId) => 0o444,
        ProcFile::Sysctl(_) => 0o644,
        _ => 0o444,
    }
}

/// A new memfd holding `text` at offset 0, close-on-exec if `cloexec`, with file mode `mode`
/// (the kernel file's). Unless `writable` it is sealed and the descriptor returned is a
/// read-only one (reopened through `/proc/self/fd`), so that write(2) fails with EBADF and
/// F_GETFL says O_RDONLY, as for the kernel's file opened for reading.
pub(crate) fn memfd_with(
    text: &[u8],
    cloexec: bool,
    writable: bool,
    mode: libc::mode_t,
) -> Result<c_int, Errno> {
    let mut flags = libc::MFD_ALLOW_SEALING;
    if cloexec {
        flags |= libc::MFD_CLOEXEC;
    }
    let fd = kernel_sys!(libc::SYS_memfd_create, c"uipc-proc".as_ptr(), flags) as c_int;
    if fd < 0 {
        return Err(Errno::from_raw(crate::guard::errno_now()));
    }
    let mut at = 0;
    while at < text.len() {
        let n = kernel_sys!(libc::SYS_write, fd, text[at..].as_ptr(), text.len() - at);
        if n <= 0 {
            let e = crate::guard::errno_now();
            kernel_sys!(libc::SYS_close, fd);
            return Err(Errno::from_raw(e));
        }
        at += n as usize;
    }
    kernel_sys!(libc::SYS_lseek, fd, 0, libc::SEEK_SET);
    if !writable {
        let seals =
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        kernel_sys!(libc::SYS_fcntl, fd, libc::F_ADD_SEALS, seals);
    }
    kernel_sys!(libc::SYS_fchmod, fd, mode);
    if writable {
        return Ok(fd);
    }
    let path = format!("/proc/self/fd/{fd}\0");
    let flags = libc::O_RDONLY | if cloexec { libc::O_CLOEXEC } else { 0 };
    let ro = kernel_sys!(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags) as c_int;
    if ro < 0 {
        // No /proc/self: the read-write descriptor still reads the text.
        return Ok(fd);
    }
    kernel_sys!(libc::SYS_close, fd);
    Ok(ro)
}
