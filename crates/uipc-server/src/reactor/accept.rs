//! Accepting connections for the event loop (a part of [`super`]): each accepted socket is
//! admitted by its user's books and the descriptor reserve, or closed at once; at the
//! descriptor limit a spare descriptor is closed to accept and close one waiting connection.
//! At most [`super::ACCEPTS_PER_TURN`] per turn.

use super::{Reactor, ACCEPTS_PER_TURN};
use crate::conn::{Conn, Queue};
use crate::limits::{open_spare, HELLO_TIMEOUT};
use crate::sync::lock;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uipc_proto::transport::set_sockopt;

/// The uid of the peer of a connected socket.
fn peer_uid(fd: RawFd) -> Option<u32> {
    // SAFETY: zeroed ucred is valid output space.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: reads the peer credentials into live space of the stated size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// How long a worker may wait for a client to make room for its reply before the connection
/// is given up (a client that sends without reading would otherwise hold workers).
const SEND_TIMEOUT: libc::timeval = libc::timeval {
    tv_sec: 10,
    tv_usec: 0,
};

/// Credentials on every frame, and the send timeout.
fn prepare_socket(fd: RawFd) {
    // Errors are ignored: the connection goes on with the socket as it is.
    let on: libc::c_int = 1;
    let _ = set_sockopt(fd, libc::SOL_SOCKET, libc::SO_PASSCRED, &on);
    let _ = set_sockopt(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &SEND_TIMEOUT);
}

impl Reactor {
    pub(super) fn accept_all(&self, jobs: &Arc<impl Queue + 'static>) {
        let Some(listener) = self.listener.get() else {
            return;
        };
        for _ in 0..ACCEPTS_PER_TURN {
            // SAFETY: accepts on our live listening socket; no address is asked for.
            let raw = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if raw < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                    Some(libc::EMFILE) | Some(libc::ENFILE) => return self.shed(listener),
                    _ => {
                        // Out of memory: let clients wait in the backlog rather than spin
                        // on the still-readable listener.
                        eprintln!("uipc serve: accept: {}", io::Error::last_os_error());
                        std::thread::sleep(Duration::from_millis(50));
                        return;
                    }
                }
            }
            // SAFETY: a fresh connected socket owned by nobody else.
            let stream = unsafe { UnixStream::from_raw_fd(raw) };
            let budget = if (raw as u64) < self.fd_ceiling {
                peer_uid(raw).and_then(|uid| Some((uid, self.users.admit(uid)?)))
            } else {
                None
            };
            let Some((uid, budget)) = budget else {
                continue;
            };
            prepare_socket(raw);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let conn = Conn::new(id, stream, jobs, uid, budget);
            lock(&self.conns).insert(id, conn.clone());
            lock(&self.hello_due).push_back((Instant::now() + HELLO_TIMEOUT, id));
            if self
                .add_to(&self.slow, conn.fd(), id, super::CONN_EVENTS)
                .is_err()
            {
                self.remove(&conn);
            }
        }
    }

    /// Out of descriptors: closes the spare one to accept a waiting connection and close it
    /// (its client sees end of file rather than a hang), then takes the spare back.
    fn shed(&self, listener: &UnixListener) {
        let mut spare = lock(&self.spare);
        *spare = None;
        // SAFETY: accepts on our live listening socket; the descriptor is closed at once.
        unsafe {
            let raw = libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            );
            if raw >= 0 {
                libc::close(raw);
            }
        }
        *spare = open_spare();
    }
}
