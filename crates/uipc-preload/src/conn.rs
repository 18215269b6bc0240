//! The calling thread's session with the daemon.
//!
//! Each thread opens its own connection on its first call (so threads block independently)
//! and keeps it in a thread-local until it exits. The daemon's socket is `$UIPC_SOCKET`, read
//! once per program image (a program that changes it later keeps the first value).
//!
//! Fork: a child must not talk on its parent's connections (the daemon would mix the two
//! processes' replies). A `pthread_atfork` child handler bumps [`GENERATION`] (an atomic add,
//! safe right after fork); a connection made under an older generation is closed without a
//! word (if its descriptor number still names the socket) and replaced. Exec: the first connection after the library is loaded tells the daemon
//! it is a new program image ([`uipc_proto::Request::Hello`]).
//!
//! A call from a signal handler that interrupted a call on the same thread finds the
//! thread's connection busy and uses a one-off connection; so does every call of a vforked
//! child, which runs on its parent's memory ([`crate::vfork`]).
//!
//! Before each call the descriptor is checked to still be the socket (same inode): a program
//! may close descriptors it does not know about, and the number may then name its own file.

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use uipc::Errno;
use uipc_proto::client::{inode_of, Connection};
use uipc_proto::{Request, Response};

/// Bumped in every forked child.
pub static GENERATION: AtomicU64 = AtomicU64::new(0);
/// No connection made yet by this program image.
static NEW_IMAGE: AtomicBool = AtomicBool::new(true);

/// A session and what identifies its socket (inode), to recognise it after a fork.
struct Session {
    generation: u64,
    inode: u64,
    conn: Connection,
}

thread_local! {
    static CONN: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// Drops a session inherited across fork without a word to the daemon. Programs that
/// daemonize often close every descriptor after fork, and the number may now name another
/// file: the socket is closed only if the number still refers to it.
fn retire(s: Session) {
    let stream = s.conn.into_stream();
    if inode_of(stream.as_raw_fd()) == Some(s.inode) {
        drop(stream);
    } else {
        std::mem::forget(stream);
    }
}

/// `$UIPC_SOCKET` as this program image started with it (read once): without it the library
/// passes calls to the kernel.
pub fn socket_path() -> Option<&'static Path> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::var_os("UIPC_SOCKET")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    })
    .as_deref()
}

/// Whether calls go to the daemon.
pub fn enabled() -> bool {
    socket_path().is_some()
}

fn connect() -> Result<Connection, Errno> {
    let path = socket_path().ok_or(Errno::ENOSYS)?;
    let new_image = NEW_IMAGE.swap(false, Ordering::SeqCst);
    Connection::connect(path, new_image).map_err(|_| {
        if new_image {
            NEW_IMAGE.store(true, Ordering::SeqCst);
        }
        Errno::ENOSYS
    })
}

/// Sends `req` and returns the daemon's response and descriptor. A daemon that cannot be
/// reached, or that drops the connection, gives ENOSYS (as a kernel without SysV IPC).
pub fn call(req: &Request) -> Result<(Response, Option<OwnedFd>), Errno> {
    call_passing(req, None, false)
}

/// [`call`], sending descriptor `pass` with the request; with `restartable`, a wait follows
/// the interrupting handler's SA_RESTART (file-lock calls).
pub fn call_passing(
    req: &Request,
    pass: Option<std::os::fd::RawFd>,
    restartable: bool,
) -> Result<(Response, Option<OwnedFd>), Errno> {
    let interruptible = req.may_block();
    if crate::vfork::on_borrowed_memory() {
        // A vforked child: this thread's session and the image's hello are its parent's
        // (`crate::vfork`). A connection of its own, which dies with its descriptors.
        let path = socket_path().ok_or(Errno::ENOSYS)?;
        return Connection::connect(path, false)
            .and_then(|conn| conn.call_passing(req, pass, interruptible, restartable))
            .map_err(|_| Errno::ENOSYS);
    }
    let generation = GENERATION.load(Ordering::SeqCst);
    let done = CONN.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return None;
        };
        if slot.as_ref().is_some_and(|s| s.generation != generation) {
            retire(slot.take()?);
        }
        if let Some(s) = slot.as_ref() {
            if inode_of(s.conn.raw_fd()) != Some(s.inode) {
                // The program closed our descriptor (closefrom, a daemon's clean-up) and the
                // number may name one of its files now: forget it, never use or close it.
                if let Some(s) = slot.take() {
                    std::mem::forget(s.conn.into_stream());
                }
            }
        }
        if slot.is_none() {
            match connect() {
                Ok(conn) => {
                    let inode = conn.inode().unwrap_or(0);
                    *slot = Some(Session {
                        generation,
                        inode,
                        conn,
                    })
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let conn = &slot.as_ref()?.conn;
        match conn.call_passing(req, pass, interruptible, restartable) {
            Ok(r) => Some(Ok(r)),
            Err(_) => {
                *slot = None;
                Some(Err(Errno::ENOSYS))
            }
        }
    });
    match done {
        Ok(Some(r)) => r,
        // Re-entered from a signal handler, or called while thread-locals are torn down.
        _ => connect()?
            .call_passing(req, pass, interruptible, restartable)
            .map_err(|_| Errno::ENOSYS),
    }
}

/// The child side of fork, run by `pthread_atfork`.
pub extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Maps an errno response to `Err`, anything else to `Ok`.
pub fn check(resp: Response) -> Result<Response, Errno> {
    match resp {
        Response::Error(e) => Err(Errno::from_raw(e)),
        r => Ok(r),
    }
}

/// The return value of a call answered with `Ret`.
pub fn ret_of(req: Request) -> Result<i64, Errno> {
    ret_value(call(&req)?.0)
}

/// The return value in a `Ret` response (or its errno).
pub fn ret_value(resp: Response) -> Result<i64, Errno> {
    match check(resp)? {
        Response::Ret(v) => Ok(v),
        _ => Err(Errno::from_raw(libc::EIO)),
    }
}
