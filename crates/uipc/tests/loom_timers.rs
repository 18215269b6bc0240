//! Loom models of the shared timer table (`uipc::timers::TimerTable`): lookups racing deletes
//! and creates. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p uipc --test loom_timers --release`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use uipc::timers::TimerTable;

type Table = Arc<TimerTable<u32>>;

/// Reserves `(owner, id)` and publishes `value` there: false if the id was taken.
fn create(t: &Table, (owner, id): (i32, i32), value: u32) -> bool {
    if !t.try_reserve(owner.into(), id.into()) {
        return false;
    }
    assert!(
        t.publish(owner.into(), id.into(), Arc::new(value)),
        "publish of a reserved id"
    );
    true
}

/// A table of `stripes` stripes with `value` created at `at`.
fn table_with(stripes: usize, at: (i32, i32), value: u32) -> Table {
    let t = Arc::new(TimerTable::with_buckets(stripes));
    assert!(create(&t, at, value));
    t
}

/// A thread running `f` on its own handle of `t`.
fn on_thread<R: 'static>(t: &Table, f: impl FnOnce(Table) -> R + 'static) -> thread::JoinHandle<R> {
    let t = t.clone();
    thread::spawn(move || f(t))
}

#[test]
fn lookup_racing_delete_sees_the_timer_or_nothing_and_delete_wins_once() {
    loom::model(|| {
        let t = table_with(2, (1, 0), 5);
        let deleter = on_thread(&t, |t| t.remove(1.into(), 0.into()).map(|v| *v));
        let second = on_thread(&t, |t| t.remove(1.into(), 0.into()).map(|v| *v));
        let seen = t.lookup(1.into(), 0.into()).map(|v| *v);
        assert!(seen.is_none() || seen == Some(5));
        let wins: Vec<_> = [deleter.join().unwrap(), second.join().unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(wins, vec![5], "exactly one delete removes the timer");
        assert!(t.lookup(1.into(), 0.into()).is_none());
    });
}

#[test]
fn lookup_never_sees_a_reserved_slot_and_racing_reservations_get_one_winner() {
    loom::model(|| {
        let t = Arc::new(TimerTable::<u32>::with_buckets(1));
        let creator = on_thread(&t, |t| create(&t, (7, 3), 1));
        let rival = on_thread(&t, |t| create(&t, (7, 3), 2));
        // Whatever the interleaving, a lookup finds a fully published value or nothing.
        let seen = t.lookup(7.into(), 3.into()).map(|v| *v);
        assert!(matches!(seen, None | Some(1) | Some(2)));
        let won = [creator.join().unwrap(), rival.join().unwrap()];
        assert_eq!(won.iter().filter(|&&w| w).count(), 1);
        assert!(t.lookup(7.into(), 3.into()).is_some());
    });
}

#[test]
fn delete_then_reuse_of_an_id_in_another_process_does_not_disturb_lookups() {
    loom::model(|| {
        let t = table_with(1, (1, 0), 10);
        let other = on_thread(&t, |t| {
            assert!(create(&t, (2, 0), 20));
            t.remove(2.into(), 0.into()).map(|v| *v)
        });
        assert_eq!(t.lookup(1.into(), 0.into()).map(|v| *v), Some(10));
        assert_eq!(other.join().unwrap(), Some(20));
        assert_eq!(t.lookup(1.into(), 0.into()).map(|v| *v), Some(10));
    });
}

#[test]
fn reserving_a_sibling_id_promotes_its_group_without_losing_or_exposing_a_timer() {
    // Ids 0 and 1 share a group: the second reservation turns the inline slot into a leaf
    // while the first timer is looked up and deleted.
    loom::model(|| {
        let t = table_with(2, (1, 0), 10);
        let sibling = on_thread(&t, |t| {
            assert!(t.try_reserve(1.into(), 1.into()));
            let seen = t.lookup(1.into(), 1.into()).map(|v| *v);
            assert!(t.publish(1.into(), 1.into(), Arc::new(11)));
            seen
        });
        let deleter = on_thread(&t, |t| t.remove(1.into(), 0.into()).map(|v| *v));
        let seen = t.lookup(1.into(), 0.into()).map(|v| *v);
        assert!(seen.is_none() || seen == Some(10));
        assert_eq!(sibling.join().unwrap(), None, "a reserved id is invisible");
        assert_eq!(deleter.join().unwrap(), Some(10));
        assert_eq!(t.lookup(1.into(), 1.into()).map(|v| *v), Some(11));
        assert!(t.lookup(1.into(), 0.into()).is_none() && !t.contains(1.into(), 0.into()));
    });
}

#[test]
fn publish_racing_the_removal_of_its_reservation_either_lands_and_is_removed_or_fails() {
    // Process exit removes a create's reservation while the create publishes.
    loom::model(|| {
        let t = Arc::new(TimerTable::<u32>::with_buckets(1));
        assert!(t.try_reserve(4.into(), 9.into()));
        assert!(
            t.try_reserve(4.into(), 8.into()),
            "a sibling keeps the group a leaf"
        );
        let creator = on_thread(&t, |t| t.publish(4.into(), 9.into(), Arc::new(90)));
        let removed = t.remove(4.into(), 9.into()).map(|v| *v);
        let published = creator.join().unwrap();
        // Publish first: the removal takes the timer. Removal first: publish finds no
        // reservation and fails (the create then undoes itself).
        assert_eq!(removed.is_some(), published);
        assert!(removed.is_none() || removed == Some(90));
        assert!(t.lookup(4.into(), 9.into()).is_none() && !t.contains(4.into(), 9.into()));
        assert!(t.contains(4.into(), 8.into()));
    });
}
