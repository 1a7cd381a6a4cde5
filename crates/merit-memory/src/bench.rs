//! A retrieval benchmark on synthetic memories: latency percentiles and memory footprint at
//! several sizes, with dense random unit vectors (`merit bench memory` prints it).
//!
//! The query embedding is computed before timing starts, so the numbers are the memory's own
//! cost: legality scan, candidate selection, the bounded cosine scan, BM25 and ranking; each
//! row also times the full exact cosine scan on the same queries as its baseline (and checks
//! that both return the same precedents). Episodes
//! enter the memory the normal way (finalize, commit), so the benchmark measures the real
//! data structures.

use crate::classify::classify_feedback;
use crate::config::{RetrievalConfig, Variant};
use crate::entry::StreamPos;
use crate::episode::{Attempt, Episode, EpisodeSource, FinalizePolicy};
use crate::failure::FailureType;
use crate::memory::{Memory, MemoryError};
use crate::retrieve::{Retrieval, RetrievalError, RetrievalQuery};
use crate::rng::SplitMix64;
use crate::store::serialize_entry;
use crate::text::query_dense_text;
use merit_core::hash::fnv1a;
use merit_core::model::{Embedder, ModelError};
use merit_core::{Feedback, Status};
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchConfig {
    /// Memory sizes (entries).
    pub sizes: Vec<usize>,
    /// Vector dimension.
    pub dimension: usize,
    /// Distinct retrieval queries per size and policy.
    pub queries: usize,
    /// Times each query is repeated; the best of them is kept as that query's noise-free
    /// estimate (a busy machine preempts some runs, rarely all of them).
    pub repeats: usize,
    /// Seed of the synthetic data.
    pub seed: u64,
    /// Policies to time.
    pub variants: Vec<Variant>,
}

/// One measured size and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// Entries in the memory.
    pub entries: usize,
    /// Policy name.
    pub policy: String,
    /// Median latency over every timed retrieval, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile latency over every timed retrieval, milliseconds.
    pub p99_ms: f64,
    /// Median over queries of each query's best repetition, milliseconds.
    pub best_p50_ms: f64,
    /// 99th percentile over queries of each query's best repetition, milliseconds.
    pub best_p99_ms: f64,
    /// [`Memory::heap_bytes`] per entry.
    pub heap_bytes_per_entry: f64,
    /// Growth of the process's resident memory while building, per entry (Linux only).
    pub rss_bytes_per_entry: Option<f64>,
    /// Serialized JSONL bytes per entry.
    pub jsonl_bytes_per_entry: f64,
    /// Seconds to build the memory (commit every episode, embed, index).
    pub build_seconds: f64,
    /// Precedents returned over all timed retrievals (to show real work was done).
    pub retrieved: usize,
    /// The same median with every candidate's cosine computed exactly
    /// ([`MemoryView::retrieve_with_vector_full_scan`](crate::MemoryView::retrieve_with_vector_full_scan)),
    /// the baseline of the bounded scan, timed in the same run on the same queries.
    pub full_scan_p50_ms: f64,
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Invalid configuration.
    #[error("{0}")]
    Config(String),
    /// Building the memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A retrieval failed.
    #[error(transparent)]
    Retrieval(#[from] RetrievalError),
    /// Embedding failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Dense pseudo-random unit vectors derived from the text: realistic for the scan's cost
/// (every coordinate non-zero), reproducible, and free.
struct RandomEmbedder {
    dimension: usize,
}

impl Embedder for RandomEmbedder {
    fn id(&self) -> String {
        format!("bench:random-{}", self.dimension)
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut rng = SplitMix64::new(fnv1a(text.as_bytes()));
                let raw: Vec<f64> = (0..self.dimension)
                    .map(|_| rng.unit() * 2.0 - 1.0)
                    .collect();
                let norm = raw.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
                raw.iter().map(|v| (v / norm) as f32).collect()
            })
            .collect())
    }
}

const WORDS: &[&str] = &[
    "singer",
    "name",
    "age",
    "country",
    "stadium",
    "concert",
    "year",
    "capacity",
    "average",
    "student",
    "pet",
    "weight",
    "owner",
    "course",
    "teacher",
    "grade",
    "city",
    "population",
    "airport",
    "flight",
    "airline",
    "employee",
    "salary",
    "department",
    "manager",
    "order",
    "product",
    "price",
    "customer",
    "address",
    "phone",
    "email",
    "album",
    "track",
    "genre",
    "artist",
    "movie",
    "director",
    "rating",
    "review",
    "budget",
    "location",
    "team",
    "player",
    "match",
    "score",
    "season",
    "game",
    "hospital",
    "doctor",
    "nurse",
    "patient",
    "room",
];

const ERRORS: &[(&str, Status)] = &[
    ("no such column: {w}", Status::ExecutionError),
    ("no such table: {w}s", Status::ExecutionError),
    ("near \"{w}\": syntax error", Status::ExecutionError),
    (
        "misuse of aggregate function count()",
        Status::ExecutionError,
    ),
];

fn words(rng: &mut SplitMix64, count: usize) -> Vec<&'static str> {
    (0..count).map(|_| WORDS[rng.below(WORDS.len())]).collect()
}

/// A plausible failed attempt: 85 % executable but wrong (Result Mismatch), the rest DBMS
/// errors of several types, roughly as in the paper's Spider failure composition.
fn failing_attempt(rng: &mut SplitMix64) -> Attempt {
    let w = words(rng, 4);
    let sql = format!(
        "SELECT T1.{}, count(*) FROM {} AS T1 JOIN {} AS T2 ON T1.{}_id = T2.{}_id WHERE T1.{} > {} GROUP BY T1.{}",
        w[0], w[1], w[2], w[1], w[1], w[3], rng.below(100), w[0]
    );
    let feedback = if rng.below(100) < 85 {
        Feedback {
            status: Status::DenotationMismatch,
            error: None,
        }
    } else {
        let (template, status) = ERRORS[rng.below(ERRORS.len())];
        Feedback {
            status,
            error: Some(template.replace("{w}", w[0])),
        }
    };
    Attempt::new(sql, feedback)
}

fn synthetic_episode(rng: &mut SplitMix64, position: u64) -> Episode {
    let db = format!("db_{}", rng.below(40));
    let source = EpisodeSource {
        query_id: format!("q{position}"),
        db_id: db.clone(),
        question: format!(
            "What is the {} of each {} with {} above {}?",
            words(rng, 1)[0],
            words(rng, 1)[0],
            words(rng, 2).join(" "),
            rng.below(500)
        ),
        evidence: String::new(),
        schema: format!("CREATE TABLE {db}_main (id int, name text, value real)"),
        stream_pos: StreamPos(position),
        method: "merit".into(),
        time: position.to_string(),
    };
    let mut episode = Episode::begin(source, failing_attempt(rng));
    let revision = {
        let mut attempt = failing_attempt(rng);
        // 70 % of episodes end solved (positive entries), the rest unsolved (negative).
        if rng.below(100) < 70 {
            attempt.feedback = Feedback::correct();
        }
        attempt
    };
    // Recording can only fail on a solved episode, and the initial attempt never is.
    let _ = episode.record(revision);
    episode
}

fn random_query(rng: &mut SplitMix64) -> RetrievalQuery {
    let attempt = failing_attempt(rng);
    let failure_type = classify_feedback(&attempt.feedback)
        .map_or(FailureType::ResultMismatch, |c| c.failure_type);
    RetrievalQuery {
        question: format!(
            "How many {} have {} {}?",
            words(rng, 1)[0],
            words(rng, 1)[0],
            words(rng, 1)[0]
        ),
        sql: attempt.sql,
        status: attempt.feedback.status,
        error: attempt.feedback.error,
        failure_type,
        db_id: format!("db_{}", rng.below(40)),
        step: 1,
    }
}

/// Resident set size of this process in bytes (Linux), for a cross-check of the estimate.
fn resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the benchmark, calling `on_row` after each measured row.
pub fn run(
    config: &BenchConfig,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, BenchError> {
    if config.dimension == 0
        || config.queries == 0
        || config.repeats == 0
        || config.sizes.is_empty()
        || config.variants.is_empty()
    {
        return Err(BenchError::Config(
            "dimension, queries, repeats, sizes and variants must be given".to_string(),
        ));
    }
    let embedder = RandomEmbedder {
        dimension: config.dimension,
    };
    let policies: Vec<(&str, RetrievalConfig)> = config
        .variants
        .iter()
        .map(|v| (v.name(), v.config(config.seed)))
        .collect();
    let mut rows = Vec::new();
    for &size in &config.sizes {
        let mut rng = SplitMix64::new(config.seed ^ size as u64);
        let rss_before = resident_bytes();
        let started = Instant::now();
        let mut memory = Memory::for_embedder(&embedder);
        let mut jsonl_bytes = 0usize;
        let mut position = 0u64;
        while memory.len() < size {
            let episode = synthetic_episode(&mut rng, position);
            position += 1;
            let finalized = episode.finalize(FinalizePolicy::PositiveAndNegative);
            if let Some(id) = memory.commit(finalized, &embedder)? {
                if let Some(entry) = memory.view_all().get(id) {
                    jsonl_bytes += serialize_entry(entry).len() + 1;
                }
            }
        }
        let build_seconds = started.elapsed().as_secs_f64();
        let rss_after = resident_bytes();
        let rss_bytes_per_entry = match (rss_before, rss_after) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before) as f64 / size as f64),
            _ => None,
        };
        let queries: Vec<RetrievalQuery> = (0..config.queries)
            .map(|_| random_query(&mut rng))
            .collect();
        let texts: Vec<String> = queries.iter().map(query_dense_text).collect();
        let vectors = embedder.embed(&texts)?;
        let view = memory.view_at(StreamPos(position), "bench-query");
        for (name, policy) in &policies {
            // Warm caches and the allocator before timing.
            for (query, vector) in queries.iter().zip(&vectors).take(20) {
                view.retrieve_with_vector(query, Some(vector), policy)?;
            }
            let mut times = Vec::with_capacity(queries.len() * config.repeats);
            let mut full_scan_times = Vec::with_capacity(queries.len() * config.repeats);
            let mut best = Vec::with_capacity(queries.len());
            let mut retrieved = 0usize;
            for (number, (query, vector)) in queries.iter().zip(&vectors).enumerate() {
                let mut fastest = f64::INFINITY;
                // The two scans alternate, so that a busy spell of the machine falls on both.
                for _ in 0..config.repeats {
                    let started = Instant::now();
                    let result = view.retrieve_with_vector(query, Some(vector), policy)?;
                    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                    times.push(elapsed);
                    fastest = fastest.min(elapsed);
                    retrieved += result.precedents.len();
                    let started = Instant::now();
                    let full = view.retrieve_with_vector_full_scan(query, Some(vector), policy)?;
                    full_scan_times.push(started.elapsed().as_secs_f64() * 1000.0);
                    let scores = |r: &Retrieval<'_>| {
                        r.precedents
                            .iter()
                            .map(|p| p.score.clone())
                            .collect::<Vec<_>>()
                    };
                    if scores(&result) != scores(&full) {
                        return Err(BenchError::Config(format!(
                            "policy {name}, {size} entries, query {number}: the bounded scan \
                             returned other precedents than the full scan"
                        )));
                    }
                }
                best.push(fastest);
            }
            times.sort_by(f64::total_cmp);
            full_scan_times.sort_by(f64::total_cmp);
            best.sort_by(f64::total_cmp);
            let row = BenchRow {
                entries: size,
                policy: (*name).to_string(),
                p50_ms: percentile(&times, 50.0),
                p99_ms: percentile(&times, 99.0),
                best_p50_ms: percentile(&best, 50.0),
                best_p99_ms: percentile(&best, 99.0),
                heap_bytes_per_entry: memory.heap_bytes() as f64 / size as f64,
                rss_bytes_per_entry,
                jsonl_bytes_per_entry: jsonl_bytes as f64 / size as f64,
                build_seconds,
                retrieved,
                full_scan_p50_ms: percentile(&full_scan_times, 50.0),
            };
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The header line matching [`render_row`].
pub fn header() -> String {
    format!(
        "{:>8} {:<18} {:>8} {:>8} {:>10} {:>10} {:>13} {:>12} {:>10} {:>8} {:>9} {:>9}",
        "entries",
        "policy",
        "p50 ms",
        "p99 ms",
        "best p50",
        "best p99",
        "heap B/entry",
        "RSS B/entry",
        "JSONL B/e",
        "build s",
        "full p50",
        "full/p50"
    )
}

/// One row as a fixed-width line.
pub fn render_row(row: &BenchRow) -> String {
    format!(
        "{:>8} {:<18} {:>8.3} {:>8.3} {:>10.3} {:>10.3} {:>13.0} {:>12} {:>10.0} {:>8.2} {:>9.3} {:>9.2}",
        row.entries,
        row.policy,
        row.p50_ms,
        row.p99_ms,
        row.best_p50_ms,
        row.best_p99_ms,
        row.heap_bytes_per_entry,
        row.rss_bytes_per_entry
            .map_or("-".to_string(), |v| format!("{v:.0}")),
        row.jsonl_bytes_per_entry,
        row.build_seconds,
        row.full_scan_p50_ms,
        row.full_scan_p50_ms / row.p50_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_retrieves_and_reports() {
        let config = BenchConfig {
            sizes: vec![200],
            dimension: 16,
            queries: 30,
            repeats: 2,
            seed: 1,
            variants: vec![Variant::Merit, Variant::DynamicRag],
        };
        let rows = run(&config, |_| {}).unwrap();
        assert_eq!(rows.len(), 2);
        for row in &rows {
            assert!(row.retrieved > 0);
            assert!(row.p50_ms <= row.p99_ms && row.best_p50_ms <= row.best_p99_ms);
            assert!(row.heap_bytes_per_entry > 0.0 && row.jsonl_bytes_per_entry > 0.0);
            assert!(!render_row(row).is_empty());
        }
        assert!(run(
            &BenchConfig {
                queries: 0,
                ..config
            },
            |_| {}
        )
        .is_err());
    }
}
