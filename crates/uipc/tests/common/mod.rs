//! Helpers shared by the engine's integration tests; each test file uses some of them.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uipc::ipc::consts::IPC_SET;
use uipc::ipc::msg::{MsgctlArg, MsqidSet};
use uipc::ipc::{IpcNamespace, NamespaceOptions};
use uipc::locks::{FileId, Flock, LockManager, OfdId, OpenFile, ParkedLock, F_SETLKW};
use uipc::timers::{Notifier, SigEvent, TimerId, TimerSignal, Timers, UserPtr, CLOCK_MONOTONIC};
use uipc::{Cred, Errno, Interrupt, ManualClock, ParkCtx, Progress, WaitCtx};

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

/// The parked call `progress` holds; panics (naming the call, `what`) if it finished.
pub fn parked<T: std::fmt::Debug, P>(progress: Progress<T, P>, what: &str) -> P {
    match progress {
        Progress::Parked(p) => p,
        Progress::Done(r) => panic!("{what} finished: {r:?}"),
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

/// A file of the lock tests, on which process `pid` acts through its own open file
/// description, numbered `pid` too.
#[derive(Clone, Copy)]
pub struct LockFile(pub FileId);

impl LockFile {
    /// Process `pid`'s description of the file (empty, readable and writable).
    pub fn fd(self, pid: i32) -> OpenFile {
        rw_open(self.0, pid as u64, 0)
    }

    /// `fcntl(cmd)` by `pid` on `[start, start + len)`; a waiting command gives up (EINTR)
    /// after ten seconds, so a lost wake-up fails the test instead of hanging it.
    pub fn setlk(
        self,
        m: &LockManager,
        pid: i32,
        cmd: i32,
        ty: i16,
        start: i64,
        len: i64,
    ) -> Result<(), Errno> {
        let ctx = WaitCtx::timeout(Duration::from_secs(10));
        self.setlk_in(m, pid, cmd, Flock::new(ty, start, len), &ctx)
    }

    /// `fcntl(cmd)` by `pid` with `fl`, waiting as `ctx` says.
    pub fn setlk_in(
        self,
        m: &LockManager,
        pid: i32,
        cmd: i32,
        mut fl: Flock,
        ctx: &WaitCtx<'_>,
    ) -> Result<(), Errno> {
        m.fcntl(&Cred::root(pid), Some(&self.fd(pid)), cmd, &mut fl, ctx)
    }

    /// A F_SETLKW by `pid` that must wait, parked with `ctx`.
    pub fn park(
        self,
        m: &LockManager,
        pid: i32,
        (ty, start, len): (i16, i64, i64),
        ctx: &ParkCtx,
    ) -> ParkedLock {
        let mut fl = Flock::new(ty, start, len);
        match m.fcntl_start(
            &Cred::root(pid),
            Some(&self.fd(pid)),
            F_SETLKW,
            &mut fl,
            ctx,
        ) {
            Progress::Parked(p) => p,
            Progress::Done(r) => panic!("a conflicting F_SETLKW finished: {r:?}"),
        }
    }

    /// How many requests wait on the file.
    pub fn blocked(self, m: &LockManager) -> usize {
        m.list_file(self.0)
            .iter()
            .filter(|l| l.blocked_behind.is_some())
            .count()
    }

    /// Waits ([`uipc_testkit::wait_until`]) until `n` requests wait on the file.
    pub fn wait_blocked(self, m: &LockManager, n: usize) {
        uipc_testkit::wait_until("the blocked requests", || self.blocked(m) == n);
    }
}

/// msgctl(IPC_SET) by root: owner root, `mode`, `qbytes`.
pub fn msg_set(ns: &IpcNamespace, id: i32, mode: u32, qbytes: u64) {
    let arg = MsgctlArg::Set(MsqidSet {
        uid: 0,
        gid: 0,
        mode,
        qbytes,
    });
    ns.msgctl(&Cred::root(1), id, IPC_SET, arg).unwrap();
}

/// A CLOCK_MONOTONIC timer of `cred` on `timers`, signalling 10 with value 0.
pub fn monotonic_timer(timers: &Timers, cred: &Cred) -> TimerId {
    new_timer(timers, cred, CLOCK_MONOTONIC, SigEvent::signal(10, 0))
}

/// A timer of `cred` on `timers` and `clock`, notifying as `ev` says (the id the kernel picks).
pub fn new_timer(timers: &Timers, cred: &Cred, clock: i32, ev: SigEvent) -> TimerId {
    timers
        .timer_create(cred, clock, UserPtr::Valid(ev), UserPtr::Valid(0))
        .unwrap()
}

/// A namespace on a manual clock that starts at `secs`.
pub fn ns_with_clock(secs: i64) -> (Arc<ManualClock>, IpcNamespace) {
    let clock = Arc::new(ManualClock::new(secs));
    let ns = IpcNamespace::with_options(NamespaceOptions {
        clock: clock.clone(),
        ..Default::default()
    });
    (clock, ns)
}
