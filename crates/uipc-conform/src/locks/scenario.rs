//! Blocking scenarios of `uipc conform locks`: F_SETLKW, F_OFD_SETLKW and blocking flock
//! requests that wait and are woken, and POSIX deadlocks.
//!
//! They run on the second file, on which nothing else ever locks, through each worker's
//! [`SCENARIO_SLOT`] (a read-write description of its own), so every request's outcome is
//! determined: who waits, behind whom, and who is woken by which release. Each scenario starts
//! and ends with no lock on that file.
//!
//! A blocking request is posted to its worker, which makes the call with an alarm of
//! [`HOST_ALARM_SECS`] armed (EINTR if it is never woken), and made on the engine on a thread
//! of its own with a timeout of the same length. The driver then polls until both sides show
//! the expected number of blocked requests, compares the state (the `->` lines included), and
//! releases. State is compared only at such stable points: a woken waiter that blocks again
//! is briefly in neither list.
//!
//! - POSIX / OFD chain of `k` owners: `w[i]` holds byte `i` and waits for byte `i + 1`. The
//!   last owner's unlock wakes `w[k-2]`; each woken owner's unlock of everything wakes the next.
//! - POSIX deadlock: the same chain, closed by `w[k-1]` asking for byte 0: Linux gives EDEADLK
//!   (cycles of up to 12 owners, and the run has at most [`super::WORKERS`]). OFD cycles are
//!   never detected on Linux (they would hang until the alarm), so they are not drawn.
//! - flock, shared waiters: `w[0]` holds LOCK_EX, the others wait for LOCK_SH; all are woken.
//! - flock, upgrade: `w[0]` and `w[1]` hold LOCK_SH; `w[0]` asks for LOCK_EX, which drops its
//!   shared lock first and waits; with a third owner, that one's LOCK_SH|LOCK_NB now succeeds.
//!   The other holders' LOCK_UN wake `w[0]`.

use super::worker::*;
use super::Run;
use std::time::{Duration, Instant};
use uipc::locks::*;
use uipc::{Errno, WaitCtx};

/// The alarm armed around every host call of a scenario.
pub const HOST_ALARM_SECS: i64 = 10;
/// How long the driver waits for requests to show up as blocked.
const BLOCK_POLL: Duration = Duration::from_secs(1);

/// What a scenario does (the owners are worker numbers, in the scenario's order).
#[derive(Clone, Copy, Debug)]
pub enum Scenario {
    /// A chain of POSIX waiters, released from the end.
    PosixChain,
    /// A chain of POSIX waiters closed into a cycle: EDEADLK.
    PosixDeadlock,
    /// A chain of OFD waiters, released from the end.
    OfdChain,
    /// One LOCK_EX holder, LOCK_SH waiters.
    FlockShared,
    /// Two LOCK_SH holders, one upgrading to LOCK_EX.
    FlockUpgrade,
}

/// One call of a scenario, on the scenario slot.
#[derive(Clone, Copy, Debug)]
enum Call {
    Fcntl(i32, Flock),
    Flock(i32),
}

impl Call {
    fn request(&self) -> Request {
        let mut req = match *self {
            Call::Fcntl(cmd, fl) => {
                let mut req = request(REQ_FCNTL, SCENARIO_SLOT, cmd as i64);
                req[6..11].copy_from_slice(&[
                    fl.l_type as i64,
                    fl.l_whence as i64,
                    fl.l_start,
                    fl.l_len,
                    fl.l_pid as i64,
                ]);
                req
            }
            Call::Flock(cmd) => request(REQ_FLOCK, SCENARIO_SLOT, cmd as i64),
        };
        req[5] = HOST_ALARM_SECS;
        req
    }

    fn show(&self, w: usize) -> String {
        match *self {
            Call::Fcntl(cmd, fl) => format!(
                "w{w}: fcntl(second file, {cmd}, {{type {}, start {}, len {}}})",
                fl.l_type, fl.l_start, fl.l_len
            ),
            Call::Flock(cmd) => format!("w{w}: flock(second file, {cmd:#x})"),
        }
    }
}

fn lock(cmd: i32, l_type: i16, start: i64, len: i64) -> Call {
    Call::Fcntl(cmd, Flock::new(l_type, start, len))
}

/// A call on the engine in progress on its own thread.
type Pending = std::thread::JoinHandle<Result<(), Errno>>;

impl Run {
    /// The engine's side of `call` by worker `w`, as a closure that may run on another thread.
    fn engine_call(&self, w: usize, call: Call) -> impl FnOnce() -> Result<(), Errno> + Send {
        let engine = self.engine.clone();
        let cred = self.cred(w);
        let fd = self.open_file(w, SCENARIO_SLOT);
        move || {
            let ctx = WaitCtx::timeout(Duration::from_secs(HOST_ALARM_SECS as u64));
            match call {
                Call::Fcntl(cmd, mut fl) => engine.fcntl(&cred, fd.as_ref(), cmd, &mut fl, &ctx),
                Call::Flock(cmd) => engine.flock(&cred, fd.as_ref(), cmd, &ctx),
            }
        }
    }

    /// Makes `call` on both sides and compares the results.
    fn both(&mut self, label: &str, w: usize, call: Call) -> Result<(), String> {
        let (reply, _) = self.worker(w)?.call(&call.request(), None)?;
        let engine = self.engine_call(w, call)();
        let host = super::host_result(&reply).map(|_| ());
        let op = format!("{label}: {}", call.show(w));
        self.check(&op, super::show(&host), super::show(&engine));
        Ok(())
    }

    /// Starts `call` on both sides without waiting for it.
    fn start(&mut self, w: usize, call: Call) -> Result<Pending, String> {
        self.worker(w)?.post(&call.request(), None)?;
        Ok(std::thread::spawn(self.engine_call(w, call)))
    }

    /// Waits for a started call on both sides and compares the results.
    fn finish(
        &mut self,
        label: &str,
        w: usize,
        call: Call,
        pending: Pending,
    ) -> Result<(), String> {
        let (reply, _) = self.worker(w)?.reply()?;
        let engine = pending
            .join()
            .map_err(|_| "an engine call panicked".to_string())?;
        let host = super::host_result(&reply).map(|_| ());
        let op = format!("{label}: {} (after it waited)", call.show(w));
        self.check(&op, super::show(&host), super::show(&engine));
        Ok(())
    }

    /// Blocked requests on the second file: (host, engine).
    fn blocked(&self) -> Result<(usize, usize), String> {
        let text = std::fs::read_to_string("/proc/locks").map_err(|e| e.to_string())?;
        let column = super::state::dev_ino(self.files[1]);
        let host = super::state::normalise_proc_locks(&text, &column, |p| p.to_string())
            .iter()
            .filter(|l| l.contains("-> "))
            .count();
        let engine = self
            .engine
            .list()
            .iter()
            .filter(|l| l.file == self.files[1] && l.blocked_behind.is_some())
            .count();
        Ok((host, engine))
    }

    /// Waits until both sides show `n` blocked requests, then compares the state.
    fn wait_blocked(&mut self, label: &str, n: usize) -> Result<(), String> {
        let deadline = Instant::now() + BLOCK_POLL;
        let mut counts = self.blocked()?;
        while (counts.0 < n || counts.1 < n) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
            counts = self.blocked()?;
        }
        let op = format!("{label}: number of blocked requests");
        self.check(&op, counts.0.to_string(), counts.1.to_string());
        self.compare_state(&format!("{label}, with {n} blocked"))
    }

    /// Runs `scenario` with the owners `w` (distinct workers, at least two).
    pub(super) fn scenario(&mut self, scenario: Scenario, w: &[usize]) -> Result<(), String> {
        let names: Vec<String> = w.iter().map(|w| format!("w{w}")).collect();
        let label = format!("{scenario:?} scenario of {}", names.join(", "));
        let k = w.len();
        match scenario {
            Scenario::PosixChain | Scenario::PosixDeadlock | Scenario::OfdChain => {
                let (set, wait) = match scenario {
                    Scenario::OfdChain => (F_OFD_SETLK, F_OFD_SETLKW),
                    _ => (F_SETLK, F_SETLKW),
                };
                for (i, &owner) in w.iter().enumerate() {
                    self.both(&label, owner, lock(set, F_WRLCK, i as i64, 1))?;
                }
                let mut pending = Vec::new();
                for (i, &owner) in w[..k - 1].iter().enumerate() {
                    let call = lock(wait, F_WRLCK, i as i64 + 1, 1);
                    pending.push((owner, call, self.start(owner, call)?));
                    self.wait_blocked(&label, i + 1)?;
                }
                if let Scenario::PosixDeadlock = scenario {
                    self.both(&label, w[k - 1], lock(wait, F_WRLCK, 0, 1))?;
                    self.compare_state(&format!("{label}, after the cycle was refused"))?;
                }
                let mut releaser = w[k - 1];
                while let Some((owner, call, handle)) = pending.pop() {
                    self.both(&label, releaser, lock(set, F_UNLCK, 0, 0))?;
                    self.finish(&label, owner, call, handle)?;
                    self.compare_state(&format!("{label}, after w{owner} was woken"))?;
                    releaser = owner;
                }
                self.both(&label, releaser, lock(set, F_UNLCK, 0, 0))?;
            }
            Scenario::FlockShared => {
                self.both(&label, w[0], Call::Flock(LOCK_EX | LOCK_NB))?;
                let mut pending = Vec::new();
                for (i, &owner) in w[1..].iter().enumerate() {
                    let call = Call::Flock(LOCK_SH);
                    pending.push((owner, call, self.start(owner, call)?));
                    self.wait_blocked(&label, i + 1)?;
                }
                self.both(&label, w[0], Call::Flock(LOCK_UN))?;
                for (owner, call, handle) in pending {
                    self.finish(&label, owner, call, handle)?;
                }
                self.compare_state(&format!("{label}, after the waiters were woken"))?;
                for &owner in &w[1..] {
                    self.both(&label, owner, Call::Flock(LOCK_UN))?;
                }
            }
            Scenario::FlockUpgrade => {
                self.both(&label, w[0], Call::Flock(LOCK_SH | LOCK_NB))?;
                self.both(&label, w[1], Call::Flock(LOCK_SH | LOCK_NB))?;
                let call = Call::Flock(LOCK_EX);
                let handle = self.start(w[0], call)?;
                self.wait_blocked(&label, 1)?;
                for &owner in &w[2..] {
                    self.both(&label, owner, Call::Flock(LOCK_SH | LOCK_NB))?;
                }
                for &owner in &w[1..] {
                    self.both(&label, owner, Call::Flock(LOCK_UN))?;
                }
                self.finish(&label, w[0], call, handle)?;
                self.compare_state(&format!("{label}, after the upgrade"))?;
                self.both(&label, w[0], Call::Flock(LOCK_UN))?;
            }
        }
        self.compare_state(&format!("{label}, at its end"))
    }
}
