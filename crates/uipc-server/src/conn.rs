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
//! Lock order: `call` (held by the worker that starts, polls or cancels the parked call,
//! across the engine call) -> engine locks; `call` -> a process's record (a guard dropped);
//! `io` -> raising the interrupt (a waiter's state, then the job queue through its notifier);
//! `reader` is the leader's alone.

use crate::parked::ParkedCall;
use crate::procs::ProcGuard;
use crate::workers::{Job, Jobs};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use uipc::{Interrupt, ParkCtx};
use uipc_proto::reader::FrameReader;
use uipc_proto::transport::{send_frame, Received};
use uipc_proto::{Request, Response};

/// Frames a busy connection may have waiting before it counts as hung up.
const MAX_QUEUED: usize = 4;

/// Replies up to this size go without waiting to a writable socket (its default send buffer
/// is over 200 KiB, and a client reads each reply before its next call).
const SURE_REPLY: usize = 16 << 10;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    closed: bool,
}

/// One client connection.
pub struct Conn {
    /// Its id (the session id in process records, and the event loop's token).
    pub id: u64,
    stream: UnixStream,
    /// Raised to end the call in flight with EINTR.
    pub irq: Interrupt,
    /// How the connection's calls park: the notifier queues a [`Job::Resume`].
    pub park: ParkCtx,
    /// The call in flight's state, held by whoever starts, polls or ends it.
    pub call: Mutex<CallSlot>,
    io: Mutex<IoState>,
    /// The frame being read (the event loop's only).
    pub(crate) reader: Mutex<FrameReader>,
}

impl Conn {
    /// A connection on `stream`, whose parked calls notify through `jobs`.
    pub fn new(id: u64, stream: UnixStream, jobs: &Arc<Jobs>) -> Arc<Conn> {
        Arc::new_cyclic(|me: &std::sync::Weak<Conn>| {
            let (me, jobs) = (me.clone(), jobs.clone());
            let irq = Interrupt::new();
            Conn {
                id,
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
                reader: Mutex::new(FrameReader::new()),
            }
        })
    }

    /// The socket.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Sends a reply (with a descriptor); false if the client is gone. If the send may wait
    /// (a large reply, or a client that has not made room), `jobs` first gets another worker
    /// to watch the sockets, as the send may take up to the socket's send timeout.
    pub fn reply(&self, resp: &Response, pass: Option<RawFd>, jobs: &Jobs) -> bool {
        let payload = resp.encode();
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // A socket reports POLLOUT while a quarter of its send buffer is free, so only small
        // replies are sure to go at once.
        // SAFETY: one live pollfd, zero timeout.
        if payload.len() > SURE_REPLY || unsafe { libc::poll(&mut p, 1, 0) } != 1 {
            jobs.promote();
        }
        send_frame(self.fd(), &payload, false, pass).is_ok()
    }

    fn dispatch(self: &Arc<Self>, io: &mut IoState, frame: Received, jobs: &Jobs) {
        self.irq.clear();
        if io.closed || !io.queued.is_empty() {
            self.irq.raise();
        }
        io.busy = true;
        jobs.push(Job::Frame(self.clone(), frame));
    }

    /// The event loop read a whole frame. Returns false if the client sent too many frames
    /// while a call is in flight (the caller then treats it as a hang-up).
    pub fn incoming(self: &Arc<Self>, frame: Received, jobs: &Jobs) -> bool {
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
    pub fn finish(self: &Arc<Self>, jobs: &Jobs) -> bool {
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
