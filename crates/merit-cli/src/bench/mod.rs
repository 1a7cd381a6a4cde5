//! `merit bench`: speed measured against a baseline run in the same process.

mod embedder;
mod episode;
mod llama_tool;
mod memory;
mod models;
mod repair;
mod serve;
mod streams;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use merit_data::DatabaseDir;
use merit_eval::suite::{evaluate_pairs, Checks, PairInput, PairResult};
use merit_eval::{EvalConfig, Evaluator};
use serde_json::Value as Json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to benchmark.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The Spider and BIRD evaluators on the Spider dev databases.
    Eval(EvalBenchArgs),
    /// MERIT memory retrieval latency (p50/p99) and bytes per entry at several sizes.
    Memory(crate::bench::memory::MemoryBenchArgs),
    /// The embedded chat model and embedder: tokens/s, prefix reuse, sentences/s.
    Models(Box<crate::bench::models::ModelsBenchArgs>),
    /// Harness overhead per repair step: a finished run replayed from the reply cache.
    /// `--out` and `--resume` are ignored (the replay goes to a scratch folder), and with
    /// `--scripted` so is `--cache`.
    Repair(Box<crate::bench::repair::RepairBenchArgs>),
    /// `merit serve` under concurrent load: latency percentiles and throughput over HTTP
    /// against the library called directly, and no memory lost or duplicated.
    Serve(crate::bench::serve::ServeBenchArgs),
}

/// Arguments of `merit bench eval`.
#[derive(Debug, Args)]
pub struct EvalBenchArgs {
    /// Spider `dev.json`.
    #[arg(long)]
    questions: PathBuf,
    /// Spider `database/` folder.
    #[arg(long)]
    db_dir: PathBuf,
    /// Golden pairs file (`eval_vectors_dev.jsonl` format) for the mutation set.
    #[arg(long)]
    pairs: PathBuf,
    /// Timed repetitions of each merit run; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Eval(args) => bench_eval(args),
        BenchCommand::Memory(args) => crate::bench::memory::run(args),
        BenchCommand::Models(args) => crate::bench::models::run(*args),
        BenchCommand::Repair(args) => crate::bench::repair::run(*args),
        BenchCommand::Serve(args) => crate::bench::serve::run(args),
    }
}

struct Workload {
    name: &'static str,
    inputs: Vec<PairInput>,
}

fn load_workloads(args: &EvalBenchArgs) -> Result<(Vec<Workload>, DatabaseDir)> {
    let databases = DatabaseDir::new(&args.db_dir);
    let questions = merit_data::load_spider_questions(&args.questions, "dev")?;
    let availability = databases.availability(&questions);
    println!("Spider dev: {}", availability.summary());
    let gold_vs_gold: Vec<PairInput> = availability
        .usable
        .iter()
        .map(|&index| {
            let question = &questions[index];
            PairInput {
                db_id: question.db_id.clone(),
                gold: question.gold_sql.clone(),
                pred: question.gold_sql.clone(),
                difficulty: None,
            }
        })
        .collect();
    let text = std::fs::read_to_string(&args.pairs)
        .with_context(|| format!("cannot read {}", args.pairs.display()))?;
    let mut mutations = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let record: Json = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", args.pairs.display(), number + 1))?;
        let field = |name: &str| record[name].as_str().map(str::to_string);
        let (Some(db_id), Some(gold), Some(pred)) = (field("db_id"), field("gold"), field("pred"))
        else {
            bail!(
                "{} line {}: needs db_id, gold, pred",
                args.pairs.display(),
                number + 1
            );
        };
        mutations.push(PairInput {
            db_id,
            gold,
            pred,
            difficulty: None,
        });
    }
    Ok((
        vec![
            Workload {
                name: "gold vs gold",
                inputs: gold_vs_gold,
            },
            Workload {
                name: "golden mutations",
                inputs: mutations,
            },
        ],
        databases,
    ))
}

/// The baseline: the reference procedure as the official scripts run it — one pair after
/// another on one thread, fresh connections for every pair and nothing cached between pairs.
fn baseline(
    databases: &DatabaseDir,
    inputs: &[PairInput],
    checks: Checks,
) -> (Duration, Vec<PairResult>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    let started = Instant::now();
    let results = pool.install(|| {
        inputs
            .iter()
            .flat_map(|input| {
                let evaluator = Evaluator::new(EvalConfig::default());
                evaluate_pairs(
                    &evaluator,
                    databases,
                    std::slice::from_ref(input),
                    checks,
                    &|| {},
                )
            })
            .collect()
    });
    (started.elapsed(), results)
}

/// merit as shipped: one shared evaluator (pooled connections, cached gold results), on
/// `threads` worker threads. Each repetition starts cold.
fn merit_run(
    databases: &DatabaseDir,
    inputs: &[PairInput],
    checks: Checks,
    threads: usize,
    repeat: usize,
) -> (Duration, Vec<PairResult>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a worker pool");
    let mut best = Duration::MAX;
    let mut last = Vec::new();
    for _ in 0..repeat.max(1) {
        let evaluator = Evaluator::new(EvalConfig::default());
        let started = Instant::now();
        last = pool.install(|| evaluate_pairs(&evaluator, databases, inputs, checks, &|| {}));
        best = best.min(started.elapsed());
    }
    (best, last)
}

fn bench_eval(args: EvalBenchArgs) -> Result<()> {
    let (workloads, databases) = load_workloads(&args)?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "cores: {cores}; merit runs: fastest of {}",
        args.repeat.max(1)
    );
    println!(
        "{:<18} {:<7} {:>6} {:>11} {:>11} {:>11} {:>9} {:>10}",
        "workload", "check", "pairs", "baseline s", "merit s", "pairs/s", "speedup", "verdicts"
    );
    let spider = Checks {
        spider: true,
        bird: false,
        hardness: false,
    };
    let bird = Checks {
        spider: false,
        bird: true,
        hardness: false,
    };
    let mut all_identical = true;
    for workload in &workloads {
        for (label, checks, threads) in [("spider", spider, cores), ("bird-1c", bird, 1)] {
            let (base_time, base_results) = baseline(&databases, &workload.inputs, checks);
            let (time, results) =
                merit_run(&databases, &workload.inputs, checks, threads, args.repeat);
            let identical = base_results == results;
            all_identical &= identical;
            println!(
                "{:<18} {:<7} {:>6} {:>11.3} {:>11.3} {:>11.0} {:>8.1}x {:>10}",
                workload.name,
                label,
                workload.inputs.len(),
                base_time.as_secs_f64(),
                time.as_secs_f64(),
                workload.inputs.len() as f64 / time.as_secs_f64(),
                base_time.as_secs_f64() / time.as_secs_f64(),
                if identical { "identical" } else { "DIFFER" },
            );
        }
    }
    println!(
        "reference points (official Python scripts on these 2-core machines, gold vs gold, \
         from the issue): Spider 7.2 s, BIRD 3.0 s on one core"
    );
    if !all_identical {
        bail!("merit and the baseline disagree on some verdicts");
    }
    Ok(())
}
