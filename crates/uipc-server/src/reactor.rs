//! The event loop: accepts connections, reads frames from every socket and fires semtimedop
//! deadlines, turning what it finds into jobs. It has no thread of its own: the leading
//! [`worker`](crate::workers) runs one turn ([`Reactor::poll_once`]) at a time.
//!
//! One epoll set holds the listening socket, an eventfd (written to wake the loop when a
//! nearer deadline is added) and every connection's socket, each registered under its
//! connection id (never its descriptor number, so a number reused after a close cannot be
//! confused with the old connection). Sockets stay in blocking mode for the workers' replies;
//! the loop reads with MSG_DONTWAIT through each connection's [`FrameReader`]
//! (`uipc_proto::reader`), a whole frame at a time, and passes frames to
//! [`Conn::incoming`]. A hang-up, a broken stream or a malformed length takes the socket out of
//! the set at once (so level-triggered readiness cannot spin) and ends the connection once its
//! call in flight is answered.
//!
//! Turns are short, so a frame from one client never waits long behind others' bytes: the
//! leader serves what a turn found only after the whole turn, and a ready socket may wait
//! several turns for epoll to report it. A turn accepts at most `ACCEPTS_PER_TURN`
//! connections and drops at most `EXPIRIES_PER_TURN` for their hello time-out; a socket at a
//! frame boundary gets one read of a page or two (a small frame whole); a socket within a
//! long frame's payload gets `BULK_READ` bytes, and only the first `BULK_READS_PER_TURN`
//! of those in a turn are read at all. What is left stays ready (level-triggered) and is
//! reported again in a later turn, after the sockets that were ready before it, so every
//! socket takes its turn. Connections not greeted yet, or within a long frame, are watched in
//! a second epoll set (itself in the first, token `SLOW`), of which a turn takes at most
//! `SLOW_EVENTS` sockets: a greeted client at a frame boundary waits for no more than a
//! turn or two however many such sockets are ready. A connection moves between the sets
//! (`Reactor::place`, by the leader after a read) under `conns`, so that a removed one is
//! never watched again.
//!
//! Before it blocks in `epoll_wait`, a turn polls the epoll set for up to
//! 50 µs (`spin.rs`), so a request that follows another closely is read
//! without a wake-up of a halted CPU; a turn with a deadline due now does not.
//!
//! Deadlines: an ordered set of (instant, connection id); `epoll_wait` sleeps until the
//! nearest (rounded up to the millisecond, so a deadline is due when it fires), then each due
//! entry becomes a [`Job::Deadline`]. A call answered before its deadline takes its entry out
//! ([`Reactor::remove_deadline`]), so the set holds only calls still waiting.
//!
//! Bounds ([`crate::limits`]): each accepted connection is admitted by its user's books
//! (`SO_PEERCRED`) and the descriptor reserve, or closed at once; each read is bounded by the
//! connection's frame limit; a connection not greeted within the hello time-out is dropped
//! (a FIFO of accept times, checked each turn). At the descriptor limit a spare descriptor
//! is closed to accept and close one waiting connection, then reopened.
//!
//! Lock order: `conns`, `deadlines`, `hello_due`, `spare` are leaves (a connection's own locks are taken with
//! neither held).
//!
//! [`FrameReader`]: uipc_proto::reader::FrameReader

mod accept;

use crate::conn::Conn;
use crate::conn::{Job, Queue};
use crate::exits::ExitWatch;
use crate::limits::{fd_limit, open_spare, Users, FD_RESERVE};
use crate::spin::DAEMON_SPIN_NS;
use crate::sync::lock;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

const LISTENER: u64 = 0;
const WAKE: u64 = 1;
/// The process table's exit set (`crate::exits`).
const EXITS: u64 = 2;
/// The second set of sockets (not greeted, or within a long frame), itself watched.
const SLOW: u64 = 3;
/// What a connection's socket is watched for.
const CONN_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Events taken from the second set in one turn.
const SLOW_EVENTS: usize = 16;
/// Events taken from one epoll_wait; a batch this full may have left the exit set's for the next.
const EVENTS: usize = 64;
/// Frames read from one socket per readiness report: one, as a client has at most one call in
/// flight (another read would mostly find nothing, a wasted system call per request); what
/// else is there is reported again (level-triggered), so a chatty client cannot starve others.
/// (Frames the reader already holds, read past the first, are taken too: bounded by one
/// read's size.)
const FRAMES_PER_TURN: usize = 1;
/// Connections accepted in one turn (the listener is reported again while more wait).
const ACCEPTS_PER_TURN: usize = 32;
/// Connections dropped for their hello time-out in one turn (the rest are due at once in the
/// next turns).
const EXPIRIES_PER_TURN: usize = 32;
/// Payload bytes one read of a frame in progress takes: the rest is read in later turns.
const BULK_READ: usize = 64 << 10;
/// Reads of frames in progress in one turn; further sockets with a frame in progress wait for
/// a later turn (they are reported again, after the other ready sockets).
const BULK_READS_PER_TURN: usize = 4;

/// The loop's shared state.
pub struct Reactor {
    epoll: OwnedFd,
    /// The second set: connections not greeted yet or within a long frame.
    slow: OwnedFd,
    wake: OwnedFd,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    deadlines: Mutex<BTreeSet<(Instant, u64)>>,
    next_id: AtomicU64,
    listener: OnceLock<UnixListener>,
    /// Each user's connections and frame bytes.
    pub users: Users,
    /// Connections not yet greeted, by accept time (oldest first).
    hello_due: Mutex<VecDeque<(Instant, u64)>>,
    /// Closed to make room to accept (and close) a connection at the descriptor limit.
    spare: Mutex<Option<OwnedFd>>,
    /// Accept only below this descriptor number.
    fd_ceiling: u64,
}

/// Wakes the leader from `epoll_wait` through the eventfd `wake`.
pub(crate) fn kick(wake: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a live eventfd.
    unsafe { libc::write(wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Reactor {
    /// An epoll set with the wake-up eventfd in it; `uncapped`: the user whose connections
    /// the per-user caps do not limit (see `limits`).
    pub fn new(uncapped: Option<u32>) -> io::Result<Reactor> {
        // SAFETY: plain syscalls; each result is checked and owned below.
        let epoll = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: as above.
        let slow = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: as above.
        let wake = unsafe {
            OwnedFd::from_raw_fd(cvt(libc::eventfd(
                0,
                libc::EFD_CLOEXEC | libc::EFD_NONBLOCK,
            ))?)
        };
        let r = Reactor {
            epoll,
            slow,
            wake,
            conns: Mutex::new(HashMap::new()),
            deadlines: Mutex::new(BTreeSet::new()),
            next_id: AtomicU64::new(SLOW + 1),
            listener: OnceLock::new(),
            users: Users::with_uncapped(uncapped),
            hello_due: Mutex::new(VecDeque::new()),
            spare: Mutex::new(open_spare()),
            fd_ceiling: fd_limit().saturating_sub(FD_RESERVE),
        };
        r.add(r.wake.as_raw_fd(), WAKE, libc::EPOLLIN as u32)?;
        r.add(r.slow.as_raw_fd(), SLOW, libc::EPOLLIN as u32)?;
        Ok(r)
    }

    fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.add_to(&self.epoll, fd, token, events)
    }

    fn add_to(&self, set: &OwnedFd, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: registers a live descriptor with one of our live epoll sets.
        cvt(unsafe { libc::epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    fn stop_watching(&self, conn: &Conn) {
        for set in [&self.epoll, &self.slow] {
            self.remove_from(set, conn);
        }
    }

    /// Takes `conn`'s descriptor (still open: `conn` owns it) out of one of our epoll sets;
    /// ENOENT if it is not there, which is fine.
    fn remove_from(&self, set: &OwnedFd, conn: &Conn) {
        // SAFETY: removes an open descriptor from one of our live epoll sets.
        unsafe {
            libc::epoll_ctl(
                set.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                conn.fd(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Moves a connection still known to the loop into the second set (`slow`) or out of it.
    /// Under `conns`, so that it cannot put back a connection [`Reactor::remove`] took out.
    fn place(&self, conn: &Conn, slow: bool) {
        if conn.slow.load(Ordering::Relaxed) == slow {
            return;
        }
        let conns = lock(&self.conns);
        if !conns.contains_key(&conn.id) {
            return;
        }
        let (from, to) = if slow {
            (&self.epoll, &self.slow)
        } else {
            (&self.slow, &self.epoll)
        };
        self.remove_from(from, conn);
        if self.add_to(to, conn.fd(), conn.id, CONN_EVENTS).is_ok() {
            conn.slow.store(slow, Ordering::Relaxed);
        } else if self.add_to(from, conn.fd(), conn.id, CONN_EVENTS).is_err() {
            drop(conns);
            if conn.hang_up() {
                self.remove(conn);
            }
        }
    }

    /// Forgets a connection; its socket closes when the last reference goes.
    pub fn remove(&self, conn: &Conn) {
        let known = lock(&self.conns).remove(&conn.id).is_some();
        self.stop_watching(conn);
        if known {
            let greeted = conn.greeted.load(Ordering::Acquire);
            self.users.left(conn.uid, greeted);
        }
    }

    /// The connection's Hello was answered: full-size frames from now on, and it no longer
    /// counts as not greeted.
    pub fn greeted(&self, conn: &Conn) {
        if !conn.greeted.swap(true, Ordering::AcqRel) {
            self.users.greeted(conn.uid);
        }
    }

    /// Drops connections whose hello time-out passed.
    fn expire_hellos(&self) {
        let now = Instant::now();
        for _ in 0..EXPIRIES_PER_TURN {
            let id = {
                let mut due = lock(&self.hello_due);
                match due.front() {
                    Some(&(at, id)) if at <= now => {
                        due.pop_front();
                        id
                    }
                    _ => return,
                }
            };
            let conn = lock(&self.conns).get(&id).cloned();
            if let Some(c) = conn.filter(|c| !c.greeted.load(Ordering::Acquire)) {
                self.stop_watching(&c);
                if c.hang_up() {
                    self.remove(&c);
                }
            }
        }
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Asks for a [`Job::Deadline`] for connection `id` at `at`.
    pub fn add_deadline(&self, at: Instant, id: u64) {
        lock(&self.deadlines).insert((at, id));
        kick(&self.wake);
    }

    /// Withdraws a deadline added with [`Reactor::add_deadline`] (its call was answered).
    pub fn remove_deadline(&self, at: Instant, id: u64) {
        lock(&self.deadlines).remove(&(at, id));
    }

    /// Deadlines not yet fired nor withdrawn.
    pub fn deadlines(&self) -> usize {
        lock(&self.deadlines).len()
    }

    fn timeout_ms(&self) -> i32 {
        let deadline = lock(&self.deadlines).first().map(|d| d.0);
        let hello = lock(&self.hello_due).front().map(|d| d.0);
        let Some(at) = deadline.into_iter().chain(hello).min() else {
            return -1;
        };
        let left = at.saturating_duration_since(Instant::now());
        left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
    }

    fn fire_deadlines(&self, jobs: &impl Queue) {
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut set = lock(&self.deadlines);
            while let Some((at, id)) = set.first().copied() {
                if at > now {
                    break;
                }
                set.pop_first();
                due.push(id);
            }
        }
        for id in due {
            let conn = lock(&self.conns).get(&id).cloned();
            if let Some(c) = conn {
                jobs.push(Job::Deadline(c));
            }
        }
    }

    /// Watches the exit set `fd` (edge-triggered): each exit notified counts the batch that
    /// sees it (the `exits` module).
    pub fn watch_exits(&self, fd: RawFd) -> io::Result<()> {
        self.add(fd, EXITS, (libc::EPOLLIN | libc::EPOLLET) as u32)
    }

    /// Starts accepting connections on `listener`.
    pub fn listen(&self, listener: UnixListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let fd = listener.as_raw_fd();
        if self.listener.set(listener).is_err() {
            return Err(io::Error::other("already listening"));
        }
        self.add(fd, LISTENER, libc::EPOLLIN as u32)
    }

    /// A second descriptor for the wake-up eventfd (for [`crate::jobs::Jobs`]).
    pub fn wake_handle(&self) -> io::Result<OwnedFd> {
        self.wake.try_clone()
    }

    /// One turn of the loop, by the leading worker: waits for readiness or the nearest
    /// deadline (or a wake-up), then accepts, reads frames and fires due deadlines. The work
    /// found is pushed to `jobs`; a wake-up of the exit set is noted in `exits` first.
    pub fn poll_once(&self, jobs: &Arc<impl Queue + 'static>, exits: &ExitWatch) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        let timeout = self.timeout_ms();
        if timeout != 0 {
            // A turn that follows a request finds the next one without a wake-up (see
            // `crate::spin`); the epoll set is readable when it has events.
            crate::spin::until_readable(self.epoll.as_raw_fd(), DAEMON_SPIN_NS);
        }
        // SAFETY: `evs` is a live array of `evs.len()` events.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as i32,
                timeout,
            )
        };
        let evs = &evs[..n.max(0) as usize];
        // Before any frame of the batch is handed out; a full batch may have left the exit
        // set's event for the next.
        if evs.len() == EVENTS || evs.iter().any(|ev| ev.u64 == EXITS) {
            exits.noted();
        }
        let mut bulk_reads = BULK_READS_PER_TURN;
        for ev in evs {
            match ev.u64 {
                EXITS => {}
                LISTENER => self.accept_all(jobs),
                SLOW => self.poll_slow(&**jobs, &mut bulk_reads),
                WAKE => {
                    let mut v = 0u64;
                    // SAFETY: reads 8 bytes into a live u64 (clears the eventfd).
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                }
                id => {
                    let conn = lock(&self.conns).get(&id).cloned();
                    if let Some(c) = conn {
                        self.read_from(&c, &**jobs, &mut bulk_reads);
                    }
                }
            }
        }
        self.fire_deadlines(&**jobs);
        self.expire_hellos();
    }

    /// Reads from up to [`SLOW_EVENTS`] ready sockets of the second set.
    fn poll_slow(&self, jobs: &impl Queue, bulk_reads: &mut usize) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; SLOW_EVENTS];
        // SAFETY: `evs` is a live array of `evs.len()` events; no wait.
        let n = unsafe {
            libc::epoll_wait(self.slow.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, 0)
        };
        for ev in &evs[..n.max(0) as usize] {
            let id = ev.u64;
            let conn = lock(&self.conns).get(&id).cloned();
            if let Some(c) = conn {
                self.read_from(&c, jobs, bulk_reads);
            }
        }
    }
    /// Reads what `conn` sent: at a frame boundary, a first chunk (a page); within a frame,
    /// [`BULK_READ`] bytes if `bulk_reads` is not spent (counting one off), else nothing this
    /// turn.
    fn read_from(&self, conn: &Arc<Conn>, jobs: &impl Queue, bulk_reads: &mut usize) {
        let mut reader = lock(&conn.reader);
        let cap = if reader.in_payload() {
            if *bulk_reads == 0 {
                return;
            }
            *bulk_reads -= 1;
            BULK_READ
        } else {
            0
        };
        let mut frames = 0;
        // Frames the last read took whole past the first (`has_ahead`) cost no system call
        // and would not be reported again: they are taken now.
        while frames < FRAMES_PER_TURN || reader.has_ahead() {
            frames += 1;
            let keep_reading = match reader.read_at_most(conn.fd(), conn.frame_limit(), cap) {
                Ok(Some(frame)) => conn.incoming(frame, jobs),
                Ok(None) => break,
                Err(_) => false,
            };
            if !keep_reading {
                self.stop_watching(conn);
                if conn.hang_up() {
                    self.remove(conn);
                }
                return;
            }
        }
        let slow = reader.in_payload() || !conn.greeted.load(Ordering::Acquire);
        self.place(conn, slow);
    }
}
