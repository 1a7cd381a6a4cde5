//! `merit report RUN_DIR...`: the paper's tables and figures from one or more run directories.

use anyhow::{bail, Context, Result};
use clap::Args;
use merit_core::episode::EpisodeRecord;
use merit_lab::jsonl::read_records;
use merit_lab::report::{build_report_against, render_markdown};
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
    /// One suffix per run directory, comma-separated, appended to the method names of that
    /// run's episodes (`+SUFFIX`; empty leaves them as they are). Runs of one method in two
    /// settings, e.g. `merit report full change --suffixes ,change`, then compare paired in
    /// Table 2 (`merit` against `merit+change`) instead of merging into one method.
    #[arg(long, value_delimiter = ',')]
    suffixes: Vec<String>,
    /// The method Table 2's paired comparisons are made against (default: `merit`, else the
    /// first `merit-` variant), e.g. `--reference dynamic-rag` for Dynamic-RAG minus Iterative.
    /// Names a method of the runs (with its `+SUFFIX`, if any).
    #[arg(long)]
    reference: Option<String>,
    /// Only these seeds' streams (comma-separated), e.g. `--seeds 0` to pair a three-seed run
    /// with a one-seed run of another setting (paired comparisons need the same seeds).
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
}

/// Reads every episode log of a run directory, in file-name order: `*.jsonl` as `merit run`
/// writes them, and `*.jsonl.gz` as results are committed (gzip, e.g. `gzip -9n`).
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
        .filter(|path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.ends_with(".jsonl") || n.ends_with(".jsonl.gz"))
        })
        .collect();
    logs.sort();
    let mut episodes = Vec::new();
    for log in logs {
        episodes.extend(read_episode_log(&log)?);
    }
    Ok(episodes)
}

/// Reads one episode log: `*.jsonl` as `merit run` writes it (an unfinished last record is
/// ignored with a warning), or gzip-compressed as results are committed.
pub(crate) fn read_episode_log(log: &Path) -> Result<Vec<EpisodeRecord>> {
    if log.extension().is_some_and(|ext| ext == "gz") {
        return read_compressed_log(log);
    }
    if !log.is_file() {
        bail!("{}: no such episode log", log.display());
    }
    let loaded = read_records::<EpisodeRecord>(log)?;
    if loaded.torn_bytes > 0 {
        eprintln!(
            "warning: {} ends with an unfinished record ({} bytes, ignored); \
             resume the run to complete it",
            log.display(),
            loaded.torn_bytes
        );
    }
    Ok(loaded.records)
}

/// Reads a gzip-compressed episode log. A committed log is complete by construction, so unlike
/// a live one it may not end in a torn line: every line must be a whole record.
fn read_compressed_log(path: &Path) -> Result<Vec<EpisodeRecord>> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .with_context(|| format!("{} is not a gzip-compressed UTF-8 log", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).with_context(|| {
                format!(
                    "{} line {}: not an episode record",
                    path.display(),
                    index + 1
                )
            })
        })
        .collect()
}

pub fn run(args: ReportArgs) -> Result<()> {
    if !args.suffixes.is_empty() && args.suffixes.len() != args.runs.len() {
        bail!(
            "--suffixes gives {} suffixes for {} run directories (give one per run; empty for none)",
            args.suffixes.len(),
            args.runs.len()
        );
    }
    let mut episodes = Vec::new();
    for (index, dir) in args.runs.iter().enumerate() {
        let mut run = load_run(dir)?;
        match args.suffixes.get(index).map(|s| s.trim()) {
            Some(suffix) if !suffix.is_empty() => {
                for episode in &mut run {
                    episode.method = format!("{}+{suffix}", episode.method);
                }
            }
            _ => {}
        }
        episodes.extend(run);
    }
    if episodes.is_empty() {
        bail!("no finished episodes in {:?}", args.runs);
    }
    if !args.seeds.is_empty() {
        episodes.retain(|e| args.seeds.contains(&e.seed));
        if episodes.is_empty() {
            bail!(
                "--seeds {:?}: no episodes of those seeds in {:?}",
                args.seeds,
                args.runs
            );
        }
    }
    let reference = args.reference.as_deref();
    if let Some(name) = reference {
        let methods: std::collections::BTreeSet<&str> =
            episodes.iter().map(|e| e.method.as_str()).collect();
        if !methods.contains(name) {
            bail!(
                "--reference {name}: no such method in these runs (they have {})",
                methods.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let report = build_report_against(&episodes, reference);
    let markdown = render_markdown(&report);
    let json = serde_json::to_string_pretty(&report)? + "\n";
    let out = args.out.unwrap_or_else(|| args.runs[0].join("report"));
    merit_lab::report::write_report_files_against(&out, &episodes, reference)?;
    if args.json {
        print!("{json}");
    } else {
        print!("{markdown}");
        eprintln!("report written to {}", out.display());
    }
    Ok(())
}
