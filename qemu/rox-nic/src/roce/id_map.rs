//! Maps keyed by the device's small integer ids (QPNs, CQ, SRQ and MR/MW key indices), looked
//! up for every packet and WQE: a multiplicative hash instead of std's SipHash, which cost
//! about 100 instructions per lookup on the data path.
//!
//! The ids are the device's own (allocated in sequence), so a table never holds keys chosen
//! to collide; a packet may name any id, but a lookup of an absent one costs one probe like
//! any other. That is why a keyed hash is not needed here.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by device ids, hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` of device ids, hashed with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing: the key times 2^64/φ. Sequential ids land in distinct buckets (the
/// multiplier is odd, so the low bits stay a bijection) and the top bits hashbrown tags
/// entries with are well mixed.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

const PHI_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(PHI_MULTIPLIER);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only for keys that are not plain integers (none on the data path).
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rox_uapi::ids::Qpn;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_spread_over_buckets_and_tags() {
        let build = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (2u32..1026)
            .map(|id| build.hash_one(Qpn::new(id).unwrap()))
            .collect();
        // 1,024 ids in a table of 1,024 buckets: each gets its own.
        let mut buckets: Vec<u64> = hashes.iter().map(|h| h & 1023).collect();
        buckets.sort_unstable();
        buckets.dedup();
        assert_eq!(buckets.len(), 1024);
        // hashbrown's 7-bit tags (the top bits) take many values, not a few.
        let mut tags: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
        tags.sort_unstable();
        tags.dedup();
        assert!(tags.len() > 100, "{} tags", tags.len());
    }

    #[test]
    fn a_map_finds_what_it_holds_and_nothing_else() {
        let mut map: IdMap<u32, u32> = IdMap::default();
        for id in (1..5000).step_by(7) {
            map.insert(id, id * 2);
        }
        for id in 1..5000 {
            assert_eq!(map.get(&id).copied(), (id % 7 == 1).then_some(id * 2));
        }
        let set: IdSet<u64> = [3, 1 << 40, 3].into_iter().collect();
        assert_eq!(set.len(), 2);
    }
}
