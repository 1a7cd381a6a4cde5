//! A deterministic, model-free [`Embedder`] for tests, benchmarks and offline inspection.

use crate::text::bm25_tokens;
use merit_core::hash::fnv1a;
use merit_core::model::{Embedder, ModelError};

/// Hashed bag of words: each `[a-z0-9_]+` token adds ±1 to one coordinate chosen by a hash of
/// the token, and the sum is scaled to unit length. Texts sharing words get a positive cosine;
/// it captures no meaning beyond that. A text without tokens maps to the first basis vector,
/// so every vector is unit length as the trait promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashEmbedder {
    dimension: usize,
}

impl HashEmbedder {
    /// An embedder producing `dimension`-dimensional vectors (at least 1).
    pub fn new(dimension: usize) -> HashEmbedder {
        HashEmbedder {
            dimension: dimension.max(1),
        }
    }

    /// Embeds one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0f64; self.dimension];
        for token in bm25_tokens(text) {
            let hash = fnv1a(token.as_bytes());
            let index = (hash % self.dimension as u64) as usize;
            let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
            vector[index] += sign;
        }
        let norm = vector.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm == 0.0 {
            let mut unit = vec![0.0f32; self.dimension];
            unit[0] = 1.0;
            return unit;
        }
        vector.iter().map(|v| (v / norm) as f32).collect()
    }
}

impl Embedder for HashEmbedder {
    fn id(&self) -> String {
        format!("merit-memory:hash-bow-{}", self.dimension)
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts.iter().map(|text| self.embed_one(text)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        let embedder = HashEmbedder::new(64);
        for text in ["", "no such column: name", "SELECT count(*) FROM singer"] {
            let a = embedder.embed_one(text);
            let b = embedder.embed_one(text);
            assert_eq!(a, b);
            let norm: f64 = a.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            assert!((norm - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn shared_words_mean_positive_similarity() {
        let embedder = HashEmbedder::new(256);
        let a = embedder.embed_one("singer name country");
        let b = embedder.embed_one("singer name age");
        let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!(dot > 0.3);
    }
}
