//! The paper's diversity and quality figures for a generated set (appendix A): execution rate,
//! distinct AST skeletons, JOIN and window-function shares, Self-BLEU-3 of the requests, and
//! the mean pairwise cosine distance of their embeddings.
//!
//! **BLEU is implemented here**, ~80 lines, rather than taken from a crate: Self-BLEU as
//! usually reported (Texygen) is NLTK's *sentence* BLEU with smoothing method 1 and the other
//! sentences as references, while the one BLEU crate on crates.io (`bleuscore`) computes
//! corpus BLEU the way Hugging Face `evaluate` does and pulls in a cache and a thread pool. The
//! definition reproduced (and tested on hand-computed values):
//!
//! * tokens: [`tokenize`], lower-cased runs of letters/digits (apostrophes inside a word kept)
//!   and single punctuation marks, close to NLTK's word tokenizer on plain English;
//! * modified n-gram precision p_n = Σ min(count, max count in any reference) / max(1, number
//!   of n-grams of the hypothesis); a zero numerator becomes 0.1 / denominator (method 1);
//! * a hypothesis with no unigram match scores 0;
//! * brevity penalty exp(1 − r/c) when c ≤ r, with r the reference length closest to c (the
//!   shorter on ties);
//! * BLEU-N = BP · exp(Σ_{n≤N} ln p_n / N); Self-BLEU-N = mean over sentences of BLEU-N
//!   against all the others.

use super::perturb::has_rows;
use super::record::GeneratedTask;
use super::sqlast;
use super::GenError;
use merit_core::model::Embedder;
use merit_data::DatabaseDir;
use merit_sql::{ExecLimits, SqliteDatabase};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Structure of a set of SQL queries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StructureStats {
    /// Queries given.
    pub queries: usize,
    /// Queries that parse as one query (the shares below are over these).
    pub parsed: usize,
    /// Distinct skeletons ([`sqlast::skeleton`]).
    pub distinct_skeletons: usize,
    /// Share of parsed queries with a join.
    pub join_share: f64,
    /// Share of parsed queries with a window function.
    pub window_share: f64,
}

/// [`StructureStats`] of `sqls` (use it on the seeds too, for the paper's seed-vs-generated
/// comparison).
pub fn structure_stats<'a>(sqls: impl IntoIterator<Item = &'a str>) -> StructureStats {
    let mut stats = StructureStats::default();
    let mut skeletons = BTreeSet::new();
    let (mut joins, mut windows) = (0usize, 0usize);
    for sql in sqls {
        stats.queries += 1;
        if let Some(features) = sqlast::features(sql) {
            stats.parsed += 1;
            joins += usize::from(features.has_join);
            windows += usize::from(features.has_window);
            skeletons.insert(features.skeleton);
        }
    }
    stats.distinct_skeletons = skeletons.len();
    stats.join_share = ratio(joins, stats.parsed);
    stats.window_share = ratio(windows, stats.parsed);
    stats
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The figures of a generated set.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GenStats {
    /// Records.
    pub tasks: usize,
    /// Records whose `sol_sql` ran without error within the deadline.
    pub executed: usize,
    /// `executed / tasks`.
    pub execution_rate: f64,
    /// Records whose `sol_sql` returned at least one row.
    pub non_empty: usize,
    /// SQL structure of the `sol_sql`s.
    pub structure: StructureStats,
    /// Self-BLEU-3 of the underspecified requests (lower is more diverse).
    pub self_bleu3_amb: f64,
    /// Self-BLEU-3 of the fully specified requests.
    pub self_bleu3_clear: f64,
    /// Distinct tokens over the underspecified requests.
    pub vocabulary_amb: usize,
    /// Mean pairwise cosine distance of the underspecified requests' embeddings, when an
    /// embedder was given and there are at least two records.
    pub mean_pairwise_cosine_distance: Option<f64>,
    /// The embedder's id.
    pub embedder: Option<String>,
}

/// Computes [`GenStats`]. A Query task's `sol_sql` (its last statement) is run read-only
/// through `merit_sql` with `timeout`; a Management task's statements (after its
/// `preprocess_sql`) run on a scratch copy of its database, and it counts as executed when
/// all of them do (its rows are not counted: a write returns none). A database that cannot
/// be found counts as not executed.
pub fn compute_stats(
    tasks: &[GeneratedTask],
    databases: &DatabaseDir,
    embedder: Option<&dyn Embedder>,
    timeout: Duration,
) -> Result<GenStats, GenError> {
    let limits = ExecLimits::with_timeout(timeout);
    let mut open: BTreeMap<String, Option<SqliteDatabase>> = BTreeMap::new();
    let mut stats = GenStats {
        tasks: tasks.len(),
        ..GenStats::default()
    };
    for task in tasks {
        if task.category == "Management" {
            let runs = databases
                .locate(&task.selected_database)
                .ok()
                .is_some_and(|path| writes_run(&path, task, &limits));
            stats.executed += usize::from(runs);
            continue;
        }
        let database = open
            .entry(task.selected_database.clone())
            .or_insert_with(|| {
                databases
                    .locate(&task.selected_database)
                    .ok()
                    .and_then(|path| SqliteDatabase::open(path).ok())
            });
        let (Some(database), Some(sql)) = (database.as_ref(), task.sol_sql.last()) else {
            continue;
        };
        if let Ok(non_empty) = has_rows(database, sql, &limits) {
            stats.executed += 1;
            stats.non_empty += usize::from(non_empty);
        }
    }
    stats.execution_rate = ratio(stats.executed, stats.tasks);
    stats.structure = structure_stats(
        tasks
            .iter()
            .filter_map(|t| t.sol_sql.last().map(String::as_str)),
    );
    let amb: Vec<String> = tasks.iter().map(|t| t.amb_user_query.clone()).collect();
    let clear: Vec<String> = tasks.iter().map(|t| t.query.clone()).collect();
    stats.self_bleu3_amb = self_bleu(&amb, 3);
    stats.self_bleu3_clear = self_bleu(&clear, 3);
    stats.vocabulary_amb = amb
        .iter()
        .flat_map(|s| tokenize(s))
        .collect::<BTreeSet<_>>()
        .len();
    if let Some(embedder) = embedder {
        stats.embedder = Some(embedder.id());
        let mut vectors = Vec::with_capacity(amb.len());
        for chunk in amb.chunks(64) {
            vectors.extend(embedder.embed(chunk).map_err(GenError::Embed)?);
        }
        stats.mean_pairwise_cosine_distance = mean_pairwise_cosine_distance(&vectors);
    }
    Ok(stats)
}

/// `true` when a Management task's `preprocess_sql` and `sol_sql` all run, in order, on a
/// scratch copy of the database at `path` (thrown away after).
fn writes_run(path: &std::path::Path, task: &GeneratedTask, limits: &ExecLimits) -> bool {
    let Ok(copy) = super::write::scratch_copy(path) else {
        return false;
    };
    let Ok(mut scratch) = SqliteDatabase::open_scratch(copy.path(), *limits) else {
        return false;
    };
    !task.sol_sql.is_empty()
        && task
            .preprocess_sql
            .iter()
            .chain(&task.sol_sql)
            .all(|sql| scratch.execute(sql).is_ok())
}

/// Mean of 1 − cos(u, v) over all unordered pairs; `None` for fewer than two vectors or a
/// zero vector. Vectors are normalised here (the `Embedder` contract says they already are;
/// this keeps the figure right for one that is not), and the mean cosine is computed exactly
/// as (|Σv|² − n) / (n(n − 1)), which is linear in n instead of quadratic.
pub fn mean_pairwise_cosine_distance(vectors: &[Vec<f32>]) -> Option<f64> {
    let n = vectors.len();
    if n < 2 {
        return None;
    }
    let dimension = vectors[0].len();
    let mut sum = vec![0.0f64; dimension];
    for vector in vectors {
        if vector.len() != dimension {
            return None;
        }
        let norm = vector
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return None;
        }
        for (s, &x) in sum.iter_mut().zip(vector) {
            *s += f64::from(x) / norm;
        }
    }
    let squared: f64 = sum.iter().map(|s| s * s).sum();
    let nf = n as f64;
    let mean_cos = (squared - nf) / (nf * (nf - 1.0));
    Some(1.0 - mean_cos)
}

/// Splits text into BLEU tokens (see the module docs).
pub fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let inner_apostrophe =
            c == '\'' && !word.is_empty() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() || inner_apostrophe {
            word.extend(c.to_lowercase());
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

fn ngrams(tokens: &[String], n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    if tokens.len() >= n {
        for window in tokens.windows(n) {
            // U+0001 cannot occur in a token (control characters are split off as punctuation
            // only when printable; tokens come from text, so the separator is unambiguous).
            *counts.entry(window.join("\u{1}")).or_insert(0) += 1;
        }
    }
    counts
}

/// Sentence BLEU-`max_n` of `hypothesis` against `references` (tokenised), with uniform
/// weights and smoothing method 1 (see the module docs).
pub fn sentence_bleu(hypothesis: &[String], references: &[Vec<String>], max_n: usize) -> f64 {
    let max_ref: Vec<HashMap<String, usize>> = (0..=max_n)
        .map(|n| {
            let mut best: HashMap<String, usize> = HashMap::new();
            if n > 0 {
                for reference in references {
                    for (gram, count) in ngrams(reference, n) {
                        let entry = best.entry(gram).or_insert(0);
                        *entry = (*entry).max(count);
                    }
                }
            }
            best
        })
        .collect();
    let ref_lengths: Vec<usize> = references.iter().map(Vec::len).collect();
    bleu_from(hypothesis, &ref_lengths, max_n, |n, gram| {
        max_ref[n].get(gram).copied().unwrap_or(0)
    })
}

/// Shared BLEU arithmetic; `max_ref_count(n, gram)` is the largest count of `gram` in any
/// reference.
fn bleu_from(
    hypothesis: &[String],
    ref_lengths: &[usize],
    max_n: usize,
    mut max_ref_count: impl FnMut(usize, &str) -> usize,
) -> f64 {
    if max_n == 0 || ref_lengths.is_empty() || hypothesis.is_empty() {
        return 0.0;
    }
    let mut log_sum = 0.0;
    for n in 1..=max_n {
        let grams = ngrams(hypothesis, n);
        let matched: usize = grams
            .iter()
            .map(|(gram, &count)| count.min(max_ref_count(n, gram)))
            .sum();
        let total = hypothesis.len().saturating_sub(n - 1).max(1);
        if n == 1 && matched == 0 {
            return 0.0;
        }
        let precision = if matched == 0 {
            0.1 / total as f64
        } else {
            matched as f64 / total as f64
        };
        log_sum += precision.ln() / max_n as f64;
    }
    let c = hypothesis.len();
    let r = ref_lengths
        .iter()
        .copied()
        .min_by_key(|&len| (len.abs_diff(c), len))
        .unwrap_or(c);
    let penalty = if c > r {
        1.0
    } else {
        (1.0 - r as f64 / c as f64).exp()
    };
    penalty * log_sum.exp()
}

/// Self-BLEU-`max_n`: the mean over sentences of their BLEU against all other sentences; 0 for
/// fewer than two sentences.
///
/// Computed in time linear in the total number of n-grams: for each n-gram the largest count
/// over all sentences, its owner and the largest count over the others give each sentence's
/// reference maximum without rescanning the corpus.
pub fn self_bleu(sentences: &[String], max_n: usize) -> f64 {
    if sentences.len() < 2 {
        return 0.0;
    }
    let tokens: Vec<Vec<String>> = sentences.iter().map(|s| tokenize(s)).collect();
    // (best count, owner of the best, best count among the others)
    let mut tops: Vec<HashMap<String, (usize, usize, usize)>> = vec![HashMap::new(); max_n + 1];
    for (owner, sentence) in tokens.iter().enumerate() {
        for (n, top) in tops.iter_mut().enumerate().skip(1) {
            for (gram, count) in ngrams(sentence, n) {
                let entry = top.entry(gram).or_insert((0, usize::MAX, 0));
                if count > entry.0 {
                    *entry = (count, owner, entry.0);
                } else if count > entry.2 {
                    entry.2 = count;
                }
            }
        }
    }
    let lengths: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let mut total = 0.0;
    for (i, hypothesis) in tokens.iter().enumerate() {
        let others: Vec<usize> = lengths
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &l)| l)
            .collect();
        total += bleu_from(hypothesis, &others, max_n, |n, gram| {
            tops[n].get(gram).map_or(
                0,
                |&(best, owner, second)| {
                    if owner == i {
                        second
                    } else {
                        best
                    }
                },
            )
        });
    }
    total / sentences.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        tokenize(s)
    }

    fn task(category: &str, sql: &[&str]) -> GeneratedTask {
        serde_json::from_value(serde_json::json!({
            "instance_id": "concert_singer_gx",
            "selected_database": "concert_singer",
            "amb_user_query": "a vague request",
            "query": "a clear request",
            "preprocess_sql": [], "clean_up_sqls": [], "sol_sql": sql,
            "external_knowledge": [], "test_cases": [], "category": category,
            "conditions": {"decimal": -1, "distinct": false, "order": false},
            "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
            "knowledge_ambiguity": [],
            "generation": {"format": "merit-interact-gen-v1", "target_id": "x",
                "seed_id": "dev-1", "seed_sql": "", "perturbations": [], "model": "m",
                "prompt_family": "f"}
        }))
        .expect("a record")
    }

    #[test]
    fn write_tasks_count_as_executed_when_their_statements_run_on_a_copy() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/spider/database");
        let file = root.join("concert_singer/concert_singer.sqlite");
        let before = std::fs::read(&file).unwrap();
        let tasks = [
            task("Query", &["SELECT Name FROM singer WHERE Age > 40"]),
            task(
                "Management",
                &[
                    "DELETE FROM singer WHERE Age > 40",
                    "UPDATE singer SET Age = Age + 1",
                ],
            ),
            task("Management", &["DELETE FROM no_such_table"]),
        ];
        let stats = compute_stats(
            &tasks,
            &DatabaseDir::new(&root),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!((stats.tasks, stats.executed, stats.non_empty), (3, 2, 1));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            before,
            "the database was written"
        );
    }

    #[test]
    fn tokenizer_splits_punctuation_and_keeps_contractions() {
        assert_eq!(
            toks("Show the singers' names, don't sort!"),
            vec!["show", "the", "singers", "'", "names", ",", "don't", "sort", "!"]
        );
    }

    #[test]
    fn bleu_matches_hand_computation() {
        // "the cat sat on the mat" vs "the cat lay on the mat": p1 = 5/6, p2 = 3/5, p3 = 1/4,
        // equal lengths, so BLEU-3 = (5/6 · 3/5 · 1/4)^(1/3) = (1/8)^(1/3) = 0.5.
        let a = toks("the cat sat on the mat");
        let b = toks("the cat lay on the mat");
        assert!((sentence_bleu(&a, &[b], 3) - 0.5).abs() < 1e-12);
        // "a b" vs "a c": p1 = 1/2, p2 = 0 → 0.1/1, p3: no trigram, denominator 1 → 0.1.
        let score = sentence_bleu(&toks("a b"), &[toks("a c")], 3);
        assert!((score - (0.5f64 * 0.1 * 0.1).cbrt()).abs() < 1e-12);
        // Brevity: "the cat" against "the cat sat": p1 = p2 = 1, p3 = 0.1/1, BP = e^(1-3/2).
        let score = sentence_bleu(&toks("the cat"), &[toks("the cat sat")], 3);
        let expected = (1.0f64 - 1.5).exp() * 0.1f64.cbrt();
        assert!((score - expected).abs() < 1e-12);
        assert_eq!(sentence_bleu(&toks("x y"), &[toks("a b")], 3), 0.0);
    }

    #[test]
    fn self_bleu_agrees_with_sentence_bleu() {
        let sentences: Vec<String> = [
            "the cat sat on the mat",
            "the cat lay on the mat",
            "a dog ran in the park",
            "the dog sat on the cat",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let tokens: Vec<Vec<String>> = sentences.iter().map(|s| toks(s)).collect();
        let mut naive = 0.0;
        for i in 0..tokens.len() {
            let refs: Vec<Vec<String>> = (0..tokens.len())
                .filter(|&j| j != i)
                .map(|j| tokens[j].clone())
                .collect();
            naive += sentence_bleu(&tokens[i], &refs, 3);
        }
        naive /= tokens.len() as f64;
        assert!((self_bleu(&sentences, 3) - naive).abs() < 1e-12);
        // Two sentences: each scores 0.5 against the other.
        assert!((self_bleu(&sentences[..2], 3) - 0.5).abs() < 1e-12);
        assert_eq!(self_bleu(&sentences[..1], 3), 0.0);
    }

    #[test]
    fn cosine_distance_by_hand() {
        // Pairs: (x, y) cos 0, (x, x) cos 1, (y, x) cos 0 → mean cos 1/3, distance 2/3.
        let v = vec![vec![1.0, 0.0], vec![0.0, 2.0], vec![3.0, 0.0]];
        let d = mean_pairwise_cosine_distance(&v).unwrap();
        assert!((d - 2.0 / 3.0).abs() < 1e-9, "{d}");
        assert!(mean_pairwise_cosine_distance(&v[..1]).is_none());
        assert!(mean_pairwise_cosine_distance(&[vec![0.0, 0.0], vec![1.0, 0.0]]).is_none());
    }

    #[test]
    fn structure_counts() {
        let stats = structure_stats([
            "SELECT a FROM t JOIN u ON t.x = u.x",
            "SELECT b FROM v JOIN w ON v.y = w.y",
            "SELECT rank() OVER (ORDER BY a) FROM t",
            "not sql",
        ]);
        assert_eq!(
            (stats.queries, stats.parsed, stats.distinct_skeletons),
            (4, 3, 2)
        );
        assert!((stats.join_share - 2.0 / 3.0).abs() < 1e-12);
        assert!((stats.window_share - 1.0 / 3.0).abs() < 1e-12);
    }
}
