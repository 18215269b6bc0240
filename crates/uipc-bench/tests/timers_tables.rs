//! The seed-004 table scenarios on the four designs (the engine's striped group maps, seed 004's
//! chained hash, mainline, xarray), timed.
//!
//! The timing run is ignored by default; run it with
//! `cargo test -p uipc-bench --release --test timers_tables -- --ignored --nocapture`.
//! The small correctness run below it is not ignored.

use std::sync::Arc;
use std::time::{Duration, Instant};
use uipc::timers::TimerTable;
use uipc_bench::before::timer_tables::{MainlineTable, SeedHashTable, TimerIndex, XarrayTable};
use uipc_bench::scenarios::timers::parallel;

fn designs() -> Vec<(&'static str, Arc<dyn TimerIndex<u64>>)> {
    vec![
        ("engine", Arc::new(TimerTable::<u64>::new())),
        ("newhash", Arc::new(SeedHashTable::<u64>::new())),
        ("mainline", Arc::new(MainlineTable::<u64>::new())),
        ("xarray", Arc::new(XarrayTable::<u64>::new())),
    ]
}

/// Creates `n` timers with linear ids in process `owner`, then looks each up; returns both times.
fn create_then_lookup(t: &dyn TimerIndex<u64>, owner: i32, n: i32) -> (Duration, Duration) {
    let start = Instant::now();
    for id in 0..n {
        assert!(t.try_reserve(owner, id));
        assert!(t.publish(owner, id, Arc::new(id as u64)));
    }
    let created = start.elapsed();
    let start = Instant::now();
    for id in 0..n {
        assert_eq!(t.lookup(owner, id).map(|v| *v), Some(id as u64));
    }
    (created, start.elapsed())
}

fn create_delete_loop(t: &dyn TimerIndex<u64>, owner: i32, rounds: i32) -> Duration {
    let start = Instant::now();
    for id in 0..rounds {
        assert!(t.try_reserve(owner, id));
        assert!(t.publish(owner, id, Arc::new(0)));
        assert!(t.remove(owner, id).is_some());
    }
    start.elapsed()
}

#[test]
fn every_design_finds_every_timer_of_every_process() {
    for (name, t) in designs() {
        for owner in 1..4 {
            create_then_lookup(&*t, owner, 500);
        }
        for owner in 1..4 {
            for id in 0..500 {
                assert!(t.remove(owner, id).is_some(), "{name}");
            }
        }
        assert!(t.lookup(1, 0).is_none(), "{name}");
    }
}

#[test]
#[ignore = "timing run; see the module doc"]
fn seed_004_table_scenarios() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for n in [20_000, 50_000, 100_000] {
        for (name, t) in designs() {
            let (c, l) = create_then_lookup(&*t, 1, n);
            println!(
                "1 process, {n} timers, {name:8}: create {:7.2} ms, lookup {:7.2} ms",
                ms(c),
                ms(l)
            );
        }
    }
    let workers = 4;
    for (name, t) in designs() {
        let r = parallel(workers, move |w| {
            let (c, l) = create_then_lookup(&*t, 100 + w as i32, 20_000);
            let d = create_delete_loop(&*t, 1000 + w as i32, 100_000);
            (c, l, d)
        });
        let avg = |f: fn(&(Duration, Duration, Duration)) -> Duration| {
            r.iter().map(|x| ms(f(x))).sum::<f64>() / workers as f64
        };
        println!(
            "{workers} processes x 20k, {name:8}: create {:7.2} ms, lookup {:7.2} ms, 100k create+delete {:7.2} ms",
            avg(|x| x.0),
            avg(|x| x.1),
            avg(|x| x.2)
        );
    }
    for (name, t) in designs() {
        let before = t.memory_bytes();
        for n in 0..2048 {
            assert!(t.try_reserve(7, n * 512));
        }
        println!(
            "2048 timers 512 ids apart, {name:8}: {} KiB",
            (t.memory_bytes() - before) / 1024
        );
    }
}
