//! What one client may cost the daemon: the bounds, and the per-user books that enforce them
//! before anything is allocated.
//!
//! - Frames: a connection that has not said hello may send frames of [`HELLO_MAX_FRAME`]
//!   bytes; one with a call in flight (which should send only a Cancel) [`BUSY_MAX_FRAME`],
//!   until the call's reply is being sent (the client may send its next call as soon as it
//!   reads the reply); otherwise [`uipc_proto::MAX_FRAME`]. A longer length closes the connection when its
//!   header arrives. A frame's memory follows the bytes that arrived
//!   ([`uipc_proto::reader`]) and is charged, until the frame is served and dropped, to its
//!   user's budget of [`FRAME_BYTES_PER_UID`]; a frame that would pass it closes its
//!   connection.
//! - Connections: at most [`CONNS_PER_UID`] per user (the peer's uid at connect time,
//!   `SO_PEERCRED`), of which at most [`UNGREETED_PER_UID`] may not have said hello yet; a
//!   connection that does not say hello within [`HELLO_TIMEOUT`] is closed. Connections over
//!   a bound are closed as soon as they are accepted. A private daemon (`uipc run`'s) counts
//!   no cap for its own user, whose program may have any number of threads calling at once
//!   (the descriptor reserve and the hello time-out still hold); the other users of its
//!   program's tree keep the caps.
//! - Descriptors: a connection is accepted only while [`FD_RESERVE`] descriptors stay free
//!   below the limit (for segments, pidfds and the descriptors of lock calls); at the limit
//!   the event loop accepts and closes with a spare descriptor kept for that, so waiting
//!   clients see their connection closed instead of hanging.
//! - Replies never wait on a worker for a client that does not read (`crate::conn`).
//!
//! Lock: `Users::map` is a leaf.

use crate::sync::lock;
use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uipc_proto::reader::Budget;

/// The largest frame before hello (a Hello is 7 bytes).
pub const HELLO_MAX_FRAME: u32 = 64;
/// The largest frame while the connection's call is in flight (a Cancel is 1 byte).
pub const BUSY_MAX_FRAME: u32 = 64 << 10;
/// Bytes one user's frames may hold in the daemon at once (read, queued or being served).
pub const FRAME_BYTES_PER_UID: u64 = 64 << 20;
/// Connections one user may have open.
pub const CONNS_PER_UID: usize = 1024;
/// Connections of one user that have not said hello yet.
pub const UNGREETED_PER_UID: usize = 256;
/// How long a new connection has to say hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Descriptors kept free below the descriptor limit when accepting.
pub const FD_RESERVE: u64 = 256;

/// A descriptor kept open to be closed when the descriptor limit is reached.
pub fn open_spare() -> Option<OwnedFd> {
    // SAFETY: opens a NUL-terminated path; the result is checked and owned.
    let raw = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: a fresh descriptor owned by nobody else.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
}

/// This process's descriptor limit.
pub fn fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads this process's limit into a live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

struct User {
    conns: usize,
    ungreeted: usize,
    budget: Arc<Budget>,
}

/// The connections and frame bytes of each user.
#[derive(Default)]
pub struct Users {
    map: Mutex<HashMap<u32, User>>,
    /// The user whose connections are not capped (a private daemon's own).
    uncapped: Option<u32>,
}

impl Users {
    /// Books in which `uncapped`'s connections are counted but not capped.
    pub fn with_uncapped(uncapped: Option<u32>) -> Users {
        Users {
            map: Mutex::default(),
            uncapped,
        }
    }

    /// A new connection of `uid`: its frame budget, or `None` if a bound refuses it.
    pub fn admit(&self, uid: u32) -> Option<Arc<Budget>> {
        let mut map = lock(&self.map);
        let user = map.entry(uid).or_insert_with(|| User {
            conns: 0,
            ungreeted: 0,
            budget: Budget::new(FRAME_BYTES_PER_UID),
        });
        let capped = self.uncapped != Some(uid);
        if capped && (user.conns >= CONNS_PER_UID || user.ungreeted >= UNGREETED_PER_UID) {
            return None;
        }
        user.conns += 1;
        user.ungreeted += 1;
        Some(user.budget.clone())
    }

    /// A connection of `uid` said hello.
    pub fn greeted(&self, uid: u32) {
        if let Some(u) = lock(&self.map).get_mut(&uid) {
            u.ungreeted = u.ungreeted.saturating_sub(1);
        }
    }

    /// A connection of `uid` closed.
    pub fn left(&self, uid: u32, greeted: bool) {
        let mut map = lock(&self.map);
        if let Some(u) = map.get_mut(&uid) {
            u.conns = u.conns.saturating_sub(1);
            if !greeted {
                u.ungreeted = u.ungreeted.saturating_sub(1);
            }
            if u.conns == 0 && u.budget.used() == 0 {
                map.remove(&uid);
            }
        }
    }

    /// Connections open, and not yet greeted, of `uid`.
    pub fn count(&self, uid: u32) -> (usize, usize) {
        lock(&self.map)
            .get(&uid)
            .map_or((0, 0), |u| (u.conns, u.ungreeted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_held_to_its_connection_bounds() {
        let users = Users::default();
        for _ in 0..UNGREETED_PER_UID {
            assert!(users.admit(7).is_some());
        }
        assert!(users.admit(7).is_none(), "too many not greeted");
        assert!(users.admit(8).is_some(), "another user is not affected");
        users.greeted(7);
        assert!(users.admit(7).is_some());
        assert_eq!(users.count(7), (UNGREETED_PER_UID + 1, UNGREETED_PER_UID));
        users.left(7, false);
        assert_eq!(users.count(7), (UNGREETED_PER_UID, UNGREETED_PER_UID - 1));
    }

    #[test]
    fn the_uncapped_user_passes_the_caps_and_the_others_do_not() {
        let users = Users::with_uncapped(Some(0));
        for _ in 0..CONNS_PER_UID + 1 {
            assert!(users.admit(0).is_some());
        }
        assert_eq!(users.count(0), (CONNS_PER_UID + 1, CONNS_PER_UID + 1));
        for _ in 0..UNGREETED_PER_UID {
            assert!(users.admit(7).is_some());
        }
        assert!(users.admit(7).is_none(), "another user keeps the caps");
    }
}
