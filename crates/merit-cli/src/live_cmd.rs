//! `merit live-experiment`: live mode on a benchmark stream with the oracle hidden from the
//! agent and a simulated user (`merit_lab::live`), wired to `merit run`'s options.

use crate::experiment::{build_models, load_questions, RunArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use merit_data::DatabaseDir;
use merit_lab::experiment::{choose_questions, initial_predictions, Silent};
use merit_lab::live::{
    accuracy_over_stream, reference_answers, render_report, LiveAnswerRecord, LiveArm,
    LiveExperiment,
};
use merit_live::LiveConfig;
use merit_repair::hints::DatabaseHints;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Arguments of `merit live-experiment`.
#[derive(Debug, Args)]
pub struct LiveExperimentArgs {
    /// Arms, as several values: `none` (no memory),
    /// `silent` (memory, nobody speaks), `oracle` (feedback on every answer, never wrong), or
    /// `p=RATE,e=ERROR` (feedback on a fraction RATE of answers, wrong with chance ERROR).
    #[arg(long, num_args = 1.., default_values_t = ["none".to_string(), "oracle".to_string(), "p=0.5,e=0".to_string(), "p=0.5,e=0.2".to_string()])]
    arms: Vec<String>,
    /// Questions an answer waits for feedback before it is finalized without.
    #[arg(long, default_value_t = 5)]
    finalize_after: u64,
    /// A stream of the repair experiment shown beside the arms, as NAME=LOG (`merit run`'s
    /// episode log of one method and seed, `.jsonl` or `.jsonl.gz`; repeat the option). It
    /// must be the same questions in the same order (same data, --limit and seed): the oracle
    /// judges every attempt there, so `iterative` and `merit` logs give memory's effect with
    /// an oracle. Each reference is compared with `none`, and every later one with the first.
    #[arg(long = "reference", value_name = "NAME=LOG")]
    references: Vec<String>,
    // The options of `merit run` (data, models, repair aids, K, --limit, --out); what does not
    // apply here is said in the subcommand's help (main.rs), since clap shows no help for a
    // flattened field.
    #[command(flatten)]
    run: RunArgs,
}

/// Runs `merit live-experiment`.
pub fn run(args: LiveExperimentArgs) -> Result<()> {
    let run = &args.run;
    if run.llm_url.is_none() {
        // As `merit run` does, before any work: embedded decoding shares two cores with
        // whatever else runs, and OpenMP's default spin makes that share collapse.
        crate::models::reexec_with_bounded_openmp_spin();
    }
    let out = run
        .out
        .clone()
        .or_else(|| run.resume.clone())
        .context("give --out DIR (run again with the same DIR to continue)")?;
    let seed = *run.seeds.first().context("give a seed")?;
    let arms: Vec<LiveArm> = args
        .arms
        .iter()
        .map(|text| LiveArm::parse(text, seed).map_err(|e| anyhow!(e)))
        .collect::<Result<_>>()?;
    if !arms.iter().any(|arm| arm.name == "none") {
        bail!("the arms must include `none`, the baseline every other arm is compared with");
    }
    let (benchmark, questions, schemas) = load_questions(run)?;
    let databases = DatabaseDir::new(&run.db_dir);
    let chosen = choose_questions(benchmark, &questions, &schemas, &databases, run.limit)?;
    eprintln!(
        "{} questions; arms: {}",
        chosen.questions.len(),
        args.arms.join(" ")
    );
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let _lock = crate::files::lock_run_dir(&out)?;
    let store = crate::models::open_store(run.cache.as_ref())?;
    let models = build_models(run, store)?;
    let initial = initial_predictions(
        &out.join("initial.jsonl"),
        benchmark,
        merit_sql::Dialect::Sqlite,
        &chosen.questions,
        models.initial.as_ref(),
        run.max_tokens,
        1,
        &Silent,
    )?;
    let hints = DatabaseHints::new(DatabaseDir::new(&run.db_dir));
    let experiment = LiveExperiment {
        chosen: &chosen,
        initial: &initial,
        databases: &run.db_dir,
        seed,
        finalize_after: args.finalize_after,
        config: LiveConfig {
            k: run.k,
            max_tokens: run.max_tokens,
            aids: run.aids(),
            retrieval: merit_memory::Variant::Merit.config(seed),
            ..LiveConfig::default()
        },
        model: models.repair.as_ref(),
        embedder: Arc::clone(&models.embedder),
        aids: Some(&hints),
    };
    // References are read before any arm runs: a wrong path must not wait for hours of arms.
    let stream_ids = experiment.stream_ids();
    let mut references: Vec<(String, Vec<LiveAnswerRecord>)> = Vec::new();
    for text in &args.references {
        let (name, log) = text
            .split_once('=')
            .filter(|(name, log)| !name.trim().is_empty() && !log.trim().is_empty())
            .with_context(|| format!("--reference {text:?}: expected NAME=EPISODE_LOG"))?;
        let episodes = crate::report_cmd::read_episode_log(std::path::Path::new(log.trim()))?;
        let name = format!("reference {}", name.trim());
        let rows = reference_answers(&name, &episodes, &stream_ids).map_err(|e| anyhow!(e))?;
        references.push((name, rows));
    }
    let mut results: Vec<(String, Vec<LiveAnswerRecord>)> = Vec::new();
    for arm in &arms {
        let bar = crate::files::progress_bar(chosen.questions.len(), "live");
        bar.set_message(arm.name.clone());
        let on_answer = |_: &LiveAnswerRecord| {
            bar.inc(1);
            crate::files::log_progress_when_not_a_terminal(&bar, 10);
        };
        let answers = experiment
            .run_arm(&out.join("arms").join(&arm.name), arm, &on_answer)
            .map_err(|e| anyhow!("{e}\nrun the same command again to continue"))?;
        bar.finish_and_clear();
        results.push((arm.name.clone(), answers));
    }
    let mut comparisons: Vec<(String, String)> = results
        .iter()
        .filter(|(name, _)| name != "none")
        .map(|(name, _)| (name.clone(), "none".to_string()))
        .collect();
    for (index, (name, _)) in references.iter().enumerate() {
        comparisons.push((name.clone(), "none".to_string()));
        if index > 0 {
            comparisons.push((name.clone(), references[0].0.clone()));
        }
    }
    let note = if references.is_empty() {
        String::new()
    } else {
        "\nRows `reference …` are streams of the repair experiment on the same questions in the \
         same order, with the oracle judging every attempt: its loop stops at the first correct \
         query (the live loop at the first that executes), and its memory holds only \
         oracle-verified entries.\n"
            .to_string()
    };
    results.extend(references);
    let report = render_report(&results, &comparisons) + &note;
    let series: BTreeMap<String, Vec<(f64, f64)>> = results
        .iter()
        .map(|(name, answers)| (name.clone(), accuracy_over_stream(answers)))
        .collect();
    let order: Vec<String> = results.iter().map(|(name, _)| name.clone()).collect();
    let svg = merit_lab::plots::line_chart(
        "Live mode: accuracy over the stream",
        "accuracy so far (%)",
        "answers",
        &series,
        &order,
    );
    crate::files::write_result_file(&out.join("report.md"), report.as_bytes())?;
    crate::files::write_result_file(&out.join("accuracy-over-stream.svg"), svg.as_bytes())?;
    print!("{report}");
    eprintln!("report: {}", out.join("report.md").display());
    Ok(())
}
