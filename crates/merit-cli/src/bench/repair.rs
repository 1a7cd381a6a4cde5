//! `merit bench repair`: what the repair harness itself costs per repair step.
//!
//! A finished run is replayed into a scratch directory with every model call served from the
//! reply cache in replay mode (a miss is an error, so nothing is generated): what remains is
//! the harness — cache lookups, the oracle, classification, memory commits and retrieval,
//! prompt rendering, the append-only logs, the report. Its wall time divided by the repair
//! steps replayed is the overhead per step. The baseline, measured in the same process, is a
//! live call of the embedded chat model on initial prompts of the run's own questions (the
//! cheapest call a repair step makes; repair prompts are longer). The original live latency of
//! the replayed replies, as recorded in the cache when the run was made, is printed beside it.
//!
//! `--scripted` makes the run to replay first, at any scale (the whole of Spider dev, every
//! method, three seeds), with a deterministic stand-in for the model: a real model needs days
//! on two cores to produce those replies, while the harness cost is what is measured here. The
//! stand-in answers each prompt with the question's gold query or a broken variant of it
//! (chosen by a hash of the prompt), so episodes fail, get classified, repaired or not,
//! write positive and negative memories and retrieve from memories that grow to full size.

use crate::experiment::{load_questions, run_experiment, RunArgs};
use crate::models::{load_chat_model, reexec_with_bounded_openmp_spin};
use crate::report_cmd::read_episode_log;
use anyhow::{bail, Context, Result};
use clap::Args;
use merit_core::hash::fnv1a;
use merit_core::model::{ChatModel, ChatReply, ChatRequest, Decoding, Embedder, ModelError};
use merit_core::Benchmark;
use merit_lab::experiment::ExperimentModels;
use merit_memory::HashEmbedder;
use merit_models::cache::{Accounting, CacheMode, CachedChat, CachedEmbedder, ReplyStore};
use merit_repair::prompts::initial::{initial_request, InitialTask};
use merit_sql::Dialect;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `merit bench repair`: the finished run to replay, then the options it was
/// made with (`--out`/`--resume` are ignored: the replay goes to a scratch directory).
#[derive(Debug, Args)]
pub struct RepairBenchArgs {
    /// The finished run directory whose replies are in the cache.
    #[arg(
        long,
        required_unless_present = "scripted",
        conflicts_with = "scripted"
    )]
    from: Option<PathBuf>,
    /// Make the run first with the scripted stand-in model (no model needed, any scale), in
    /// a scratch directory with its own reply cache, then replay it.
    #[arg(long)]
    scripted: bool,
    /// Live embedded-model calls for the baseline (0: skip it).
    #[arg(long, default_value_t = 3)]
    live_calls: usize,
    /// The options of the original `merit run`.
    #[command(flatten)]
    run: RunArgs,
}

/// What the original run's manifest says about its models.
#[derive(serde::Deserialize)]
struct ManifestModels {
    chat_model: String,
    embedder: String,
    #[serde(default)]
    repair_model: Option<String>,
}

/// A chat model that is never asked: the cache in replay mode answers every call or fails.
struct ReplayOnlyChat(String);

impl ChatModel for ReplayOnlyChat {
    fn id(&self) -> String {
        self.0.clone()
    }

    fn chat(&self, _: &ChatRequest) -> Result<ChatReply, ModelError> {
        Err(ModelError::Unavailable(
            "replay: the reply is not in the cache".into(),
        ))
    }
}

/// An embedder that is never asked, like [`ReplayOnlyChat`].
struct ReplayOnlyEmbedder(String);

impl Embedder for ReplayOnlyEmbedder {
    fn id(&self) -> String {
        self.0.clone()
    }

    fn dimension(&self) -> usize {
        // all-MiniLM-L6-v2's; only used to check vectors, which all come from the cache.
        384
    }

    fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Err(ModelError::Unavailable(
            "replay: the embedding is not in the cache".into(),
        ))
    }
}

/// Runs `merit bench repair`.
pub fn run(args: RepairBenchArgs) -> Result<()> {
    if args.live_calls > 0 {
        reexec_with_bounded_openmp_spin();
    }
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    match &args.from {
        Some(from) => {
            let cache_dir = args
                .run
                .cache
                .clone()
                .unwrap_or_else(|| crate::models::merit_home().join("replies"));
            replay(&args, from, &cache_dir, scratch.path())
        }
        None => {
            let cache_dir = scratch.path().join("replies");
            let original = scratch.path().join("original");
            record_scripted_run(&args.run, &cache_dir, &original)?;
            replay(&args, &original, &cache_dir, scratch.path())
        }
    }
}

/// Makes the run to replay with [`ScriptedRepairer`] and the hashed bag-of-words embedder,
/// storing every reply in `cache_dir`.
fn record_scripted_run(run: &RunArgs, cache_dir: &Path, out: &Path) -> Result<()> {
    let (_, questions, _) = load_questions(run)?;
    let mut golds: HashMap<String, String> = HashMap::new();
    for question in &questions {
        // A question text asked of two databases keeps its first gold; the other database
        // then sees a failing "gold", which is just one more failure to repair.
        golds
            .entry(question.question.clone())
            .or_insert_with(|| question.gold_sql.clone());
    }
    let store = Arc::new(ReplyStore::open(cache_dir).context("cannot open the scratch cache")?);
    let chat: Arc<dyn ChatModel> = Arc::new(CachedChat::new(
        ScriptedRepairer { golds },
        Arc::clone(&store),
    ));
    let embedder: Arc<dyn Embedder> = Arc::new(CachedEmbedder::new(
        HashEmbedder::new(SCRIPTED_EMBEDDING_DIMENSION),
        store,
    ));
    let mut run_args = run.clone();
    run_args.out = Some(out.to_path_buf());
    run_args.resume = None;
    run_args.cache = Some(cache_dir.to_path_buf());
    let started = Instant::now();
    run_experiment(run_args, Some(ExperimentModels::single(chat, embedder)))
        .context("the scripted run that the benchmark replays failed")?;
    println!(
        "scripted run (stand-in model, recording every reply): {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The dimension [`ReplayOnlyEmbedder`] reports, and so the one the scripted run embeds with.
const SCRIPTED_EMBEDDING_DIMENSION: usize = 384;

/// A deterministic stand-in for the chat model, for timing the harness at full scale.
///
/// It reads the question from the prompt's `QUESTION` block and answers with that question's
/// gold query or a broken variant of it, chosen by a hash of the whole prompt: initial
/// prompts get the gold 4 times in 10, repair prompts 1 time in 5. The prompt of a later
/// attempt differs (it carries the history and the precedents), so an episode's attempts
/// differ too. Reflection requests get a query as well: the harness stores any text there.
struct ScriptedRepairer {
    golds: HashMap<String, String>,
}

impl ScriptedRepairer {
    fn reply_sql(&self, prompt: &str) -> String {
        let question = prompt
            .split_once("QUESTION\n")
            .map(|(_, rest)| rest.split_once("\n\n").map_or(rest, |(q, _)| q))
            .unwrap_or("");
        let gold = self
            .golds
            .get(question)
            .map_or("SELECT 1", String::as_str)
            .trim()
            .trim_end_matches(';');
        let hash = fnv1a(prompt.as_bytes());
        let is_repair = prompt.contains("CURRENT SQL");
        let correct = if is_repair {
            hash.is_multiple_of(5)
        } else {
            hash % 10 < 4
        };
        if correct {
            return gold.to_string();
        }
        match (hash >> 16) % 5 {
            0 => format!("SELECT * FROM ({gold}) LIMIT 0"),
            1 => format!("SELECT count(*) FROM ({gold})"),
            2 => format!("SELECT no_such_column FROM ({gold})"),
            3 => format!("{gold} WHERE"),
            _ => format!("SELECT * FROM no_such_table_{}", hash % 7),
        }
    }
}

impl ChatModel for ScriptedRepairer {
    fn id(&self) -> String {
        "merit-bench:scripted-repairer-v1".into()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let prompt: String = request
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let sql = self.reply_sql(&prompt);
        Ok(ChatReply {
            text: format!("```sql\n{sql}\n```"),
            prompt_tokens: (prompt.len() / 4) as u32,
            completion_tokens: (sql.len() / 4 + 4) as u32,
            latency: Duration::ZERO,
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// Replays the run in `from` with every reply from `cache_dir`, and prints the overhead.
fn replay(args: &RepairBenchArgs, from: &Path, cache_dir: &Path, scratch: &Path) -> Result<()> {
    let manifest_path = from.join("manifest.json");
    let manifest: ManifestModels = serde_json::from_str(
        &std::fs::read_to_string(&manifest_path)
            .with_context(|| format!("cannot read {}", manifest_path.display()))?,
    )
    .with_context(|| format!("{} is not a run manifest", manifest_path.display()))?;
    let store = Arc::new(ReplyStore::open(cache_dir).context("cannot open the reply cache")?);
    println!(
        "machine: {} cores available; reply cache {} ({} entries)",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        cache_dir.display(),
        store.len()
    );

    let accounting = Arc::new(Accounting::new());
    let chat: Arc<dyn ChatModel> = Arc::new(
        CachedChat::new(
            ReplayOnlyChat(manifest.chat_model.clone()),
            Arc::clone(&store),
        )
        .with_mode(CacheMode::Replay)
        .with_accounting(Arc::clone(&accounting)),
    );
    let repair: Arc<dyn ChatModel> = match &manifest.repair_model {
        None => Arc::clone(&chat),
        Some(id) => Arc::new(
            CachedChat::new(ReplayOnlyChat(id.clone()), Arc::clone(&store))
                .with_mode(CacheMode::Replay)
                .with_accounting(Arc::clone(&accounting)),
        ),
    };
    let embedder: Arc<dyn Embedder> = Arc::new(
        CachedEmbedder::new(ReplayOnlyEmbedder(manifest.embedder.clone()), store)
            .with_mode(CacheMode::Replay),
    );
    let replay_dir = scratch.join("replay");
    let mut run_args = args.run.clone();
    run_args.out = Some(replay_dir.clone());
    run_args.resume = None;
    run_args.cache = Some(cache_dir.to_path_buf());

    let started = Instant::now();
    let models = ExperimentModels {
        initial: chat,
        repair,
        embedder,
    };
    run_experiment(run_args, Some(models)).context(
        "the replay failed: is every reply of the run in the cache, and are the options \
         those of the original run?",
    )?;
    let replay_time = started.elapsed();

    let (episodes, steps) = count_steps(&replay_dir)?;
    if !same_episode_logs(from, &replay_dir)? {
        bail!(
            "the replayed episode logs differ from {}: the replay did not reproduce the run",
            from.display()
        );
    }
    let tally = accounting.snapshot().total;
    let calls = tally.cached.calls.max(1);
    let recorded_ms = tally.cached.latency_ms as f64 / calls as f64;
    let per_step = replay_time.as_secs_f64() * 1000.0 / steps.max(1) as f64;
    println!(
        "replayed {episodes} episodes ({steps} repair steps, {} chat calls from the cache, \
         {} live) in {:.2} s; episode logs identical to the original run",
        tally.cached.calls,
        tally.live.calls,
        replay_time.as_secs_f64()
    );
    println!(
        "harness overhead: {per_step:.2} ms per repair step (everything but the model; \
         includes the initial predictions' lookups and the report)"
    );
    // The scripted stand-in records no latency; only a real model's replies have one.
    if tally.cached.latency_ms > 0 {
        println!(
            "recorded live latency of the replayed calls: {recorded_ms:.0} ms per call \
             (overhead = {:.2}% of it)",
            per_step / recorded_ms * 100.0
        );
    }

    if args.live_calls > 0 {
        let live_ms = live_baseline(&args.run, args.live_calls)?;
        println!(
            "baseline, measured now: {live_ms:.0} ms per live embedded call on an initial \
             prompt; overhead per step = {:.2}% of one call (ratio {:.0}x)",
            per_step / live_ms * 100.0,
            live_ms / per_step.max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}

/// Episodes and repair steps (attempts after the initial one) in a run's episode logs.
fn count_steps(dir: &Path) -> Result<(usize, usize)> {
    let mut episodes = 0;
    let mut steps = 0;
    for log in episode_logs(dir)? {
        let records = read_episode_log(&log)?;
        episodes += records.len();
        steps += records.iter().map(|r| r.repair_steps()).sum::<usize>();
    }
    Ok((episodes, steps))
}

fn episode_logs(dir: &Path) -> Result<Vec<PathBuf>> {
    let folder = dir.join("episodes");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&folder)
        .with_context(|| format!("cannot list {}", folder.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    logs.sort();
    Ok(logs)
}

/// Whether every episode log of the replay is byte-identical to the original's.
fn same_episode_logs(original: &Path, replay: &Path) -> Result<bool> {
    let originals = episode_logs(original)?;
    let replays = episode_logs(replay)?;
    if originals.len() != replays.len() {
        return Ok(false);
    }
    for (a, b) in originals.iter().zip(&replays) {
        if a.file_name() != b.file_name() || std::fs::read(a)? != std::fs::read(b)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Mean milliseconds of live embedded-model calls on the first questions' initial prompts.
fn live_baseline(run: &RunArgs, calls: usize) -> Result<f64> {
    let (benchmark, questions, schemas) = load_questions(run)?;
    let chat = load_chat_model(&run.model, run.model_path.as_deref(), run.context_size)?;
    let decoding = Decoding {
        max_tokens: run.max_tokens,
        ..Decoding::default()
    };
    let mut total = Duration::ZERO;
    let mut done = 0usize;
    for question in questions.iter().take(calls) {
        let schema = schemas.get(&question.db_id).cloned().unwrap_or_default();
        let task = InitialTask {
            benchmark,
            dialect: Dialect::Sqlite,
            schema: &schema,
            question: &question.question,
            evidence: (benchmark == Benchmark::Bird).then_some(question.evidence.as_str()),
        };
        let started = Instant::now();
        chat.chat(&initial_request(&task, decoding.clone()))?;
        total += started.elapsed();
        done += 1;
    }
    if done == 0 {
        bail!("no questions for the live baseline");
    }
    Ok(total.as_secs_f64() * 1000.0 / done as f64)
}
