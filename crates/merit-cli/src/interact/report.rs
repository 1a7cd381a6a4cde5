//! `merit interact report` and `summaries`: what run directories hold (the figures are
//! computed by `merit_lab::interact`).

use anyhow::{Context, Result};
use clap::Args;
use merit_interact::runlog::read_log;
use merit_lab::interact::{
    compare, render, render_behaviour, render_comparisons, render_repeated_tries, repeated_tries,
    summarise, LOG_FILE,
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
}

pub(super) fn report(args: InteractReportArgs) -> Result<()> {
    let summaries = summarise(&args.runs)?;
    let comparisons = match &args.baseline {
        Some(baseline) => compare(&args.runs, baseline, args.resamples, args.bootstrap_seed)?,
        None => Vec::new(),
    };
    let tries = match args.pass_at_k {
        true => Some(repeated_tries(&args.runs)?),
        false => None,
    };
    if args.json {
        let report = serde_json::json!({
            "runs": summaries, "comparisons": comparisons, "repeated_tries": tries,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
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
