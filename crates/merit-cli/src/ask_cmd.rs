//! `merit ask`: one question, answered by the embedded chat model with the initial
//! Text-to-SQL prompt; optionally run on the database.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use merit_agent::extract::extract_sql;
use merit_agent::prompts::initial::{initial_request, schema_from_database, InitialTask};
use merit_core::model::{ChatModel, Decoding};
use merit_core::Benchmark;
use merit_data::DatabaseDir;
use merit_models::embed::{MiniLmConfig, MiniLmEmbedder};
use merit_models::llama::{LlamaChat, LlamaConfig, DEFAULT_CONTEXT_SIZE};
use merit_models::registry::{ensure_model, ModelFiles, PullEvent, PullOptions};
use merit_sql::{Database, Dialect, ExecLimits, ResultSet, SqliteDatabase};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `merit ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// Folder with one folder per database (Spider's `database/`, BIRD's `dev_databases/`).
    #[arg(long)]
    db_dir: PathBuf,
    /// Database id (its folder name).
    #[arg(long)]
    db: String,
    /// The question, in natural language.
    question: String,
    /// BIRD-style evidence (external knowledge) to show with the question.
    #[arg(long)]
    evidence: Option<String>,
    /// Chat model to use (see `merit models list`).
    #[arg(long, default_value = merit_models::registry::DEFAULT_CHAT_MODEL)]
    model: String,
    /// A GGUF file to use instead of the cached or downloaded model.
    #[arg(long)]
    model_path: Option<PathBuf>,
    /// Context window of the model, in tokens.
    #[arg(long, default_value_t = DEFAULT_CONTEXT_SIZE)]
    context_size: u32,
    /// Most tokens the model may write.
    #[arg(long, default_value_t = 512)]
    max_tokens: u32,
    /// Run the query (read-only, 30 s limit) and print its rows.
    #[arg(long)]
    execute: bool,
    /// Rows printed with `--execute`.
    #[arg(long, default_value_t = 20)]
    max_rows: usize,
    /// Also print the prompt and the model's raw reply (on stderr).
    #[arg(long)]
    verbose: bool,
}

/// Runs `merit ask`.
pub fn run(args: AskArgs) -> Result<()> {
    reexec_with_bounded_openmp_spin();
    let path = DatabaseDir::new(&args.db_dir)
        .locate(&args.db)
        .map_err(|missing| anyhow!("{missing}"))?;
    let database = SqliteDatabase::open(&path)?;
    let schema = schema_from_database(&database)
        .with_context(|| format!("cannot read the schema of {}", path.display()))?;
    if schema.is_empty() {
        bail!("{} has no tables", path.display());
    }
    let task = InitialTask {
        benchmark: if args.evidence.is_some() {
            Benchmark::Bird
        } else {
            Benchmark::Spider
        },
        dialect: Dialect::Sqlite,
        schema: &schema,
        question: &args.question,
        evidence: args.evidence.as_deref(),
    };
    let decoding = Decoding {
        max_tokens: args.max_tokens,
        ..Decoding::default()
    };
    let request = initial_request(&task, decoding);

    let chat = load_chat_model(&args.model, args.model_path.as_deref(), args.context_size)?;
    if args.verbose {
        eprintln!("--- prompt ({}) ---", request.prompt_version);
        eprintln!("{}", request.messages[0].content);
    }
    let started = Instant::now();
    let reply = chat.chat(&request)?;
    eprintln!(
        "{}: {} prompt tokens, {} generated, {:.1} s",
        chat.id(),
        reply.prompt_tokens,
        reply.completion_tokens,
        started.elapsed().as_secs_f64()
    );
    if args.verbose {
        eprintln!("--- reply ---\n{}\n---", reply.text);
    }
    let sql = extract_sql(&reply.text)
        .map_err(|error| anyhow!("{error}\n--- full reply ---\n{}", reply.text))?;
    println!("{sql}");

    if args.execute {
        let result = database.query(&sql, &ExecLimits::AGENT)?;
        print!("{}", render_table(&result, args.max_rows));
    }
    Ok(())
}

/// How long an OpenMP thread of llama.cpp spins at a barrier before it sleeps, in libgomp's
/// spin iterations (about 100 per microsecond): long enough to cover the wait between two
/// operations of one token on an idle machine, far shorter than a scheduler time slice.
///
/// Measured on the 2-core machine (0.5B model, generation tok/s, issue 17):
/// idle, PASSIVE (no spin) 28.4, 1,000 spins 46.8, 3,000 spins 50.0, ACTIVE (spin forever)
/// 51.0; with four busy processes beside it, PASSIVE 16.5, 1,000 spins 12.4, 3,000 spins 9.2,
/// 10,000 spins 4.2, ACTIVE 4.0.
pub const OPENMP_SPIN_COUNT: u32 = 3_000;

/// Restarts the process with a bounded OpenMP spin (`OMP_WAIT_POLICY=PASSIVE` with
/// `GOMP_SPINCOUNT` = [`OPENMP_SPIN_COUNT`]) unless `OMP_WAIT_POLICY` is already set.
///
/// llama.cpp runs its CPU threads under OpenMP, whose threads wait at the many barriers of
/// each token. libgomp's default spins for about 3 ms before sleeping: when other processes
/// hold the cores (parallel builds, other experiments) a waiting thread burns whole time
/// slices and generation collapses (measured on 2 shared cores: 1 token/s instead of 22).
/// The passive policy alone (sleep at once) fixed that but cost 45% of generation speed on an
/// idle machine, since every barrier became a futex sleep and wake-up. A short spin keeps
/// nearly all of the idle speed and bounds what a waiting thread can waste under load. libgomp
/// reads these variables once, when the program starts, so they cannot be changed from inside
/// the process: the only way is to start again with them set. Call this first thing in a
/// command, before it has done anything else. Setting `OMP_WAIT_POLICY` yourself (to any
/// value, with or without `GOMP_SPINCOUNT`) skips the restart.
pub fn reexec_with_bounded_openmp_spin() {
    if std::env::var_os("OMP_WAIT_POLICY").is_some() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(executable) = std::env::current_exe() else {
            return;
        };
        let mut command = std::process::Command::new(executable);
        command
            .args(std::env::args_os().skip(1))
            .env("OMP_WAIT_POLICY", "PASSIVE");
        if std::env::var_os("GOMP_SPINCOUNT").is_none() {
            command.env("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT.to_string());
        }
        let error = command.exec();
        // `exec` only returns when it failed; carry on with the default policy.
        tracing::debug!("could not restart with a bounded OpenMP spin: {error}");
    }
}

/// How an embedded chat model is loaded, beyond its name and file.
#[derive(Debug, Clone, Copy)]
pub struct ChatLoad {
    /// Context window of one conversation, in tokens.
    pub context_size: u32,
    /// CPU threads (`None`: every core).
    pub threads: Option<usize>,
    /// KV caches kept side by side for conversations that alternate on the model (an
    /// interact run's agent and user simulator, Reflexion's reflection and repair prompts).
    pub cache_slots: usize,
    /// Conversations decoded together (continuous batching; 1: one call at a time).
    pub parallel: usize,
}

impl ChatLoad {
    /// One conversation at a time, one cache, every core.
    pub fn new(context_size: u32) -> ChatLoad {
        ChatLoad {
            context_size,
            threads: None,
            cache_slots: 1,
            parallel: 1,
        }
    }
}

/// Finds (or fetches, with a progress bar) the named chat model and loads it.
pub fn load_chat_model(
    name: &str,
    model_path: Option<&Path>,
    context_size: u32,
) -> Result<LlamaChat> {
    load_chat_model_with(name, model_path, ChatLoad::new(context_size))
}

/// Loads a chat model with every option of [`ChatLoad`].
pub fn load_chat_model_with(
    name: &str,
    model_path: Option<&Path>,
    load: ChatLoad,
) -> Result<LlamaChat> {
    let files = pull(name, model_path)?;
    let mut config = LlamaConfig::new(files.main_file())
        .with_name(files.name.clone())
        .with_context_size(load.context_size)
        .with_cache_slots(load.cache_slots)
        .with_parallel(load.parallel);
    if let Some(threads) = load.threads {
        config = config.with_threads(threads);
    }
    let started = Instant::now();
    let chat = LlamaChat::load(config)?;
    tracing::info!(
        "loaded {} in {:.1} s",
        chat.id(),
        started.elapsed().as_secs_f64()
    );
    Ok(chat)
}

/// Finds (or fetches) the named embedder and loads it.
pub fn load_embedder(name: &str, model_path: Option<&Path>) -> Result<MiniLmEmbedder> {
    let files = pull(name, model_path)?;
    let mut config = MiniLmConfig::from_dir(&files.dir);
    for (slot, file) in [
        (&mut config.weights, "model.safetensors"),
        (&mut config.tokenizer, "tokenizer.json"),
        (&mut config.config, "config.json"),
    ] {
        if let Some(path) = files.file(file) {
            *slot = path.to_path_buf();
        }
    }
    Ok(MiniLmEmbedder::load_with(config)?)
}

/// The model's files through the registry: the user's path, the cache, then the network,
/// showing download progress on stderr.
pub(crate) fn pull(name: &str, model_path: Option<&Path>) -> Result<ModelFiles> {
    let options = PullOptions {
        model_path: model_path.map(Path::to_path_buf),
        ..PullOptions::default()
    };
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut progress = |event: PullEvent| match event {
        PullEvent::Trying { source } => eprintln!("fetching {name} from {source} ..."),
        PullEvent::Progress { done, total, .. } => {
            let bar = bar.get_or_insert_with(|| {
                let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                bar
            });
            bar.set_position(done);
        }
        PullEvent::SourceFailed { source, error } => {
            if let Some(bar) = bar.take() {
                bar.abandon();
            }
            eprintln!("{source} failed: {error}");
        }
        PullEvent::Ready { .. } => {
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
        }
        PullEvent::Verifying { .. } => {}
    };
    ensure_model(name, &options, &mut progress).map_err(|error| anyhow!("{error}"))
}

/// Rows as a small aligned text table, at most `max_rows` of them, with a count line.
fn render_table(result: &ResultSet, max_rows: usize) -> String {
    const MAX_CELL: usize = 40;
    let cell = |text: String| -> String {
        let flat = text.replace(['\n', '\r', '\t'], " ");
        if flat.chars().count() > MAX_CELL {
            let mut short: String = flat.chars().take(MAX_CELL - 1).collect();
            short.push('…');
            short
        } else {
            flat
        }
    };
    let header: Vec<String> = result.columns.iter().cloned().map(cell).collect();
    let rows: Vec<Vec<String>> = result
        .rows
        .iter()
        .take(max_rows)
        .map(|row| row.iter().map(|value| cell(value.display())).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, value) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(value.chars().count());
            }
        }
    }
    let line = |values: &[String]| -> String {
        let padded: Vec<String> = values
            .iter()
            .zip(&widths)
            .map(|(value, &width)| {
                let pad = width.saturating_sub(value.chars().count());
                format!("{value}{}", " ".repeat(pad))
            })
            .collect();
        format!("{}\n", padded.join(" | ").trim_end())
    };
    let mut out = String::new();
    out.push_str(&line(&header));
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&format!("{}\n", rule.join("-+-")));
    for row in &rows {
        out.push_str(&line(row));
    }
    let total = result.rows.len();
    let more = if result.truncated { "+" } else { "" };
    let noun = if total == 1 && !result.truncated {
        "row"
    } else {
        "rows"
    };
    if total > rows.len() {
        out.push_str(&format!(
            "({total}{more} {noun}, first {} shown)\n",
            rows.len()
        ));
    } else {
        out.push_str(&format!("({total}{more} {noun})\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_sql::Value;

    #[test]
    fn the_table_aligns_columns_and_counts_rows() {
        let result = ResultSet {
            columns: vec!["count(*)".to_string(), "name".to_string()],
            rows: vec![
                vec![Value::Integer(6), Value::Text(b"Joe Sharp".to_vec())],
                vec![Value::Null, Value::Text(b"a\nb".to_vec())],
            ],
            truncated: false,
        };
        assert_eq!(
            render_table(&result, 20),
            "count(*) | name\n---------+----------\n6        | Joe Sharp\nNULL     | a b\n(2 rows)\n"
        );
        assert_eq!(
            render_table(&result, 1),
            "count(*) | name\n---------+----------\n6        | Joe Sharp\n(2 rows, first 1 shown)\n"
        );
    }
}
