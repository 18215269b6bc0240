//! The key map's hasher ([`KeyHasher`]): IPC keys to places in hashbrown's table such that a
//! `*get` loop over consecutive keys walks the table in order.
//!
//! The engine's other hashed maps (the file map, the deadlock graph, interned permissions) use
//! `foldhash`. This one is kept by hand for its layout, which a general-purpose hasher does not
//! give: an aligned run of eight consecutive keys lands on one aligned run of eight buckets
//! (see [`KeyHasher`]). Measured against foldhash's fixed-seed hasher on the seed's own loop
//! (31900 `semget` creates, then as many lookups, in one namespace:
//! `crates/uipc/examples/keys_loop.rs` pinned to one core at real-time priority, alternating
//! builds): creates 8% and lookups 10% faster with this one (BENCHMARKS.md, "ipc-keys").
//! SipHash's protection against chosen keys is not needed: an attacker who picks 31900
//! colliding keys only slows their own namespace, which the limits already bound.

use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for IPC keys that keeps runs of neighbouring keys together.
///
/// Programs often use consecutive keys (PostgreSQL numbers its semaphore sets' keys from a
/// base; benchmarks loop `k++`), and a `*get` loop over them then walks the table in order.
/// hashbrown picks the bucket from the hash's low bits and a 7-bit tag from its top bits, so:
/// - the top 7 bits are a multiplicative hash of the whole key (neighbours get different tags,
///   so a probe compares few keys);
/// - the low bits are the key XORed with a mix of the key's upper bits (`key >> RUN_BITS`).
///   Within an aligned run of 8 keys that mix is constant, and XOR with a constant maps the
///   run onto one aligned run of 8 buckets (no collisions, two cache lines, half a probe
///   group); different runs land at unrelated places. Runs are kept short so that two runs
///   landing on the same place cost a probe step, not a long displacement. Keys that differ
///   only in their high bits (ftok keys of one file with different project ids) still spread
///   over the whole table.
#[derive(Default, Clone, Copy, Debug)]
pub struct KeyHasher(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
const TAG_BITS: u64 = 0x7f << 57;
/// Neighbouring keys stay together in aligned runs of `1 << RUN_BITS`.
pub const RUN_BITS: u32 = 3;

/// Where a run-preserving table places `x`: `x` XORed with a mix of `x >> RUN_BITS`, so an
/// aligned run of `1 << RUN_BITS` consecutive values keeps its order (see [`KeyHasher`]).
fn run_preserving(x: u64) -> u64 {
    let run = (x >> RUN_BITS).wrapping_mul(GOLDEN);
    // The product's upper half is well mixed; move it down over the bucket bits.
    x ^ ((run >> 29) & !((1 << RUN_BITS) - 1))
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_i32(&mut self, n: i32) {
        self.write_u64(u64::from(n as u32));
    }

    /// Chains `n` into the state: the top 7 bits a multiplicative hash, the rest the
    /// run-preserving place.
    fn write_u64(&mut self, n: u64) {
        let x = self.0.rotate_left(5) ^ n;
        self.0 = (x.wrapping_mul(GOLDEN) & TAG_BITS) | (run_preserving(x) & !TAG_BITS);
    }
}

/// `HashMap<K, V, KeyBuildHasher>` for IPC keys.
pub type KeyBuildHasher = BuildHasherDefault<KeyHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn key_hasher_keeps_a_run_of_keys_in_one_run_of_buckets_and_spreads_high_bit_variants() {
        let b = KeyBuildHasher::default();
        let mask = (1u64 << 16) - 1;
        let base = 0x1000_0000;
        for start in (base..base + 64).step_by(8) {
            let run: std::collections::HashSet<u64> = (start..start + 8)
                .map(|k: i32| b.hash_one(k) & mask)
                .collect();
            assert_eq!(run.len(), 8, "a run of 8 keys never shares a bucket");
            let lo = run.iter().min().unwrap();
            assert_eq!(lo % 8, 0);
            assert_eq!(
                run.iter().max().unwrap() - lo,
                7,
                "and fills one aligned run"
            );
        }
        let runs: std::collections::HashSet<u64> = (0..64)
            .map(|r: i32| b.hash_one(base + 8 * r) & mask)
            .collect();
        assert!(runs.len() > 60, "runs land apart: {} places", runs.len());
        let tags: std::collections::HashSet<u64> = (base..base + 128)
            .map(|k: i32| b.hash_one(k) >> 57)
            .collect();
        assert!(
            tags.len() > 64,
            "neighbours get varied tags: {}",
            tags.len()
        );
        // ftok keys of one file: project ids 1..=255 in the top byte, the rest equal.
        let ftok: std::collections::HashSet<u64> = (1..=255)
            .map(|p: i32| b.hash_one((p << 24) | 0x01_2345) & mask)
            .collect();
        assert!(
            ftok.len() > 200,
            "only {} buckets for 255 ftok keys",
            ftok.len()
        );
    }
}
