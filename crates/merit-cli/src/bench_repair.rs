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

use crate::ask_cmd::{load_chat_model, reexec_with_passive_openmp};
use crate::run_cmd::{load_questions, run_with_models, RunArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use merit_agent::prompts::initial::{initial_request, InitialTask};
use merit_core::episode::EpisodeRecord;
use merit_core::model::{ChatModel, ChatReply, ChatRequest, Decoding, Embedder, ModelError};
use merit_core::Benchmark;
use merit_lab::jsonl::read_records;
use merit_models::cache::{Accounting, CacheMode, CachedChat, CachedEmbedder, ReplyStore};
use merit_sql::Dialect;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `merit bench repair`: the finished run to replay, then the options it was
/// made with (`--out`/`--resume` are ignored: the replay goes to a scratch directory).
#[derive(Debug, Args)]
pub struct RepairBenchArgs {
    /// The finished run directory whose replies are in the cache.
    #[arg(long)]
    from: PathBuf,
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
    reexec_with_passive_openmp();
    let manifest_path = args.from.join("manifest.json");
    let manifest: ManifestModels = serde_json::from_str(
        &std::fs::read_to_string(&manifest_path)
            .with_context(|| format!("cannot read {}", manifest_path.display()))?,
    )
    .with_context(|| format!("{} is not a run manifest", manifest_path.display()))?;
    let cache_dir = args
        .run
        .cache
        .clone()
        .unwrap_or_else(|| crate::run_cmd::merit_home().join("replies"));
    let store = Arc::new(ReplyStore::open(&cache_dir).context("cannot open the reply cache")?);
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
    let embedder: Arc<dyn Embedder> = Arc::new(
        CachedEmbedder::new(ReplayOnlyEmbedder(manifest.embedder.clone()), store)
            .with_mode(CacheMode::Replay),
    );
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    let replay_dir = scratch.path().join("replay");
    let mut run_args = args.run.clone();
    run_args.out = Some(replay_dir.clone());
    run_args.resume = None;

    let started = Instant::now();
    run_with_models(run_args, Some((chat, embedder))).context(
        "the replay failed: is every reply of the run in the cache, and are the options \
         those of the original run?",
    )?;
    let replay_time = started.elapsed();

    let (episodes, steps) = count_steps(&replay_dir)?;
    if !same_episode_logs(&args.from, &replay_dir)? {
        bail!(
            "the replayed episode logs differ from {}: the replay did not reproduce the run",
            args.from.display()
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
    println!(
        "recorded live latency of the replayed calls: {recorded_ms:.0} ms per call \
         (overhead = {:.2}% of it)",
        per_step / recorded_ms.max(f64::MIN_POSITIVE) * 100.0
    );

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
        let records: Vec<EpisodeRecord> = read_records(&log)
            .with_context(|| format!("cannot read {}", log.display()))?
            .records;
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
