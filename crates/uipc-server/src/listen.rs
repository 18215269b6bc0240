//! The listening socket, made so that no client can slip through a gap.
//!
//! - Permissions: the socket's inode takes its mode from the socket (`unix_bind` uses the
//!   socket inode's mode less the umask), so the socket is `fchmod`ed to its final mode
//!   before `bind`: the path never exists with more permission than asked, whatever the
//!   umask. A `chmod` after `bind` then restores bits the umask took away (never more than
//!   asked).
//! - Credentials: SO_PASSCRED is set on the listening socket before `listen`, so every
//!   accepted socket has it from the start and even a frame sent before the accept carries
//!   the sender's credentials.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use uipc_proto::transport::set_sockopt;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A listening Unix stream socket at `path` with mode `mode` and SO_PASSCRED.
pub fn bind_listener(path: &Path, mode: libc::mode_t) -> io::Result<UnixListener> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: zeroed sockaddr_un is a valid empty address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: creates a socket; the result is checked and owned below.
    let raw =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let on: libc::c_int = 1;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    set_sockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PASSCRED, &on)?;
    // SAFETY: system calls on our own socket with live arguments of the stated sizes.
    unsafe {
        cvt(libc::fchmod(fd.as_raw_fd(), mode))?;
        cvt(libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        ))?;
    }
    let cpath = CString::new(bytes).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path; a listen on our own bound socket.
    unsafe {
        cvt(libc::chmod(cpath.as_ptr(), mode))?;
        cvt(libc::listen(fd.as_raw_fd(), libc::SOMAXCONN))?;
    }
    Ok(UnixListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_socket_gets_exactly_its_mode_and_passes_credentials() {
        let dir = std::env::temp_dir().join(format!("uipc-listen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let l = bind_listener(&path, 0o600).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o600);
        let mut on: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: reads an int option into live space.
        let r = unsafe {
            libc::getsockopt(
                l.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&mut on as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((r, on), (0, 1));
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
