//! Applying one random operation of `uipc conform locks` to both sides.
//!
//! The host side is a request to a worker ([`super::worker`]); the engine side is the matching
//! `LockManager` call, or for descriptor operations (open, dup, passing, close, exit) the
//! bookkeeping of open file descriptions that decides what `close` and `process_exit` tell the
//! engine (see the parent module's doc).

use super::generator::{flock_text, FcntlOp, Op};
use super::worker::*;
use super::{host_result, show, Run};
use std::time::Duration;
use uipc::locks::*;
use uipc::{Errno, WaitCtx};

impl Run {
    /// Applies one operation to both sides and compares the results.
    pub(super) fn apply(&mut self, op: Op) -> Result<(), String> {
        if self.verbose && !matches!(op, Op::Fcntl(_) | Op::Flock { .. }) {
            println!("op {}: {op}", self.index);
        }
        match op {
            Op::Fcntl(FcntlOp {
                w,
                slot,
                cmd,
                fl,
                seek,
            }) => {
                let mut req = fcntl_request(slot, cmd, &fl);
                req[4] = seek.unwrap_or(-1);
                let (reply, _) = self.worker(w)?.call(&req, None)?;
                let host = host_result(&reply).map(|_| Flock {
                    l_type: reply[2] as i16,
                    l_whence: reply[3] as i16,
                    l_start: reply[4],
                    l_len: reply[5],
                    l_pid: reply[6] as i32,
                });
                if let (Some(off), Some(id)) = (seek, self.procs[w].slots[slot]) {
                    self.descriptions.get_mut(&id).expect("tracked").offset = off;
                }
                let mut answer = fl;
                let engine = self
                    .engine
                    .fcntl(
                        &self.cred(w),
                        self.open_file(w, slot).as_ref(),
                        cmd,
                        &mut answer,
                        &WaitCtx::timeout(Duration::from_secs(2)),
                    )
                    .map(|()| answer);
                let getlk = cmd == F_GETLK || cmd == F_OFD_GETLK;
                let (host, engine) = if getlk {
                    let name = |r: Result<Flock, Errno>, side: &dyn Fn(i32) -> String| {
                        show(&r.map(|f| flock_text(&f, side(f.l_pid))))
                    };
                    (
                        name(host, &|p| self.pids.host(p)),
                        name(engine, &|p| self.pids.engine(p)),
                    )
                } else {
                    (show(&host.map(|_| ())), show(&engine.map(|_| ())))
                };
                self.check(&op.to_string(), host, engine);
            }
            Op::Flock { w, slot, cmd } => {
                let (reply, _) = self
                    .worker(w)?
                    .call(&request(REQ_FLOCK, slot, cmd as i64), None)?;
                let host = host_result(&reply).map(|_| ());
                let engine = self.engine.flock(
                    &self.cred(w),
                    self.open_file(w, slot).as_ref(),
                    cmd,
                    &WaitCtx::timeout(Duration::from_secs(2)),
                );
                self.check(&op.to_string(), show(&host), show(&engine));
            }
            Op::Close { w, slot } => {
                let (reply, _) = self.worker(w)?.call(&request(REQ_CLOSE, slot, 0), None)?;
                match self.procs[w].slots[slot].take() {
                    Some(id) => {
                        Self::expect_ok(&op, &reply)?;
                        self.release(w, id);
                    }
                    None if host_result(&reply) == Err(Errno::EBADF) => {}
                    None => return Err(format!("{op}: the host closed an empty slot")),
                }
            }
            Op::Open { w, slot, flags } => {
                let (reply, _) = self
                    .worker(w)?
                    .call(&request(REQ_OPEN, slot, flags as i64), None)?;
                Self::expect_ok(&op, &reply)?;
                self.new_description(w, slot, 0, flags);
            }
            Op::Dup { w, from, to } => {
                let (reply, _) = self
                    .worker(w)?
                    .call(&request(REQ_DUP, to, from as i64), None)?;
                Self::expect_ok(&op, &reply)?;
                let id = self.procs[w].slots[from].expect("dup of an open slot");
                self.hold(w, to, id);
            }
            Op::Share {
                w,
                slot,
                to_w,
                to_slot,
            } => {
                let (_, fd) = self.worker(w)?.call(&request(REQ_SEND, slot, 0), None)?;
                let fd = fd.ok_or_else(|| format!("{op}: no descriptor came"))?;
                let sent = self
                    .worker(to_w)?
                    .call(&request(REQ_RECV, to_slot, 0), Some(fd));
                // SAFETY: the driver's own copy of the passed descriptor; the driver holds no
                // locks, so closing it changes no lock.
                unsafe { libc::close(fd) };
                Self::expect_ok(&op, &sent?.0)?;
                let id = self.procs[w].slots[slot].expect("share of an open slot");
                self.hold(to_w, to_slot, id);
            }
            Op::Truncate { size } => self.truncate(size)?,
            Op::Exit { w } => {
                if let Some(worker) = self.procs[w].worker.take() {
                    worker.exit();
                }
                for slot in 0..=SLOTS {
                    if let Some(id) = self.procs[w].slots[slot].take() {
                        self.release(w, id);
                    }
                }
                self.engine
                    .process_exit(uipc::Tgid::new(self.engine_pid(w)));
                self.pids.exit(self.procs[w].incarnation);
                self.procs[w] = self.spawn()?;
                self.open_scenario_slot(w)?;
            }
            Op::Scenario {
                scenario,
                order,
                k,
                mask,
            } => self.scenario(scenario, &order[..k], mask)?,
        }
        Ok(())
    }
}
