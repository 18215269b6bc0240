//! Drawing the operations of `uipc conform locks`.
//!
//! The draw depends only on the generator and on which slots are open ([`Slots`]), which every
//! operation changes the same way whatever the host answers, so a seed replays exactly.
//!
//! Most lock requests are valid and fall on a small range (bytes 0..80), so owners meet,
//! conflict, split and merge. The rest are Linux's error cases: bad `l_type` and `l_whence`,
//! negative starts, offsets near `i64::MAX` (EOVERFLOW), negative lengths, `l_pid != 0` on the
//! OFD commands, unknown commands, read locks on write-only descriptors and the reverse, empty
//! slots (EBADF), `O_PATH` descriptors and descriptors opened with access mode 3 (neither
//! readable nor writable), and flock's invalid commands. Nothing drawn here can block: the
//! blocking commands are only drawn with an `l_type` that never waits (F_UNLCK or invalid),
//! and flock's LOCK_SH / LOCK_EX always carry LOCK_NB.

use super::scenario::Scenario;
use super::worker::SLOTS;
use crate::rng::Rng;
use uipc::locks::*;

/// Which slots of each worker hold a descriptor, and of which access mode (its open flags).
pub type Slots = Vec<[Option<i32>; SLOTS]>;

/// `fcntl(slot, cmd, &fl)` by worker `w`, after moving the description's offset to `seek` if
/// given.
#[derive(Clone, Copy, Debug)]
pub struct FcntlOp {
    /// The worker.
    pub w: usize,
    /// Its slot.
    pub slot: usize,
    /// The command.
    pub cmd: i32,
    /// The request.
    pub fl: Flock,
    /// The description's offset to set first (for SEEK_CUR).
    pub seek: Option<i64>,
}

/// A `struct flock` as the run shows it, with its `l_pid` as `pid`.
pub fn flock_text(fl: &Flock, pid: impl std::fmt::Display) -> String {
    format!(
        "{{type {}, whence {}, start {}, len {}, pid {pid}}}",
        fl.l_type, fl.l_whence, fl.l_start, fl.l_len
    )
}

/// One operation of the run.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// A lock command.
    Fcntl(FcntlOp),
    /// `flock(slot, cmd)`.
    Flock {
        /// The worker.
        w: usize,
        /// Its slot.
        slot: usize,
        /// The command.
        cmd: i32,
    },
    /// `close(slot)` of an open slot.
    Close {
        /// The worker.
        w: usize,
        /// Its slot.
        slot: usize,
    },
    /// `open(path, flags)` into an empty slot.
    Open {
        /// The worker.
        w: usize,
        /// The empty slot.
        slot: usize,
        /// `O_RDWR`, `O_RDONLY`, `O_WRONLY`, `O_PATH` or 3.
        flags: i32,
    },
    /// `dup(from)` into an empty slot of the same worker.
    Dup {
        /// The worker.
        w: usize,
        /// The open slot.
        from: usize,
        /// The empty slot.
        to: usize,
    },
    /// Pass the description in `(w, slot)` to `(to_w, to_slot)` (SCM_RIGHTS).
    Share {
        /// The sending worker.
        w: usize,
        /// Its open slot.
        slot: usize,
        /// The receiving worker.
        to_w: usize,
        /// Its empty slot.
        to_slot: usize,
    },
    /// `ftruncate` the file.
    Truncate {
        /// The new size.
        size: i64,
    },
    /// The worker exits (and a fresh one takes its place, with no descriptors).
    Exit {
        /// The worker.
        w: usize,
    },
    /// A blocking scenario on the second file, with the owners `order[..k]`.
    Scenario {
        /// What happens.
        scenario: Scenario,
        /// The workers taking part, in the scenario's order.
        order: [usize; 4],
        /// How many take part.
        k: usize,
        /// Bit `i` set: `order[i]` uses OFD locks rather than POSIX ones.
        mask: u8,
    },
}

/// A command's name, or its number when it has none.
pub fn cmd_name(cmd: i32) -> String {
    match cmd {
        F_GETLK => "F_GETLK".into(),
        F_SETLK => "F_SETLK".into(),
        F_SETLKW => "F_SETLKW".into(),
        F_OFD_GETLK => "F_OFD_GETLK".into(),
        F_OFD_SETLK => "F_OFD_SETLK".into(),
        F_OFD_SETLKW => "F_OFD_SETLKW".into(),
        other => other.to_string(),
    }
}

fn flags_name(flags: i32) -> &'static str {
    match flags {
        libc::O_RDWR => "O_RDWR",
        libc::O_RDONLY => "O_RDONLY",
        libc::O_WRONLY => "O_WRONLY",
        libc::O_PATH => "O_PATH",
        _ => "3 (no access)",
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Fcntl(c) => {
                let (w, slot) = (c.w, c.slot);
                if let Some(off) = c.seek {
                    write!(f, "w{w}: lseek(s{slot}, {off}); ")?;
                }
                let fl = flock_text(&c.fl, c.fl.l_pid);
                write!(f, "w{w}: fcntl(s{slot}, {}, {fl})", cmd_name(c.cmd))
            }
            Op::Flock { w, slot, cmd } => write!(f, "w{w}: flock(s{slot}, {cmd:#x})"),
            Op::Close { w, slot } => write!(f, "w{w}: close(s{slot})"),
            Op::Open { w, slot, flags } => write!(f, "w{w}: s{slot} = open({})", flags_name(flags)),
            Op::Dup { w, from, to } => write!(f, "w{w}: s{to} = dup(s{from})"),
            Op::Share {
                w,
                slot,
                to_w,
                to_slot,
            } => write!(
                f,
                "w{to_w}: s{to_slot} = w{w}'s s{slot}, passed over SCM_RIGHTS"
            ),
            Op::Truncate { size } => write!(f, "ftruncate(file, {size})"),
            Op::Exit { w } => write!(f, "w{w}: exit, replaced by a fresh worker"),
            Op::Scenario {
                scenario,
                order,
                k,
                mask,
            } => {
                write!(f, "{scenario:?} scenario of w{}", order[0])?;
                for w in &order[1..k] {
                    write!(f, ", w{w}")?;
                }
                write!(f, " (OFD mask {mask:#b})")
            }
        }
    }
}

/// The sizes the file is truncated to: small ones, and huge ones for SEEK_END overflows.
const SIZES: [i64; 8] = [0, 10, 37, 64, 100, 1 << 62, i64::MAX, i64::MAX - 10];

fn open_slot(rng: &mut Rng, slots: &[Option<i32>; SLOTS]) -> Option<usize> {
    let open: Vec<usize> = (0..SLOTS).filter(|&s| slots[s].is_some()).collect();
    (!open.is_empty()).then(|| *rng.pick(&open))
}

fn empty_slot(rng: &mut Rng, slots: &[Option<i32>; SLOTS]) -> Option<usize> {
    let empty: Vec<usize> = (0..SLOTS).filter(|&s| slots[s].is_none()).collect();
    (!empty.is_empty()).then(|| *rng.pick(&empty))
}

/// A slot for a lock call: mostly an open one, sometimes any (an empty one gives EBADF).
fn target_slot(rng: &mut Rng, slots: &[Option<i32>; SLOTS]) -> usize {
    match open_slot(rng, slots) {
        Some(s) if rng.chance(9, 10) => s,
        _ => rng.below(SLOTS as u64) as usize,
    }
}

fn offset(rng: &mut Rng) -> i64 {
    match rng.below(100) {
        0..=84 => rng.range(0, 80),
        85..=89 => rng.range(-40, -1),
        90..=94 => i64::MAX - rng.range(0, 20),
        95..=97 => *rng.pick(&[i64::MIN, -i64::MAX, i64::MIN + 1]),
        _ => 1 << 62,
    }
}

fn length(rng: &mut Rng) -> i64 {
    match rng.below(100) {
        0..=59 => rng.range(1, 16),
        60..=74 => 0,
        75..=89 => rng.range(-16, -1),
        90..=94 => i64::MAX,
        95..=97 => i64::MIN,
        _ => i64::MAX - rng.range(0, 20),
    }
}

fn fcntl(rng: &mut Rng, slots: &Slots) -> Op {
    let w = rng.below(slots.len() as u64) as usize;
    let slot = target_slot(rng, &slots[w]);
    let valid_type = rng.chance(9, 10);
    let l_type = if valid_type {
        *rng.pick(&[F_RDLCK, F_WRLCK, F_UNLCK])
    } else {
        *rng.pick(&[3, -1, 4, 0x100])
    };
    let cmd = match rng.below(100) {
        0..=33 => F_SETLK,
        34..=45 => F_GETLK,
        46..=79 => F_OFD_SETLK,
        80..=91 => F_OFD_GETLK,
        // Only when the call cannot wait.
        92..=95 if !valid_type || l_type == F_UNLCK => *rng.pick(&[F_SETLKW, F_OFD_SETLKW]),
        92..=95 => F_SETLK,
        _ => *rng.pick(&[12, 13, 14, 39, 4242, -1, i32::MAX]),
    };
    let l_whence = match rng.below(100) {
        0..=79 => SEEK_SET,
        80..=87 => SEEK_CUR,
        88..=95 => SEEK_END,
        _ => *rng.pick(&[3, -1, 7]),
    };
    let seek = (l_whence == SEEK_CUR).then(|| match rng.below(20) {
        0..=16 => rng.range(0, 80),
        17 => 1 << 62,
        _ => i64::MAX - rng.range(0, 20),
    });
    let l_pid = if rng.chance(1, 20) {
        *rng.pick(&[1, -1, 12345])
    } else {
        0
    };
    let fl = Flock {
        l_type,
        l_whence,
        l_start: offset(rng),
        l_len: length(rng),
        l_pid,
    };
    Op::Fcntl(FcntlOp {
        w,
        slot,
        cmd,
        fl,
        seek,
    })
}

/// Draws the next operation, given which slots are open.
pub fn draw(rng: &mut Rng, slots: &Slots) -> Op {
    let workers = slots.len() as u64;
    let w = rng.below(workers) as usize;
    match rng.below(100) {
        0..=59 => fcntl(rng, slots),
        60..=74 => {
            let slot = target_slot(rng, &slots[w]);
            let cmd = if rng.chance(6, 7) {
                *rng.pick(&[
                    LOCK_SH | LOCK_NB,
                    LOCK_EX | LOCK_NB,
                    LOCK_UN,
                    LOCK_UN | LOCK_NB,
                ])
            } else {
                *rng.pick(&[
                    0,
                    3,
                    3 | LOCK_NB,
                    LOCK_NB,
                    LOCK_MAND,
                    LOCK_MAND | LOCK_EX,
                    9,
                    16,
                    -1,
                ])
            };
            Op::Flock { w, slot, cmd }
        }
        75..=80 => match open_slot(rng, &slots[w]) {
            Some(slot) => Op::Close { w, slot },
            None => fcntl(rng, slots),
        },
        81..=88 => match empty_slot(rng, &slots[w]) {
            Some(slot) => {
                let flags = *rng.pick(&[
                    libc::O_RDWR,
                    libc::O_RDWR,
                    libc::O_RDONLY,
                    libc::O_RDONLY,
                    libc::O_WRONLY,
                    libc::O_WRONLY,
                    libc::O_PATH,
                    3,
                ]);
                Op::Open { w, slot, flags }
            }
            None => Op::Close {
                w,
                slot: rng.below(SLOTS as u64) as usize,
            },
        },
        89..=91 => match (open_slot(rng, &slots[w]), empty_slot(rng, &slots[w])) {
            (Some(from), Some(to)) => Op::Dup { w, from, to },
            _ => fcntl(rng, slots),
        },
        92..=95 => {
            let to_w = rng.below(workers) as usize;
            match (open_slot(rng, &slots[w]), empty_slot(rng, &slots[to_w])) {
                (Some(slot), Some(to_slot)) => Op::Share {
                    w,
                    slot,
                    to_w,
                    to_slot,
                },
                _ => fcntl(rng, slots),
            }
        }
        96..=97 => Op::Truncate {
            size: if rng.chance(3, 4) {
                *rng.pick(&SIZES[..5])
            } else {
                *rng.pick(&SIZES)
            },
        },
        98 if workers >= 2 => scenario(rng, workers as usize),
        _ => Op::Exit { w },
    }
}

fn scenario(rng: &mut Rng, workers: usize) -> Op {
    let mut order = [0, 1, 2, 3];
    let n = workers.min(4);
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let scenario = *rng.pick(&[
        Scenario::Chain,
        Scenario::Cycle,
        Scenario::Cycle,
        Scenario::Tree,
        Scenario::Delayed,
        Scenario::Interrupted,
        Scenario::FlockShared,
        Scenario::FlockUpgrade,
    ]);
    let most = match scenario {
        Scenario::FlockUpgrade => n.min(3),
        Scenario::Interrupted => 2,
        _ => n,
    };
    let k = match scenario {
        // Three owners exactly (a run has at least three workers).
        Scenario::Delayed => 3.min(n),
        _ => rng.range(2, most as i64) as usize,
    };
    // Half of the fcntl scenarios are all POSIX, where Linux's deadlock detection applies.
    let mask = if rng.chance(1, 2) {
        0
    } else {
        rng.below(16) as u8
    };
    Op::Scenario {
        scenario,
        order,
        k,
        mask,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `op` to the slot view the way the run's model does.
    fn follow(op: &Op, slots: &mut Slots) {
        match *op {
            Op::Open { w, slot, flags } => slots[w][slot] = Some(flags),
            Op::Close { w, slot } => slots[w][slot] = None,
            Op::Dup { w, from, to } => slots[w][to] = slots[w][from],
            Op::Share {
                w,
                slot,
                to_w,
                to_slot,
            } => slots[to_w][to_slot] = slots[w][slot],
            Op::Exit { w } => slots[w] = [None; SLOTS],
            _ => {}
        }
    }

    fn ops(seed: u64, n: usize) -> Vec<String> {
        let mut rng = Rng::new(seed);
        let mut slots: Slots = vec![[Some(libc::O_RDWR); SLOTS]; 4];
        (0..n)
            .map(|_| {
                let op = draw(&mut rng, &slots);
                follow(&op, &mut slots);
                op.to_string()
            })
            .collect()
    }

    #[test]
    fn the_same_seed_draws_the_same_operations() {
        assert_eq!(ops(7, 2000), ops(7, 2000));
        assert_ne!(ops(7, 50), ops(8, 50));
    }

    #[test]
    fn descriptor_operations_respect_which_slots_are_open_and_nothing_drawn_can_block() {
        let mut rng = Rng::new(3);
        let mut slots: Slots = vec![[None; SLOTS]; 4];
        let mut kinds = std::collections::HashSet::new();
        for _ in 0..50_000 {
            let op = draw(&mut rng, &slots);
            kinds.insert(std::mem::discriminant(&op));
            match op {
                Op::Open { w, slot, .. } => assert!(slots[w][slot].is_none(), "{op}"),
                Op::Dup { w, from, to } => {
                    assert!(slots[w][from].is_some() && slots[w][to].is_none(), "{op}")
                }
                Op::Share {
                    w,
                    slot,
                    to_w,
                    to_slot,
                } => assert!(
                    slots[w][slot].is_some() && slots[to_w][to_slot].is_none(),
                    "{op}"
                ),
                Op::Fcntl(c) if c.cmd == F_SETLKW || c.cmd == F_OFD_SETLKW => {
                    assert!(c.fl.l_type != F_RDLCK && c.fl.l_type != F_WRLCK, "{op}")
                }
                Op::Flock { cmd, .. } if cmd & LOCK_MAND == 0 => {
                    let waits = matches!(cmd & !LOCK_NB, LOCK_SH | LOCK_EX);
                    assert!(!waits || cmd & LOCK_NB != 0, "{op}")
                }
                _ => {}
            }
            follow(&op, &mut slots);
        }
        assert_eq!(kinds.len(), 9, "every kind of operation is drawn");
    }
}
