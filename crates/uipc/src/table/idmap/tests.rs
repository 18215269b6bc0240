use super::*;
use std::collections::HashMap;

#[test]
fn lookup_cost_does_not_depend_on_how_large_the_key_is() {
    // The same number of live entries, once drawn from the default layout's indices and
    // once from the extended layout's: the probes per lookup stay the same handful (a radix
    // tree would walk more levels for the large keys).
    let draw = |range: u64| {
        let mut x = 7u64;
        let mut keys = std::collections::BTreeSet::new();
        while keys.len() < 3000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            keys.insert(((x >> 33) % range) as u32);
        }
        keys.into_iter().collect::<Vec<u32>>()
    };
    let (small, large) = (draw(32_768), draw(1 << 24));
    let mut means = Vec::new();
    for keys in [&small, &large] {
        let (m, mut w) = IdMap::<u32>::new();
        for &k in keys {
            m.insert(&mut w, k, Arc::new(k));
        }
        let probes: Vec<usize> = keys.iter().map(|&k| m.cells_probed(k)).collect();
        let mean = probes.iter().sum::<usize>() as f64 / probes.len() as f64;
        assert!(mean < 3.0, "mean probes {mean}");
        assert!(
            *probes.iter().max().unwrap() < 100,
            "primary clusters stay short"
        );
        means.push(mean);
    }
    let (one, mut w) = IdMap::<u32>::new();
    one.insert(&mut w, 1, Arc::new(1));
    one.insert(&mut w, 15_777_204, Arc::new(2));
    assert_eq!(one.cells_probed(1), one.cells_probed(15_777_204));
    assert!((means[0] - means[1]).abs() < 0.5, "{means:?}");
}

#[test]
fn a_bounded_map_stops_at_the_bound_until_its_last_free_cell() {
    let (m, mut w) = IdMap::<u32>::with_key_bound(1 << 12);
    let cells = |m: &IdMap<u32>| {
        // SAFETY: index arrays are freed only when the map is dropped.
        unsafe { &*m.index.load(SeqCst) }.cells.len()
    };
    for k in 0..(1 << 12) - 1 {
        m.insert(&mut w, k, Arc::new(k));
    }
    assert_eq!(cells(&m), 1 << 12, "an unbounded map would have 1 << 14");
    assert!((0..(1 << 12) - 1).all(|k| m.cells_probed(k) == 1));
    assert_eq!(
        m.cells_probed((1 << 12) - 1),
        1,
        "a miss stops at its empty home"
    );
    m.insert(&mut w, (1 << 12) - 1, Arc::new(0));
    assert_eq!(cells(&m), 1 << 13, "filling the last free cell grows it");
    for k in 0..1 << 12 {
        assert_eq!(
            m.remove(&mut w, k).map(|v| *v),
            Some(if k == 4095 { 0 } else { k })
        );
    }
    assert!(w.is_empty());
    let (unbounded, mut w) = IdMap::<u32>::new();
    for k in 0..(1 << 12) - 1 {
        unbounded.insert(&mut w, k, Arc::new(k));
    }
    assert_eq!(cells(&unbounded), 1 << 14);
}

#[test]
fn chunks_cover_slots_without_gaps() {
    let mut expect = (0usize, 0usize);
    for s in 0..10_000u32 {
        let got = chunk_of(s);
        assert_eq!(got, expect, "slot {s}");
        expect.1 += 1;
        if expect.1 == chunk_len(expect.0) {
            expect = (expect.0 + 1, 0);
        }
    }
}

#[test]
#[allow(clippy::map_entry)] // the model mirrors the map's own remove-or-insert calls
fn insert_get_remove_agree_with_a_hashmap_under_churn() {
    let (m, mut w) = IdMap::<u32>::new();
    let mut model = HashMap::new();
    let mut x = 12345u64;
    for _ in 0..20_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = ((x >> 33) % 700) as u32;
        if model.contains_key(&key) {
            assert_eq!(m.remove(&mut w, key).map(|v| *v), model.remove(&key));
        } else {
            m.insert(&mut w, key, Arc::new(key * 3));
            model.insert(key, key * 3);
        }
        let probe = ((x >> 20) % 700) as u32;
        assert_eq!(m.get(probe).map(|v| *v), model.get(&probe).copied());
    }
    assert_eq!(w.len(), model.len());
}

#[test]
fn memory_follows_live_entries_not_the_largest_key() {
    let (small, mut ws) = IdMap::<u64>::new();
    let (sparse, mut wp) = IdMap::<u64>::new();
    for i in 0..64u32 {
        small.insert(&mut ws, i, Arc::new(0));
        sparse.insert(&mut wp, i * 262_144, Arc::new(0));
    }
    assert_eq!(small.memory_bytes(), sparse.memory_bytes());
    assert!(sparse.get(63 * 262_144).is_some());
    assert!(small.memory_bytes() < 8192);
}

#[test]
fn removed_values_are_dropped_once_and_remaining_ones_at_drop() {
    let tracker = Arc::new(());
    let (m, mut w) = IdMap::new();
    for i in 0..100 {
        m.insert(&mut w, i, Arc::new(tracker.clone()));
    }
    assert_eq!(Arc::strong_count(&tracker), 101);
    drop(m.remove(&mut w, 5));
    assert_eq!(Arc::strong_count(&tracker), 100);
    drop(m);
    assert_eq!(Arc::strong_count(&tracker), 1);
}

#[test]
fn concurrent_readers_never_see_a_missing_live_key_while_others_churn() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    let (m, mut w) = IdMap::<u32>::new();
    let m = Arc::new(m);
    let stable: Vec<u32> = (0..50).map(|i| i * 7).collect();
    for &k in &stable {
        m.insert(&mut w, k, Arc::new(k));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (m, stable, stop, lookups) =
                (m.clone(), stable.clone(), stop.clone(), lookups.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    for &k in &stable {
                        assert_eq!(m.get(k).map(|v| *v), Some(k), "live key {k} missed");
                    }
                    lookups.fetch_add(stable.len() as u64, SeqCst);
                }
            })
        })
        .collect();
    // Churn colliding neighbours (the same hash region) until the readers have overlapped
    // a good number of removals, however the threads are scheduled.
    let mut round = 0u32;
    while round < 3000 || lookups.load(SeqCst) < 50_000 {
        let k = 1000 + (round % 300) * 7 + 1;
        m.insert(&mut w, k, Arc::new(k));
        assert_eq!(m.remove(&mut w, k).map(|v| *v), Some(k));
        round += 1;
        assert!(round < 50_000_000, "readers never ran");
    }
    stop.store(true, SeqCst);
    for r in readers {
        r.join().unwrap();
    }
}
