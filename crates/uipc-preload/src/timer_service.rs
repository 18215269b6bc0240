//! The in-process POSIX timer service behind the timer exports (`uipc run --timers`).
//!
//! # Algorithm
//! One engine ([`uipc::timers::Timers`]) per program image holds the ids and the state of the
//! process's timers, with the engine's own semantics (linear ids, overrun counting, Linux's
//! errnos). One service thread (`timer_delivery.rs`), started by the first successful
//! `timer_create` (a program that never creates a timer pays nothing), runs the engine's
//! driver: it sleeps until the earliest expiry (or until a check of a signal in flight,
//! below), fires the due timers and delivers what the engine queues:
//! - SIGEV_SIGNAL: `rt_sigqueueinfo` to the process, SIGEV_THREAD_ID: `rt_tgsigqueueinfo` to the
//!   thread, each with a `siginfo_t` built as the kernel builds a timer's (`si_code` SI_TIMER,
//!   `si_timerid`, `si_overrun`, `si_value`);
//! - SIGEV_THREAD (the C library's kind): the function runs on a new detached thread with all
//!   signals unblocked, as glibc runs it;
//! - SIGEV_NONE: nothing (the engine never arms such a timer).
//!
//! The caller's identity: `timer_create` asks the kernel (raw getuid, getgid, gettid and the
//! RLIMIT_SIGPENDING limit: the engine counts queued signals per user); settime, gettime,
//! getoverrun and delete find the timer by the process alone, as Linux does, so they ask
//! nothing (the pid is the library's cached one, `vfork.rs`).
//!
//! # Signals in flight
//! The engine keeps at most one signal per timer queued and turns expirations meanwhile into the
//! overrun; a periodic timer is re-armed only when its signal is dequeued. The kernel tells no
//! one when a queued signal is taken, so the service asks it: a signal sent is "in flight"
//! until the kernel no longer shows it pending (`ShdPnd` of `/proc/self/status` for the
//! process, `SigPnd` of the thread's status for SIGEV_THREAD_ID); then it is dequeued from the
//! engine, which re-arms the timer on its grid and counts the periods skipped as the overrun.
//! A periodic timer's signal is checked just before each period boundary (the boundary minus a
//! quarter period, at most 500 µs), and at the boundary itself, so a signal taken promptly
//! re-arms the timer in time and no overrun is counted; `timer_settime`, `timer_gettime`,
//! `timer_getoverrun` and `timer_delete` check their timer's signal first, so getoverrun right
//! after the signal was taken sees the overrun. `timer_settime` and `timer_delete` take a
//! still-pending process signal of the timer back from the kernel (`rt_sigtimedwait`, zero
//! timeout), as Linux discards it at dequeue.
//!
//! A signal the kernel would drop as ignored (`timer_signals::kernel_ignores`) is parked
//! instead of sent: kept in `in_flight`, not looked at, its timer not re-armed (Linux's
//! ignored list), until settime or delete drops it or a sigaction that replaces SIG_IGN sends
//! it ([`Service::unignore`]). A signal whose timer was deleted or set again after the engine
//! queued it is not sent at all (`Timers::signal_is_live`), as Linux drops it at dequeue.
//!
//! # Lock order
//! `in_flight` -> engine locks (the engine's own order) -> the outbox. The engine calls the
//! outbox ([`Notifier::queue`]) with no engine lock held; the service thread empties it before
//! taking `in_flight`. `callbacks` is a leaf. No lock is held across a fork: the child drops the
//! parent's service (see below) without touching its locks.
//!
//! # Signal handlers
//! settime, gettime and getoverrun may run in a signal handler (see `timer.rs`). Every caller
//! holds these locks with all signals blocked: the exports block them, and the service thread
//! runs with all of them blocked. And no thread holding `in_flight` or the outbox allocates or
//! frees (nor does the engine under its locks, see its doc), so a handler's call never waits
//! for a thread that waits for malloc's lock, which the code the handler interrupted may hold:
//! the outbox and `in_flight` get their room at timer_create ([`Service::make_room`], the
//! larger container allocated and the old one freed with no lock held); the service thread
//! swaps the outbox with a twin of the same capacity instead of taking it, walks `in_flight`
//! with `retain`, and drops what it removes after releasing the lock; delete forgets a
//! deleted timer's entry, so that dropping an entry under the lock frees no timer.
//!
//! # Fork and exec
//! A forked child has no timers (Linux): a `pthread_atfork` child handler forgets the parent's
//! service (leaked, never touched: its locks may be held by threads that do not exist in the
//! child, and its thread does not exist either); the child's first `timer_create` starts a new
//! one. A child forked without the handler (a raw `fork` system call) is recognised by its pid.
//! Exec: the service dies with the image, the kernel holds no timer of ours, and it drops the
//! SI_TIMER signals we queued (`timer_signals`). The id counter carries on, as Linux keeps it
//! across execve: the library's exec functions hand it to the new image (`exec_env`), whose
//! service starts its table there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use uipc::timers::{
    HostCpuClocks, ItimerSpec, Notifier, SigEvent, SignalTarget, TimerId, TimerSignal, Timers,
    TimersConfig, UserPtr,
};
use uipc::{Cred, Errno};

use crate::timer_in_flight::InFlight;
use crate::timer_signals::{kernel_pending, take_from_kernel};
use crate::timer_thread::Callback;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn raw_id(nr: libc::c_long) -> i32 {
    // SAFETY: getpid, gettid, getuid and getgid take no arguments and cannot fail.
    unsafe { libc::syscall(nr) as i32 }
}

/// What the engine queues, waiting for the service thread.
pub(crate) struct Outbox(pub(crate) Mutex<Vec<TimerSignal>>);

impl Notifier for Outbox {
    fn queue(&self, signal: TimerSignal) {
        lock(&self.0).push(signal);
    }

    fn same_thread_group(&self, tgid: i32, tid: i32) -> bool {
        // SAFETY: signal 0 only checks that `tid` is a thread of `tgid`.
        tid > 0 && unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, 0) } == 0
    }
}

/// One program image's timers; see the module doc.
pub struct Service {
    pub(crate) engine: Timers,
    pub(crate) pid: i32,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) in_flight: Mutex<HashMap<i32, InFlight>>,
    pub(crate) callbacks: Mutex<HashMap<i32, Callback>>,
    pub(crate) thread_started: AtomicBool,
    /// Live timers: sizes the outbox and `in_flight` ([`Service::make_room`]).
    timers: AtomicUsize,
    /// Batches taken from the outbox (counted under its lock) and batches handed to the
    /// kernel: `timer_catch_up` waits for the batch holding what it queued.
    pub(crate) batches_taken: AtomicU64,
    pub(crate) batches_sent: AtomicU64,
    /// Non-zero while the service thread runs the engine's `run_expired`, which takes due
    /// timers off its heap before it hands their signals to the outbox: a catch-up waits for
    /// zero, else it could find nothing due and an empty outbox while the service thread
    /// still holds a fired timer's signal, and unblock before that signal exists. A counter,
    /// not a lock: `run_expired` allocates, and a catch-up may run in a signal handler.
    pub(crate) firing: AtomicUsize,
    /// Threads setting a mask that may unblock signals: while non-zero a pending signal is
    /// not taken back to update its overrun (it would be missing from the kernel at the
    /// unblock), see `timer_mask`.
    pub(crate) unblocking: AtomicUsize,
}

static SERVICE: AtomicPtr<Service> = AtomicPtr::new(std::ptr::null_mut());
static ATFORK_REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn forget_in_child() {
    SERVICE.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// The service of this process, if it has made one (a forked child has none).
pub fn current() -> Option<&'static Service> {
    let p = SERVICE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked `Box<Service>`, never freed.
    let svc = unsafe { p.as_ref() }?;
    (svc.pid == crate::vfork::pid()).then_some(svc)
}

/// The service of this process, made on first use (without its thread yet).
pub fn get_or_make() -> &'static Service {
    if let Some(svc) = current() {
        return svc;
    }
    if !ATFORK_REGISTERED.swap(true, Ordering::SeqCst) {
        // SAFETY: registers a child handler that only stores an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    }
    let outbox = Arc::new(Outbox(Mutex::new(Vec::new())));
    let config = TimersConfig {
        buckets: Some(64),
        cpu_clocks: Some(Arc::new(HostCpuClocks)),
        ..TimersConfig::default()
    };
    let pid = raw_id(libc::SYS_getpid);
    let engine = Timers::with_config(Arc::new(uipc::SystemClock), outbox.clone(), config);
    let next_id = crate::exec_env::inherited_next_id(pid);
    if next_id != 0 {
        engine.resume_timer_ids(pid, next_id);
    }
    let fresh = Box::into_raw(Box::new(Service {
        engine,
        pid,
        outbox,
        in_flight: Mutex::new(HashMap::new()),
        callbacks: Mutex::new(HashMap::new()),
        thread_started: AtomicBool::new(false),
        timers: AtomicUsize::new(0),
        batches_taken: AtomicU64::new(0),
        batches_sent: AtomicU64::new(0),
        firing: AtomicUsize::new(0),
        unblocking: AtomicUsize::new(0),
    }));
    let seen = SERVICE.load(Ordering::Acquire);
    match SERVICE.compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: we just stored our own leaked box.
        Ok(_) => unsafe { &*fresh },
        Err(_) => {
            // SAFETY: ours was never published; free it and take the winner's.
            drop(unsafe { Box::from_raw(fresh) });
            current().unwrap_or_else(get_or_make)
        }
    }
}

impl Service {
    /// The caller's identity as the engine needs it, from raw system calls (see lib.rs).
    fn cred(&self) -> Cred {
        let mut cred = Cred::user(
            self.pid,
            raw_id(libc::SYS_getuid) as u32,
            raw_id(libc::SYS_getgid) as u32,
        )
        .in_thread(raw_id(libc::SYS_gettid));
        let mut limit = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reads this process's limit into a live struct.
        let r = unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_SIGPENDING,
                std::ptr::null::<libc::rlimit64>(),
                &mut limit,
            )
        };
        if r == 0 {
            cred.rlimit_sigpending = limit.rlim_cur;
        }
        cred
    }

    /// The caller as settime, gettime, getoverrun and delete need it: Linux finds the timer
    /// by the calling process alone and checks no id or limit, and so does the engine (it
    /// reads only `tgid`), so nothing is asked of the kernel; the ids are left as nobody's.
    fn owner(&self) -> Cred {
        Cred::user(self.pid, u32::MAX, u32::MAX)
    }

    /// `timer_create` with a checked sigevent; `out` is where the id goes (`len` 4 or 8 bytes).
    pub fn create(
        &'static self,
        clock: i32,
        event: UserPtr<SigEvent>,
        callback: Option<Callback>,
        out: usize,
        len: usize,
    ) -> Result<i32, Errno> {
        let out_ptr = match out {
            0 => UserPtr::Null,
            a if crate::user::copy_in(a, len).is_err() => UserPtr::Fault,
            _ => UserPtr::Valid(0),
        };
        let cred = self.cred();
        let id = self
            .engine
            .timer_create(&cred, clock, event, out_ptr)?
            .raw();
        let bytes = (id as i64).to_le_bytes();
        if crate::user::copy_out(out, &bytes[..len]).is_err() {
            let _ = self.engine.timer_delete(&cred, TimerId::from_raw(id));
            return Err(Errno::EFAULT);
        }
        if !self.ensure_thread() {
            let _ = self.engine.timer_delete(&cred, TimerId::from_raw(id));
            return Err(Errno::EAGAIN);
        }
        if let Some(cb) = callback {
            lock(&self.callbacks).insert(id, cb);
        }
        let timers = self.timers.fetch_add(1, Ordering::Relaxed) + 1;
        self.make_room(timers);
        Ok(id)
    }

    /// Room for `timers` timers in the outbox (at most one signal per timer is queued) and in
    /// `in_flight` (twice as many: hashbrown then rehashes in place, never growing), so that
    /// settime, gettime and getoverrun (which may run in a signal handler), and the service
    /// thread while it holds these locks, never allocate. The larger containers are allocated,
    /// and the old ones freed, with no lock held: a thread that holds one of these locks must
    /// never wait for malloc's, which a handler's call may have interrupted.
    fn make_room(&self, timers: usize) {
        if lock(&self.outbox.0).capacity() < timers {
            let mut bigger = Vec::with_capacity(2 * timers);
            let mut outbox = lock(&self.outbox.0);
            if outbox.capacity() < timers {
                bigger.append(&mut outbox);
                std::mem::swap(&mut *outbox, &mut bigger);
            }
            drop(outbox);
        }
        if lock(&self.in_flight).capacity() < 2 * timers {
            let mut bigger = HashMap::with_capacity(4 * timers);
            let mut in_flight = lock(&self.in_flight);
            if in_flight.capacity() < 2 * timers {
                bigger.extend(in_flight.drain());
                std::mem::swap(&mut *in_flight, &mut bigger);
            }
            drop(in_flight);
        }
    }

    /// The process's id counter, for the next program image (`exec_env`).
    pub fn next_id(&self) -> u32 {
        self.engine.next_timer_id(self.pid)
    }

    /// `timer_settime`: returns the old setting.
    pub fn settime(
        &self,
        id: i32,
        flags: i32,
        new: UserPtr<ItimerSpec>,
    ) -> Result<ItimerSpec, Errno> {
        // A refused setting changes nothing, its pending signal included.
        if let UserPtr::Valid(spec) = new {
            if spec.interval.is_valid() && spec.value.is_valid() {
                self.settle(id, true);
            }
        }
        let old = self
            .engine
            .timer_settime(&self.owner(), TimerId::from_raw(id), flags, new)?;
        // The engine kicks the service thread when the arm is sooner than its sleep (or the
        // first CPU-time timer, polled); a CPU-time expiry already passed was fired here and
        // its signal waits in the outbox, which only the service thread empties.
        if !lock(&self.outbox.0).is_empty() {
            self.engine.clock_was_set();
        }
        Ok(old)
    }

    /// `timer_gettime`.
    pub fn gettime(&self, id: i32) -> Result<ItimerSpec, Errno> {
        self.settle(id, false);
        self.engine
            .timer_gettime(&self.owner(), TimerId::from_raw(id))
    }

    /// `timer_getoverrun`.
    pub fn getoverrun(&self, id: i32) -> Result<i32, Errno> {
        self.settle(id, false);
        self.engine
            .timer_getoverrun(&self.owner(), TimerId::from_raw(id))
    }

    /// `timer_delete`.
    pub fn delete(&self, id: i32) -> Result<(), Errno> {
        // Deleted first, so no expiry of it is queued after the pending signal is taken back
        // (Linux discards a deleted timer's pending signal).
        self.engine
            .timer_delete(&self.owner(), TimerId::from_raw(id))?;
        self.settle(id, true);
        self.timers.fetch_sub(1, Ordering::Relaxed);
        lock(&self.callbacks).remove(&id);
        // A signal still in flight (a thread's, which cannot be taken back) is forgotten here,
        // so `in_flight` never holds the last reference to a deleted timer: a handler's
        // getoverrun or the service thread would otherwise free it under the lock.
        let forgotten = lock(&self.in_flight).remove(&id);
        if let Some(entry) = &forgotten {
            self.engine.dequeue_signal(&entry.signal);
        }
        drop(forgotten);
        Ok(())
    }

    /// A handler replaced SIG_IGN for `signo` (Linux's `posixtimer_sig_unignore`): the parked
    /// signals of that number are sent now, and followed as any signal in flight; the
    /// dequeue re-arms their timers. Holds `in_flight` with all signals blocked (sigaction
    /// may be called in a handler) and allocates nothing.
    pub(crate) fn unignore(&self, signo: i32) {
        let held = crate::sigmask::SignalsBlocked::new();
        let now = std::time::Instant::now();
        let mut in_flight = lock(&self.in_flight);
        let mut sent = false;
        in_flight.retain(|&id, entry| {
            if !entry.parked || entry.signal.signo != signo {
                return true;
            }
            if self.send(&entry.signal, 0) != 0 {
                self.engine.dequeue_signal(&entry.signal);
                return false;
            }
            entry.unpark(self.grid_of(id), now);
            sent = true;
            true
        });
        drop(in_flight);
        drop(held);
        if sent {
            // The service thread plans its looks at them.
            self.engine.clock_was_set();
        }
    }

    /// Looks whether timer `id`'s signal in flight was taken; if it was, dequeues it from the
    /// engine. With `take_back`, a process signal still pending is taken out of the kernel and
    /// dropped (settime and delete: Linux discards it at dequeue).
    pub(crate) fn settle(&self, id: i32, take_back: bool) {
        if id < 0 {
            return;
        }
        let mut in_flight = lock(&self.in_flight);
        let Some(entry) = in_flight.get(&id) else {
            return;
        };
        let sig = &entry.signal;
        if entry.parked {
            // Not in the kernel: settime and delete drop it, gettime and getoverrun leave it.
            if take_back {
                let taken = in_flight.remove(&id);
                if let Some(entry) = &taken {
                    self.engine.dequeue_signal(&entry.signal);
                }
                drop(in_flight);
                drop(taken);
            }
            return;
        }
        // A thread's signal can be taken back only by that thread itself.
        let take_from = match sig.target {
            SignalTarget::Process | SignalTarget::ThreadCallback => Some(None),
            SignalTarget::Thread(tid) if tid == raw_id(libc::SYS_gettid) => Some(Some(tid)),
            SignalTarget::Thread(_) => None,
        };
        let gone = !kernel_pending(sig.target, sig.signo)
            || (take_back
                && take_from.is_some_and(|tid| take_from_kernel(self.pid, tid, sig.signo, id)));
        if !gone {
            return;
        }
        let taken = in_flight.remove(&id);
        if let Some(entry) = &taken {
            self.engine.dequeue_signal(&entry.signal);
        }
        drop(in_flight);
        // The timer is live (the table holds it), so this frees nothing in the common case.
        drop(taken);
    }
}
