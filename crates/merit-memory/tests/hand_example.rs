//! A retrieval worked by hand: BM25, min–max normalisation and the 0.75/0.25 hybrid score
//! through the production path (episodes → commit → view → explain), checked to 1e-9.

use merit_core::model::{Embedder, ModelError};
use merit_core::{Feedback, Status};
use merit_memory::text::{bm25_tokens, entry_bm25_text, query_bm25_text};
use merit_memory::{
    Attempt, Episode, EpisodeSource, FailureType, FinalizePolicy, Memory, MemoryId, PoolKind,
    RetrievalConfig, RetrievalQuery, StreamPos, Variant,
};

/// Maps texts to fixed vectors by their first line, so cosines are exact by construction.
struct TableEmbedder;

const H: f32 = 0.5;

impl Embedder for TableEmbedder {
    fn id(&self) -> String {
        "table".into()
    }
    fn dimension(&self) -> usize {
        4
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| {
                let first = text.lines().next().unwrap_or_default();
                let second = text.lines().nth(1).unwrap_or_default();
                let is_query = second.starts_with("sql:");
                match (first, is_query) {
                    // the query
                    ("question: list singer names", true) => vec![H, H, H, H],
                    ("question: how many singers", false) => vec![1.0, 0.0, 0.0, 0.0],
                    ("question: list singer names", false) => vec![H, H, H, H],
                    ("question: stadium names", false) => vec![H, -H, -H, H],
                    ("question: singer ages", false) => vec![0.0, 0.0, 0.0, 1.0],
                    _ => vec![0.0, 1.0, 0.0, 0.0],
                }
            })
            .collect())
    }
}

fn error(text: &str) -> Feedback {
    Feedback {
        status: Status::ExecutionError,
        error: Some(text.to_string()),
    }
}

fn commit(memory: &mut Memory, pos: u64, question: &str, attempts: &[(&str, Feedback)]) {
    let source = EpisodeSource {
        query_id: format!("q{pos}"),
        db_id: "concert_singer".into(),
        question: question.into(),
        evidence: String::new(),
        schema: "singer(name, age); stadium(name)".into(),
        stream_pos: StreamPos(pos),
        method: "merit".into(),
        time: format!("t{pos}"),
    };
    let (first, rest) = attempts.split_first().unwrap();
    let mut episode = Episode::begin(source, Attempt::new(first.0, first.1.clone()));
    for (sql, feedback) in rest {
        episode
            .record(Attempt::new(*sql, feedback.clone()))
            .unwrap();
    }
    memory
        .commit(
            episode.finalize(FinalizePolicy::PositiveAndNegative),
            &TableEmbedder,
        )
        .unwrap();
}

fn build() -> Memory {
    let mut memory = Memory::for_embedder(&TableEmbedder);
    commit(
        &mut memory,
        0,
        "how many singers",
        &[
            (
                "SELECT count(*) FROM singers",
                error("no such table: singers"),
            ),
            ("SELECT count(*) FROM singer", Feedback::correct()),
        ],
    );
    commit(
        &mut memory,
        1,
        "list singer names",
        &[
            ("SELECT nme FROM singer", error("no such column: nme")),
            ("SELECT name FROM singer", Feedback::correct()),
        ],
    );
    commit(
        &mut memory,
        2,
        "stadium names",
        &[
            (
                "SELECT stadium_name FROM stadium",
                error("no such column: stadium_name"),
            ),
            ("SELECT name FROM stadium", Feedback::correct()),
        ],
    );
    commit(
        &mut memory,
        3,
        "singer ages",
        &[
            ("SELECT agee FROM singer", error("no such column: agee")),
            ("SELECT ages FROM singer", error("no such column: ages")),
        ],
    );
    memory
}

fn query() -> RetrievalQuery {
    RetrievalQuery {
        question: "list singer names".into(),
        sql: "SELECT nme FROM singer".into(),
        status: Status::ExecutionError,
        error: Some("no such column: nme".into()),
        failure_type: FailureType::SchemaLinking,
        db_id: "concert_singer".into(),
        step: 1,
    }
}

fn count(tokens: &[String], term: &str) -> usize {
    tokens.iter().filter(|t| *t == term).count()
}

/// BM25 term weight g(w, m) with k1 = 1.2, b = 0.75.
fn g(tf: f64, length: f64, average: f64) -> f64 {
    tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
}

#[test]
fn bm25_and_hybrid_scores_match_the_hand_computation() {
    let memory = build();
    let view = memory.view_at(StreamPos(10), "q9");
    let explanation = view
        .explain(&query(), &RetrievalConfig::merit(), &TableEmbedder)
        .unwrap();

    // ── The inputs, counted by hand ─────────────────────────────────────────────────────
    // Query terms (unique, in order): list singer names select nme from execution_error no
    // such column schema linking.
    // Positive pool: m0, m1, m2, all Schema Linking, so |T| = 3 and C = T; N = 3.
    //   document lengths: m0 = 26, m1 = 26, m2 = 25 tokens; average 77/3.
    //   term      df | tf m0 m1 m2
    //   list       1 |     0  1  0
    //   singer     2 |     2  3  0
    //   names      2 |     0  1  1
    //   select     3 |     2  3  3
    //   nme        1 |     0  3  0
    //   from       3 |     3  2  2
    //   execution_error, no, such, schema, linking: df 3, tf 1 in each document
    //   column     2 |     0  1  1
    let terms = bm25_tokens(&query_bm25_text(&query()));
    let mut unique: Vec<String> = Vec::new();
    for term in terms {
        if !unique.contains(&term) {
            unique.push(term);
        }
    }
    assert_eq!(
        unique,
        [
            "list",
            "singer",
            "names",
            "select",
            "nme",
            "from",
            "execution_error",
            "no",
            "such",
            "column",
            "schema",
            "linking"
        ]
    );
    let texts: Vec<Vec<String>> = view
        .entries()
        .map(|e| bm25_tokens(&entry_bm25_text(e)))
        .collect();
    let lengths: Vec<usize> = texts.iter().map(Vec::len).collect();
    assert_eq!(lengths, vec![26, 26, 25, 19]);
    for (term, expected) in [
        ("list", [0, 1, 0]),
        ("singer", [2, 3, 0]),
        ("names", [0, 1, 1]),
        ("select", [2, 3, 3]),
        ("nme", [0, 3, 0]),
        ("from", [3, 2, 2]),
        ("column", [0, 1, 1]),
        ("linking", [1, 1, 1]),
    ] {
        let got: Vec<usize> = texts[..3].iter().map(|t| count(t, term)).collect();
        assert_eq!(got, expected, "tf of {term}");
    }

    // IDF(w) = ln(1 + (N − df + 0.5)/(df + 0.5)) with N = 3.
    let idf1 = (1.0f64 + 2.5 / 1.5).ln(); // ln(8/3)
    let idf2 = (1.0f64 + 1.5 / 2.5).ln(); // ln(1.6)
    let idf3 = (1.0f64 + 0.5 / 3.5).ln(); // ln(8/7)
    let avg = 77.0 / 3.0;
    // m0: singer 2 (df 2), select 2, from 3, and five df-3 terms once.
    let bm25_m0 = idf2 * g(2.0, 26.0, avg)
        + idf3 * (g(2.0, 26.0, avg) + g(3.0, 26.0, avg) + 5.0 * g(1.0, 26.0, avg));
    // m1: list 1 (df 1), nme 3 (df 1), singer 3, names 1, column 1 (df 2), select 3,
    // from 2, five df-3 terms once.
    let bm25_m1 = idf1 * (g(1.0, 26.0, avg) + g(3.0, 26.0, avg))
        + idf2 * (g(3.0, 26.0, avg) + 2.0 * g(1.0, 26.0, avg))
        + idf3 * (g(3.0, 26.0, avg) + g(2.0, 26.0, avg) + 5.0 * g(1.0, 26.0, avg));
    // m2: names 1, column 1 (df 2), select 3, from 2, five df-3 terms once.
    let bm25_m2 = idf2 * (2.0 * g(1.0, 25.0, avg))
        + idf3 * (g(3.0, 25.0, avg) + g(2.0, 25.0, avg) + 5.0 * g(1.0, 25.0, avg));
    // The same three numbers from an independent calculation, to 16 digits.
    assert!((bm25_m0 - 1.700221784340399).abs() < 1e-12);
    assert!((bm25_m1 - 5.2405571050991835).abs() < 1e-12);
    assert!((bm25_m2 - 2.0208966109635784).abs() < 1e-12);

    // Dense: the query vector is (½,½,½,½); m0 = e1 → 0.5, m1 = query → 1, m2 = (½,−½,−½,½) → 0.
    // Min–max: d̂ = (0.5, 1, 0); b̂ = (0, 1, (m2 − m0)/(m1 − m0)).
    let b_hat_m2 = (bm25_m2 - bm25_m0) / (bm25_m1 - bm25_m0);
    let expected = [
        // (id, dense, d̂, bm25, b̂, score), in rank order
        (1, 1.0, 1.0, bm25_m1, 1.0, 1.0),
        (0, 0.5, 0.5, bm25_m0, 0.0, 0.375),
        (2, 0.0, 0.0, bm25_m2, b_hat_m2, 0.25 * b_hat_m2),
    ];
    assert!((0.25 * b_hat_m2 - 0.02264438235150354).abs() < 1e-12);

    let positive = &explanation.pools[0];
    assert_eq!(positive.pool, PoolKind::Positive);
    assert_eq!(
        (positive.legal, positive.typed, positive.type_filtered),
        (3, 3, true)
    );
    assert_eq!(positive.bm25_documents, 3);
    assert!((positive.bm25_average_length - avg).abs() < 1e-9);
    assert_eq!(positive.candidates.len(), 3);
    for (candidate, (id, dense, d_hat, bm25, b_hat, score)) in
        positive.candidates.iter().zip(expected)
    {
        assert_eq!(candidate.id, MemoryId(id));
        assert!((candidate.dense.unwrap() - dense).abs() < 1e-9);
        assert!((candidate.dense_normalized.unwrap() - d_hat).abs() < 1e-9);
        assert!(
            (candidate.bm25.unwrap() - bm25).abs() < 1e-9,
            "bm25 of m{id}"
        );
        assert!((candidate.bm25_normalized.unwrap() - b_hat).abs() < 1e-9);
        assert!((candidate.score - score).abs() < 1e-9, "score of m{id}");
        assert!(candidate.type_match && candidate.selected);
    }

    // Negative pool: only m3 (N = 1, length 19 = average, so g = 2.2·tf/(tf + 1.2)).
    // Terms present: singer 2, select 2, from 1, execution_error 2, no, such, column, schema,
    // linking once each; IDF = ln(1 + 0.5/1.5) = ln(4/3).
    let negative = &explanation.pools[1];
    assert_eq!(negative.pool, PoolKind::Negative);
    assert_eq!(
        (negative.legal, negative.typed, negative.type_filtered),
        (1, 1, false)
    );
    let m3 = &negative.candidates[0];
    let g19 = |tf: f64| g(tf, 19.0, 19.0);
    let bm25_m3 = (4.0f64 / 3.0).ln() * (3.0 * g19(2.0) + g19(1.0) + 5.0 * g19(1.0));
    assert_eq!(m3.id, MemoryId(3));
    assert!((m3.bm25.unwrap() - bm25_m3).abs() < 1e-9);
    assert!((m3.dense.unwrap() - 0.5).abs() < 1e-9);
    // A single candidate: max = min, so both normalised scores are 0.
    assert_eq!(
        (m3.dense_normalized, m3.bm25_normalized, m3.score),
        (Some(0.0), Some(0.0), 0.0)
    );
    assert!(m3.selected);

    // retrieve() returns the same selection: 3 positive, 1 negative.
    let retrieval = view
        .retrieve(&query(), &RetrievalConfig::merit(), &TableEmbedder)
        .unwrap();
    assert_eq!(
        retrieval.ids(),
        vec![MemoryId(1), MemoryId(0), MemoryId(2), MemoryId(3)]
    );
    assert!((retrieval.precedents[0].score.score - 1.0).abs() < 1e-9);
}

#[test]
fn the_current_query_and_later_positions_are_invisible() {
    let memory = build();
    // At position 2 for query q1 (the episode that produced m1): only m0 is legal.
    let view = memory.view_at(StreamPos(2), "q1");
    let retrieval = view
        .retrieve(&query(), &RetrievalConfig::merit(), &TableEmbedder)
        .unwrap();
    assert_eq!(retrieval.ids(), vec![MemoryId(0)]);
    // One typed entry is below the threshold of 3: the whole legal pool is ranked.
    let explanation = view
        .explain(&query(), &RetrievalConfig::merit(), &TableEmbedder)
        .unwrap();
    assert!(!explanation.pools[0].type_filtered);
}

#[test]
fn dynamic_rag_ranks_one_unified_pool() {
    let memory = build();
    let view = memory.view_at(StreamPos(10), "q9");
    let config = Variant::DynamicRag.config(0);
    let explanation = view.explain(&query(), &config, &TableEmbedder).unwrap();
    assert_eq!(explanation.pools.len(), 1);
    assert_eq!(explanation.pools[0].pool, PoolKind::Unified);
    assert_eq!(explanation.pools[0].bm25_documents, 4);
    let retrieval = view.retrieve(&query(), &config, &TableEmbedder).unwrap();
    assert_eq!(retrieval.precedents.len(), 4);
    assert_eq!(retrieval.precedents[0].entry.id, MemoryId(1));
}
