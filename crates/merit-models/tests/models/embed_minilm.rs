//! all-MiniLM-L6-v2 through candle against reference vectors computed independently (see
//! `fixtures/minilm_reference.json` for how).
//!
//! Needs the embedder's files: through the registry (the user path in
//! `MERIT_MODEL_PATH_ALL_MINILM_L6_V2`, or the local cache). When they are absent the tests are
//! skipped with a loud message, unless `MERIT_REQUIRE_MODELS=1`, where they fail.

use merit_core::model::Embedder;
use merit_models::embed::MiniLmEmbedder;
use merit_models::registry::{model_for_tests, DEFAULT_EMBEDDER};
use std::sync::OnceLock;

/// The embedder, loaded once per test binary; `None` (after a loud message) when absent.
fn embedder() -> Option<&'static MiniLmEmbedder> {
    static EMBEDDER: OnceLock<Option<MiniLmEmbedder>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            let files = model_for_tests(DEFAULT_EMBEDDER, "the embedder tests")?;
            Some(MiniLmEmbedder::load(&files.dir).expect("load the embedder"))
        })
        .as_ref()
}

struct Reference {
    text: String,
    tokens: usize,
    vector: Vec<f32>,
}

fn references() -> Vec<Reference> {
    let text = include_str!("../fixtures/minilm_reference.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("fixture is JSON");
    doc["sentences"]
        .as_array()
        .expect("sentences")
        .iter()
        .map(|entry| Reference {
            text: entry["text"].as_str().expect("text").to_string(),
            tokens: entry["tokens"].as_u64().expect("tokens") as usize,
            vector: entry["vector"]
                .as_array()
                .expect("vector")
                .iter()
                .map(|x| x.as_f64().expect("number") as f32)
                .collect(),
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
#[ignore = "needs the embedded embedder (merit models pull); run with --include-ignored, as CI does"]
fn vectors_match_the_independent_reference() {
    let Some(embedder) = embedder() else { return };
    let references = references();
    assert!(references.len() >= 5);
    assert!(
        references.iter().any(|r| r.tokens > 128),
        "the fixture must hold a sentence longer than the shipped 128-token truncation"
    );
    let texts: Vec<String> = references.iter().map(|r| r.text.clone()).collect();
    // One batch: short sentences are padded up to the long one, so this also checks that
    // padding does not leak into the mean.
    let vectors = embedder.embed(&texts).expect("embed");
    assert_eq!(vectors.len(), references.len());
    for (reference, vector) in references.iter().zip(&vectors) {
        assert_eq!(vector.len(), 384);
        let similarity = cosine(&reference.vector, vector);
        assert!(
            similarity > 0.999,
            "cosine {similarity} for {:?}",
            reference.text
        );
    }
}

#[test]
#[ignore = "needs the embedded embedder (merit models pull); run with --include-ignored, as CI does"]
fn vectors_are_unit_length_and_independent_of_the_batch() {
    let Some(embedder) = embedder() else { return };
    assert_eq!(embedder.dimension(), 384);
    assert_eq!(embedder.id(), "candle:all-MiniLM-L6-v2");
    let texts: Vec<String> = references().into_iter().map(|r| r.text).collect();
    let together = embedder.embed(&texts).expect("embed");
    for (text, batched) in texts.iter().zip(&together) {
        let alone = embedder.embed(std::slice::from_ref(text)).expect("embed");
        let norm: f64 = alone[0]
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        assert!(cosine(&alone[0], batched) > 0.99999, "{text:?}");
    }
}

#[test]
#[ignore = "needs the embedded embedder (merit models pull); run with --include-ignored, as CI does"]
fn many_texts_are_split_into_batches_in_order_and_edge_cases_work() {
    let Some(embedder) = embedder() else { return };
    assert!(embedder.embed(&[]).expect("embed nothing").is_empty());
    // 70 texts: three batches of at most 32; every vector must belong to its own text.
    let texts: Vec<String> = (0..70)
        .map(|i| format!("question number {i} about table t{}", i % 7))
        .collect();
    let vectors = embedder.embed(&texts).expect("embed");
    assert_eq!(vectors.len(), 70);
    for i in [0, 31, 32, 33, 69] {
        let alone = embedder
            .embed(std::slice::from_ref(&texts[i]))
            .expect("embed");
        assert!(cosine(&alone[0], &vectors[i]) > 0.99999, "text {i}");
    }
    // Empty and very long inputs are fine (the long one is truncated at 256 tokens).
    let odd = vec![String::new(), "word ".repeat(2000)];
    let vectors = embedder.embed(&odd).expect("embed odd inputs");
    assert!(vectors.iter().all(|v| v.iter().all(|x| x.is_finite())));
}

#[test]
#[ignore = "needs the embedded embedder (merit models pull); run with --include-ignored, as CI does"]
fn related_sentences_are_closer_than_unrelated_ones() {
    let Some(embedder) = embedder() else { return };
    let texts = [
        "How many singers do we have?",
        "What is the total number of singers?",
        "The stadium with the largest capacity hosted the most concerts.",
    ]
    .map(String::from);
    let v = embedder.embed(&texts).expect("embed");
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.2);
}
