//! Loom models of the entry seqlock: a reader's lookup against the daemon removing a key and
//! creating it again (in the same entry), and against IPC_SET rewriting the entry in place.
//! The reader must see one whole version of the entry, or none.
//!
//! Checked to fail when broken: `a_writer_without_the_odd_mark_is_seen_torn` writes the fields
//! without making `SEQ` odd first (the protocol with its first step left out) and expects the
//! model to find a reader that takes a mix of two versions.

use super::writer::{KeyRegion, KeyTable};
use super::{store_fields, words_for, Entry, Kind, TableView, ENTRY_WORDS, HEADER_WORDS, SEQ};
use crate::ipc::perm::IpcPerm;
use crate::sync::Ordering::{Relaxed, Release};
use crate::{IpcId, IpcKey};
use std::sync::Arc;

const KEY: i32 = 0x42;

fn perm(uid: u32, mode: u32) -> IpcPerm {
    IpcPerm {
        uid,
        gid: uid,
        cuid: 0,
        cgid: 0,
        mode,
    }
}

/// Whether `e` is exactly one of the versions the writer published.
fn whole(e: &Entry, versions: &[(i32, u32, u32)]) -> bool {
    versions
        .iter()
        .any(|&(id, uid, mode)| e.id == id && e.uid == uid && e.gid == uid && e.mode == mode)
}

/// A table of 8 entries per region, and its `kind` region, in which `KEY` is id 1 of uid 5
/// with mode 0600 (and `info`).
fn table_with_key(kind: Kind, info: u64) -> (Arc<KeyTable>, KeyRegion) {
    let t = Arc::new(KeyTable::owned(8));
    let r = KeyRegion::new(Arc::clone(&t), kind);
    r.put(IpcKey::new(KEY), IpcId::new(1), &perm(5, 0o600), info);
    (t, r)
}

/// A reader's lookup of `KEY` in `kind`'s region: none, or one of `versions`, never a mix.
fn read_whole(t: &KeyTable, kind: Kind, versions: &[(i32, u32, u32)]) {
    if let Some(e) = TableView::new(t.words()).lookup(kind, KEY) {
        assert!(whole(&e, versions), "torn: {e:?}");
    }
}

/// `write` on a new model thread, through its own handle of region `r`.
fn spawn_writer(
    r: &KeyRegion,
    write: impl FnOnce(&KeyRegion) + Send + 'static,
) -> loom::thread::JoinHandle<()> {
    let r = r.clone();
    loom::thread::spawn(move || write(&r))
}

#[test]
fn a_reader_sees_one_version_across_removal_and_recreation() {
    crate::sync::model(|| {
        let (t, r) = table_with_key(Kind::Msg, 0);
        let writer = spawn_writer(&r, |r| {
            r.remove(IpcKey::new(KEY));
            r.put(IpcKey::new(KEY), IpcId::new(2), &perm(6, 0o644), 0);
        });
        read_whole(&t, Kind::Msg, &[(1, 5, 0o600), (2, 6, 0o644)]);
        writer.join().unwrap();
        let e = TableView::new(t.words()).lookup(Kind::Msg, KEY).unwrap();
        assert!(whole(&e, &[(2, 6, 0o644)]));
    });
}

#[test]
fn a_reader_sees_one_version_across_ipc_set() {
    crate::sync::model(|| {
        let (t, r) = table_with_key(Kind::Sem, 1);
        let writer = spawn_writer(&r, |r| {
            r.put(IpcKey::new(KEY), IpcId::new(1), &perm(7, 0o400), 1)
        });
        // The entry is being rewritten in place, so the reader may find it busy (None: the
        // daemon answers), never a mix.
        read_whole(&t, Kind::Sem, &[(1, 5, 0o600), (1, 7, 0o400)]);
        writer.join().unwrap();
    });
}

/// The entry of `KEY` in a table of 8 entries per region (the window is the whole region, and
/// the first free entry from the hash is where `put` placed it).
fn entry_of(t: &KeyTable, kind: Kind) -> &[crate::sync::AtomicU64] {
    let start = super::window_start(KEY, 8);
    let at = HEADER_WORDS + ((kind as usize) * 8 + start) * ENTRY_WORDS;
    &t.words()[at..at + ENTRY_WORDS]
}

#[test]
#[should_panic(expected = "torn")]
fn a_writer_without_the_odd_mark_is_seen_torn() {
    crate::sync::model(|| {
        let (t, _region) = table_with_key(Kind::Sem, 1);
        assert_eq!(t.words().len(), words_for(8));
        let writer = {
            let t = Arc::clone(&t);
            loom::thread::spawn(move || {
                let e = entry_of(&t, Kind::Sem);
                let v = Entry {
                    key: KEY,
                    id: 1,
                    mode: 0o400,
                    uid: 7,
                    gid: 7,
                    cuid: 0,
                    cgid: 0,
                    info: 1,
                };
                // Broken: the fields first, then SEQ moved on by two (never odd).
                store_fields(e, Some(&v));
                let s = e[SEQ].load(Relaxed);
                e[SEQ].store(s + 2, Release);
            })
        };
        read_whole(&t, Kind::Sem, &[(1, 5, 0o600), (1, 7, 0o400)]);
        writer.join().unwrap();
    });
}
