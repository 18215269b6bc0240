//! The timer service's thread: it runs the engine's driver, hands what the engine queues to
//! the kernel (or starts a SIGEV_THREAD function) and follows each signal in flight until the
//! kernel no longer shows it pending. The algorithm, the lock order and the rules for signal
//! handlers are in `timer_service.rs`; this module keeps them: it takes `in_flight` before the
//! engine's locks, empties the outbox by swapping it with a twin of the same capacity, walks
//! `in_flight` with `retain`, and drops what it removes after releasing the lock.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use uipc::timers::{SignalTarget, TimerId, TimerSignal};
use uipc::Cred;

use crate::timer_abi;
use crate::timer_in_flight::InFlight;
use crate::timer_service::{lock, Service};
use crate::timer_signals::{kernel_ignores, kernel_pending, take_from_kernel};
use crate::timer_thread::spawn_callback;

impl Service {
    /// Starts the service thread on first use; false if it could not be started.
    pub(crate) fn ensure_thread(&'static self) -> bool {
        if self.thread_started.swap(true, Ordering::SeqCst) {
            return true;
        }
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: fills a local set and swaps this thread's mask, so the new thread starts
        // with every signal blocked (it must never run the program's handlers); restored below.
        unsafe {
            libc::sigfillset(all.as_mut_ptr());
            crate::sigmask::set_mask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        }
        let started = std::thread::Builder::new()
            .name("uipc-timers".into())
            .stack_size(256 << 10)
            .spawn(move || self.serve())
            .is_ok();
        // SAFETY: restores the mask saved above.
        crate::sigmask::set_mask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        if !started {
            self.thread_started.store(false, Ordering::SeqCst);
        }
        started
    }

    /// The service thread: fire, deliver, check signals in flight, sleep.
    fn serve(&self) {
        // The outbox's twin: swapped with it, so neither is allocated or freed under its lock.
        let mut queued: Vec<TimerSignal> = Vec::new();
        loop {
            let next_check = self.check_due();
            self.firing.fetch_add(1, Ordering::AcqRel);
            self.engine.run_expired();
            self.firing.fetch_sub(1, Ordering::AcqRel);
            let batch = loop {
                let capacity = {
                    let mut outbox = lock(&self.outbox.0);
                    if queued.capacity() >= outbox.capacity() {
                        std::mem::swap(&mut *outbox, &mut queued);
                        break self.batches_taken.fetch_add(1, Ordering::AcqRel) + 1;
                    }
                    outbox.capacity()
                };
                queued.reserve_exact(capacity);
            };
            let mut next_check = next_check;
            for sig in queued.drain(..) {
                if let Some(at) = self.deliver(sig) {
                    next_check = Some(next_check.map_or(at, |n: Instant| n.min(at)));
                }
            }
            self.batches_sent.store(batch, Ordering::Release);
            let until_check = next_check.map(|at| at.saturating_duration_since(Instant::now()));
            let timeout = match (self.engine.next_deadline(), until_check) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if timeout != Some(Duration::ZERO) {
                self.engine.wait_for_work(timeout);
            }
        }
    }

    /// Dequeues the signals in flight that were taken; brings the overrun of a process signal
    /// still pending up to date (taken back and queued again with the new `si_overrun`).
    /// Returns the next check time.
    fn check_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut in_flight = lock(&self.in_flight);
        let mut next: Option<Instant> = None;
        // `retain` allocates nothing: a settime in a handler may wait for this lock.
        in_flight.retain(|&id, entry| {
            let Some(at) = entry.check_at(now) else {
                return true;
            };
            if at > now {
                next = Some(next.map_or(at, |n| n.min(at)));
                return true;
            }
            if !kernel_pending(entry.signal.target, entry.signal.signo) {
                self.engine.dequeue_signal(&entry.signal);
                return false;
            }
            entry.probed(now);
            if entry.count_boundaries(now) {
                let sig = &entry.signal;
                let process = matches!(
                    sig.target,
                    SignalTarget::Process | SignalTarget::ThreadCallback
                );
                let unblocking = self.unblocking.load(Ordering::Acquire) != 0;
                if process && !unblocking && take_from_kernel(self.pid, None, sig.signo, id) {
                    let overrun = entry.overrun.min(i32::MAX as u64) as i32;
                    if self.send(sig, overrun) != 0 {
                        self.engine.dequeue_signal(&entry.signal);
                        return false;
                    }
                }
            }
            if let Some(at) = entry.check_at(now) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            true
        });
        next
    }

    /// A periodic timer's next boundary and period, read right after it fired (the engine
    /// forwards a timer whose signal is pending to its next boundary). None: one-shot.
    pub(crate) fn grid_of(&self, id: i32) -> Option<(Instant, Duration)> {
        let cred = Cred::root(self.pid);
        let spec = self
            .engine
            .timer_gettime(&cred, TimerId::from_raw(id))
            .ok()?;
        let period = spec.interval.to_nanos();
        if period == 0 {
            return None;
        }
        let remaining = Duration::from_nanos(spec.value.to_nanos() as u64);
        Some((
            Instant::now() + remaining,
            Duration::from_nanos(period as u64),
        ))
    }

    /// Queues `sig` in the kernel with `overrun` as `si_overrun`; 0 or the failing errno.
    pub(crate) fn send(&self, sig: &TimerSignal, overrun: i32) -> i64 {
        let info = timer_abi::timer_siginfo(sig.signo, sig.timer.raw(), overrun, sig.value);
        // SAFETY: queues a signal to this process (or one of its threads) with a siginfo that
        // lives across the call; any si_code is allowed when signalling oneself.
        unsafe {
            match sig.target {
                SignalTarget::Thread(tid) => libc::syscall(
                    libc::SYS_rt_tgsigqueueinfo,
                    self.pid,
                    tid,
                    sig.signo,
                    info.as_ptr(),
                ),
                _ => libc::syscall(
                    libc::SYS_rt_sigqueueinfo,
                    self.pid,
                    sig.signo,
                    info.as_ptr(),
                ),
            }
        }
    }

    /// Hands one queued signal to the kernel (or runs the callback). Returns when to check it.
    fn deliver(&self, sig: TimerSignal) -> Option<Instant> {
        let id = sig.timer.raw();
        let callback = lock(&self.callbacks).get(&id).copied();
        if let (SignalTarget::ThreadCallback, Some(cb)) = (sig.target, callback) {
            if let Some(info) = self.engine.dequeue_signal(&sig) {
                spawn_callback(cb, info.value);
            }
            return None;
        }
        let mut in_flight = lock(&self.in_flight);
        // Deleted or set again since the engine queued it (delete and settime found no
        // entry to take back): Linux drops such a signal at its dequeue, so it is not sent.
        if !self.engine.signal_is_live(&sig) {
            drop(in_flight);
            self.engine.dequeue_signal(&sig);
            return None;
        }
        let now = Instant::now();
        if kernel_ignores(self.pid, sig.target, sig.signo) {
            // Parked, as Linux parks an ignored timer signal: not sent, the timer not
            // re-armed until `unignore` sends it or settime or delete drops it.
            let replaced = in_flight.insert(id, InFlight::park(sig, now));
            drop(in_flight);
            drop(replaced);
            return None;
        }
        if self.send(&sig, 0) != 0 {
            // The thread is gone, or the kernel's queue is full: the signal is lost.
            drop(in_flight);
            self.engine.dequeue_signal(&sig);
            return None;
        }
        let entry = InFlight::new(sig, self.grid_of(id), now);
        let check_at = entry.check_at(now);
        let replaced = in_flight.insert(id, entry);
        drop(in_flight);
        drop(replaced);
        check_at
    }
}
