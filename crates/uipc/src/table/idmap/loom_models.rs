use super::*;
use loom::thread;

/// Keys whose home cell is the same in a fresh 16-cell index, so a removal must shift.
/// (Called inside the model: the index's cells are loom atomics.)
fn colliding_keys() -> (u32, u32) {
    let arr = IndexArray::new(MIN_CELLS);
    let a = 1;
    let b = (2..10_000)
        .find(|&k| arr.home(k) == arr.home(a))
        .expect("a collision exists");
    (a, b)
}

#[test]
fn lookup_racing_removal_gets_the_value_or_nothing_never_a_freed_one() {
    loom::model(|| {
        let (m, mut w) = IdMap::<u32>::new();
        let m = Arc::new(m);
        let keep = Arc::new(7u32);
        m.insert(&mut w, 3, keep.clone());
        let reader = {
            let m = m.clone();
            thread::spawn(move || m.get(3).map(|v| *v))
        };
        let removed = m.remove(&mut w, 3);
        assert_eq!(removed.map(|v| *v), Some(7));
        let seen = reader.join().unwrap();
        assert!(seen.is_none() || seen == Some(7));
        assert!(m.get(3).is_none());
    });
}

#[test]
fn removal_shifting_a_colliding_entry_never_hides_it_from_a_reader() {
    loom::model(|| {
        let (a, b) = colliding_keys();
        let (m, mut w) = IdMap::<u32>::new();
        let m = Arc::new(m);
        m.insert(&mut w, a, Arc::new(a));
        m.insert(&mut w, b, Arc::new(b));
        let reader = {
            let m = m.clone();
            thread::spawn(move || m.get(b).map(|v| *v))
        };
        m.remove(&mut w, a);
        assert_eq!(reader.join().unwrap(), Some(b), "b was live throughout");
    });
}

#[test]
fn lookup_during_growth_finds_live_entries() {
    loom::model(|| {
        let (m, mut w) = IdMap::<u32>::new();
        let m = Arc::new(m);
        for k in 0..11 {
            m.insert(&mut w, k, Arc::new(k));
        }
        let reader = {
            let m = m.clone();
            thread::spawn(move || m.get(5).map(|v| *v))
        };
        m.insert(&mut w, 11, Arc::new(11)); // 12 > 3/4 of 16 cells: grows
        assert_eq!(reader.join().unwrap(), Some(5));
    });
}
