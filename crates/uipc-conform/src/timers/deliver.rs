//! Signal delivery in `uipc conform timers`: taking one pending timer signal on both sides, so
//! that overruns (counted while a signal is pending, handed over at delivery, then reported
//! by `timer_getoverrun`) are compared on real values, not on a host that never delivers.
//!
//! Host: `rt_sigtimedwait` for one signal number with a zero timeout (every signal is blocked,
//! so it stays pending until taken here). The kernel takes the first queued entry of that
//! number from the thread's private queue, else from the process's shared queue, and drops
//! (and takes the next) an entry whose timer was deleted or re-armed since it was queued.
//!
//! Engine: [`SignalQueue`] is the embedder's side of [`Notifier`]: it keeps queued signals in
//! order and [`SignalQueue::take`] does the same selection, handing each entry to
//! [`Timers::dequeue_signal`] until one is still valid.
//!
//! Locks: the queue's mutex is a leaf; the engine is called with it released.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use uipc::timers::{take_pending_signal, Notifier, SigInfo, SignalTarget, TimerSignal, Timers};
use uipc::Errno;

/// What a delivery hands over: (signo, si_code, si_timerid, si_overrun, si_value).
pub(super) type Delivered = (i32, i32, i32, i32, u64);

/// The embedder's signal queue: every signal the engine queued and nobody took yet.
#[derive(Default)]
pub(super) struct SignalQueue {
    queued: Mutex<Vec<TimerSignal>>,
}

impl Notifier for SignalQueue {
    fn queue(&self, signal: TimerSignal) {
        self.queued.lock().unwrap().push(signal);
    }
}

impl SignalQueue {
    /// Signal numbers currently queued, in queue order (with repeats).
    pub(super) fn pending_signos(&self) -> Vec<i32> {
        self.queued
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.signo)
            .collect()
    }

    /// Takes the first queued `signo`, thread queue first, as the kernel's `dequeue_signal`;
    /// entries the engine says are stale are dropped and the next one is tried.
    pub(super) fn take(&self, engine: &Timers, signo: i32) -> Result<Delivered, Errno> {
        loop {
            let signal = {
                let mut q = self.queued.lock().unwrap();
                let private = |s: &TimerSignal| matches!(s.target, SignalTarget::Thread(_));
                let at = q
                    .iter()
                    .position(|s| s.signo == signo && private(s))
                    .or_else(|| q.iter().position(|s| s.signo == signo && !private(s)));
                match at {
                    Some(at) => q.remove(at),
                    None => return Err(Errno::EAGAIN),
                }
            };
            if let Some(SigInfo {
                signo,
                code,
                timer,
                overrun,
                value,
            }) = engine.dequeue_signal(&signal)
            {
                return Ok((signo, code, timer.raw(), overrun, value));
            }
        }
    }
}

/// The host's `rt_sigtimedwait` for `signo` alone, not waiting.
pub(super) fn host_take(signo: i32) -> Result<Delivered, Errno> {
    let info = SigInfo::from_bytes(&take_pending_signal(signo)?);
    Ok((
        info.signo,
        info.code,
        info.timer.raw(),
        info.overrun,
        info.value,
    ))
}

/// Whether two overrun counts agree, given the timer's interval: periods skipped while a
/// signal waits depend on when each side delivers it, and the two sides act up to `window_ns`
/// apart.
pub(super) fn overruns_close(host: i32, engine: i32, interval_ns: i64, window_ns: i64) -> bool {
    if interval_ns <= 0 {
        return host == engine;
    }
    let slack = window_ns / interval_ns + 1;
    (i64::from(host) - i64::from(engine)).abs() <= slack
}

/// Two deliveries agree: everything equal but the overrun, which must be close.
pub(super) fn deliveries_close(
    host: &Result<Delivered, Errno>,
    engine: &Result<Delivered, Errno>,
    interval_ns: i64,
    window_ns: i64,
) -> bool {
    match (host, engine) {
        (Ok(h), Ok(e)) => {
            (h.0, h.1, h.2, h.4) == (e.0, e.1, e.2, e.4)
                && overruns_close(h.3, e.3, interval_ns, window_ns)
        }
        _ => host == engine,
    }
}

/// Nanoseconds since `t`.
fn since(t: Instant) -> i64 {
    t.elapsed().as_nanos() as i64
}

/// Slack for [`arm_and_deliver`] on top of the measured gaps between the two sides' calls.
const ARM_SLACK_NS: i64 = 1_000_000;

/// The overrun each side handed over at a timer's last delivery. Overruns depend on when each
/// side delivered, so later `timer_getoverrun` results are compared with these, not with a
/// fixed tolerance (a stall of the shared machine between the two deliveries would otherwise
/// show up again at every later read).
#[derive(Default)]
pub(super) struct LastOverruns {
    by_id: HashMap<i32, (i32, i32)>,
}

impl LastOverruns {
    /// A delivery both sides made (and agreed on) handed over these overruns.
    pub(super) fn record(&mut self, id: i32, host: i32, engine: i32) {
        self.by_id.insert(id, (host, engine));
    }

    /// The timer was re-set or deleted: its overrun starts again from zero on both sides.
    pub(super) fn forget(&mut self, id: i32) {
        self.by_id.remove(&id);
    }

    /// Whether `timer_getoverrun` results agree: the pair recorded at the last delivery, or
    /// close within `window_ns` (see [`overruns_close`]).
    pub(super) fn agree(
        &self,
        id: i32,
        host: i32,
        engine: i32,
        interval: i64,
        window: i64,
    ) -> bool {
        self.by_id.get(&id) == Some(&(host, engine))
            || overruns_close(host, engine, interval, window)
    }
}

/// Arms timer `id` (not a CPU-time one) 1 ms ahead with a short interval on both sides, waits
/// `wait_ms` so that it expires many times while its first signal is pending, takes `signo`
/// on both sides and reads `timer_getoverrun`. The overruns may differ by the periods that fit
/// in the measured gaps between the two settime calls and between the two deliveries. Returns
/// (host, engine, agreed) as text.
pub(super) fn arm_and_deliver(
    engine: &Timers,
    queue: &SignalQueue,
    last: &mut LastOverruns,
    cred: &uipc::Cred,
    (id, signo): (i32, i32),
    interval_ns: i64,
    wait_ms: u64,
) -> (String, String, bool) {
    use super::host::{host_settime, host_simple};
    use uipc::timers::{ItimerSpec, TimerId, UserPtr};
    let spec = UserPtr::Valid(ItimerSpec::from_nanos(1_000_000, interval_ns));
    let timer = TimerId::from_raw(id);
    let t = Instant::now();
    let host_set = host_settime(id, 0, spec).map(|_| ());
    let engine_set = engine.timer_settime(cred, timer, 0, spec).map(|_| ());
    let set_gap = since(t);
    last.forget(id);
    std::thread::sleep(std::time::Duration::from_millis(wait_ms));
    let t = Instant::now();
    engine.run_expired();
    let host_got = host_take(signo);
    let engine_got = queue.take(engine, signo);
    let window = set_gap + since(t) + ARM_SLACK_NS;
    let host_over = host_simple(libc::SYS_timer_getoverrun, id);
    let engine_over = engine.timer_getoverrun(cred, timer);
    let agreed = host_set == engine_set
        && deliveries_close(&host_got, &engine_got, interval_ns, window)
        && match (host_over, engine_over) {
            (Ok(h), Ok(e)) => overruns_close(h, e, interval_ns, window),
            (h, e) => h == e,
        };
    if let (true, Ok(h), Ok(e)) = (agreed, &host_got, &engine_got) {
        last.record(h.2, h.3, e.3);
    }
    // The delivery re-armed the timer; it fires again within its interval (at most 2 ms).
    // Let the host's fire before the engine's next `run_expired`, so both hold one signal.
    std::thread::sleep(std::time::Duration::from_millis(3));
    (
        format!("{host_set:?} {host_got:?} {host_over:?}"),
        format!("{engine_set:?} {engine_got:?} {engine_over:?}"),
        agreed,
    )
}

/// Takes `signo` on both sides (host first) and compares; the overruns may differ by the
/// periods in `window_ns` plus the measured gap between the two deliveries.
pub(super) fn deliver_both(
    engine: &Timers,
    queue: &SignalQueue,
    last: &mut LastOverruns,
    cred: &uipc::Cred,
    signo: i32,
    window_ns: i64,
) -> (Result<Delivered, Errno>, Result<Delivered, Errno>, bool) {
    let t = Instant::now();
    let host = host_take(signo);
    let eng = queue.take(engine, signo);
    let window = window_ns + since(t);
    let interval = match &eng {
        Ok(d) => engine
            .timer_gettime(cred, uipc::timers::TimerId::from_raw(d.2))
            .map_or(0, |s| s.interval.sec * 1_000_000_000 + s.interval.nsec),
        Err(_) => 0,
    };
    let same = deliveries_close(&host, &eng, interval, window);
    if let (true, Ok(h), Ok(e)) = (same, &host, &eng) {
        last.record(h.2, h.3, e.3);
    }
    (host, eng, same)
}
