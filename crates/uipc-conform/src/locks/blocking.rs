//! Calls that may block, on both sides, for the [`super::scenario`]s.
//!
//! All of them go to the second file, through the worker's [`SCENARIO_SLOT`]. A host call is
//! made by its worker with a `SIGALRM` timer armed ([`SAFETY_ALARM_MS`] unless the scenario
//! wants it interrupted sooner): a call still waiting when it fires ends with EINTR. The
//! engine's side runs on a thread of its own with a timeout of the same length and an
//! [`Interrupt`] the driver can raise, which is how an interrupted host call is mirrored:
//! once the host call has ended, the interrupt is raised, and an engine call still waiting
//! ends with EINTR too.
//!
//! Before comparing state with requests waiting, the driver polls until both sides show the
//! expected number of blocked requests (at most `BLOCK_POLL`): a woken waiter that has to
//! wait again is briefly in neither list.

use super::worker::*;
use super::Run;
use std::time::{Duration, Instant};
use uipc::locks::*;
use uipc::{Errno, Interrupt, WaitCtx};

/// The timer armed around every blocking host call: long enough never to fire in a run where
/// the engine and the host agree, short enough that a stuck request cannot hang the run.
pub const SAFETY_ALARM_MS: i64 = 10_000;
/// How long the driver waits for requests to show up as blocked (generous: the machine may
/// be busy), and for an engine call to end once the host call has.
const BLOCK_POLL: Duration = Duration::from_secs(3);

/// One call of a scenario, on the scenario slot.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    /// `fcntl(cmd, &fl)`.
    Fcntl(i32, Flock),
    /// `flock(cmd)`.
    Flock(i32),
}

impl Call {
    fn request(&self, alarm_ms: i64) -> Request {
        let mut req = match *self {
            Call::Fcntl(cmd, fl) => fcntl_request(SCENARIO_SLOT, cmd, &fl),
            Call::Flock(cmd) => request(REQ_FLOCK, SCENARIO_SLOT, cmd as i64),
        };
        req[5] = alarm_ms;
        req
    }

    fn show(&self, w: usize) -> String {
        match *self {
            Call::Fcntl(cmd, fl) => format!(
                "w{w}: fcntl(second file, {}, {{type {}, start {}, len {}}})",
                super::generator::cmd_name(cmd),
                fl.l_type,
                fl.l_start,
                fl.l_len
            ),
            Call::Flock(cmd) => format!("w{w}: flock(second file, {cmd:#x})"),
        }
    }
}

/// A call in progress on both sides.
pub struct Pending {
    w: usize,
    call: Call,
    engine: std::thread::JoinHandle<Result<(), Errno>>,
    interrupt: Interrupt,
}

impl Run {
    /// The engine's side of `call` by worker `w`, as a closure that may run on another thread.
    fn engine_call(
        &self,
        w: usize,
        call: Call,
        interrupt: Interrupt,
    ) -> impl FnOnce() -> Result<(), Errno> + Send {
        let engine = self.engine.clone();
        let cred = self.cred(w);
        let fd = self.open_file(w, SCENARIO_SLOT);
        move || {
            let ctx = WaitCtx::timeout(Duration::from_millis(SAFETY_ALARM_MS as u64))
                .interruptible(&interrupt);
            match call {
                Call::Fcntl(cmd, mut fl) => engine.fcntl(&cred, fd.as_ref(), cmd, &mut fl, &ctx),
                Call::Flock(cmd) => engine.flock(&cred, fd.as_ref(), cmd, &ctx),
            }
        }
    }

    /// Makes `call`, which is not expected to wait, on both sides and compares the results.
    pub(super) fn both(&mut self, label: &str, w: usize, call: Call) -> Result<(), String> {
        let (reply, _) = self.worker(w)?.call(&call.request(SAFETY_ALARM_MS), None)?;
        let engine = self.engine_call(w, call, Interrupt::new())();
        let host = super::host_result(&reply).map(|_| ());
        let op = format!("{label}: {}", call.show(w));
        self.check(&op, super::show(&host), super::show(&engine));
        Ok(())
    }

    /// Starts `call` on both sides without waiting for it; on the host it is interrupted after
    /// `alarm_ms` if still waiting.
    pub(super) fn start(&mut self, w: usize, call: Call, alarm_ms: i64) -> Result<Pending, String> {
        self.worker(w)?.post(&call.request(alarm_ms), None)?;
        let interrupt = Interrupt::new();
        let engine = std::thread::spawn(self.engine_call(w, call, interrupt.clone()));
        Ok(Pending {
            w,
            call,
            engine,
            interrupt,
        })
    }

    /// Waits for a started call on both sides and compares the results. Once the host call has
    /// ended with EINTR, an engine call still waiting is interrupted (see the module doc); once
    /// it has ended otherwise, the engine call gets [`BLOCK_POLL`] to end too, and is then
    /// interrupted and reported as still waiting.
    pub(super) fn finish(&mut self, label: &str, pending: Pending) -> Result<(), String> {
        let (reply, _) = self.worker(pending.w)?.reply()?;
        let host = super::host_result(&reply).map(|_| ());
        let mut stuck = false;
        if host == Err(Errno::EINTR) {
            pending.interrupt.raise();
        } else {
            let deadline = Instant::now() + BLOCK_POLL;
            while !pending.engine.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
            if !pending.engine.is_finished() {
                stuck = true;
                pending.interrupt.raise();
            }
        }
        let engine = pending
            .engine
            .join()
            .map_err(|_| "an engine call panicked".to_string())?;
        let mut engine = super::show(&engine);
        if stuck {
            engine = format!(
                "still waiting {BLOCK_POLL:?} after the host call returned \
                 ({engine} once interrupted)"
            );
        }
        let op = format!(
            "{label}: {} (started earlier)",
            pending.call.show(pending.w)
        );
        self.check(&op, super::show(&host), engine);
        Ok(())
    }

    /// Blocked requests on the second file: (host, engine).
    fn blocked(&self) -> Result<(usize, usize), String> {
        let host = super::state::host_lines(&self.files[1..], |p| Some(p.to_string()))?
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
    pub(super) fn wait_blocked(&mut self, label: &str, n: usize) -> Result<(), String> {
        let deadline = Instant::now() + BLOCK_POLL;
        let mut counts = self.blocked()?;
        while (counts.0 != n || counts.1 != n) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
            counts = self.blocked()?;
        }
        let op = format!("{label}: number of blocked requests (expected {n})");
        self.check(&op, counts.0.to_string(), counts.1.to_string());
        self.compare_state(&format!("{label}, with {n} blocked"))
    }
}
