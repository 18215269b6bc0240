//! The proofs a process remembers: which member of which slot each of its descriptors was
//! last proven to be ([`FlockView::prove`]), so that the next flock through the same
//! descriptor makes no `kcmp`.
//!
//! A proof stays good while three things hold, each checked at its use:
//! - the process closed no descriptor since (the caller's close count, read before the
//!   proof's `kcmp`, is unchanged): the descriptor still refers to the description proven;
//! - the slot's lease is still the epoch of the proof ([`FlockView::still`]);
//! - the member's token is still the word the proof compared, named with the caller's pid.
//!   Within an epoch a token never comes back to a word it left (it goes to another pid of
//!   the same description or to `GONE`, and `GONE` stays), and the daemon closes the
//!   descriptor a token numbers only after the token left it; so the same word in the same
//!   epoch is the same description.
//!
//! The table is an [`FdMemo`] of four words a descriptor: slot and member, token, epoch,
//! close count.

use super::FlockView;
use crate::locks::fdmemo::FdMemo;

/// One proof: descriptor `fd` of the process was member `member` of slot `slot`, whose token
/// was `token`, in lease epoch `epoch`, when the process's close count was `closes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The descriptor.
    pub fd: i32,
    /// The slot.
    pub slot: usize,
    /// The member index in the slot.
    pub member: usize,
    /// The member's token word the proof compared.
    pub token: u64,
    /// The lease epoch the proof stood on.
    pub epoch: u64,
    /// The caller's close count, read before the proof.
    pub closes: u64,
}

/// A process's remembered proofs (see the module doc).
pub struct Proofs(FdMemo<4>);

impl Default for Proofs {
    fn default() -> Self {
        Self::new()
    }
}

impl Proofs {
    /// An empty table (a `static`'s initialiser).
    #[cfg(not(loom))]
    pub const fn new() -> Proofs {
        Proofs(FdMemo::new())
    }

    /// An empty table.
    #[cfg(loom)]
    pub fn new() -> Proofs {
        Proofs(FdMemo::new())
    }

    /// The proof last remembered for descriptor `fd`, read whole, if there is one.
    pub fn get(&self, fd: i32) -> Option<Proof> {
        let [at, token, epoch, closes] = self.0.get(fd)?;
        Some(Proof {
            fd,
            slot: (at >> 8) as usize,
            member: (at & 0xff) as usize,
            token,
            epoch,
            closes,
        })
    }

    /// Remembers `p` for its descriptor, unless another writer holds the entry now.
    pub fn remember(&self, p: Proof) {
        if p.member > 0xff {
            return;
        }
        let at = ((p.slot as u64) << 8) | p.member as u64;
        self.0.remember(p.fd, [at, p.token, p.epoch, p.closes]);
    }
}

impl FlockView<'_> {
    /// Whether proof `p`, made by the caller `pid`, still stands in the slot (its epoch, and
    /// the member's token named with `pid`): the epoch to act in, else `None`. The caller
    /// checks its close count itself.
    pub fn still(&self, p: &Proof, pid: i32) -> Option<u64> {
        let (_, e, t) = self.member_now(p.slot, p.member)?;
        (e == p.epoch && t == p.token && super::names_pid(t, pid)).then_some(e)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_read_back_whole() {
        let t = Proofs::new();
        let p = Proof {
            fd: 3,
            slot: super::super::FLOCK_SLOTS - 1,
            member: super::super::MEMBERS - 1,
            token: u64::MAX - 1,
            epoch: 1 << 40,
            closes: 9,
        };
        assert_eq!(t.get(3), None);
        t.remember(p);
        assert_eq!(t.get(3), Some(p));
        assert_eq!(t.get(4), None);
    }
}
