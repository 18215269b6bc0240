//! How uipc's in-process tables compare with the concurrent maps an embedder would otherwise
//! pick (dashmap and scc, the best-maintained ones today), on the two lookups the seeds are
//! about:
//! - id lookup: every operation (semop, msgsnd, shmat) first finds its object by id. uipc's
//!   column is the engine's [`Registry::lookup`] (no registry lock: a read lock of the index's
//!   own slot in a direct table, plus the id's sequence check); dashmap takes a shard read
//!   lock; scc's `HashIndex` reads lock-free.
//! - key lookup: `*get` finds a key. uipc's column is the engine's own [`Registry`]: its key
//!   hash map under the registry lock, taken for reading when the key exists (Linux takes its
//!   rwsem for writing); the peers are concurrent maps.
//!
//! Each cell: T threads (the machine's cores) each doing N lookups over a table of `size`
//! live entries with sparse ids, total microseconds summed over threads.

use crate::report::Table;
use crate::Bench;
use std::sync::Arc;
use std::time::Instant;
use uipc::ipc::{IpcHeader, IpcObject, IpcPerm, Registry};
use uipc::table::IdLayout;
use uipc::{Cred, Errno, IpcId, IpcKey};

/// A registry entry with nothing but its id and key.
struct KeyObj(IpcHeader);

impl IpcObject for KeyObj {
    type KeyInfo = ();
    fn header(&self) -> &IpcHeader {
        &self.0
    }
}

const LOOKUPS_PER_THREAD: usize = 200_000;

fn sizes(quick: bool) -> &'static [u32] {
    if quick {
        &[100, 10_000]
    } else {
        &[100, 1000, 10_000, 100_000]
    }
}

/// Sparse ids: what a namespace holds after churn and restores.
fn ids(n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| i.wrapping_mul(2_654_435_761) % (1 << 24))
        .collect()
}

/// Runs `lookup` from every core, `LOOKUPS_PER_THREAD` times each over `keys`; returns the
/// per-thread times summed, in microseconds.
fn hammer(keys: &Arc<Vec<u32>>, lookup: impl Fn(u32) -> bool + Send + Sync + 'static) -> f64 {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let lookup = Arc::new(lookup);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (keys, lookup) = (keys.clone(), lookup.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9u64.wrapping_mul(t as u64 + 1);
                let t0 = Instant::now();
                let mut hits = 0usize;
                for _ in 0..LOOKUPS_PER_THREAD {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    hits += usize::from(lookup(keys[(x % keys.len() as u64) as usize]));
                }
                assert_eq!(hits, LOOKUPS_PER_THREAD, "every looked-up key is live");
                t0.elapsed().as_secs_f64() * 1e6
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("lookup thread"))
        .sum()
}

/// Runs the scenario.
/// Rounds of uipc's table, dashmap and scc (in that order) into row `row` of `t`.
fn three_designs(
    b: &Bench,
    t: &mut Table,
    row: &str,
    [uipc, dashmap, scc]: [&mut dyn FnMut() -> f64; 3],
) {
    b.rounds(
        t,
        row,
        &mut [("uipc", uipc), ("dashmap", dashmap), ("scc", scc)],
    );
}

pub fn run(b: &Bench) -> Vec<Table> {
    let sizes = sizes(b.opts.quick);
    b.plan("peers", (sizes.len() * 6 * b.opts.runs) as u64);
    let cols = ["uipc", "dashmap", "scc"];
    let mut by_id = Table::new("id lookup, all cores", "live objects", "µs total", &cols);
    let mut by_key = Table::new("key lookup, all cores", "live keys", "µs total", &cols);
    for &n in sizes {
        let p = n.to_string();
        let keys = Arc::new(ids(n));

        let dash = Arc::new(dashmap::DashMap::<u32, Arc<u64>>::new());
        let scc_index = Arc::new(scc::HashIndex::<u32, Arc<u64>>::new());
        for &k in keys.iter() {
            dash.insert(k, Arc::new(u64::from(k)));
            let _ = scc_index.insert_sync(k, Arc::new(u64::from(k)));
        }
        // The engine's id lookups: a registry holding `n` objects at the same sparse indices
        // (restored ids, so each sits exactly at its index), looked up by full id.
        let by_id_reg = Arc::new(Registry::<KeyObj>::new(IdLayout::EXTENDED));
        {
            let perm = IpcPerm::new(&Cred::root(1), 0o600);
            for &k in keys.iter() {
                by_id_reg
                    .set_next_id(i64::from(k))
                    .expect("a valid next id");
                by_id_reg
                    .vacancy(&mut by_id_reg.write(), IpcKey::PRIVATE)
                    .and_then(|free| {
                        free.add(i32::MAX, (&perm, ()), |id| {
                            KeyObj(IpcHeader::new(id, IpcKey::PRIVATE))
                        })
                    })
                    .expect("the registry has room for every id");
            }
        }
        let mut uipc = || {
            let r = by_id_reg.clone();
            hammer(&keys, move |k| r.lookup(IpcId::new(k as i32)).is_ok())
        };
        let mut dashmap = || {
            let d = dash.clone();
            hammer(&keys, move |k| d.get(&k).map(|v| v.clone()).is_some())
        };
        let mut scc = || {
            let s = scc_index.clone();
            hammer(&keys, move |k| s.peek_with(&k, |_, v| v.clone()).is_some())
        };
        three_designs(b, &mut by_id, &p, [&mut uipc, &mut dashmap, &mut scc]);

        // Key lookups: the engine's registry, opening existing keys (`*get` without IPC_CREAT).
        // IPC keys are the table keys plus one, as key 0 is IPC_PRIVATE (never in the table).
        let reg = Arc::new(Registry::<KeyObj>::new(IdLayout::EXTENDED));
        {
            let mut st = reg.write();
            // The permissions every key is entered with (the lookups do not check them).
            let perm = IpcPerm::new(&Cred::root(1), 0o600);
            for &k in keys.iter() {
                let key = IpcKey::new(k as i32 + 1);
                reg.vacancy(&mut st, key)
                    .and_then(|free| {
                        free.add(i32::MAX, (&perm, ()), |id| KeyObj(IpcHeader::new(id, key)))
                    })
                    .expect("the registry has room for every key");
            }
        }
        let dkeys = Arc::new(dashmap::DashMap::<i32, u32>::new());
        let skeys = Arc::new(scc::HashMap::<i32, u32>::new());
        for &k in keys.iter() {
            dkeys.insert(k as i32, k);
            let _ = skeys.insert_sync(k as i32, k);
        }
        let mut uipc = || {
            let r = reg.clone();
            hammer(&keys, move |k| {
                r.get_or_create(
                    IpcKey::new(k as i32 + 1),
                    0,
                    |_| Err(Errno::ENOENT),
                    |_| Ok(()),
                )
                .is_ok()
            })
        };
        let mut dashmap = || {
            let d = dkeys.clone();
            hammer(&keys, move |k| d.get(&(k as i32)).is_some())
        };
        let mut scc = || {
            let s = skeys.clone();
            hammer(&keys, move |k| {
                s.read_sync(&(k as i32), |_, v| *v).is_some()
            })
        };
        three_designs(b, &mut by_key, &p, [&mut uipc, &mut dashmap, &mut scc]);
    }
    vec![by_id, by_key]
}
