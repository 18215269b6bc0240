//! A hasher for the engine's integer keys (IPC keys, indices, pids): one multiplication by the
//! golden ratio, whose high bits (the ones hashbrown uses for its control bytes and buckets)
//! mix every input bit. SipHash's protection against chosen keys is not needed here: an
//! attacker who picks 31900 colliding keys only slows their own namespace, which the limits
//! already bound, and SipHash cost 15% of a `semget` lookup.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hashing of integers.
#[derive(Default, Clone, Copy, Debug)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_i32(&mut self, n: i32) {
        self.write_u64(u64::from(n as u32));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// `HashMap<K, V, IntBuildHasher>` for integer keys.
pub type IntBuildHasher = BuildHasherDefault<IntHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn neighbouring_keys_land_far_apart_in_the_high_bits() {
        let b = IntBuildHasher::default();
        let top = |k: i32| b.hash_one(k) >> 57;
        let distinct: std::collections::HashSet<u64> = (0..128).map(top).collect();
        assert!(
            distinct.len() > 64,
            "only {} of 128 top-7-bit values",
            distinct.len()
        );
    }
}
