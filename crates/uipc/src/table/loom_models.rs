//! Loom models of the direct table's slots: a lookup against the removal of its object, and
//! against the creation that fills an empty slot without the slot's gate. The object's value
//! is a loom cell written when it is built, and its drop sets a loom flag, so loom reports a
//! lookup that reads an object not yet published to it, or that holds one already dropped.
//!
//! Checked to fail when broken: with `Slot::take` not taking the gate, loom finds a lookup
//! that gets an object whose last reference was dropped under it. (The empty-slot store made
//! `Relaxed` was not caught: loom explores no reader that loads the new pointer without its
//! store's effects.)

use super::direct::DirectMap;
use crate::sync::{AtomicBool, Ordering::SeqCst};
use crate::IpcIdx;
use loom::cell::UnsafeCell;
use std::sync::Arc;

/// An object whose building and dropping loom watches.
struct Obj {
    value: UnsafeCell<u32>,
    dropped: Arc<AtomicBool>,
}

impl Obj {
    fn new(v: u32, dropped: &Arc<AtomicBool>) -> Obj {
        let o = Obj {
            value: UnsafeCell::new(0),
            dropped: Arc::clone(dropped),
        };
        o.value.with_mut(|p| {
            // SAFETY: the object is not shared yet.
            unsafe { *p = v }
        });
        o
    }
    fn value(&self) -> u32 {
        // SAFETY: only `new` writes, before the object is shared; loom checks that the
        // publication orders it before this read.
        self.value.with(|p| unsafe { *p })
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.dropped.store(true, SeqCst);
    }
}

const IDX: IpcIdx = IpcIdx::new(3);

#[test]
fn a_lookup_racing_removal_gets_a_live_object_or_none() {
    crate::sync::model(|| {
        let dropped = Arc::new(AtomicBool::new(false));
        let m = Arc::new(DirectMap::new(64));
        m.insert(IDX, Arc::new(Obj::new(7, &dropped)));
        let remover = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || drop(m.remove(IDX)))
        };
        if let Some(o) = m.get(IDX) {
            assert!(!dropped.load(SeqCst), "got an object already dropped");
            assert_eq!(o.value(), 7);
        }
        remover.join().unwrap();
        assert!(m.get(IDX).is_none());
        assert!(dropped.load(SeqCst));
    });
}

#[test]
fn a_lookup_racing_creation_reads_the_object_as_built_or_none() {
    crate::sync::model(|| {
        let dropped = Arc::new(AtomicBool::new(false));
        let m = Arc::new(DirectMap::new(64));
        // The chunk exists already, as it does for every index after the first of its chunk.
        m.insert(IpcIdx::new(0), Arc::new(Obj::new(1, &dropped)));
        let creator = {
            let (m, dropped) = (Arc::clone(&m), Arc::clone(&dropped));
            loom::thread::spawn(move || {
                assert!(m.insert(IDX, Arc::new(Obj::new(7, &dropped))).is_none());
            })
        };
        if let Some(o) = m.get(IDX) {
            assert_eq!(o.value(), 7);
        }
        creator.join().unwrap();
    });
}
