//! The one stable hash of the project.

/// 64-bit FNV-1a. Used wherever a hash must never change: stable ids, per-seed random streams,
/// the hashed bag-of-words embedder, checkpoint fingerprints, the scripted benchmark model.
/// Unlike `std`'s hasher it is fixed forever, so ids and results survive a toolchain update.
/// (Written here rather than taken from a crate: it is five lines, and a dependency would
/// not make it any more fixed.)
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
