//! What the expiry driver (per-base binary heaps with lazy cancel) costs with many armed
//! timers: arming, re-arming (cancel + arm) and firing, per timer. The figures quoted in the
//! driver's module doc come from this run.
//!
//! Ignored by default (it only prints timings); run it with
//! `cargo test -p uipc --release --test timers_driver_cost -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::Instant;
use uipc::timers::*;
use uipc::{Cred, ManualClock};

const MS: i64 = 1_000_000;

#[test]
#[ignore = "timing run; prints figures"]
fn arming_rearming_and_firing_many_timers() {
    for n in [1_000i64, 10_000, 60_000] {
        let clock = Arc::new(ManualClock::new(1000));
        let t = Timers::new(clock.clone(), Arc::new(NoNotifier));
        let cred = Cred {
            rlimit_sigpending: u64::MAX,
            ..Cred::root(100)
        };
        let ids: Vec<TimerId> = (0..n)
            .map(|_| {
                t.timer_create(
                    &cred,
                    CLOCK_MONOTONIC,
                    UserPtr::Valid(SigEvent::signal(10, 0)),
                    UserPtr::Valid(0),
                )
                .unwrap()
            })
            .collect();
        // Deadlines scrambled over 1..=1000 ms.
        let deadline = |i: i64, round: i64| ((i * 7919 + round * 104_729) % 1000 + 1) * MS;
        let arm = |round: i64| {
            let start = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                let spec = ItimerSpec::from_nanos(deadline(i as i64, round), 0);
                t.timer_settime(&cred, id, 0, UserPtr::Valid(spec)).unwrap();
            }
            start.elapsed().as_nanos() as f64 / n as f64
        };
        let first = arm(0);
        let again = arm(1);
        let start = Instant::now();
        let mut fired = 0;
        for _ in 0..1000 {
            clock.advance(MS);
            fired += t.run_expired();
        }
        let fire = start.elapsed().as_nanos() as f64 / n as f64;
        assert_eq!(fired as i64, n, "every timer fired once");
        println!(
            "{n:>6} timers: arm {first:>6.0} ns, re-arm {again:>6.0} ns, fire {fire:>6.0} ns per \
             timer; {} heap entries left",
            t.driver_entries()
        );
    }
}
