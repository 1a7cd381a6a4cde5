//! `merit classify`: the deterministic failure classifier — one message, the rule table, or
//! the validation against reference labels in the layout of the repair paper's Table 5.

use crate::args::StatusArg;
use anyhow::{bail, Result};
use clap::Args;
use merit_memory::classify::{classify, rule_table_markdown};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `merit classify`.
#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// Validate the classifier on the failing pairs of --pairs and print Table 5.
    #[arg(long, requires_all = ["pairs", "db_dir"])]
    validate: bool,
    /// JSONL pairs with `db_id`, `gold`, `pred` (and optionally `spider_exec`), e.g.
    /// `eval_vectors_dev.jsonl`.
    #[arg(long)]
    pairs: Option<PathBuf>,
    /// Folder holding `<db_id>/<db_id>.sqlite`.
    #[arg(long)]
    db_dir: Option<PathBuf>,
    /// Dataset name for the table row.
    #[arg(long, default_value = "Spider")]
    dataset: String,
    /// Write the report (and every labelled pair) as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the rule table (Markdown).
    #[arg(long)]
    rules: bool,
    /// Classify this DBMS error text.
    #[arg(long)]
    error: Option<String>,
    /// Status of the attempt (default: execution-error with --error, else denotation-mismatch).
    #[arg(long, value_enum)]
    status: Option<StatusArg>,
    /// Time limit per query in seconds (validation).
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
}

pub fn run(args: ClassifyArgs) -> Result<()> {
    if args.rules {
        say_raw!("{}", rule_table_markdown());
        return Ok(());
    }
    if args.validate {
        return validate(&args);
    }
    if args.error.is_none() && args.status.is_none() {
        bail!("give --error TEXT (and optionally --status), --rules, or --validate --pairs FILE --db-dir DIR");
    }
    let status = crate::args::failure_status(args.status, args.error.as_deref());
    match classify(status, args.error.as_deref()) {
        Some(label) => say!("{} (rule {})", label.failure_type, label.rule),
        None => say!("correct: not a failure"),
    }
    Ok(())
}

fn validate(args: &ClassifyArgs) -> Result<()> {
    let (Some(pairs_path), Some(db_dir)) = (&args.pairs, &args.db_dir) else {
        bail!("--validate needs --pairs and --db-dir");
    };
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    if !db_dir.is_dir() {
        bail!("--db-dir {} is not a folder", db_dir.display());
    }
    let bar = crate::files::progress_bar(0, "classifying");
    let found = merit_lab::validation::validate(
        pairs_path,
        db_dir,
        Duration::from_secs_f64(args.timeout),
        args.dataset.clone(),
        &|total| {
            bar.set_length(total as u64);
            bar.inc(1);
        },
    )?;
    bar.finish_and_clear();
    say!(
        "{} pairs read; {} not marked correct in the file; {} of them judged correct now \
         (skipped); {} skipped ({} without a database){}",
        found.pairs.len(),
        found.selected,
        found.judged_correct,
        found.skipped.len(),
        found.unavailable,
        if found.labelled.is_empty() {
            "; nothing to label"
        } else {
            ""
        }
    );
    for line in found.skipped.iter().take(5) {
        say!("  skipped {line}");
    }
    say!("\n{}", found.report.table5());
    say!(
        "Composition: shares of the classifier's labels. Other = Aggregation, Filter/Value, \
         Execution, Syntax, Unknown. Accuracy and macro-F1 against the AST reference labeler.\n"
    );
    say_raw!("{}", found.report.details());
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &found.labelled {
        *by_status.entry(l.status.as_str()).or_default() += 1;
    }
    let statuses: Vec<String> = by_status.iter().map(|(s, n)| format!("{s} {n}")).collect();
    say!("\nStatus of the labelled failures: {}", statuses.join(", "));
    if let Some(out) = &args.out {
        let items: Vec<Json> = found
            .labelled
            .iter()
            .map(|l| {
                let pair = &found.pairs[l.pair];
                json!({
                    "id": pair.id,
                    "db_id": pair.db_id,
                    "pred": pair.pred,
                    "status": l.status,
                    "error": l.error,
                    "classifier": l.predicted,
                    "rule": l.rule,
                    "reference": l.reference,
                    "reference_reason": l.reason,
                })
            })
            .collect();
        let document = json!({ "report": found.report, "pairs": items });
        let text = serde_json::to_string_pretty(&document)?;
        crate::files::write_result_file(out, text.as_bytes())?;
        say!("wrote {}", out.display());
    }
    Ok(())
}
