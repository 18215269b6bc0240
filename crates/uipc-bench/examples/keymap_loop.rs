//! The key map alone on the seed's loop (`keymap_loop [KEYS [ROUNDS]]`, 31900 and 8 by
//! default): KEYS consecutive keys entered ("creates": look the key up, enter it if absent),
//! then each looked up once, in a fresh map per round, one thread. Prints each design's fastest
//! round in nanoseconds per call of the thread's CPU time.
//!
//! The designs, each doing what a `*get` would with it:
//! - `registry`: the engine's way, a hashbrown table (std's `HashMap`) hashed by the
//!   run-preserving `KeyHasher`, behind one `RwLock` taken for writing by every call (a `*get`
//!   with IPC_CREAT takes the registry's lock for writing when it is free);
//! - `dashmap behind lock`: a `DashMap` in the same place (its shard lock inside the registry's);
//! - `dashmap`, `scc`: the concurrent maps alone, with no registry lock (what a lookup would
//!   cost if opens read the map without the registry's lock; creations would still need it).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::RwLock;
use uipc::table::hash::KeyBuildHasher;

/// What the key map keeps per key: id, interned permissions, the type's size.
type Entry = (i32, u32, u32);

const BASE: i32 = 0x1000_0000;

/// This thread's CPU time in nanoseconds.
fn cpu_ns() -> u64 {
    uipc_bench::kernel::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// A key map as the loop uses it: enter `key` unless present, and look it up.
trait KeyMap: Default {
    fn create(&self, key: i32, e: Entry) -> bool;
    fn open(&self, key: i32) -> Option<Entry>;
}

#[derive(Default)]
struct Registry(RwLock<HashMap<i32, Entry, KeyBuildHasher>>);

impl KeyMap for Registry {
    fn create(&self, key: i32, e: Entry) -> bool {
        let mut m = self.0.write().unwrap();
        match m.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(e);
                true
            }
        }
    }
    fn open(&self, key: i32) -> Option<Entry> {
        self.0.write().unwrap().get(&key).copied()
    }
}

/// Enters `key` in `m` unless present.
fn dash_create(m: &dashmap::DashMap<i32, Entry>, key: i32, e: Entry) -> bool {
    match m.entry(key) {
        dashmap::Entry::Occupied(_) => false,
        dashmap::Entry::Vacant(v) => {
            v.insert(e);
            true
        }
    }
}

#[derive(Default)]
struct DashBehindLock(RwLock<()>, dashmap::DashMap<i32, Entry>);

impl KeyMap for DashBehindLock {
    fn create(&self, key: i32, e: Entry) -> bool {
        let _reg = self.0.write().unwrap();
        dash_create(&self.1, key, e)
    }
    fn open(&self, key: i32) -> Option<Entry> {
        let _reg = self.0.write().unwrap();
        self.1.get(&key).map(|e| *e)
    }
}

#[derive(Default)]
struct Dash(dashmap::DashMap<i32, Entry>);

impl KeyMap for Dash {
    fn create(&self, key: i32, e: Entry) -> bool {
        dash_create(&self.0, key, e)
    }
    fn open(&self, key: i32) -> Option<Entry> {
        self.0.get(&key).map(|e| *e)
    }
}

#[derive(Default)]
struct Scc(scc::HashMap<i32, Entry>);

impl KeyMap for Scc {
    fn create(&self, key: i32, e: Entry) -> bool {
        self.0.insert_sync(key, e).is_ok()
    }
    fn open(&self, key: i32) -> Option<Entry> {
        self.0.read_sync(&key, |_, e| *e)
    }
}

/// A design's [`measure`].
type Measure = fn(i32, usize) -> (f64, f64);

/// The fastest of `rounds` rounds of `n` creates and `n` opens, ns per call each.
fn measure<M: KeyMap>(n: i32, rounds: usize) -> (f64, f64) {
    let (mut create, mut open) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        let m = M::default();
        let t0 = cpu_ns();
        for i in 0..n {
            assert!(m.create(BASE + i, (i, 0, 1)));
        }
        let t1 = cpu_ns();
        for i in 0..n {
            black_box(m.open(BASE + i).expect("present"));
        }
        let t2 = cpu_ns();
        create = create.min((t1 - t0) as f64 / f64::from(n));
        open = open.min((t2 - t1) as f64 / f64::from(n));
    }
    (create, open)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: i32 = args.next().map_or(31900, |a| a.parse().expect("KEYS"));
    let rounds: usize = args.next().map_or(8, |a| a.parse().expect("ROUNDS"));
    let designs: [(&str, Measure); 4] = [
        ("registry", measure::<Registry>),
        ("dashmap behind lock", measure::<DashBehindLock>),
        ("dashmap", measure::<Dash>),
        ("scc", measure::<Scc>),
    ];
    for (name, run) in designs {
        let (create, open) = run(n, rounds);
        println!("{name:>20}: create {create:5.1} ns, lookup {open:5.1} ns");
    }
}
