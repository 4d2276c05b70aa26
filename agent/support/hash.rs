//! FNV-1a, 64 bits: the stable hash of board keys, journal layouts, pre-training cache
//! keys and dataset shards (stable across runs and builds, unlike the standard library's
//! hasher). Not for anything an adversary chooses.

/// A running FNV-1a hash.
#[derive(Debug, Clone, Copy)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    /// Hashes `bytes` in.
    pub fn write(&mut self, bytes: &[u8]) -> &mut Fnv64 {
        self.0 = bytes.iter().fold(self.0, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    Fnv64::default().write(bytes).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors_and_pieces_hash_as_the_whole() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(
            Fnv64::default().write(b"foo").write(b"bar").finish(),
            fnv1a(b"foobar")
        );
    }
}
