//! One thread that watches descriptors and runs a callback, once, when one becomes readable
//! or hung up.
//!
//! While a blocking call is served, the session watches the client's socket (readable when
//! the client sends Cancel or closes). A watch fires at most once and is then gone; [`Poller::unwatch`] removes
//! it earlier.
//!
//! The thread polls a snapshot of the watches plus an eventfd that `watch`/`unwatch` write to
//! make it take a new snapshot. A descriptor may be closed and its number reused while the
//! thread polls an old snapshot: readiness is matched back to watches by token, not by number,
//! so a stale readiness fires nothing, and the next snapshot drops the old number.
//!
//! Lock: `watches` is held only to copy the snapshot and to take a watch out; callbacks run
//! with no lock held.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

type Callback = Box<dyn FnOnce() + Send>;

/// A watch's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatchToken(u64);

struct Watches {
    next: u64,
    map: HashMap<u64, (RawFd, Callback)>,
}

/// The watching thread's shared state.
pub struct Poller {
    watches: Mutex<Watches>,
    wake: OwnedFd,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Poller {
    /// Starts the thread.
    pub fn start() -> std::io::Result<Arc<Poller>> {
        // SAFETY: plain syscall with valid flags.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let poller = Arc::new(Poller {
            watches: Mutex::new(Watches {
                next: 1,
                map: HashMap::new(),
            }),
            // SAFETY: `raw` is a fresh eventfd owned by nobody else.
            wake: unsafe { OwnedFd::from_raw_fd(raw) },
        });
        let p = poller.clone();
        std::thread::Builder::new()
            .name("uipc-poller".into())
            .spawn(move || p.run())?;
        Ok(poller)
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Runs `f` once `fd` is readable or hung up. `fd` must stay open until the watch fires or
    /// is removed.
    pub fn watch(&self, fd: RawFd, f: impl FnOnce() + Send + 'static) -> WatchToken {
        let token = {
            let mut w = lock(&self.watches);
            let t = w.next;
            w.next += 1;
            w.map.insert(t, (fd, Box::new(f)));
            t
        };
        self.kick();
        WatchToken(token)
    }

    /// Removes a watch; returns whether it had not fired yet.
    pub fn unwatch(&self, token: WatchToken) -> bool {
        let removed = lock(&self.watches).map.remove(&token.0).is_some();
        if removed {
            self.kick();
        }
        removed
    }

    fn run(&self) {
        loop {
            let snapshot: Vec<(u64, RawFd)> = lock(&self.watches)
                .map
                .iter()
                .map(|(&t, (fd, _))| (t, *fd))
                .collect();
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(snapshot.len() + 1);
            fds.push(libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            fds.extend(snapshot.iter().map(|&(_, fd)| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }));
            // SAFETY: `fds` is a live array of `fds.len()` pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                continue;
            }
            if fds[0].revents != 0 {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a live u64 (clears the eventfd).
                unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            }
            for (pfd, &(token, _)) in fds[1..].iter().zip(&snapshot) {
                if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
                    continue;
                }
                let fired = lock(&self.watches).map.remove(&token);
                if let Some((_, f)) = fired {
                    f();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_watch_fires_once_on_readable_and_not_after_unwatch() {
        let p = Poller::start().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        let t = p.watch(b.as_raw_fd(), move || tx.send(1).unwrap());
        let (c, d) = UnixStream::pair().unwrap();
        let t2 = p.watch(d.as_raw_fd(), move || tx2.send(2).unwrap());
        assert!(p.unwatch(t2));
        (&c).write_all(b"x").unwrap();
        (&a).write_all(b"x").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        assert!(!p.unwatch(t), "fired watches are gone");
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    }
}
