//! The one stable hash of the project.

/// 64-bit FNV-1a. Used wherever a hash must never change: stable ids, per-seed random streams,
/// the hashed bag-of-words embedder, checkpoint fingerprints, the scripted benchmark model.
/// Unlike `std`'s hasher it is fixed forever, so ids and results survive a toolchain update.
/// (Written here rather than taken from a crate: it is five lines, and a dependency would
/// not make it any more fixed.)
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a::new();
    hash.write(bytes);
    hash.finish()
}

/// [`fnv1a`] fed piece by piece: the hash of the pieces' concatenation, without building it
/// (a checkpoint's fingerprint runs over every tensor value).
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Fnv1a {
    /// The hash of nothing yet.
    pub fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash of everything written so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a::new()
    }
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        let mut pieces = super::Fnv1a::new();
        pieces.write(b"foo");
        pieces.write(b"bar");
        assert_eq!(pieces.finish(), fnv1a(b"foobar"));
    }
}
