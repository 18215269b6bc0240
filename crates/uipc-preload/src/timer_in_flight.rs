//! One timer signal the service queued in the kernel and has not seen taken yet, with the
//! schedule of the service's looks at it and the overrun its kernel copy carries (see
//! `timer_service`'s module doc for why the service looks).
//!
//! Schedule: early looks 50 µs after sending, then at doubling gaps; a look a margin before
//! each period boundary (a quarter period, at most 500 µs) so a signal taken in time re-arms
//! its timer before the boundary; and a look at the boundary itself, where a signal still
//! pending has its overrun counted. One-shot timers get no looks: their signal's fate only
//! matters to the next settime, gettime, getoverrun or delete, which look themselves.
//!
//! Plain data: the service keeps these under its `in_flight` lock.

use std::time::{Duration, Instant};
use uipc::timers::TimerSignal;

/// A signal the kernel holds for us, and when to look whether it was taken.
pub struct InFlight {
    pub signal: TimerSignal,
    /// A periodic timer's next period boundary and its period.
    pub grid: Option<(Instant, Duration)>,
    /// The `si_overrun` the kernel's copy carries: the boundaries passed while it was pending.
    pub overrun: u64,
    /// Parked, not sent: the kernel would have dropped it as ignored (Linux keeps such a
    /// periodic timer's signal on its ignored list, the timer not re-armed, until a handler
    /// replaces SIG_IGN). A parked signal gets no looks.
    pub parked: bool,
    /// The next early look (50 µs after sending, then twice as far each time).
    probe: Instant,
    probe_gap: Duration,
}

impl InFlight {
    pub fn new(signal: TimerSignal, grid: Option<(Instant, Duration)>, now: Instant) -> InFlight {
        let probe_gap = Duration::from_micros(50);
        InFlight {
            signal,
            grid,
            overrun: 0,
            parked: false,
            probe: now + probe_gap,
            probe_gap,
        }
    }

    /// A signal parked instead of sent (see [`InFlight::parked`]).
    pub fn park(signal: TimerSignal, now: Instant) -> InFlight {
        InFlight {
            parked: true,
            ..InFlight::new(signal, None, now)
        }
    }

    /// A parked signal sent at `now`, its timer's grid `grid`: looked at from now on.
    pub fn unpark(&mut self, grid: Option<(Instant, Duration)>, now: Instant) {
        self.parked = false;
        self.grid = grid;
        self.overrun = 0;
        self.probe_gap = Duration::from_micros(50);
        self.probe = now + self.probe_gap;
    }

    /// When to look next: early looks at growing gaps (a signal taken at once is seen long
    /// before the boundary, even when the service thread wakes late), a margin before the
    /// next boundary (a quarter period, at most 500 µs), and the boundary itself.
    pub fn check_at(&self, now: Instant) -> Option<Instant> {
        if self.parked {
            return None;
        }
        let (boundary, period) = self.grid?;
        let margin = (period / 4).min(Duration::from_micros(500));
        let early = boundary.checked_sub(margin).unwrap_or(boundary);
        let at = if now < early { early } else { boundary };
        Some(at.min(self.probe.max(now)))
    }

    /// A look happened at `now`: the next early look is twice as far.
    pub fn probed(&mut self, now: Instant) {
        if self.probe <= now {
            self.probe_gap = self.probe_gap.saturating_mul(2);
            self.probe = now + self.probe_gap;
        }
    }

    /// Counts the boundaries passed by `now`; true if there were any.
    pub fn count_boundaries(&mut self, now: Instant) -> bool {
        let Some((boundary, period)) = self.grid else {
            return false;
        };
        if now < boundary || period.is_zero() {
            return false;
        }
        let passed = ((now - boundary).as_nanos() / period.as_nanos()) as u64 + 1;
        let next = u32::try_from(passed)
            .ok()
            .and_then(|p| period.checked_mul(p))
            .and_then(|d| boundary.checked_add(d));
        self.grid = next.map(|b| (b, period));
        self.overrun = self.overrun.saturating_add(passed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use uipc::timers::{ItimerSpec, Notifier, SigEvent, Timers, UserPtr};
    use uipc::Cred;

    /// Keeps the signals the engine queues.
    struct Keep(Mutex<Vec<TimerSignal>>);

    impl Notifier for Keep {
        fn queue(&self, signal: TimerSignal) {
            self.0.lock().unwrap().push(signal);
        }
    }

    fn entry(grid: Option<(Instant, Duration)>, now: Instant) -> InFlight {
        let outbox = Arc::new(Keep(Mutex::new(Vec::new())));
        let engine = Timers::new(Arc::new(uipc::SystemClock), outbox.clone());
        let cred = Cred::root(1);
        let id = engine
            .timer_create(
                &cred,
                1,
                UserPtr::Valid(SigEvent::signal(34, 0)),
                UserPtr::Valid(0),
            )
            .unwrap();
        let spec = ItimerSpec::from_nanos(1, 0);
        engine
            .timer_settime(&cred, id, 0, UserPtr::Valid(spec))
            .unwrap();
        std::thread::sleep(Duration::from_millis(1));
        engine.run_expired();
        let signal = outbox.0.lock().unwrap().pop().expect("the timer fired");
        InFlight::new(signal, grid, now)
    }

    #[test]
    fn a_one_shot_signal_is_never_checked_by_the_service() {
        let now = Instant::now();
        assert_eq!(entry(None, now).check_at(now), None);
    }

    #[test]
    fn checks_probe_early_then_before_and_at_the_boundary() {
        let now = Instant::now();
        let period = Duration::from_millis(10);
        let mut e = entry(Some((now + period, period)), now);
        assert_eq!(e.check_at(now), Some(now + Duration::from_micros(50)));
        // Probes at 50, 150, 350, 750 us, ... (gaps doubling), until the look at the margin
        // before the boundary (500 us) comes first, then the boundary itself.
        let early = now + period - Duration::from_micros(500);
        let mut looks = Vec::new();
        let mut t = now;
        while t < now + period {
            t = e.check_at(t).unwrap();
            e.probed(t);
            looks.push((t - now).as_micros());
        }
        assert_eq!(looks, [50, 150, 350, 750, 1550, 3150, 6350, 9500, 10000]);
        assert!(looks.contains(&(early - now).as_micros()));
    }

    #[test]
    fn boundaries_passed_while_pending_become_the_overrun() {
        let now = Instant::now();
        let period = Duration::from_millis(1);
        let mut e = entry(Some((now + period, period)), now);
        assert!(!e.count_boundaries(now), "no boundary passed yet");
        assert!(e.count_boundaries(now + period));
        assert_eq!(e.overrun, 1);
        assert!(e.count_boundaries(now + period * 5 + period / 2));
        assert_eq!(e.overrun, 5, "boundaries 2, 3, 4 and 5 passed too");
        assert_eq!(e.grid, Some((now + period * 6, period)));
    }
}
