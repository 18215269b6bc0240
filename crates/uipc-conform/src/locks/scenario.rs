//! Blocking scenarios of `uipc conform locks`: F_SETLKW, F_OFD_SETLKW and blocking flock
//! requests that wait, are woken or interrupted, and deadlocks.
//!
//! They run on the second file, on which nothing else ever locks, through each worker's
//! scenario slot (a read-write description of its own), so every outcome is determined: who
//! waits, behind whom, and who is woken by which release. Each scenario starts and ends with
//! no lock on that file. The owners are distinct workers `w[0..k]`; for the fcntl scenarios
//! each owner uses POSIX or OFD locks as the scenario's `mask` says (bit `i` set: `w[i]` uses
//! OFD locks), so chains and cycles mix both kinds. How the calls are made and compared is in
//! [`super::blocking`].
//!
//! - Chain: `w[i]` holds byte `i` and waits for byte `i + 1`. The last owner's unlock wakes
//!   `w[k-2]`; each woken owner's unlock of everything wakes the next.
//! - Cycle: the same chain, closed by `w[k-1]` asking for byte 0. Linux refuses it with
//!   EDEADLK when the closing request is POSIX and it can follow the waiting owners from the
//!   lock in its way back to itself (POSIX waiters blocked by POSIX locks); otherwise the
//!   request waits, and is interrupted after [`CYCLE_ALARM_MS`]. Then the chain is released.
//! - Tree: `w[0]` holds W\[0,9\]; `w[1]` waits for W\[0,4\]; `w[2]` for W\[2,3\], which conflicts
//!   with `w[1]`'s request and so waits behind it (depth 2 in `/proc/locks`); `w[3]` for
//!   R\[5,9\], which does not (depth 1). `w[0]`'s unlock wakes `w[1]` and `w[3]`; `w[2]` waits
//!   again, now behind `w[1]`'s lock, until `w[1]` unlocks.
//! - Delayed deadlock: `w[0]`, `w[1]`, `w[2]` hold W\[2,6\], W\[9,13\], W\[17,21\]; `w[1]` waits
//!   for \[17,21\] (behind `w[2]`), then `w[2]` for \[2,15\] (behind `w[0]`, who waits for nobody).
//!   `w[0]`'s unlock leaves `w[2]` blocked by `w[1]`, who waits for it: Linux checks the woken
//!   request again and refuses it with EDEADLK where it follows POSIX waiters; otherwise it
//!   waits on and is interrupted after [`DELAYED_ALARM_MS`]. `w[2]`'s unlock then lets `w[1]`
//!   go.
//! - Interrupted: `w[0]` holds a write lock (POSIX, OFD or flock), `w[1]` waits for it and is
//!   interrupted; its request must be gone afterwards.
//! - flock, shared waiters: `w[0]` holds LOCK_EX, the others wait for LOCK_SH; all are woken.
//! - flock, upgrade: `w[0]` and `w[1]` hold LOCK_SH; `w[0]` asks for LOCK_EX, which drops its
//!   shared lock first and waits; with a third owner, that one's LOCK_SH|LOCK_NB now succeeds.
//!   The other holders' LOCK_UN wake `w[0]`.

use super::blocking::{Call, Pending, SAFETY_ALARM_MS};
use super::Run;
use uipc::locks::*;

/// How long a request that closes a cycle Linux does not detect waits before it is
/// interrupted; also how long an interrupted waiter waits.
pub const CYCLE_ALARM_MS: i64 = 50;

/// How long the delayed deadlock's last request may wait before it is interrupted: it must
/// outlast the release that (where Linux sees the cycle) fails it.
pub const DELAYED_ALARM_MS: i64 = 1000;

/// What a scenario does (see the module doc).
#[derive(Clone, Copy, Debug)]
pub enum Scenario {
    /// Waiters in a chain, released from the end.
    Chain,
    /// A chain closed into a cycle.
    Cycle,
    /// Waiters at depths 1 and 2.
    Tree,
    /// A waiter left blocked by an owner who waits for it (three owners).
    Delayed,
    /// A waiter interrupted.
    Interrupted,
    /// One LOCK_EX holder, LOCK_SH waiters.
    FlockShared,
    /// Two LOCK_SH holders, one upgrading to LOCK_EX.
    FlockUpgrade,
}

/// Whether owner `i` uses OFD locks under `mask`.
fn ofd(mask: u8, i: usize) -> bool {
    mask >> i & 1 == 1
}

/// A write lock (or unlock) request by owner `i` under `mask`.
fn lock(mask: u8, i: usize, wait: bool, l_type: i16, start: i64, len: i64) -> Call {
    let cmd = match (ofd(mask, i), wait) {
        (false, false) => F_SETLK,
        (false, true) => F_SETLKW,
        (true, false) => F_OFD_SETLK,
        (true, true) => F_OFD_SETLKW,
    };
    Call::Fcntl(cmd, Flock::new(l_type, start, len))
}

impl Run {
    /// Runs `scenario` with the owners `w` (distinct workers, at least two).
    pub(super) fn scenario(
        &mut self,
        scenario: Scenario,
        w: &[usize],
        mask: u8,
    ) -> Result<(), String> {
        let names: Vec<String> = w
            .iter()
            .enumerate()
            .map(|(i, w)| format!("w{w}{}", if ofd(mask, i) { " (OFD)" } else { "" }))
            .collect();
        let label = format!("{scenario:?} scenario of {}", names.join(", "));
        let k = w.len();
        match scenario {
            Scenario::Chain | Scenario::Cycle => {
                for (i, &owner) in w.iter().enumerate() {
                    self.both(&label, owner, lock(mask, i, false, F_WRLCK, i as i64, 1))?;
                }
                let mut pending = Vec::new();
                for (i, &owner) in w[..k - 1].iter().enumerate() {
                    let call = lock(mask, i, true, F_WRLCK, i as i64 + 1, 1);
                    pending.push(self.start(owner, call, SAFETY_ALARM_MS)?);
                    self.wait_blocked(&label, i + 1)?;
                }
                if let Scenario::Cycle = scenario {
                    let call = lock(mask, k - 1, true, F_WRLCK, 0, 1);
                    let closing = self.start(w[k - 1], call, CYCLE_ALARM_MS)?;
                    self.finish(&label, closing)?;
                    self.wait_blocked(&label, k - 1)?;
                }
                for i in (0..k).rev() {
                    self.both(&label, w[i], lock(mask, i, false, F_UNLCK, 0, 0))?;
                    if let Some(woken) = pending.pop() {
                        self.finish(&label, woken)?;
                        self.wait_blocked(&label, i.saturating_sub(1))?;
                    }
                }
            }
            Scenario::Tree => {
                self.both(&label, w[0], lock(mask, 0, false, F_WRLCK, 0, 10))?;
                let requests = [(F_WRLCK, 0, 5), (F_WRLCK, 2, 2), (F_RDLCK, 5, 5)];
                let mut pending: Vec<Option<Pending>> = Vec::new();
                for (i, &(ty, start, len)) in requests.iter().enumerate().take(k - 1) {
                    let call = lock(mask, i + 1, true, ty, start, len);
                    pending.push(Some(self.start(w[i + 1], call, SAFETY_ALARM_MS)?));
                    self.wait_blocked(&label, i + 1)?;
                }
                self.both(&label, w[0], lock(mask, 0, false, F_UNLCK, 0, 0))?;
                for at in [0, 2] {
                    if let Some(woken) = pending.get_mut(at).and_then(Option::take) {
                        self.finish(&label, woken)?;
                    }
                }
                let still = usize::from(k > 2);
                self.wait_blocked(&label, still)?;
                self.both(&label, w[1], lock(mask, 1, false, F_UNLCK, 0, 0))?;
                if let Some(woken) = pending.get_mut(1).and_then(Option::take) {
                    self.finish(&label, woken)?;
                }
                self.compare_state(&format!("{label}, after all were woken"))?;
                for (i, &owner) in w.iter().enumerate().skip(2) {
                    self.both(&label, owner, lock(mask, i, false, F_UNLCK, 0, 0))?;
                }
            }
            Scenario::Delayed => {
                let held = [(2, 5), (9, 5), (17, 5)];
                for (i, &(start, len)) in held.iter().enumerate() {
                    self.both(&label, w[i], lock(mask, i, false, F_WRLCK, start, len))?;
                }
                let call = lock(mask, 1, true, F_WRLCK, 17, 5);
                let second = self.start(w[1], call, SAFETY_ALARM_MS)?;
                self.wait_blocked(&label, 1)?;
                let call = lock(mask, 2, true, F_WRLCK, 2, 14);
                let third = self.start(w[2], call, DELAYED_ALARM_MS)?;
                self.wait_blocked(&label, 2)?;
                self.both(&label, w[0], lock(mask, 0, false, F_UNLCK, 0, 0))?;
                self.finish(&label, third)?;
                self.wait_blocked(&label, 1)?;
                self.both(&label, w[2], lock(mask, 2, false, F_UNLCK, 0, 0))?;
                self.finish(&label, second)?;
                self.both(&label, w[1], lock(mask, 1, false, F_UNLCK, 0, 0))?;
            }
            Scenario::Interrupted => {
                let (hold, wait, release) = match mask % 3 {
                    0 | 1 => (
                        lock(mask, 0, false, F_WRLCK, 0, 1),
                        lock(mask, 1, true, F_RDLCK, 0, 0),
                        lock(mask, 0, false, F_UNLCK, 0, 0),
                    ),
                    _ => (
                        Call::Flock(LOCK_EX | LOCK_NB),
                        Call::Flock(LOCK_SH),
                        Call::Flock(LOCK_UN),
                    ),
                };
                self.both(&label, w[0], hold)?;
                let waiter = self.start(w[1], wait, CYCLE_ALARM_MS)?;
                self.finish(&label, waiter)?;
                self.wait_blocked(&label, 0)?;
                self.both(&label, w[0], release)?;
            }
            Scenario::FlockShared => {
                self.both(&label, w[0], Call::Flock(LOCK_EX | LOCK_NB))?;
                let mut pending = Vec::new();
                for (i, &owner) in w[1..].iter().enumerate() {
                    pending.push(self.start(owner, Call::Flock(LOCK_SH), SAFETY_ALARM_MS)?);
                    self.wait_blocked(&label, i + 1)?;
                }
                self.both(&label, w[0], Call::Flock(LOCK_UN))?;
                for woken in pending {
                    self.finish(&label, woken)?;
                }
                self.compare_state(&format!("{label}, after the waiters were woken"))?;
                for &owner in &w[1..] {
                    self.both(&label, owner, Call::Flock(LOCK_UN))?;
                }
            }
            Scenario::FlockUpgrade => {
                self.both(&label, w[0], Call::Flock(LOCK_SH | LOCK_NB))?;
                self.both(&label, w[1], Call::Flock(LOCK_SH | LOCK_NB))?;
                let upgrade = self.start(w[0], Call::Flock(LOCK_EX), SAFETY_ALARM_MS)?;
                self.wait_blocked(&label, 1)?;
                for &owner in &w[2..] {
                    self.both(&label, owner, Call::Flock(LOCK_SH | LOCK_NB))?;
                }
                for &owner in &w[1..] {
                    self.both(&label, owner, Call::Flock(LOCK_UN))?;
                }
                self.finish(&label, upgrade)?;
                self.compare_state(&format!("{label}, after the upgrade"))?;
                self.both(&label, w[0], Call::Flock(LOCK_UN))?;
            }
        }
        self.compare_state(&format!("{label}, at its end"))
    }
}
