//! `merit interact report` and `summaries`: what run directories hold (the figures are
//! computed by `merit_lab::interact`).

use anyhow::{Context, Result};
use clap::Args;
use merit_interact::runlog::read_log;
use merit_lab::interact::{
    compare, read_run, render, render_behaviour, render_comparisons, render_repeated_tries,
    repeated_tries, summarise, ExcludedTasks, LOG_FILE,
};
use std::path::PathBuf;

/// Arguments of `merit interact summaries`.
#[derive(Debug, Args)]
pub struct InteractSummariesArgs {
    /// The run directory.
    run: PathBuf,
    /// Write the lines to this file (atomically) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `merit interact report`.
#[derive(Debug, Args)]
pub struct InteractReportArgs {
    /// Run directories.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Print JSON instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Compare every run with this one on their common tasks: paired differences of phase 1
    /// and phase 2 success with 95% bootstrap intervals (tasks resampled).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Treat the runs as independent tries of one configuration (e.g. sampled runs with
    /// different `--sample-seed`s): Pass@k of phase 1 for k = 1..number of runs over the tasks
    /// every run holds, and the mean and sd of the success rate across runs.
    #[arg(long)]
    pass_at_k: bool,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    resamples: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    bootstrap_seed: u64,
    /// Leave these task ids out of every figure (comma-separated or repeated), e.g. tasks
    /// found ill-posed after the runs; each must be in at least one run.
    #[arg(long, value_delimiter = ',')]
    exclude_tasks: Vec<String>,
}

pub(super) fn report(args: InteractReportArgs) -> Result<()> {
    let excluded = excluded_tasks(&args)?;
    let summaries = summarise(&args.runs, &excluded)?;
    let comparisons = match &args.baseline {
        Some(baseline) => compare(
            &args.runs,
            baseline,
            &excluded,
            args.resamples,
            args.bootstrap_seed,
        )?,
        None => Vec::new(),
    };
    let tries = match args.pass_at_k {
        true => Some(repeated_tries(&args.runs, &excluded)?),
        false => None,
    };
    if args.json {
        let report = serde_json::json!({
            "runs": summaries, "comparisons": comparisons, "repeated_tries": tries,
            "excluded_tasks": excluded,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if !excluded.is_empty() {
            let ids: Vec<&str> = excluded.iter().map(String::as_str).collect();
            println!(
                "Left out of every figure below: {} task(s): {}\n",
                ids.len(),
                ids.join(", ")
            );
        }
        print!("{}", render(&summaries));
        println!();
        print!("{}", render_behaviour(&summaries));
        if !comparisons.is_empty() {
            println!();
            print!("{}", render_comparisons(&comparisons));
        }
        if let Some(tries) = &tries {
            println!();
            print!("{}", render_repeated_tries(tries));
        }
    }
    Ok(())
}

/// The `--exclude-tasks` ids, each checked to be in at least one of the runs (a mistyped id
/// would otherwise leave the figures unchanged without a word).
fn excluded_tasks(args: &InteractReportArgs) -> Result<ExcludedTasks> {
    let excluded: ExcludedTasks = args
        .exclude_tasks
        .iter()
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
        .collect();
    if excluded.is_empty() {
        return Ok(excluded);
    }
    let mut seen = ExcludedTasks::new();
    for run in &args.runs {
        seen.extend(
            read_run(run, &ExcludedTasks::new())?
                .into_iter()
                .map(|record| record.instance_id),
        );
    }
    if let Some(missing) = excluded.iter().find(|id| !seen.contains(*id)) {
        anyhow::bail!("--exclude-tasks: task {missing} is in none of the runs");
    }
    Ok(excluded)
}

pub(super) fn summaries(args: InteractSummariesArgs) -> Result<()> {
    let log = args.run.join(LOG_FILE);
    let loaded =
        read_log(&log).with_context(|| format!("cannot read the log {}", log.display()))?;
    let mut text = String::new();
    for record in &loaded.records {
        text.push_str(&serde_json::to_string(
            &merit_interact::EpisodeSummary::of(record),
        )?);
        text.push('\n');
    }
    match &args.out {
        Some(path) => merit_core::fs::write_atomically(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Arguments of `merit interact missed`.
#[derive(Debug, Args)]
pub struct InteractMissedArgs {
    /// Run directories.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    #[command(flatten)]
    task_set: super::TaskSetArgs,
    /// Print JSON (every failed episode) instead of a Markdown table.
    #[arg(long)]
    json: bool,
}

pub(super) fn missed(args: InteractMissedArgs) -> Result<()> {
    use merit_interact::missed::{missed_answers, render_missed};
    use merit_interact::{sqlite_backend, EnvConfig, ScriptedSimulator};
    let set = args.task_set.load()?;
    let mut runs = Vec::with_capacity(args.runs.len());
    for run in &args.runs {
        let log = run.join(LOG_FILE);
        let records = read_log(&log)
            .with_context(|| format!("cannot read the log {}", log.display()))?
            .records;
        runs.push(
            missed_answers(
                &run.display().to_string(),
                &set,
                &records,
                &EnvConfig::default(),
                sqlite_backend,
                |_| ScriptedSimulator::default(),
            )
            .with_context(|| format!("cannot judge the queries of {}", run.display()))?,
        );
    }
    for run in runs.iter().filter(|run| run.not_judged > 0) {
        eprintln!(
            "warning: {} failed episode(s) of {} are not in the task file {} (or their database is missing); they are counted as not judged",
            run.not_judged,
            run.run,
            args.task_set.tasks.display()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else {
        print!("{}", render_missed(&runs));
    }
    Ok(())
}
