//! Helpers shared by the engine's integration tests; each test file uses some of them.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use uipc::locks::{FileId, OfdId, OpenFile};
use uipc::timers::{Notifier, TimerSignal};
use uipc::{Interrupt, ParkCtx};

/// A timer notifier that keeps every signal it is given, for the test to deliver or inspect.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<TimerSignal>>);

impl Notifier for Recorder {
    fn queue(&self, signal: TimerSignal) {
        self.0.lock().unwrap().push(signal);
    }
}

impl Recorder {
    /// The signals kept so far, which it forgets.
    pub fn take(&self) -> Vec<TimerSignal> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// Open file description `ofd` of `file`, readable and writable, at offset 0 of a file `size`
/// bytes long.
pub fn rw_open(file: FileId, ofd: u64, size: i64) -> OpenFile {
    OpenFile {
        file,
        ofd: OfdId(ofd),
        readable: true,
        writable: true,
        offset: 0,
        size,
    }
}

/// A park context whose notifications are counted, interrupted by `irq` if given.
pub fn counted(irq: Option<&Interrupt>) -> (ParkCtx, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let ctx = ParkCtx::new(
        Arc::new(move || {
            n2.fetch_add(1, Ordering::SeqCst);
        }),
        irq.cloned(),
    );
    (ctx, n)
}
