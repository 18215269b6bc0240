//! Which processes the daemon serves.
//!
//! A daemon of `uipc serve` serves whoever can connect: the socket's mode decides (0600: its
//! user; `--shared`, 0666: everyone, each call judged by the caller's ids). The private daemon
//! of a `uipc run` must serve every descendant of the program whatever uid it switches to (a
//! root program's child that drops to a service user stays a client), and nobody else. Its
//! socket is therefore 0666 in a 0711 directory that any uid can traverse, and the filesystem
//! no longer decides: the daemon admits a process when it first meets its pid
//! ([`crate::procs::Procs::enter`] making its record) if the process runs as the daemon's own
//! user or descends from the `uipc run` process ([`Admission::Tree`]). A child announced by a
//! fork of an admitted process is admitted with its parent.
//!
//! Descent is read from `/proc/PID/stat` (the parent pid), walking up until the `uipc run`
//! process or pid 1. `uipc run` is a subreaper, so an orphaned descendant is reparented to it
//! (or to a subreaper or PID namespace init below it) and stays in its tree: a process cannot
//! leave the tree, and a process outside it cannot enter it. A walk that meets a process that
//! was reaped meanwhile starts once more (its children were reparented before it became a
//! zombie, so the second walk sees their new parent).
//!
//! What this rests on: the frame's pid is the kernel's (SCM_CREDENTIALS; only a sender with
//! CAP_SYS_ADMIN over its PID namespace may name another pid, and such a process may already
//! do anything the daemon's user can); a descendant that hands its connection to an outsider
//! does not make the outsider a client, since every frame names its sender and the outsider's
//! first frame is refused.

use uipc_proto::transport::PeerCred;

/// Who may be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Whoever can connect (the socket's mode decides).
    Anyone,
    /// Processes of user `owner`, and every descendant of process `root`.
    Tree {
        /// The `uipc run` process whose descendants are served.
        root: i32,
        /// The daemon's own user.
        owner: u32,
    },
}

/// How many ancestors a walk visits at most (a deeper process is refused).
const MAX_DEPTH: usize = 4096;

impl Admission {
    /// Whether the process `peer.pid`, running with effective uid `peer.uid`, is served.
    pub fn admits(&self, peer: PeerCred) -> bool {
        match *self {
            Admission::Anyone => true,
            Admission::Tree { root, owner } => {
                peer.uid == owner
                    || descends_from(peer.pid, root)
                        .or_else(|| descends_from(peer.pid, root))
                        .unwrap_or(false)
            }
        }
    }
}

/// The parent pid of `pid` from `/proc/PID/stat` (None if the process is gone).
pub fn parent_of(pid: i32) -> Option<i32> {
    let mut buf = [0u8; 512];
    let path = format!("/proc/{pid}/stat");
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).ok()?;
        f.read(&mut buf).ok()?
    };
    let stat = &buf[..n];
    // The command name, in parentheses, may hold anything: the fields follow the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `root` is `pid` or one of its ancestors; None if a process on the way was gone.
fn descends_from(pid: i32, root: i32) -> Option<bool> {
    let mut p = pid;
    for _ in 0..MAX_DEPTH {
        if p == root {
            return Some(true);
        }
        if p <= 1 {
            return Some(false);
        }
        p = parent_of(p)?;
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> PeerCred {
        // SAFETY: plain getters.
        let (pid, uid, gid) = unsafe { (libc::getpid(), libc::geteuid(), libc::getegid()) };
        PeerCred { pid, uid, gid }
    }

    #[test]
    fn the_tree_holds_its_root_and_descendants_and_the_owner_anywhere() {
        let me = me();
        // SAFETY: plain getter.
        let parent = unsafe { libc::getppid() };
        assert_eq!(parent_of(me.pid), Some(parent));
        let stranger = me.uid.wrapping_add(1);
        let as_stranger = PeerCred {
            uid: stranger,
            ..me
        };
        let tree = |root| Admission::Tree {
            root,
            owner: stranger.wrapping_add(1),
        };
        assert!(tree(me.pid).admits(as_stranger), "the root itself");
        assert!(tree(parent).admits(as_stranger), "a child of the root");
        // A pid that is no ancestor of ours: one above pid_max never is.
        assert!(!tree(1 << 23).admits(as_stranger));
        let owner = Admission::Tree {
            root: 1 << 23,
            owner: me.uid,
        };
        assert!(owner.admits(me), "the daemon's own user, outside the tree");
        assert!(Admission::Anyone.admits(as_stranger));
    }
}
