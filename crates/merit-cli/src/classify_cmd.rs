//! `merit classify`: the deterministic failure classifier — one message, the rule table, or
//! the validation against reference labels in the layout of the repair paper's Table 5.

/// `println!` / `print!` through [`crate::files::write_text`].
macro_rules! say {
    () => {
        crate::files::write_text("\n")
    };
    ($($arg:tt)*) => {
        crate::files::write_text(&format!("{}\n", format_args!($($arg)*)))
    };
}
macro_rules! say_raw {
    ($($arg:tt)*) => {
        crate::files::write_text(&format!($($arg)*))
    };
}

use crate::args::StatusArg;
use anyhow::{bail, Context, Result};
use clap::Args;
use merit_core::{Benchmark, Question, Status};
use merit_data::DatabaseDir;
use merit_eval::spider_text::{
    join_spaced_operators, replace_current_year, replace_value_placeholder,
};
use merit_eval::{EvalConfig, Evaluator, Oracle};
use merit_memory::classify::{classify, rule_table_markdown};
use merit_memory::{reference_label, FailureType, ReferenceSchema, ValidationReport};
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use rayon::prelude::*;
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
    let status = args
        .status
        .map(Status::from)
        .unwrap_or(if args.error.is_some() {
            Status::ExecutionError
        } else {
            Status::DenotationMismatch
        });
    match classify(status, args.error.as_deref()) {
        Some(label) => say!("{} (rule {})", label.failure_type, label.rule),
        None => say!("correct: not a failure"),
    }
    Ok(())
}

/// One pair of the input file.
struct Pair {
    line: usize,
    id: String,
    db_id: String,
    gold: String,
    pred: String,
    /// The file's own Spider verdict, when it has one (`0`/`1`; other values are `None`).
    spider_exec: Option<u8>,
}

fn read_pairs(path: &Path) -> Result<Vec<Pair>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut pairs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Json = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not JSON", path.display(), number + 1))?;
        let field = |name: &str| record[name].as_str().map(str::to_string);
        let (Some(db_id), Some(gold), Some(pred)) = (field("db_id"), field("gold"), field("pred"))
        else {
            bail!(
                "{} line {}: needs string fields db_id, gold and pred",
                path.display(),
                number + 1
            );
        };
        pairs.push(Pair {
            line: number + 1,
            id: field("id").unwrap_or_else(|| format!("line-{}", number + 1)),
            db_id,
            gold,
            pred,
            spider_exec: record["spider_exec"]
                .as_u64()
                .and_then(|v| u8::try_from(v).ok()),
        });
    }
    Ok(pairs)
}

/// Table and column names of a SQLite database, read through the read-only connection.
fn schema_names(path: &Path) -> Result<ReferenceSchema> {
    let database = SqliteDatabase::open(path)?;
    let limits = ExecLimits::AGENT;
    let tables = database.query(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')",
        &limits,
    )?;
    let mut out = Vec::new();
    for row in tables.rows {
        let Some(name) = row.first().and_then(|v| v.as_text()).map(str::to_string) else {
            continue;
        };
        let quoted = name.replace('"', "\"\"");
        let columns = database.query(&format!("PRAGMA table_info(\"{quoted}\")"), &limits)?;
        let names: Vec<String> = columns
            .rows
            .iter()
            .filter_map(|row| row.get(1).and_then(|v| v.as_text()).map(str::to_string))
            .collect();
        out.push((name, names));
    }
    Ok(ReferenceSchema::new(out))
}

struct Labelled {
    pair: usize,
    status: Status,
    error: Option<String>,
    predicted: FailureType,
    rule: &'static str,
    reference: FailureType,
    reason: String,
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
    let pairs = read_pairs(pairs_path)?;
    let databases = DatabaseDir::new(db_dir);
    // Each pair becomes a question of its own so that the oracle — the same component the
    // repair loop asks — produces the status and error text the classifier sees.
    let questions: Vec<Question> = pairs
        .iter()
        .enumerate()
        .map(|(index, pair)| Question {
            id: format!("{}#{}", pair.id, pair.line),
            index,
            db_id: pair.db_id.clone(),
            question: String::new(),
            evidence: String::new(),
            gold_sql: pair.gold.clone(),
            difficulty: None,
        })
        .collect();
    let evaluator = Arc::new(Evaluator::new(EvalConfig {
        query_timeout: Duration::from_secs_f64(args.timeout),
        ..EvalConfig::default()
    }));
    let (oracle, availability) = Oracle::new(Benchmark::Spider, evaluator, &questions, &databases);
    let mut schemas: BTreeMap<String, ReferenceSchema> = BTreeMap::new();
    for pair in &pairs {
        if schemas.contains_key(&pair.db_id) {
            continue;
        }
        if let Ok(path) = databases.locate(&pair.db_id) {
            schemas.insert(pair.db_id.clone(), schema_names(&path)?);
        }
    }
    let selected: Vec<usize> = (0..pairs.len())
        .filter(|&i| pairs[i].spider_exec != Some(1))
        .filter(|&i| schemas.contains_key(&pairs[i].db_id))
        .collect();
    let bar = crate::files::progress_bar(selected.len(), "classifying");
    let outcomes: Vec<Result<Option<Labelled>, String>> = selected
        .par_iter()
        .map(|&i| {
            let pair = &pairs[i];
            let result =
                label_pair(&oracle, &questions[i].id, pair, &schemas[&pair.db_id]).map(|found| {
                    found.map(|mut l| {
                        l.pair = i;
                        l
                    })
                });
            bar.inc(1);
            result
        })
        .collect();
    bar.finish_and_clear();
    let mut labelled = Vec::new();
    let mut judged_correct = 0;
    let mut skipped = Vec::new();
    for (outcome, &i) in outcomes.into_iter().zip(&selected) {
        match outcome {
            Ok(Some(found)) => labelled.push(found),
            Ok(None) => judged_correct += 1,
            Err(why) => skipped.push(format!("{} (line {}): {why}", pairs[i].id, pairs[i].line)),
        }
    }
    let unavailable: usize = availability.unavailable.values().sum();
    say!(
        "{} pairs read; {} not marked correct in the file; {} of them judged correct now \
         (skipped); {} skipped ({} without a database){}",
        pairs.len(),
        selected.len(),
        judged_correct,
        skipped.len(),
        unavailable,
        if labelled.is_empty() {
            "; nothing to label"
        } else {
            ""
        }
    );
    for line in skipped.iter().take(5) {
        say!("  skipped {line}");
    }
    let report = ValidationReport::new(
        args.dataset.clone(),
        labelled.iter().map(|l| (l.predicted, l.reference)),
    );
    say!("\n{}", report.table5());
    say!(
        "Composition: shares of the classifier's labels. Other = Aggregation, Filter/Value, \
         Execution, Syntax, Unknown. Accuracy and macro-F1 against the AST reference labeler.\n"
    );
    say_raw!("{}", report.details());
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &labelled {
        *by_status.entry(l.status.as_str()).or_default() += 1;
    }
    let statuses: Vec<String> = by_status.iter().map(|(s, n)| format!("{s} {n}")).collect();
    say!("\nStatus of the labelled failures: {}", statuses.join(", "));
    if let Some(out) = &args.out {
        let items: Vec<Json> = labelled
            .iter()
            .map(|l| {
                let pair = &pairs[l.pair];
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
        let document = json!({ "report": report, "pairs": items });
        let text = serde_json::to_string_pretty(&document)?;
        crate::files::write_atomically(out, text.as_bytes())?;
        say!("wrote {}", out.display());
    }
    Ok(())
}

/// Judges one pair; `Ok(None)` when the oracle says it is correct.
fn label_pair(
    oracle: &Oracle,
    question_id: &str,
    pair: &Pair,
    schema: &ReferenceSchema,
) -> Result<Option<Labelled>, String> {
    let feedback = oracle
        .judge(question_id, &pair.pred)
        .map_err(|e| e.to_string())?;
    let Some(classified) = classify(feedback.status, feedback.error.as_deref()) else {
        return Ok(None);
    };
    // The labeler compares the queries as the Spider evaluator executes them: its text
    // rewrites (`value` → `1` in the prediction, `> =` → `>=`, `YEAR(CURDATE())`) can turn a
    // harmless prediction into a failing one, and the reference should see why.
    let executed_pred = replace_current_year(&join_spaced_operators(&replace_value_placeholder(
        &pair.pred,
    )));
    let executed_gold = replace_current_year(&join_spaced_operators(&pair.gold));
    let reference = reference_label(&executed_pred, &executed_gold, feedback.status, schema)
        .map_err(|e| e.to_string())?;
    Ok(Some(Labelled {
        pair: 0,
        status: feedback.status,
        error: feedback.error,
        predicted: classified.failure_type,
        rule: classified.rule,
        reference: reference.failure_type,
        reason: reference.reason,
    }))
}
