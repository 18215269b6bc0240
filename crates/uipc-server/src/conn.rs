//! One client connection: its socket, its interrupt, the call it has in flight.
//!
//! A connection has at most one call in flight (the client waits for each reply), so replies
//! stay in request order. The event loop reads whole frames ([`Conn::incoming`]); the first
//! one while the connection is idle becomes a job, and the connection is busy until that
//! call is answered ([`Conn::finish`]). What arrives while busy ends the call's wait (a
//! Cancel, or any frame: the client broke the one-call rule or gave up) by raising the
//! connection's interrupt; Cancels are dropped, other frames are queued (a few, then the
//! connection is treated as hung up) and served in order after the reply. A hang-up raises the
//! interrupt too; the connection goes once it is idle.
//!
//! The interrupt is lowered each time a call is dispatched, and raised again at once if the
//! client already hung up or sent more, as the old thread-per-connection daemon's socket
//! watch fired at once on unread bytes.
//!
//! Replies never make a worker wait for a client that does not read ([`Conn::reply`]): a
//! reply is sent without waiting; a client whose socket cannot take it (it left earlier
//! replies unread) loses its connection. A large reply first gets a send buffer it fits in,
//! and only to a client that has read everything before; only if the kernel refuses such a
//! buffer (a daemon without CAP_NET_ADMIN, a reply over `net.core.wmem_max`) does the rest
//! wait, bounded by the socket's send timeout, with another worker leading meanwhile.
//!
//! Lock order: `call` (held by the worker that starts, polls or cancels the parked call,
//! across the engine call) -> engine locks; `call` -> a process's record (a guard dropped);
//! `io` -> raising the interrupt (a waiter's state, then the job queue through its notifier);
//! `reader` is the leader's alone.

use crate::parked::ParkedCall;
use crate::procs::ProcGuard;
use crate::sync::lock;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uipc::{Interrupt, ParkCtx};
use uipc_proto::reader::{Budget, FrameReader};
use uipc_proto::transport::{send_frame_nowait, send_frame_rest, Received};
use uipc_proto::{Request, Response, MAX_FRAME};

/// One piece of work for a worker.
pub enum Job {
    /// A whole frame from the connection, which has no other call in flight.
    Frame(Arc<Conn>, Received),
    /// The connection's parked call may go on: poll it.
    Resume(Arc<Conn>),
    /// The connection's parked call may have passed its deadline.
    Deadline(Arc<Conn>),
}

/// Where a connection's jobs go (the worker pool's queue, `jobs.rs`).
pub trait Queue: Send + Sync {
    /// Queues `job` and makes sure a worker takes it.
    fn push(&self, job: Job);
    /// Before a step that may take long: makes sure the sockets stay watched meanwhile.
    fn promote(&self);
}

impl<Q: Queue + ?Sized> Queue for Arc<Q> {
    fn push(&self, job: Job) {
        (**self).push(job);
    }

    fn promote(&self) {
        (**self).promote();
    }
}

/// Frames a busy connection may have waiting before it counts as hung up.
const MAX_QUEUED: usize = 4;

/// Replies up to this size need no room made for them: a client that reads its replies has
/// room (the default send buffer is over 200 KiB, and a client reads each reply before its
/// next call).
const SURE_REPLY: usize = 16 << 10;

/// Bytes sent on `sock` that its peer has not read yet (SIOCOUTQ).
fn unsent_bytes(sock: RawFd) -> libc::c_int {
    let mut n: libc::c_int = 0;
    // SAFETY: reads an int into live space.
    if unsafe { libc::ioctl(sock, libc::TIOCOUTQ, &mut n) } != 0 {
        return 0;
    }
    n
}

/// Makes `sock`'s send buffer hold a frame of `len` bytes with the kernel's overhead
/// (SO_SNDBUFFORCE if the daemon may, else SO_SNDBUF up to `net.core.wmem_max`). False only
/// if the socket is gone.
fn fit_send_buffer(sock: RawFd, len: usize) -> bool {
    let want = len
        .saturating_mul(2)
        .saturating_add(64 << 10)
        .min(i32::MAX as usize) as libc::c_int;
    let mut have: libc::c_int = 0;
    let mut sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let int = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads and sets int options from and into live values of the stated size.
    unsafe {
        if libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut have as *mut libc::c_int).cast(),
            &mut sz,
        ) != 0
        {
            return false;
        }
        // The kernel reports twice the size set, and sets twice the size asked.
        if have >= want {
            return true;
        }
        let half = (want / 2 + 1) as libc::c_int;
        let p = (&half as *const libc::c_int).cast();
        if libc::setsockopt(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, p, int) != 0 {
            libc::setsockopt(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, p, int);
        }
    }
    true
}

/// A call parked for the connection, and its process's guard (held until the reply is sent).
pub struct Parked {
    /// The engine's parked call.
    pub call: ParkedCall,
    /// The request's entry in its process's record.
    pub guard: ProcGuard,
    /// Tells this call from the connection's later ones (a canceller ends only its own).
    pub serial: u64,
}

/// What the worker serving the connection keeps.
#[derive(Default)]
pub struct CallSlot {
    /// The Hello was answered.
    pub greeted: bool,
    /// The call waiting without a thread, if any.
    pub parked: Option<Parked>,
    /// The serial of the next parked call.
    pub next_serial: u64,
}

#[derive(Default)]
struct IoState {
    queued: VecDeque<Received>,
    busy: bool,
    /// The call in flight is being answered: the client may send its next call (of any
    /// length) as soon as it reads the reply, before the worker has finished with this one.
    answering: bool,
    closed: bool,
}

/// One client connection.
pub struct Conn {
    /// Its id (the session id in process records, and the event loop's token).
    pub id: u64,
    /// The peer's uid when it connected (the connection counts against its bounds).
    pub uid: u32,
    /// The Hello was answered (the event loop's view, for frame bounds).
    pub(crate) greeted: AtomicBool,
    /// Watched in the event loop's second set (not greeted, or within a long frame).
    pub(crate) slow: AtomicBool,
    stream: UnixStream,
    /// Raised to end the call in flight with EINTR.
    pub irq: Interrupt,
    /// How the connection's calls park: the notifier queues a [`Job::Resume`].
    pub park: ParkCtx,
    /// The call in flight's state, held by whoever starts, polls or ends it.
    pub call: Mutex<CallSlot>,
    io: Mutex<IoState>,
    /// The IPC namespace its calls act on, set at Hello ([`crate::namespaces`]).
    pub ns: std::sync::OnceLock<Arc<uipc::ipc::IpcNamespace>>,
    /// The greeting process, set at Hello.
    pub greeter: std::sync::OnceLock<i32>,
    /// How the greeting process numbers pids, read from `/proc` when a reply to it first
    /// carries pids (a process's pid namespace never changes).
    greeter_view: std::sync::OnceLock<Option<crate::pidns::PidView>>,
    /// The frame being read (the event loop's only).
    pub(crate) reader: Mutex<FrameReader>,
}

impl Conn {
    /// The namespace its calls act on (`home`, the daemon's first, until Hello).
    pub fn namespace<'a>(
        &'a self,
        home: &'a uipc::ipc::IpcNamespace,
    ) -> &'a uipc::ipc::IpcNamespace {
        self.ns.get().map_or(home, |ns| ns)
    }

    /// How process `tgid`, a caller on this connection, numbers pids: read once for the
    /// process that greeted, read again for any other sender.
    pub fn pid_view(&self, tgid: i32) -> Option<crate::pidns::PidView> {
        if self.greeter.get() == Some(&tgid) {
            *self
                .greeter_view
                .get_or_init(|| crate::pidns::PidView::of(tgid))
        } else {
            crate::pidns::PidView::of(tgid)
        }
    }

    /// A connection on `stream` of user `uid`, whose parked calls notify through `jobs` and
    /// whose frames are charged to `budget`.
    pub fn new(
        id: u64,
        stream: UnixStream,
        jobs: &Arc<impl Queue + 'static>,
        uid: u32,
        budget: Arc<Budget>,
    ) -> Arc<Conn> {
        Arc::new_cyclic(|me: &std::sync::Weak<Conn>| {
            let (me, jobs) = (me.clone(), jobs.clone());
            let irq = Interrupt::new();
            Conn {
                id,
                uid,
                greeted: AtomicBool::new(false),
                slow: AtomicBool::new(true),
                stream,
                park: ParkCtx::new(
                    Arc::new(move || {
                        if let Some(c) = me.upgrade() {
                            jobs.push(Job::Resume(c));
                        }
                    }),
                    Some(irq.clone()),
                ),
                irq,
                call: Mutex::new(CallSlot::default()),
                io: Mutex::new(IoState::default()),
                ns: std::sync::OnceLock::new(),
                greeter: std::sync::OnceLock::new(),
                greeter_view: std::sync::OnceLock::new(),
                reader: Mutex::new(FrameReader::with_budget(budget)),
            }
        })
    }

    /// The socket.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// The longest frame the connection may send now (see [`crate::limits`]).
    pub fn frame_limit(&self) -> u32 {
        if !self.greeted.load(Ordering::Acquire) {
            return crate::limits::HELLO_MAX_FRAME;
        }
        let io = lock(&self.io);
        if io.busy && !io.answering {
            crate::limits::BUSY_MAX_FRAME
        } else {
            MAX_FRAME
        }
    }

    /// Sends a reply (with a descriptor); false if the client is gone or does not read its
    /// replies (the caller closes the connection). See the module doc.
    pub fn reply(&self, resp: &Response, pass: Option<RawFd>, jobs: &impl Queue) -> bool {
        lock(&self.io).answering = true;
        let payload = resp.encode();
        let total = payload.len() + 4;
        let large = payload.len() > SURE_REPLY;
        if large && (unsent_bytes(self.fd()) != 0 || !fit_send_buffer(self.fd(), total)) {
            return false;
        }
        let sent = match send_frame_nowait(self.fd(), &payload, pass) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if sent == total {
            return true;
        }
        if !large || sent == 0 {
            return false;
        }
        // The kernel would not give a buffer the reply fits in: the rest waits for the
        // client (which has read all else), with another worker leading meanwhile.
        jobs.promote();
        send_frame_rest(self.fd(), &payload, sent).is_ok()
    }

    fn dispatch(self: &Arc<Self>, io: &mut IoState, frame: Received, jobs: &impl Queue) {
        self.irq.clear();
        if io.closed || !io.queued.is_empty() {
            self.irq.raise();
        }
        io.busy = true;
        io.answering = false;
        jobs.push(Job::Frame(self.clone(), frame));
    }

    /// The event loop read a whole frame. Returns false if the client sent too many frames
    /// while a call is in flight (the caller then treats it as a hang-up).
    pub fn incoming(self: &Arc<Self>, frame: Received, jobs: &impl Queue) -> bool {
        let mut io = lock(&self.io);
        if io.closed {
            return true;
        }
        if !io.busy {
            self.dispatch(&mut io, frame, jobs);
            return true;
        }
        self.irq.raise();
        if matches!(Request::decode(&frame.payload), Ok(Request::Cancel)) {
            return true;
        }
        if io.queued.len() >= MAX_QUEUED {
            return false;
        }
        io.queued.push_back(frame);
        true
    }

    /// The call in flight was answered: dispatches the next queued frame, if any. Returns
    /// true if the connection is now idle and hung up (the caller removes it).
    pub fn finish(self: &Arc<Self>, jobs: &impl Queue) -> bool {
        let mut io = lock(&self.io);
        if let Some(next) = io.queued.pop_front() {
            self.dispatch(&mut io, next, jobs);
            return false;
        }
        io.busy = false;
        io.closed
    }

    /// The client hung up (or the stream broke): no more reading; the call in flight, if any,
    /// is interrupted. Returns true if the connection is idle (the caller removes it now).
    pub fn hang_up(&self) -> bool {
        let mut io = lock(&self.io);
        io.closed = true;
        if io.busy {
            self.irq.raise();
            false
        } else {
            true
        }
    }

    /// A protocol error on the frame being served: closes the connection at once (queued
    /// frames are dropped; the client sees end of file).
    pub fn shut(&self) {
        let mut io = lock(&self.io);
        io.closed = true;
        io.busy = false;
        io.queued.clear();
        // SAFETY: shuts down our own live socket; the descriptor stays open until dropped.
        unsafe { libc::shutdown(self.fd(), libc::SHUT_RDWR) };
    }
}
