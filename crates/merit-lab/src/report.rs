//! The paper's Tables 1–4, Table 5's failure composition, Table 6 (memory use) and three
//! figures, from episode records of any number of runs.
//!
//! Everything here is a pure function of the records (no clock, no hash order), so the same
//! records always give byte-identical Markdown, JSON and SVG.

use crate::memory_use::{memory_use, run_memory_use, MemoryUse};
use crate::metrics::{run_metrics, RunMetrics};
use crate::stats::{mean_and_sample_sd, paired_cluster_bootstrap, PairedDifference};
use merit_core::episode::EpisodeRecord;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The method every paired comparison is made against, where the runs have it; without it,
/// the first MERIT variant in display order (e.g. a run of `iterative,merit-positive-only`
/// alone, as the post-hoc ablations are), so such a run still gets its paired table.
pub const REFERENCE_METHOD: &str = "merit";

/// The method a report's comparisons are made against: [`REFERENCE_METHOD`] when present,
/// else the first `merit-` variant among `methods` (in the order given); `None` without either.
pub fn reference_method(methods: &[String]) -> Option<&str> {
    methods
        .iter()
        .find(|m| m.as_str() == REFERENCE_METHOD)
        .or_else(|| methods.iter().find(|m| m.starts_with("merit-")))
        .map(String::as_str)
}

/// Bootstrap resamples for paired comparisons (the issue asks for at least 10,000).
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// Seed of the bootstrap's own random generator.
pub const BOOTSTRAP_SEED: u64 = 20_240_601;

/// Canonical display order of the methods the project knows; others follow alphabetically.
const METHOD_ORDER: &[&str] = &[
    "iterative",
    "reflexion",
    "dynamic-rag",
    "merit",
    "merit-type-rel",
];

/// One method summarised over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodSummary {
    /// Method name.
    pub method: String,
    /// Seeds it ran.
    pub seeds: Vec<u64>,
    /// Per-seed metrics, in seed order.
    pub runs: Vec<RunMetrics>,
    /// Mean accuracy over seeds, percent.
    pub accuracy_mean: f64,
    /// Sample standard deviation of accuracy over seeds.
    pub accuracy_sd: f64,
    /// 95% query-cluster bootstrap interval of the accuracy, percent.
    pub accuracy_ci: (f64, f64),
    /// Mean repaired initial failures over seeds.
    pub repaired_mean: f64,
    /// Mean steps per initial failure.
    pub steps_mean: f64,
    /// Mean oscillation rate, percent.
    pub oscillation_mean: f64,
    /// Mean prompt + completion tokens, in millions.
    pub tokens_millions_mean: f64,
    /// Mean model calls, the initial generation included.
    pub calls_mean: f64,
    /// Mean repair and reflection calls (the initial generation excluded).
    #[serde(default)]
    pub repair_calls_mean: f64,
}

/// A paired comparison of the reference method with another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The other method.
    pub against: String,
    /// Reference minus other, with its interval.
    pub difference: PairedDifference,
}

/// Everything `merit report` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Questions per run.
    pub questions: usize,
    /// Per-method summaries, in display order.
    pub methods: Vec<MethodSummary>,
    /// The method the comparisons are made against ([`reference_method`]).
    pub reference: Option<String>,
    /// Paired comparisons of the reference against every other method (empty without one).
    pub comparisons: Vec<Comparison>,
    /// Failure types of the initial failures (each question once: the initial predictions
    /// are shared by every method and seed), most frequent first; the composition half of the
    /// paper's Table 5.
    pub initial_failures: Vec<FailureShare>,
    /// What each memory method's retrievals supplied to its repair steps (Table 6; empty
    /// without a memory method).
    pub memory_use: Vec<MemoryUse>,
    /// Problems found in the records (e.g. a method missing a seed), reported not hidden.
    pub warnings: Vec<String>,
}

/// How many initial failures the classifier put in one type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureShare {
    /// Failure type name (`unclassified` when the record carries none).
    pub failure_type: String,
    /// Initial failures of that type.
    pub count: usize,
    /// Share of all initial failures, percent.
    pub share_pct: f64,
}

/// The composition of the initial failures, counting each question once.
///
/// Each question's initial attempt is read from its first stream in display order (method
/// rank, then seed), so the result does not depend on the order the records come in; in a
/// real run every stream holds the same shared initial prediction anyway.
fn initial_failure_composition(episodes: &[EpisodeRecord]) -> Vec<FailureShare> {
    type StreamKey = ((usize, String), u64);
    let mut first_attempt: BTreeMap<&str, (StreamKey, &merit_core::episode::AttemptRecord)> =
        BTreeMap::new();
    for episode in episodes {
        let Some(initial) = episode.attempts.first() else {
            continue;
        };
        let key = (method_rank(&episode.method), episode.seed);
        let slot = first_attempt
            .entry(episode.question_id.as_str())
            .or_insert((key.clone(), initial));
        if key < slot.0 {
            *slot = (key, initial);
        }
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, attempt) in first_attempt.values() {
        if attempt.status.is_correct() {
            continue;
        }
        let name = attempt
            .failure_type
            .map_or("unclassified", |t| t.as_str())
            .to_string();
        *counts.entry(name).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let mut shares: Vec<FailureShare> = counts
        .into_iter()
        .map(|(failure_type, count)| FailureShare {
            failure_type,
            count,
            share_pct: count as f64 * 100.0 / total.max(1) as f64,
        })
        .collect();
    // Most frequent first; the name breaks ties so the order never depends on anything else.
    shares.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.failure_type.cmp(&b.failure_type))
    });
    shares
}

fn method_rank(method: &str) -> (usize, String) {
    let position = METHOD_ORDER
        .iter()
        .position(|known| *known == method)
        .unwrap_or(METHOD_ORDER.len());
    (position, method.to_string())
}

/// Per-question final correctness, `outcomes[question][seed]`, for one method.
fn outcome_matrix(
    runs: &BTreeMap<u64, Vec<&EpisodeRecord>>,
    questions: &[String],
) -> Option<Vec<Vec<u8>>> {
    let mut by_question: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    for episodes in runs.values() {
        let finals: BTreeMap<&str, u8> = episodes
            .iter()
            .map(|e| (e.question_id.as_str(), u8::from(e.finally_correct())))
            .collect();
        for question in questions {
            by_question
                .entry(question.as_str())
                .or_default()
                .push(*finals.get(question.as_str())?);
        }
    }
    Some(by_question.into_values().collect())
}

/// Builds the report from the episodes of every run, its paired comparisons made against
/// [`reference_method`].
pub fn build_report(episodes: &[EpisodeRecord]) -> Report {
    build_report_against(episodes, None)
}

/// Builds the report with its paired comparisons (Table 2) made against `reference` when
/// given (e.g. Dynamic-RAG against Iterative, which the default reference never shows), else
/// against [`reference_method`]. A `reference` no episode has gives no comparisons and a
/// warning.
pub fn build_report_against(episodes: &[EpisodeRecord], reference: Option<&str>) -> Report {
    let mut grouped: BTreeMap<String, BTreeMap<u64, Vec<&EpisodeRecord>>> = BTreeMap::new();
    for episode in episodes {
        grouped
            .entry(episode.method.clone())
            .or_default()
            .entry(episode.seed)
            .or_default()
            .push(episode);
    }
    let mut warnings = Vec::new();
    let questions: Vec<String> = episodes
        .iter()
        .map(|e| e.question_id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let all_seeds: BTreeSet<u64> = episodes.iter().map(|e| e.seed).collect();
    let mut method_names: Vec<String> = grouped.keys().cloned().collect();
    method_names.sort_by_key(|m| method_rank(m));
    let mut matrices = BTreeMap::new();
    let mut methods = Vec::new();
    let mut memory = Vec::new();
    for method in &method_names {
        let runs = &grouped[method];
        let uses: Vec<_> = runs
            .values()
            .filter_map(|run| run_memory_use(run))
            .collect();
        memory.extend(memory_use(method, &uses));
        let seeds: Vec<u64> = runs.keys().copied().collect();
        if seeds.iter().copied().collect::<BTreeSet<_>>() != all_seeds {
            warnings.push(format!(
                "{method} ran seeds {seeds:?}, others ran {all_seeds:?}"
            ));
        }
        let metrics: Vec<RunMetrics> = runs
            .values()
            .map(|episodes| {
                let owned: Vec<EpisodeRecord> = episodes.iter().map(|e| (*e).clone()).collect();
                run_metrics(&owned)
            })
            .collect();
        for (seed, run) in seeds.iter().zip(&metrics) {
            if run.questions != questions.len() {
                warnings.push(format!(
                    "{method} seed {seed} has {} of {} questions",
                    run.questions,
                    questions.len()
                ));
            }
        }
        let mean_of = |f: &dyn Fn(&RunMetrics) -> f64| {
            mean_and_sample_sd(&metrics.iter().map(f).collect::<Vec<_>>()).0
        };
        let (accuracy_mean, accuracy_sd) =
            mean_and_sample_sd(&metrics.iter().map(|m| m.accuracy_pct).collect::<Vec<_>>());
        let matrix = outcome_matrix(runs, &questions);
        let accuracy_ci = match &matrix {
            Some(matrix) => {
                let zeros: Vec<Vec<u8>> = matrix.iter().map(|row| vec![0; row.len()]).collect();
                paired_cluster_bootstrap(matrix, &zeros, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
                    .map(|d| (d.ci_low_pp, d.ci_high_pp))
                    .unwrap_or((accuracy_mean, accuracy_mean))
            }
            None => (accuracy_mean, accuracy_mean),
        };
        if let Some(matrix) = matrix {
            matrices.insert(method.clone(), matrix);
        }
        methods.push(MethodSummary {
            method: method.clone(),
            seeds,
            accuracy_mean,
            accuracy_sd,
            accuracy_ci,
            repaired_mean: mean_of(&|m| m.repaired as f64),
            steps_mean: mean_of(&|m| m.steps_per_initial_failure),
            oscillation_mean: mean_of(&|m| m.oscillation_pct),
            tokens_millions_mean: mean_of(&|m| {
                (m.prompt_tokens + m.completion_tokens) as f64 / 1e6
            }),
            calls_mean: mean_of(&|m| m.calls as f64),
            repair_calls_mean: mean_of(&|m| m.repair_calls as f64),
            runs: metrics,
        });
    }
    let mut comparisons = Vec::new();
    let reference_name = match reference {
        Some(name) => {
            if !method_names.iter().any(|m| m == name) {
                warnings.push(format!(
                    "no comparisons: the reference method {name} is not among the runs' methods ({})",
                    method_names.join(", ")
                ));
            }
            Some(name.to_string())
        }
        None => reference_method(&method_names).map(str::to_string),
    };
    if let Some((reference_name, reference)) = reference_name
        .as_deref()
        .and_then(|name| matrices.get(name).map(|matrix| (name, matrix)))
    {
        for method in &method_names {
            if method == reference_name {
                continue;
            }
            match matrices.get(method).map(|other| {
                paired_cluster_bootstrap(reference, other, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
            }) {
                Some(Ok(difference)) => comparisons.push(Comparison {
                    against: method.clone(),
                    difference,
                }),
                Some(Err(error)) => warnings.push(format!("{reference_name} vs {method}: {error}")),
                None => warnings.push(format!(
                    "{reference_name} vs {method}: runs are not aligned"
                )),
            }
        }
    }
    Report {
        questions: questions.len(),
        methods,
        reference: reference_name,
        comparisons,
        initial_failures: initial_failure_composition(episodes),
        memory_use: memory,
        warnings,
    }
}

/// The report as Markdown: Tables 1–4 in the paper's layout.
pub fn render_markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# MERIT repair report\n");
    let _ = writeln!(out, "{} questions per run.\n", report.questions);
    for warning in &report.warnings {
        let _ = writeln!(out, "> warning: {warning}\n");
    }
    let _ = writeln!(
        out,
        "## Table 1: execution accuracy (mean ± sample sd over seeds, %)\n"
    );
    let _ = writeln!(
        out,
        "| Method | Seeds | Exec. accuracy | 95% CI (query bootstrap) |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- |");
    for m in &report.methods {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} ± {:.2} | [{:.2}, {:.2}] |",
            m.method,
            m.seeds.len(),
            m.accuracy_mean,
            m.accuracy_sd,
            m.accuracy_ci.0,
            m.accuracy_ci.1
        );
    }
    if !report.comparisons.is_empty() {
        let reference = report.reference.as_deref().unwrap_or(REFERENCE_METHOD);
        let _ = writeln!(
            out,
            "\n## Table 2: paired query-level comparison ({reference} minus method)\n"
        );
        let _ = writeln!(
            out,
            "| Comparison | Δ pp | 95% CI | queries better: {reference} / other | exact sign test p |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for c in &report.comparisons {
            let d = &c.difference;
            let _ = writeln!(
                out,
                "| {} | {:+.2} | [{:+.2}, {:+.2}] | {} / {} | {} |",
                c.against,
                d.delta_pp,
                d.ci_low_pp,
                d.ci_high_pp,
                d.a_better,
                d.b_better,
                format_p(d.sign_test_p)
            );
        }
        let _ = writeln!(
            out,
            "\nQueries resampled with replacement, each keeping its outcomes across seeds; \
             {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}. A query counts as better \
             for a method when it is correct under more seeds; the sign test leaves ties out."
        );
    }
    let _ = writeln!(
        out,
        "\n## Table 3: repair behaviour and cost (means over seeds)\n"
    );
    let _ = writeln!(
        out,
        "| Method | Rep. | Steps | Osc. % | Tok. (M) | Calls | Repair calls |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- |");
    for m in &report.methods {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.3} | {:.2} | {:.3} | {:.0} | {:.0} |",
            m.method,
            m.repaired_mean,
            m.steps_mean,
            m.oscillation_mean,
            m.tokens_millions_mean,
            m.calls_mean,
            m.repair_calls_mean
        );
    }
    let reference = report.methods.iter().find(|m| m.method == REFERENCE_METHOD);
    let ablations: Vec<&MethodSummary> = report
        .methods
        .iter()
        .filter(|m| m.method.starts_with("merit-"))
        .collect();
    if let (Some(reference), false) = (reference, ablations.is_empty()) {
        let _ = writeln!(out, "\n## Table 4: MERIT variants and ablations\n");
        let _ = writeln!(out, "| Variant | Exec. accuracy | Δ vs merit |");
        let _ = writeln!(out, "| --- | --- | --- |");
        let _ = writeln!(
            out,
            "| merit | {:.2} ± {:.2} | — |",
            reference.accuracy_mean, reference.accuracy_sd
        );
        for m in ablations {
            let _ = writeln!(
                out,
                "| {} | {:.2} ± {:.2} | {:+.2} |",
                m.method,
                m.accuracy_mean,
                m.accuracy_sd,
                m.accuracy_mean - reference.accuracy_mean
            );
        }
    }
    if !report.initial_failures.is_empty() {
        let total: usize = report.initial_failures.iter().map(|s| s.count).sum();
        let _ = writeln!(
            out,
            "\n## Table 5 (composition): failure types of the {total} initial failures\n"
        );
        let _ = writeln!(out, "| Failure type | Count | Share % |");
        let _ = writeln!(out, "| --- | --- | --- |");
        for share in &report.initial_failures {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} |",
                share.failure_type, share.count, share.share_pct
            );
        }
        let _ = writeln!(
            out,
            "\nThe classifier's accuracy against reference labels (the rest of Table 5) is \
             `merit classify --validate`."
        );
    }
    if !report.memory_use.is_empty() {
        let _ = writeln!(
            out,
            "\n## Table 6 (memory use): what the retrievals put in front of repair steps \
             (means over seeds)\n"
        );
        let _ = writeln!(
            out,
            "| Method | Written + / − | Repair steps | With a positive % | Of the repaired type % \
             | With a same-database positive % | Correct with a positive % | Correct without % |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |");
        let rate = |value: Option<f64>| value.map_or("–".to_string(), |v| format!("{v:.1}"));
        for m in &report.memory_use {
            let _ = writeln!(
                out,
                "| {} | {:.1} / {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
                m.method,
                m.positive_written_mean,
                m.negative_written_mean,
                m.repair_steps_mean,
                m.with_positive_pct,
                m.with_typed_positive_pct,
                m.with_same_database_positive_pct,
                rate(m.correct_with_positive_pct),
                rate(m.correct_without_positive_pct)
            );
        }
        let _ = writeln!(
            out,
            "\nRead from the logs: a memory is positive when the episode that wrote it was \
             repaired; its type is that of the attempt its transition starts from. A step counts \
             as \"with a positive\" when one was among its retrieved precedents, \"of the \
             repaired type\" when one had the failure type of the attempt being repaired, \
             \"with a same-database positive\" when one came from the question's own database \
             (shares of steps, not of precedents). The \
             two correct rates (pooled over seeds) describe different steps (those with a \
             positive come later in the stream), so their difference is not an effect of \
             memory; Table 2 measures that."
        );
    }
    let _ = writeln!(
        out,
        "\nDefinitions: Rep. = initial failures repaired; Steps = repair generations per initial \
         failure (an unrepaired episode counts the steps it took: K, or fewer when it stopped \
         early); Osc. = revisions whose normalised SQL \
         (case, whitespace and a trailing `;` ignored, literals kept) equals an earlier attempt \
         of the same episode, in % of revisions; Tok. and Calls = prompt + output tokens and \
         model calls of the shared initial generation (charged to every method, as the paper \
         counts it) and of every repair, repeat-guard and reflection call; Repair calls = the \
         calls after the initial generation."
    );
    out
}

/// A p-value for a table: three significant digits, or `< 0.001`.
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".to_string()
    } else {
        format!("{p:.3}")
    }
}

/// Writes a run's report files into `out` (created when missing), each atomically: the
/// tables as Markdown (`report.md`) and JSON (`report.json`), and the three figures
/// (`accuracy.svg`, `repaired_by_step.svg`, `accuracy_over_stream.svg`).
pub fn write_report_files(
    out: &std::path::Path,
    episodes: &[EpisodeRecord],
) -> Result<(), crate::run::RunError> {
    write_report_files_against(out, episodes, None)
}

/// [`write_report_files`] with Table 2 made against `reference` ([`build_report_against`]).
pub fn write_report_files_against(
    out: &std::path::Path,
    episodes: &[EpisodeRecord],
    reference: Option<&str>,
) -> Result<(), crate::run::RunError> {
    use crate::plots::{accuracy_bars, accuracy_over_stream, repaired_by_step};
    use crate::run::write_file;
    let report = build_report_against(episodes, reference);
    let json = serde_json::to_string_pretty(&report).map_err(|e| crate::run::RunError::Io {
        path: out.join("report.json"),
        message: e.to_string(),
    })? + "\n";
    write_file(&out.join("report.md"), render_markdown(&report).as_bytes())?;
    write_file(&out.join("report.json"), json.as_bytes())?;
    write_file(&out.join("accuracy.svg"), accuracy_bars(&report).as_bytes())?;
    write_file(
        &out.join("repaired_by_step.svg"),
        repaired_by_step(&report, episodes).as_bytes(),
    )?;
    write_file(
        &out.join("accuracy_over_stream.svg"),
        accuracy_over_stream(&report, episodes).as_bytes(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_core::episode::AttemptRecord;
    use merit_core::failure::FailureType;
    use merit_core::Status;

    fn record(method: &str, seed: u64, question: usize, fixed_at: Option<u32>) -> EpisodeRecord {
        let mut attempts = vec![AttemptRecord {
            step: 0,
            sql: "SELECT 0".into(),
            status: if fixed_at == Some(0) {
                Status::Correct
            } else {
                Status::DenotationMismatch
            },
            error: None,
            failure_type: None,
            retrieved: vec![],
            prompt_tokens: 0,
            completion_tokens: 0,
            calls: 0,
            aids: Default::default(),
        }];
        if fixed_at != Some(0) {
            let last = fixed_at.unwrap_or(7);
            for step in 1..=last {
                attempts.push(AttemptRecord {
                    step,
                    sql: format!("SELECT {step}"),
                    status: if Some(step) == fixed_at {
                        Status::Correct
                    } else {
                        Status::DenotationMismatch
                    },
                    error: None,
                    failure_type: None,
                    retrieved: vec![],
                    prompt_tokens: 1000,
                    completion_tokens: 20,
                    calls: 1,
                    aids: Default::default(),
                });
            }
        }
        EpisodeRecord {
            method: method.into(),
            seed,
            position: question,
            question_id: format!("q{question}"),
            db_id: "db".into(),
            attempts,
            memory_written: None,
            stopped_early: None,
        }
    }

    fn sample() -> Vec<EpisodeRecord> {
        let mut records = Vec::new();
        for seed in 0..3 {
            for q in 0..40 {
                let merit = if q % 4 == 0 {
                    None
                } else {
                    Some((q % 3) as u32)
                };
                let iterative = if q % 2 == 0 {
                    None
                } else {
                    Some((q % 3) as u32)
                };
                records.push(record("merit", seed, q, merit));
                records.push(record("iterative", seed, q, iterative));
            }
        }
        records
    }

    #[test]
    fn initial_failures_are_counted_once_per_question_by_type() {
        let mut records = Vec::new();
        for seed in 0..3 {
            for (q, kind) in [
                (0, Some(FailureType::SchemaLinking)),
                (1, Some(FailureType::ResultMismatch)),
                (2, None),
            ]
            .into_iter()
            .chain([(3, Some(FailureType::ResultMismatch))])
            {
                let mut episode = record("merit", seed, q, None);
                episode.attempts[0].failure_type = kind;
                records.push(episode);
            }
            // A question answered correctly at once is no initial failure.
            records.push(record("merit", seed, 4, Some(0)));
        }
        let report = build_report(&records);
        let shares: Vec<(&str, usize)> = report
            .initial_failures
            .iter()
            .map(|s| (s.failure_type.as_str(), s.count))
            .collect();
        assert_eq!(
            shares,
            [
                ("result_mismatch", 2),
                ("schema_linking", 1),
                ("unclassified", 1)
            ]
        );
        assert!((report.initial_failures[0].share_pct - 50.0).abs() < 1e-9);
        assert!(render_markdown(&report).contains("| result_mismatch | 2 | 50.00 |"));
    }

    #[test]
    fn report_has_the_paper_tables_and_is_deterministic() {
        let records = sample();
        let report = build_report(&records);
        assert_eq!(report.methods[0].method, "iterative");
        assert_eq!(report.methods[1].method, "merit");
        assert!((report.methods[1].accuracy_mean - 75.0).abs() < 1e-9);
        assert!((report.methods[0].accuracy_mean - 50.0).abs() < 1e-9);
        assert_eq!(report.comparisons.len(), 1);
        assert!((report.comparisons[0].difference.delta_pp - 25.0).abs() < 1e-9);
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let markdown = render_markdown(&report);
        assert!(markdown.contains("## Table 1") && markdown.contains("## Table 3"));
        let mut reversed = records.clone();
        reversed.reverse();
        assert_eq!(markdown, render_markdown(&build_report(&reversed)));
    }

    #[test]
    fn a_run_without_merit_is_compared_against_its_merit_variant() {
        // A post-hoc ablation runs `iterative,merit-positive-only` alone: its paired table
        // is made against the variant rather than left out.
        let records: Vec<EpisodeRecord> = sample()
            .into_iter()
            .map(|mut r| {
                if r.method == "merit" {
                    r.method = "merit-positive-only".into();
                }
                r
            })
            .collect();
        let report = build_report(&records);
        assert_eq!(report.reference.as_deref(), Some("merit-positive-only"));
        assert_eq!(report.comparisons.len(), 1);
        assert_eq!(report.comparisons[0].against, "iterative");
        assert!((report.comparisons[0].difference.delta_pp - 25.0).abs() < 1e-9);
        let markdown = render_markdown(&report);
        assert!(
            markdown.contains("(merit-positive-only minus method)"),
            "{markdown}"
        );
        // With `merit` present it stays the reference, whatever else ran.
        let mut with_merit = sample();
        with_merit.extend(records.into_iter().filter(|r| r.method != "iterative"));
        let report = build_report(&with_merit);
        assert_eq!(report.reference.as_deref(), Some("merit"));
        assert_eq!(report.comparisons.len(), 2);
        assert_eq!(reference_method(&[]), None);
    }

    #[test]
    fn another_reference_reverses_the_comparison() {
        let report = build_report_against(&sample(), Some("iterative"));
        assert_eq!(report.reference.as_deref(), Some("iterative"));
        assert_eq!(report.comparisons.len(), 1);
        assert_eq!(report.comparisons[0].against, "merit");
        assert!((report.comparisons[0].difference.delta_pp + 25.0).abs() < 1e-9);
        assert!(render_markdown(&report).contains("(iterative minus method)"));
        let missing = build_report_against(&sample(), Some("reflexion"));
        assert!(missing.comparisons.is_empty());
        assert!(
            missing.warnings.iter().any(|w| w.contains("reflexion")),
            "{:?}",
            missing.warnings
        );
    }

    #[test]
    fn a_missing_seed_is_reported() {
        let records: Vec<EpisodeRecord> = sample()
            .into_iter()
            .filter(|r| !(r.method == "iterative" && r.seed == 2))
            .collect();
        let report = build_report(&records);
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("iterative ran seeds")));
    }
}
