//! The bounded dense scan (a pool that keeps only its top computes most cosines approximately)
//! must return exactly what the full exact scan returns: the same entries, in the same order,
//! with every number bit for bit. `explain_with_vector` ranks every candidate with exact
//! cosines and `retrieve_with_vector_full_scan` computes every cosine exactly, while
//! `retrieve_with_vector` takes the bounded path, so the three are compared on memories
//! built to be hard for it: exact duplicates (ties broken by BM25 and id), vectors that differ
//! by less than the approximation's error bound (the approximation may order them wrongly),
//! all-equal vectors (an empty min–max range), and dimensions that are not a multiple of the
//! scan's 32 lanes.

use merit_core::model::{Embedder, ModelError};
use merit_core::{Feedback, Status};
use merit_memory::rng::SplitMix64;
use merit_memory::{
    Attempt, CandidateScore, Episode, EpisodeSource, FailureType, FinalizePolicy, Memory, Ranking,
    RetrievalQuery, StreamPos, Variant,
};

fn unit(raw: &[f64]) -> Vec<f32> {
    let norm = raw.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-300);
    raw.iter().map(|v| (v / norm) as f32).collect()
}

/// Maps each text to one of a few base directions, moved by a perturbation whose size comes
/// from `sizes` (0 gives exact duplicates; 1e-7 is far below the approximation's bound).
struct ClusteredEmbedder {
    bases: Vec<Vec<f64>>,
    sizes: Vec<f64>,
}

impl ClusteredEmbedder {
    fn new(dimension: usize, bases: usize, sizes: Vec<f64>, seed: u64) -> ClusteredEmbedder {
        let mut rng = SplitMix64::new(seed);
        let bases = (0..bases)
            .map(|_| (0..dimension).map(|_| rng.unit() * 2.0 - 1.0).collect())
            .collect();
        ClusteredEmbedder { bases, sizes }
    }

    fn vector(&self, key: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(key);
        let base = &self.bases[rng.below(self.bases.len())];
        let size = self.sizes[rng.below(self.sizes.len())];
        let raw: Vec<f64> = base
            .iter()
            .map(|&b| b + size * (rng.unit() * 2.0 - 1.0))
            .collect();
        unit(&raw)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Embedder for ClusteredEmbedder {
    fn id(&self) -> String {
        "test:clustered".into()
    }

    fn dimension(&self) -> usize {
        self.bases[0].len()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| self.vector(fnv1a(text.as_bytes())))
            .collect())
    }
}

const WORDS: &[&str] = &[
    "singer", "name", "age", "stadium", "concert", "count", "year", "country", "capacity",
];

const ERRORS: &[&str] = &[
    "no such column: nme",
    "no such table: singers",
    "misuse of aggregate function count()",
];

fn feedback(rng: &mut SplitMix64) -> Feedback {
    match rng.below(4) {
        0 => Feedback {
            status: Status::DenotationMismatch,
            error: None,
        },
        k => Feedback {
            status: Status::ExecutionError,
            error: Some(ERRORS[k - 1].to_string()),
        },
    }
}

/// A memory of `episodes` finalized episodes (about half solved, so both pools fill).
fn memory(embedder: &ClusteredEmbedder, episodes: u64, rng: &mut SplitMix64) -> Memory {
    let mut memory = Memory::for_embedder(embedder);
    for position in 0..episodes {
        let words: Vec<&str> = (0..1 + rng.below(3))
            .map(|_| WORDS[rng.below(WORDS.len())])
            .collect();
        let db = rng.below(3);
        let source = EpisodeSource {
            query_id: format!("q{position}"),
            db_id: format!("db{db}"),
            question: format!("what is the {} of each", words.join(" ")),
            evidence: String::new(),
            schema: format!("schema of db{db}"),
            stream_pos: StreamPos(position),
            method: "merit".into(),
            time: position.to_string(),
        };
        let column = WORDS[rng.below(WORDS.len())];
        let mut episode = Episode::begin(
            source,
            Attempt::new(format!("SELECT {column} FROM t{db}"), feedback(rng)),
        );
        let fixed = WORDS[rng.below(WORDS.len())];
        let last = if rng.below(2) == 0 {
            Feedback::correct()
        } else {
            feedback(rng)
        };
        episode
            .record(Attempt::new(format!("SELECT {fixed} FROM t{db}"), last))
            .expect("a second attempt is recorded");
        memory
            .commit(
                episode.finalize(FinalizePolicy::PositiveAndNegative),
                embedder,
            )
            .expect("the episode is committed");
    }
    memory
}

/// What the bounded path returned against what the full exact ranking selected.
fn compare(
    memory: &Memory,
    embedder: &ClusteredEmbedder,
    rng: &mut SplitMix64,
    queries: usize,
) -> usize {
    let mut variants: Vec<_> = Variant::ALL
        .iter()
        .map(|variant| variant.config(7))
        .filter(|config| matches!(config.ranking, Ranking::Hybrid { dense_weight, .. } if dense_weight != 0.0))
        .collect();
    // A negative dense weight, which the bounded scan does not take: the exact path again.
    let mut negative = Variant::Merit.config(7);
    negative.ranking = Ranking::Hybrid {
        dense_weight: -0.75,
        bm25_weight: 0.25,
    };
    negative.name = "negative-dense".into();
    variants.push(negative);
    let view = memory.view_at(StreamPos(u64::MAX), "probe");
    let mut compared = 0;
    for number in 0..queries {
        let column = WORDS[rng.below(WORDS.len())];
        let query = RetrievalQuery {
            question: format!("how many {column} per {}", WORDS[rng.below(WORDS.len())]),
            sql: format!("SELECT {column} FROM t{}", rng.below(3)),
            status: Status::DenotationMismatch,
            error: None,
            failure_type: FailureType::ALL[rng.below(FailureType::ALL.len())],
            db_id: format!("db{}", rng.below(3)),
            step: 1,
        };
        // Queries on a base direction (exact ties with its duplicates) and near it.
        let vector = embedder.vector(number as u64 ^ 0x5eed);
        for config in &variants {
            let retrieved: Vec<CandidateScore> = view
                .retrieve_with_vector(&query, Some(&vector), config)
                .expect("retrieval works")
                .precedents
                .into_iter()
                .map(|precedent| precedent.score)
                .collect();
            let selected: Vec<CandidateScore> = view
                .explain_with_vector(&query, Some(&vector), config)
                .expect("explanation works")
                .pools
                .into_iter()
                .flat_map(|pool| pool.candidates)
                .filter(|candidate| candidate.selected)
                .collect();
            assert_eq!(
                retrieved, selected,
                "policy {} on query {number}: the bounded scan differs from the exact one",
                config.name
            );
            let full_scan: Vec<CandidateScore> = view
                .retrieve_with_vector_full_scan(&query, Some(&vector), config)
                .expect("retrieval works")
                .precedents
                .into_iter()
                .map(|precedent| precedent.score)
                .collect();
            assert_eq!(
                retrieved, full_scan,
                "policy {} on query {number}",
                config.name
            );
            compared += retrieved.len();
        }
    }
    compared
}

#[test]
fn bounded_scan_returns_exactly_what_the_full_scan_returns() {
    let cases: &[(usize, usize, &[f64])] = &[
        // Dimension, base directions, perturbation sizes.
        (384, 4, &[0.0, 1e-7, 1e-6, 1e-5, 1e-3]),
        (100, 2, &[0.0, 1e-7]),
        (64, 1, &[0.0]),
        (17, 3, &[0.0, 1e-6, 0.5]),
        (384, 50, &[0.3, 1.0]),
    ];
    let mut rng = SplitMix64::new(42);
    let mut compared = 0;
    for (case, &(dimension, bases, sizes)) in cases.iter().enumerate() {
        let embedder = ClusteredEmbedder::new(dimension, bases, sizes.to_vec(), case as u64);
        let memory = memory(&embedder, 400, &mut rng);
        compared += compare(&memory, &embedder, &mut rng, 60);
    }
    // The comparison saw real selections, not empty pools.
    assert!(
        compared > 1000,
        "only {compared} selected candidates compared"
    );
}
