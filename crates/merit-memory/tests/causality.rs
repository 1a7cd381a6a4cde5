//! Property tests over random streams: no retrieval, under any policy, ever returns an entry
//! from the current query or from a position at or after the current one, and the optimised
//! ranking equals a naive recomputation of the paper's formulas.

use merit_core::{Feedback, Status};
use merit_memory::text::{bm25_tokens, entry_bm25_text, query_bm25_text, query_dense_text};
use merit_memory::{
    Attempt, DatabaseScope, Episode, EpisodeSource, FailureType, FinalizePolicy, HashEmbedder,
    Memory, MemoryEntry, MemoryView, Polarity, PoolKind, Ranking, RetrievalConfig, RetrievalQuery,
    StreamPos, Variant,
};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

const DIMENSION: usize = 16;

/// Error texts (real SQLite wording) that cover several failure types.
const ERRORS: &[&str] = &[
    "no such column: nme",
    "no such table: singers",
    "near \"FROM\": syntax error",
    "misuse of aggregate function count()",
    "sub-select returns 2 columns - expected 1",
    "integer overflow",
    "unable to use function MATCH in the requested context",
];

const WORDS: &[&str] = &[
    "singer", "name", "age", "stadium", "concert", "count", "year", "country",
];

#[derive(Debug, Clone)]
struct AttemptSpec {
    /// 0 = correct, 1 = mismatch, 2 = timeout, 3.. = execution error with ERRORS[k - 3].
    outcome: usize,
    column: usize,
}

#[derive(Debug, Clone)]
struct EpisodeSpec {
    query: usize,
    db: usize,
    words: Vec<usize>,
    attempts: Vec<AttemptSpec>,
    probes: Vec<Probe>,
}

#[derive(Debug, Clone)]
struct Probe {
    variant: usize,
    seed: u64,
    failure_type: usize,
    db: usize,
}

fn attempt_spec() -> impl Strategy<Value = AttemptSpec> {
    (0usize..3 + ERRORS.len(), 0usize..WORDS.len())
        .prop_map(|(outcome, column)| AttemptSpec { outcome, column })
}

fn probe() -> impl Strategy<Value = Probe> {
    (
        0usize..Variant::ALL.len(),
        0u64..4,
        0usize..FailureType::ALL.len(),
        0usize..4,
    )
        .prop_map(|(variant, seed, failure_type, db)| Probe {
            variant,
            seed,
            failure_type,
            db,
        })
}

fn episode_spec() -> impl Strategy<Value = EpisodeSpec> {
    (
        0usize..10,
        0usize..3,
        prop::collection::vec(0usize..WORDS.len(), 1..4),
        prop::collection::vec(attempt_spec(), 1..5),
        prop::collection::vec(probe(), 0..3),
    )
        .prop_map(|(query, db, words, attempts, probes)| EpisodeSpec {
            query,
            db,
            words,
            attempts,
            probes,
        })
}

fn stream() -> impl Strategy<Value = (Vec<EpisodeSpec>, Vec<u64>)> {
    (
        prop::collection::vec(episode_spec(), 1..30),
        // Gaps between stream positions (positions need not be contiguous).
        prop::collection::vec(1u64..3, 30),
    )
}

fn feedback(spec: &AttemptSpec) -> Feedback {
    match spec.outcome {
        0 => Feedback::correct(),
        1 => Feedback {
            status: Status::DenotationMismatch,
            error: None,
        },
        2 => Feedback {
            status: Status::Timeout,
            error: Some("query interrupted after exceeding the 30s time limit".into()),
        },
        k => Feedback {
            status: Status::ExecutionError,
            error: Some(ERRORS[k - 3].to_string()),
        },
    }
}

fn question(spec: &EpisodeSpec) -> String {
    let words: Vec<&str> = spec.words.iter().map(|&w| WORDS[w]).collect();
    format!("what is the {} of each", words.join(" "))
}

fn open_episode(spec: &EpisodeSpec, position: u64) -> Episode {
    let source = EpisodeSource {
        query_id: format!("q{}", spec.query),
        db_id: format!("db{}", spec.db),
        question: question(spec),
        evidence: String::new(),
        schema: format!("schema of db{}", spec.db),
        stream_pos: StreamPos(position),
        method: "merit".into(),
        time: position.to_string(),
    };
    let sql = |a: &AttemptSpec| format!("SELECT {} FROM t{}", WORDS[a.column], spec.db);
    let first = &spec.attempts[0];
    Episode::begin(source, Attempt::new(sql(first), feedback(first)))
}

fn probe_query(episode: &Episode, probe: &Probe) -> RetrievalQuery {
    let mut query = episode.retrieval_query().unwrap_or_else(|| RetrievalQuery {
        question: episode.source().question.clone(),
        sql: episode.current().sql.clone(),
        status: Status::DenotationMismatch,
        error: None,
        failure_type: FailureType::ResultMismatch,
        db_id: episode.source().db_id.clone(),
        step: 1,
    });
    // Any predicted type and database may be asked for; legality must not depend on them.
    query.failure_type = FailureType::ALL[probe.failure_type];
    if probe.db == 3 {
        query.db_id = "db-unknown".into();
    }
    query
}

/// Checks every legality property of one retrieval; returns a description of a violation.
fn check_probe(
    view: &MemoryView<'_>,
    position: u64,
    current_query: &str,
    query: &RetrievalQuery,
    config: &RetrievalConfig,
    embedder: &HashEmbedder,
) -> Result<(), TestCaseError> {
    let retrieval = view
        .retrieve(query, config, embedder)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let explanation = view
        .explain(query, config, embedder)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let legal = |entry: &MemoryEntry| {
        entry.provenance.stream_pos.0 < position && entry.provenance.query_id != current_query
    };
    for precedent in &retrieval.precedents {
        prop_assert!(
            legal(precedent.entry),
            "illegal entry {:?} at t = {position} for {current_query}",
            precedent.entry.provenance
        );
    }
    let by_id: HashMap<_, &MemoryEntry> = view.entries().map(|e| (e.id, e)).collect();
    prop_assert_eq!(by_id.len(), view.len());
    for entry in by_id.values() {
        prop_assert!(legal(entry));
    }
    let mut selected = Vec::new();
    for pool in &explanation.pools {
        prop_assert!(pool.candidates.len() <= pool.legal);
        let chosen = pool.candidates.iter().filter(|c| c.selected).count();
        prop_assert_eq!(chosen, pool.quota.min(pool.candidates.len()));
        for (rank, candidate) in pool.candidates.iter().enumerate() {
            prop_assert_eq!(candidate.rank, rank + 1);
            let entry = by_id.get(&candidate.id);
            prop_assert!(entry.is_some(), "candidate {} not visible", candidate.id);
            let entry = entry.unwrap();
            match pool.pool {
                PoolKind::Positive => prop_assert_eq!(entry.polarity, Polarity::Positive),
                PoolKind::Negative => prop_assert_eq!(entry.polarity, Polarity::Negative),
                PoolKind::Unified => {}
            }
            if pool.type_filtered {
                prop_assert_eq!(entry.failure_type, query.failure_type);
            }
            match config.scope {
                DatabaseScope::Any => {}
                DatabaseScope::SameDatabase => {
                    prop_assert_eq!(&entry.provenance.db_id, &query.db_id)
                }
                DatabaseScope::CrossDatabase => {
                    prop_assert_ne!(&entry.provenance.db_id, &query.db_id)
                }
            }
            if candidate.selected {
                selected.push(candidate.id);
            }
        }
        for pair in pool.candidates.windows(2) {
            prop_assert!(pair[0].score >= pair[1].score);
        }
    }
    prop_assert_eq!(retrieval.ids(), selected);
    Ok(())
}

/// Replays a stream, probing retrieval inside every open episode and at random other points.
fn run_stream(specs: &[EpisodeSpec], gaps: &[u64]) -> Result<(), TestCaseError> {
    let embedder = HashEmbedder::new(DIMENSION);
    let mut memory = Memory::for_embedder(&embedder);
    let mut position = 0u64;
    for (number, spec) in specs.iter().enumerate() {
        position += gaps[number % gaps.len()];
        let mut episode = open_episode(spec, position);
        let before = memory.len();
        for attempt in &spec.attempts[1..] {
            if episode.is_solved() {
                break;
            }
            for probe in &spec.probes {
                let config = Variant::ALL[probe.variant].config(probe.seed);
                let view = memory.view_for(&episode);
                let query = probe_query(&episode, probe);
                check_probe(
                    &view,
                    position,
                    &episode.source().query_id,
                    &query,
                    &config,
                    &embedder,
                )?;
            }
            let sql = format!("SELECT {} FROM t{}", WORDS[attempt.column], spec.db);
            episode
                .record(Attempt::new(sql, feedback(attempt)))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            // The open episode's attempts are in no memory.
            prop_assert_eq!(memory.len(), before);
        }
        let finalized = episode.finalize(FinalizePolicy::PositiveAndNegative);
        let expected_polarity = finalized.polarity();
        let id = memory
            .commit(finalized, &embedder)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(id.is_some(), expected_polarity.is_some());
        prop_assert!(memory.len() <= before + 1);
        // A view at the same position still does not see the new entry; the next one does
        // (for other queries).
        if let Some(id) = id {
            prop_assert!(memory
                .view_at(StreamPos(position), "someone-else")
                .get(id)
                .is_none());
            prop_assert!(memory
                .view_at(StreamPos(position + 1), "someone-else")
                .get(id)
                .is_some());
            let own = format!("q{}", spec.query);
            prop_assert!(memory.view_at(StreamPos(u64::MAX), &own).get(id).is_none());
        }
    }
    // Views at arbitrary positions and queries over the final memory.
    for t in 0..=position + 1 {
        for query in 0..10 {
            let current = format!("q{query}");
            let view = memory.view_at(StreamPos(t), &current);
            for entry in view.entries() {
                prop_assert!(
                    entry.provenance.stream_pos.0 < t && entry.provenance.query_id != current
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn no_retrieval_ever_returns_an_illegal_entry((specs, gaps) in stream()) {
        run_stream(&specs, &gaps)?;
    }
}

/// The paper's formulas computed the slow, obvious way over the candidate ids the
/// explanation reports.
fn naive_scores(
    view: &MemoryView<'_>,
    query: &RetrievalQuery,
    config: &RetrievalConfig,
    embedder: &HashEmbedder,
    candidates: &[&MemoryEntry],
) -> Vec<(f64, f64)> {
    let Ranking::Hybrid { .. } = config.ranking else {
        return Vec::new();
    };
    let _ = view;
    let query_vector = embedder.embed_one(&query_dense_text(query));
    let mut terms: Vec<String> = Vec::new();
    for t in bm25_tokens(&query_bm25_text(query)) {
        if !terms.contains(&t) {
            terms.push(t);
        }
    }
    let docs: Vec<Vec<String>> = candidates
        .iter()
        .map(|e| bm25_tokens(&entry_bm25_text(e)))
        .collect();
    let n = docs.len() as f64;
    let average = docs.iter().map(|d| d.len() as f64).sum::<f64>() / n;
    candidates
        .iter()
        .zip(&docs)
        .map(|(entry, doc)| {
            let vector = embedder.embed_one(&merit_memory::text::entry_dense_text(entry));
            let dense: f64 = query_vector
                .iter()
                .zip(&vector)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let mut bm25 = 0.0;
            for term in &terms {
                let df = docs.iter().filter(|d| d.contains(term)).count() as f64;
                if df == 0.0 {
                    continue;
                }
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let tf = doc.iter().filter(|t| *t == term).count() as f64;
                bm25 += idf * tf * (config.bm25.k1 + 1.0)
                    / (tf
                        + config.bm25.k1
                            * (1.0 - config.bm25.b + config.bm25.b * doc.len() as f64 / average));
            }
            (dense, bm25)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn ranking_equals_a_naive_recomputation((specs, gaps) in stream(), probe in probe(), at in 0u64..80) {
        let embedder = HashEmbedder::new(DIMENSION);
        let mut memory = Memory::for_embedder(&embedder);
        let mut position = 0u64;
        let mut episodes = Vec::new();
        for (number, spec) in specs.iter().enumerate() {
            position += gaps[number % gaps.len()];
            let mut episode = open_episode(spec, position);
            for attempt in &spec.attempts[1..] {
                if episode.is_solved() {
                    break;
                }
                let sql = format!("SELECT {} FROM t{}", WORDS[attempt.column], spec.db);
                episode.record(Attempt::new(sql, feedback(attempt))).unwrap();
            }
            episodes.push(episode.clone());
            memory.commit(episode.finalize(FinalizePolicy::PositiveAndNegative), &embedder).unwrap();
        }
        let episode = &episodes[at as usize % episodes.len()];
        let config = Variant::ALL[probe.variant].config(probe.seed);
        let query = probe_query(episode, &probe);
        let current = format!("q{}", at % 10);
        let view = memory.view_at(StreamPos(at), &current);
        let explanation = view.explain(&query, &config, &embedder).unwrap();
        let by_id: HashMap<_, &MemoryEntry> = view.entries().map(|e| (e.id, e)).collect();
        for pool in &explanation.pools {
            let entries: Vec<&MemoryEntry> = pool.candidates.iter().map(|c| by_id[&c.id]).collect();
            // The candidate set is exactly C: every legal same-pool entry, or the typed subset.
            let expected_ids: HashSet<_> = view
                .entries()
                .filter(|e| match pool.pool {
                    PoolKind::Positive => e.polarity == Polarity::Positive,
                    PoolKind::Negative => e.polarity == Polarity::Negative,
                    PoolKind::Unified => true,
                })
                .filter(|e| match config.scope {
                    DatabaseScope::Any => true,
                    DatabaseScope::SameDatabase => e.provenance.db_id == query.db_id,
                    DatabaseScope::CrossDatabase => e.provenance.db_id != query.db_id,
                })
                .filter(|e| !pool.type_filtered || e.failure_type == query.failure_type)
                .map(|e| e.id)
                .collect();
            let got_ids: HashSet<_> = pool.candidates.iter().map(|c| c.id).collect();
            prop_assert_eq!(got_ids, expected_ids);
            let naive = naive_scores(&view, &query, &config, &embedder, &entries);
            if naive.is_empty() {
                continue;
            }
            for (candidate, (dense, bm25)) in pool.candidates.iter().zip(&naive) {
                if let Some(d) = candidate.dense {
                    prop_assert!((d - dense).abs() < 1e-5, "dense {} vs {}", d, dense);
                }
                if let Some(b) = candidate.bm25 {
                    prop_assert!((b - bm25).abs() < 1e-9, "bm25 {} vs {}", b, bm25);
                }
            }
        }
    }
}

#[test]
fn commits_must_follow_the_stream_and_replays_are_idempotent() {
    let embedder = HashEmbedder::new(DIMENSION);
    let mut memory = Memory::for_embedder(&embedder);
    let spec = EpisodeSpec {
        query: 1,
        db: 0,
        words: vec![0],
        attempts: vec![
            AttemptSpec {
                outcome: 3,
                column: 0,
            },
            AttemptSpec {
                outcome: 0,
                column: 1,
            },
        ],
        probes: Vec::new(),
    };
    let solved = |position| {
        let mut episode = open_episode(&spec, position);
        episode
            .record(Attempt::new("SELECT name FROM t0", Feedback::correct()))
            .unwrap();
        episode.finalize(FinalizePolicy::PositiveAndNegative)
    };
    let first = memory.commit(solved(5), &embedder).unwrap();
    // The same episode again (a resumed run): same id, nothing added.
    assert_eq!(memory.commit(solved(5), &embedder).unwrap(), first);
    assert_eq!(memory.len(), 1);
    // An earlier position is refused.
    let error = memory.commit(solved(4), &embedder).unwrap_err();
    assert!(error.to_string().contains("stream order"), "{error}");
    // The same position with another outcome is refused.
    let unsolved = open_episode(&spec, 5).finalize(FinalizePolicy::PositiveAndNegative);
    assert!(memory.commit(unsolved, &embedder).is_err());
}
