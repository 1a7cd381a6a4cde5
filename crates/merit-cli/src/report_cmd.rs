//! `merit report RUN_DIR...`: the paper's tables and figures from one or more run directories.

use anyhow::{bail, Context, Result};
use clap::Args;
use merit_core::episode::EpisodeRecord;
use merit_lab::jsonl::read_records;
use merit_lab::report::{build_report, render_markdown};
use std::path::{Path, PathBuf};

/// Arguments of `merit report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run directories (each with an `episodes/` folder); their streams are combined.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Where to write report.md, report.json and the SVG figures (default: `<first run>/report`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the JSON report to stdout instead of the Markdown tables.
    #[arg(long)]
    json: bool,
}

/// Reads every episode log of a run directory, in file-name order.
fn load_run(dir: &Path) -> Result<Vec<EpisodeRecord>> {
    let folder = dir.join("episodes");
    let entries = std::fs::read_dir(&folder).with_context(|| {
        format!(
            "{} is not a run directory (no episodes/ folder)",
            dir.display()
        )
    })?;
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    logs.sort();
    let mut episodes = Vec::new();
    for log in logs {
        let loaded = read_records::<EpisodeRecord>(&log)?;
        if loaded.torn_bytes > 0 {
            eprintln!(
                "warning: {} ends with an unfinished record ({} bytes, ignored); \
                 resume the run to complete it",
                log.display(),
                loaded.torn_bytes
            );
        }
        episodes.extend(loaded.records);
    }
    Ok(episodes)
}

pub fn run(args: ReportArgs) -> Result<()> {
    let mut episodes = Vec::new();
    for dir in &args.runs {
        episodes.extend(load_run(dir)?);
    }
    if episodes.is_empty() {
        bail!("no finished episodes in {:?}", args.runs);
    }
    let report = build_report(&episodes);
    let markdown = render_markdown(&report);
    let json = serde_json::to_string_pretty(&report)? + "\n";
    let out = args.out.unwrap_or_else(|| args.runs[0].join("report"));
    crate::run_cmd::write_report(&out, &episodes)?;
    if args.json {
        print!("{json}");
    } else {
        print!("{markdown}");
        eprintln!("report written to {}", out.display());
    }
    Ok(())
}
