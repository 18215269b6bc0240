//! The messages of one queue, indexed so that every `msgrcv` selection mode is cheap.
//!
//! Linux keeps one list per queue and `find_msg` walks it, so a receiver asking for type 7
//! on a queue holding 10000 messages of type 3 visits all 10000. Here every message gets a
//! global arrival number (`seq`, strictly increasing), and three views are kept:
//!
//! - `messages`: seq -> message, in arrival order;
//! - `by_type`: mtype -> FIFO of the seqs of that type (no empty lists are kept);
//! - `heads`: seq -> mtype for the first message of each type only.
//!
//! Every removal takes the head of its type's FIFO: the first message overall, the first of
//! a type, the first of the lowest type and the first message not of type t are each the
//! oldest of their own type. So removal is O(log n) and the views never need a middle
//! deletion.
//!
//! Selection cost, n messages and T distinct types on the queue:
//!
//! | mode | how | cost |
//! |---|---|---|
//! | `Any` (msgtyp 0) | first entry of `heads` | O(log T) |
//! | `Equal(t)` | front of `by_type[t]` | O(log T) |
//! | `NotEqual(t)` (MSG_EXCEPT) | first two entries of `heads`: one is not of type t | O(log T) |
//! | `LessEqual(t)` (msgtyp < 0) | first key of `by_type`, if <= t | O(log T) |
//! | `Position(k)` (MSG_COPY) | walk `messages` in order to the k-th | O(k) |
//!
//! `visited` counts the messages a selection looked at (tests assert on it to prove the
//! shapes above).
//!
//! Locking: a `MessageStore` is plain data inside its queue's lock; every method expects the
//! caller to hold that lock.

use std::collections::{BTreeMap, VecDeque};

/// A queued message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) mtype: i64,
    pub(crate) text: Vec<u8>,
}

/// How `msgrcv` picks a message (Linux's `convert_mode`), with `msgtyp` already converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    /// msgtyp 0: the first message.
    Any,
    /// msgtyp > 0: the first of this type.
    Equal(i64),
    /// msgtyp > 0 with MSG_EXCEPT: the first not of this type.
    NotEqual(i64),
    /// msgtyp < 0: the lowest type <= this bound (|msgtyp|), first queued among equals.
    LessEqual(i64),
    /// MSG_COPY: the message at this 0-based position.
    Position(i64),
}

impl Selector {
    /// Linux's `convert_mode`: MSG_COPY first, then the sign of msgtyp, then MSG_EXCEPT.
    pub(crate) fn from_call(msgtyp: i64, copy: bool, except: bool) -> Selector {
        if copy {
            Selector::Position(msgtyp)
        } else if msgtyp == 0 {
            Selector::Any
        } else if msgtyp < 0 {
            // -LONG_MIN overflows; Linux uses LONG_MAX for it.
            Selector::LessEqual(msgtyp.checked_neg().unwrap_or(i64::MAX))
        } else if except {
            Selector::NotEqual(msgtyp)
        } else {
            Selector::Equal(msgtyp)
        }
    }

    /// `testmsg`: whether a message of type `mtype` matches (pipelined send to a sleeper).
    pub(crate) fn matches(self, mtype: i64) -> bool {
        match self {
            Selector::Any | Selector::Position(_) => true,
            Selector::Equal(t) => mtype == t,
            Selector::NotEqual(t) => mtype != t,
            Selector::LessEqual(t) => mtype <= t,
        }
    }
}

/// The messages of one queue (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct MessageStore {
    messages: BTreeMap<u64, Message>,
    by_type: BTreeMap<i64, VecDeque<u64>>,
    heads: BTreeMap<u64, i64>,
    next_seq: u64,
    /// Messages looked at by selections so far.
    pub(crate) visited: u64,
}

impl MessageStore {
    /// Number of messages (`msg_qnum`).
    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    /// Appends a message at the tail. O(log n).
    pub(crate) fn push(&mut self, msg: Message) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let fifo = self.by_type.entry(msg.mtype).or_default();
        if fifo.is_empty() {
            self.heads.insert(seq, msg.mtype);
        }
        fifo.push_back(seq);
        self.messages.insert(seq, msg);
    }

    /// The seq of the message `sel` picks, if any.
    pub(crate) fn select(&mut self, sel: Selector) -> Option<u64> {
        let found = match sel {
            Selector::Any => self.heads.keys().next().copied(),
            Selector::Equal(t) => self.by_type.get(&t).and_then(|f| f.front().copied()),
            Selector::NotEqual(t) => self
                .heads
                .iter()
                .take(2)
                .inspect(|_| self.visited += 1)
                .find(|&(_, &ty)| ty != t)
                .map(|(&seq, _)| seq),
            Selector::LessEqual(t) => self
                .by_type
                .iter()
                .next()
                .filter(|&(&ty, _)| ty <= t)
                .and_then(|(_, f)| f.front().copied()),
            Selector::Position(k) => {
                let k = usize::try_from(k).ok()?;
                if k >= self.messages.len() {
                    return None;
                }
                let visited = &mut self.visited;
                self.messages
                    .keys()
                    .inspect(|_| *visited += 1)
                    .nth(k)
                    .copied()
            }
        };
        if found.is_some() && !matches!(sel, Selector::NotEqual(_) | Selector::Position(_)) {
            self.visited += 1;
        }
        found
    }

    /// The message with this seq.
    pub(crate) fn get(&self, seq: u64) -> Option<&Message> {
        self.messages.get(&seq)
    }

    /// Removes the message with this seq, which must be the head of its type (every
    /// selection but `Position` returns such a seq). O(log n).
    pub(crate) fn remove_head(&mut self, seq: u64) -> Option<Message> {
        let msg = self.messages.remove(&seq)?;
        let fifo = self.by_type.get_mut(&msg.mtype)?;
        debug_assert_eq!(fifo.front(), Some(&seq), "only type heads are removed");
        fifo.pop_front();
        self.heads.remove(&seq);
        match fifo.front() {
            Some(&next) => {
                self.heads.insert(next, msg.mtype);
            }
            None => {
                self.by_type.remove(&msg.mtype);
            }
        }
        Some(msg)
    }

    /// The messages in arrival order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Message> {
        self.messages.values()
    }

    /// Removes every message and returns them in arrival order (the fast path's publish).
    pub(crate) fn take_all(&mut self) -> Vec<Message> {
        self.by_type.clear();
        self.heads.clear();
        std::mem::take(&mut self.messages).into_values().collect()
    }

    /// Removes every message (queue removal), returning (count, bytes).
    pub(crate) fn clear(&mut self) -> (u64, u64) {
        let count = self.messages.len() as u64;
        let bytes = self.messages.values().map(|m| m.text.len() as u64).sum();
        self.messages.clear();
        self.by_type.clear();
        self.heads.clear();
        (count, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(types: &[i64]) -> MessageStore {
        let mut s = MessageStore::default();
        for (i, &t) in types.iter().enumerate() {
            s.push(Message {
                mtype: t,
                text: vec![i as u8],
            });
        }
        s
    }

    fn take(s: &mut MessageStore, sel: Selector) -> Option<(i64, u8)> {
        let seq = s.select(sel)?;
        let m = s.remove_head(seq).unwrap();
        Some((m.mtype, m.text[0]))
    }

    #[test]
    fn lowest_type_at_most_bound_first_queued_among_equals() {
        let mut s = store(&[5, 3, 2, 3, 7]);
        let sel = Selector::from_call(-3, false, false);
        assert_eq!(take(&mut s, sel), Some((2, 2)));
        assert_eq!(take(&mut s, sel), Some((3, 1)));
        assert_eq!(take(&mut s, sel), Some((3, 3)));
        assert_eq!(take(&mut s, sel), None, "5 and 7 are above the bound");
        assert_eq!(take(&mut s, Selector::Any), Some((5, 0)));
    }

    #[test]
    fn long_min_is_treated_as_long_max() {
        assert_eq!(
            Selector::from_call(i64::MIN, false, false),
            Selector::LessEqual(i64::MAX)
        );
        assert_eq!(
            Selector::from_call(0, false, true),
            Selector::Any,
            "MSG_EXCEPT with 0"
        );
        assert_eq!(
            Selector::from_call(-4, false, true),
            Selector::LessEqual(4),
            "MSG_EXCEPT ignored for negative msgtyp"
        );
        assert_eq!(Selector::from_call(-4, true, false), Selector::Position(-4));
    }

    #[test]
    fn except_takes_first_of_other_type_and_order_survives_removals() {
        let mut s = store(&[4, 4, 9, 4, 8]);
        assert_eq!(take(&mut s, Selector::NotEqual(4)), Some((9, 2)));
        assert_eq!(take(&mut s, Selector::NotEqual(9)), Some((4, 0)));
        assert_eq!(take(&mut s, Selector::NotEqual(4)), Some((8, 4)));
        assert_eq!(take(&mut s, Selector::NotEqual(4)), None);
        assert_eq!(take(&mut s, Selector::Any), Some((4, 1)));
        assert_eq!(take(&mut s, Selector::Equal(4)), Some((4, 3)));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn position_counts_from_zero_in_arrival_order() {
        let mut s = store(&[1, 2, 3]);
        let at = |s: &mut MessageStore, k| {
            s.select(Selector::Position(k))
                .map(|q| s.get(q).unwrap().mtype)
        };
        assert_eq!(at(&mut s, 0), Some(1));
        assert_eq!(at(&mut s, 2), Some(3));
        assert_eq!(at(&mut s, 3), None);
        assert_eq!(at(&mut s, -1), None);
        assert_eq!(s.len(), 3, "positional selection does not remove");
    }

    #[test]
    fn typed_selection_does_not_visit_other_types() {
        let mut types = vec![1; 10_000];
        types.push(2);
        let mut s = store(&types);
        s.visited = 0;
        assert_eq!(take(&mut s, Selector::Equal(3)), None);
        assert_eq!(take(&mut s, Selector::Equal(2)), Some((2, 16)));
        assert_eq!(take(&mut s, Selector::LessEqual(0)), None);
        assert_eq!(take(&mut s, Selector::NotEqual(1)), None);
        assert!(s.visited <= 3, "visited {}", s.visited);
    }

    /// Linux's `find_msg`: one walk over the list in arrival order.
    fn linux_find(list: &[(u64, i64)], sel: Selector) -> Option<u64> {
        let mut found = None;
        let mut bound = match sel {
            Selector::LessEqual(t) => t,
            _ => 0,
        };
        for (count, &(seq, ty)) in list.iter().enumerate() {
            match sel {
                Selector::Position(k) if k == count as i64 => return Some(seq),
                Selector::Position(_) => {}
                Selector::LessEqual(_) if ty <= bound => {
                    if ty == 1 {
                        return Some(seq);
                    }
                    bound = ty - 1;
                    found = Some(seq);
                }
                Selector::LessEqual(_) => {}
                other if other.matches(ty) => return Some(seq),
                _ => {}
            }
        }
        found
    }

    proptest::proptest! {
        #[test]
        fn every_selection_agrees_with_a_linear_walk(
            ops in proptest::collection::vec((0u8..6, 1i64..6, -1i64..8), 1..200)
        ) {
            let mut s = MessageStore::default();
            let mut model: Vec<(u64, i64)> = Vec::new();
            let mut next = 0u64;
            for (kind, ty, arg) in ops {
                let sel = match kind {
                    0 | 1 => {
                        s.push(Message { mtype: ty, text: Vec::new() });
                        model.push((next, ty));
                        next += 1;
                        continue;
                    }
                    2 => Selector::from_call(arg, false, false),
                    3 => Selector::from_call(-arg, false, false),
                    4 => Selector::from_call(arg, false, true),
                    _ => Selector::Position(arg),
                };
                let got = s.select(sel);
                proptest::prop_assert_eq!(got, linux_find(&model, sel), "{:?}", sel);
                if let (Some(seq), false) = (got, matches!(sel, Selector::Position(_))) {
                    s.remove_head(seq).unwrap();
                    model.retain(|m| m.0 != seq);
                }
                proptest::prop_assert_eq!(s.len(), model.len());
            }
        }
    }
}
