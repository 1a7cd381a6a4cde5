//! SplitMix64: the one small seeded generator of this crate (the random-order ablation's
//! shuffle, the retrieval benchmark's synthetic data, the tests' cases). A hand-written
//! generator instead of `rand`: its stream must never change with a dependency's version,
//! because the random-order ablation's committed results depend on it.

/// SplitMix64 (Steele, Lea and Flood): one 64-bit state, well mixed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The output function: a well-mixed 64-bit value of `z`.
    pub fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        SplitMix64::mix(self.state)
    }

    /// A value in `0..n` (0 when `n` is 0; modulo bias is negligible for small `n`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A value in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64s() {
        // The first outputs of SplitMix64 from seed 0, as the reference C code gives them.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next(), 0x6e78_9e6a_a1b9_65f4);
        let mut rng = SplitMix64::new(3);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        assert!((0..1000).all(|_| (0.0..1.0).contains(&rng.unit())));
    }
}
