//! `merit eval`: official-format evaluation and golden-style pair files.

use crate::files::{progress_bar, write_result_file};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use merit_core::Difficulty;
use merit_data::DatabaseDir;
use merit_eval::suite::{
    bird_table, evaluate_pairs, spider_table, Checks, PairInput, PairResult, Summary,
};
use merit_eval::{EvalConfig, Evaluator, Verdict};
use serde_json::{json, Map, Value as Json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Benchmarks whose official file formats `merit eval` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchmarkArg {
    /// Spider: gold file `SQL<TAB>db_id` per line, predictions one SQL per line.
    Spider,
    /// BIRD: gold `dev.json` (or a `SQL<TAB>db_id` file), predictions `predict_dev.json`.
    Bird,
}

/// Arguments of `merit eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Which official evaluator to reproduce (with --gold/--pred).
    #[arg(
        long,
        value_enum,
        required_unless_present = "pairs",
        conflicts_with = "pairs"
    )]
    benchmark: Option<BenchmarkArg>,
    /// Gold file: Spider `dev_gold.sql`; BIRD `dev.json` or a gold `.sql` file.
    #[arg(long, requires = "benchmark")]
    gold: Option<PathBuf>,
    /// Prediction file: Spider one SQL per line; BIRD `predict_dev.json`.
    #[arg(long, requires = "benchmark")]
    pred: Option<PathBuf>,
    /// A JSONL file of records with `db_id`, `gold` and `pred`; every record is written back
    /// with `spider_exec`, `spider_hardness` and `bird_ex` set.
    #[arg(long)]
    pairs: Option<PathBuf>,
    /// Folder holding `<db_id>/<db_id>.sqlite` (Spider `database/`, BIRD `dev_databases/`).
    #[arg(long)]
    db_dir: PathBuf,
    /// Write one JSON verdict per example here (for --pairs: the annotated records).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print a machine-readable summary as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Time limit per query, in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: EvalArgs) -> Result<()> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build_global()
            .context("cannot start the worker threads")?;
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!(
            "--timeout must be a positive number of seconds, got {}",
            args.timeout
        );
    }
    if !args.db_dir.is_dir() {
        bail!("--db-dir {} is not a folder", args.db_dir.display());
    }
    let evaluator = Evaluator::new(EvalConfig {
        query_timeout: Duration::from_secs_f64(args.timeout),
        ..EvalConfig::default()
    });
    let databases = DatabaseDir::new(&args.db_dir);
    if let Some(pairs) = &args.pairs {
        return run_pairs(&args, pairs, &evaluator, &databases);
    }
    let (Some(gold), Some(pred)) = (&args.gold, &args.pred) else {
        bail!("--benchmark needs both --gold and --pred");
    };
    match args.benchmark {
        Some(BenchmarkArg::Spider) => run_spider(&args, gold, pred, &evaluator, &databases),
        Some(BenchmarkArg::Bird) => run_bird(&args, gold, pred, &evaluator, &databases),
        None => bail!("give --benchmark with --gold/--pred, or --pairs"),
    }
}

fn evaluate_with_progress(
    evaluator: &Evaluator,
    databases: &DatabaseDir,
    inputs: &[PairInput],
    checks: Checks,
) -> Vec<PairResult> {
    let bar = progress_bar(inputs.len(), "evaluating");
    let results = evaluate_pairs(evaluator, databases, inputs, checks, &|| bar.inc(1));
    bar.finish_and_clear();
    results
}

fn report_availability(inputs: &[PairInput], results: &[PairResult]) {
    let mut missing: std::collections::BTreeMap<&str, usize> = Default::default();
    for (input, result) in inputs.iter().zip(results) {
        if !result.available {
            *missing.entry(input.db_id.as_str()).or_default() += 1;
        }
    }
    let usable = results.iter().filter(|r| r.available).count();
    if missing.is_empty() {
        println!("{usable} usable of {}; every database found", results.len());
    } else {
        let list: Vec<String> = missing
            .iter()
            .map(|(db, n)| format!("{db} ({n} questions, database not found)"))
            .collect();
        println!(
            "{usable} usable of {}; unavailable: {} (not scored, not counted)",
            results.len(),
            list.join(", ")
        );
    }
}

fn verdict_json(verdict: Option<&Verdict>) -> Json {
    match verdict {
        None => Json::Null,
        Some(verdict) => json!({
            "score": verdict.score(),
            "verdict": verdict.tag(),
            "error": verdict.message(),
        }),
    }
}

fn write_verdicts(path: &Path, inputs: &[PairInput], results: &[PairResult]) -> Result<()> {
    let mut text = String::new();
    for (index, (input, result)) in inputs.iter().zip(results).enumerate() {
        let record = json!({
            "index": index,
            "db_id": input.db_id,
            "available": result.available,
            "hardness": result.hardness.map(|h| h.as_str()),
            "difficulty": input.difficulty.map(|d| d.as_str()),
            "spider": verdict_json(result.spider.as_ref()),
            "bird": verdict_json(result.bird.as_ref()),
        });
        text.push_str(&record.to_string());
        text.push('\n');
    }
    write_result_file(path, text.as_bytes())
}

fn print_summary(summary: &Summary) -> Result<()> {
    println!("{}", serde_json::to_string(summary)?);
    Ok(())
}

fn run_spider(
    args: &EvalArgs,
    gold: &Path,
    pred: &Path,
    evaluator: &Evaluator,
    databases: &DatabaseDir,
) -> Result<()> {
    let golds = merit_data::load_gold_sql(gold)?;
    let preds = merit_data::load_predictions(pred)?;
    if preds.is_empty() {
        bail!("{}: the prediction file is empty", pred.display());
    }
    if preds.len() != golds.len() {
        bail!(
            "{} has {} predictions but {} has {} gold queries; they must align line by line",
            pred.display(),
            preds.len(),
            gold.display(),
            golds.len()
        );
    }
    let blank = preds.iter().filter(|p| p.sql.is_empty()).count();
    if blank > 0 {
        eprintln!("warning: {blank} blank prediction lines are scored 0 (no SQL)");
    }
    let inputs: Vec<PairInput> = golds
        .into_iter()
        .zip(preds)
        .map(|(gold, pred)| PairInput {
            db_id: gold.db_id,
            gold: gold.sql,
            pred: pred.sql,
            difficulty: None,
        })
        .collect();
    let checks = Checks {
        spider: true,
        bird: false,
        hardness: true,
    };
    let results = evaluate_with_progress(evaluator, databases, &inputs, checks);
    report_availability(&inputs, &results);
    print!("{}", spider_table(&results));
    if let Some(out) = &args.out {
        write_verdicts(out, &inputs, &results)?;
    }
    if args.json {
        print_summary(&Summary::of(&results, |r| r.spider.as_ref()))?;
    }
    Ok(())
}

fn run_bird(
    args: &EvalArgs,
    gold: &Path,
    pred: &Path,
    evaluator: &Evaluator,
    databases: &DatabaseDir,
) -> Result<()> {
    let is_json = gold
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let golds: Vec<(String, String, Option<Difficulty>)> = if is_json {
        merit_data::load_bird_questions(gold, "dev")?
            .into_iter()
            .map(|q| (q.gold_sql, q.db_id, q.difficulty))
            .collect()
    } else {
        merit_data::load_bird_gold_sql(gold)?
            .into_iter()
            .map(|g| (g.sql, g.db_id, None))
            .collect()
    };
    let predictions = merit_data::load_bird_predictions(pred)?;
    if predictions.is_empty() {
        bail!(
            "{}: the prediction file holds no predictions",
            pred.display()
        );
    }
    if let Some(extra) = predictions.iter().find(|p| p.index >= golds.len()) {
        bail!(
            "{}: prediction key {} has no gold question ({} has {})",
            pred.display(),
            extra.index,
            gold.display(),
            golds.len()
        );
    }
    let mut by_index: Vec<Option<String>> = vec![None; golds.len()];
    for prediction in predictions {
        if let Some(db_id) = &prediction.db_id {
            if db_id != &golds[prediction.index].1 {
                eprintln!(
                    "warning: prediction {} names database {db_id}, gold uses {}; using the gold's",
                    prediction.index, golds[prediction.index].1
                );
            }
        }
        by_index[prediction.index] = Some(prediction.sql);
    }
    let missing = by_index.iter().filter(|p| p.is_none()).count();
    if missing > 0 {
        eprintln!("warning: {missing} questions have no prediction; each runs as an empty query");
    }
    let inputs: Vec<PairInput> = golds
        .into_iter()
        .zip(by_index)
        .map(|((gold, db_id, difficulty), pred)| PairInput {
            db_id,
            gold,
            pred: pred.unwrap_or_default(),
            difficulty,
        })
        .collect();
    let checks = Checks {
        spider: false,
        bird: true,
        hardness: false,
    };
    let results = evaluate_with_progress(evaluator, databases, &inputs, checks);
    report_availability(&inputs, &results);
    print!("{}", bird_table(&results, &inputs));
    if let Some(out) = &args.out {
        write_verdicts(out, &inputs, &results)?;
    }
    if args.json {
        print_summary(&Summary::of(&results, |r| r.bird.as_ref()))?;
    }
    Ok(())
}

/// Reads golden-style records: one JSON object per line with string `db_id`, `gold`, `pred`.
fn read_pair_records(path: &Path) -> Result<Vec<Map<String, Json>>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{}: not valid UTF-8 ({e})", path.display()))?;
    let mut records = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line_number = number + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Json = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!("{} line {line_number}: invalid JSON: {e}", path.display())
        })?;
        let Json::Object(record) = value else {
            bail!(
                "{} line {line_number}: expected a JSON object",
                path.display()
            );
        };
        for field in ["db_id", "gold", "pred"] {
            if !record.get(field).is_some_and(Json::is_string) {
                bail!(
                    "{} line {line_number}: field `{field}` must be a string",
                    path.display()
                );
            }
        }
        records.push(record);
    }
    if records.is_empty() {
        bail!("{}: no records", path.display());
    }
    Ok(records)
}

fn run_pairs(
    args: &EvalArgs,
    pairs: &Path,
    evaluator: &Evaluator,
    databases: &DatabaseDir,
) -> Result<()> {
    let mut records = read_pair_records(pairs)?;
    let field = |record: &Map<String, Json>, name: &str| -> String {
        record[name].as_str().unwrap_or_default().to_string()
    };
    let inputs: Vec<PairInput> = records
        .iter()
        .map(|record| PairInput {
            db_id: field(record, "db_id"),
            gold: field(record, "gold"),
            pred: field(record, "pred"),
            difficulty: None,
        })
        .collect();
    let checks = Checks {
        spider: true,
        bird: true,
        hardness: true,
    };
    let results = evaluate_with_progress(evaluator, databases, &inputs, checks);
    let mut text = String::new();
    for (record, result) in records.iter_mut().zip(&results) {
        let score = |verdict: Option<&Verdict>| match verdict {
            Some(verdict) => json!(verdict.score()),
            None => Json::Null,
        };
        record.insert("spider_exec".into(), score(result.spider.as_ref()));
        record.insert(
            "spider_hardness".into(),
            result.hardness.map_or(Json::Null, |h| json!(h.as_str())),
        );
        // As in the golden file, BIRD's verdict is null when the gold itself fails.
        let bird = match &result.bird {
            Some(Verdict::GoldError(_)) => Json::Null,
            other => score(other.as_ref()),
        };
        record.insert("bird_ex".into(), bird);
        text.push_str(&Json::Object(record.clone()).to_string());
        text.push('\n');
    }
    match &args.out {
        Some(out) => write_result_file(out, text.as_bytes())?,
        None => print!("{text}"),
    }
    if args.json {
        let spider = Summary::of(&results, |r| r.spider.as_ref());
        let bird = Summary::of(&results, |r| r.bird.as_ref());
        let mut summary = serde_json::to_value(&spider)?;
        summary["bird"] = serde_json::to_value(&bird)?;
        println!("{summary}");
    }
    Ok(())
}
