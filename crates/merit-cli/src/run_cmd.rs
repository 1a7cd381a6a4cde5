//! `merit run` and `merit demo`: MERIT repair experiments over a benchmark.

use crate::models::{load_chat_model_with, load_embedder, merit_home, ChatLoad, RUN_CONTEXT_SIZE};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use merit_agent::extract::extract_sql;
use merit_agent::hints::{DatabaseHints, HintKinds};
use merit_agent::memory::{MeritMemory, RuleClassifier};
use merit_agent::prompts::initial::{dialect_name, initial_request, InitialTask};
use merit_agent::repair::{
    EpisodeDeps, EpisodeSettings, NoMemory, QuestionView, RepairAids, RepairLayout, RepairMemory,
};
use merit_core::episode::EpisodeRecord;
use merit_core::model::{ChatModel, Decoding, Embedder};
use merit_core::{Benchmark, Question};
use merit_data::{render_create_tables, DatabaseDir};
use merit_eval::{EvalConfig, Evaluator, Oracle};
use merit_lab::jsonl::{read_records, truncate_torn_tail, Appender};
use merit_lab::report::{build_report, render_markdown};
use merit_lab::run::{
    ensure_manifest, load_episodes, run_streams, MethodFactory, PreparedQuestion, RunPlan,
    StreamSpec,
};
use merit_memory::{FinalizePolicy, Variant};
use merit_models::cache::{CachedChat, CachedEmbedder, ReplyStore};
use merit_models::openai::{OpenAiChat, OpenAiConfig, OpenAiEmbedder};
use merit_sql::Dialect;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Benchmarks `merit run` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetArg {
    /// Spider dev (`dev.json`, `tables.json`).
    Spider,
    /// BIRD dev (`dev.json`, `dev_tables.json`).
    Bird,
}

/// Which split of the benchmark a run draws its questions from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitArg {
    /// The evaluation split (`dev.json`): report here, tune nowhere.
    Dev,
    /// The training split (`train.json`): where prompts, aids and defaults are calibrated.
    Train,
}

/// Layouts of the repair request on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// The paper's: the current SQL as a block to correct, with the whole history.
    Paper,
    /// Ask afresh: the feedback of earlier attempts without their SQL.
    Fresh,
}

/// Hints on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HintArg {
    /// Nearest identifiers, tables holding a column, foreign-key join paths.
    Schema,
    /// Empty results and literals that never occur in their column.
    Values,
}

/// Arguments of `merit run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Benchmark family.
    #[arg(long, value_enum, default_value = "spider")]
    pub dataset: DatasetArg,
    /// Folder with the benchmark files (Spider: dev.json, tables.json; BIRD: dev.json,
    /// dev_tables.json).
    #[arg(long)]
    pub data: PathBuf,
    /// Folder with `<db_id>/<db_id>.sqlite`.
    #[arg(long)]
    pub db_dir: PathBuf,
    /// Question split: dev (`dev.json`) or train (`train.json`, Spider: for calibration).
    #[arg(long, value_enum, default_value = "dev")]
    pub split: SplitArg,
    /// Methods, comma-separated: iterative, reflexion, dynamic-rag, merit, merit-type-rel,
    /// and the ablations merit-positive-only, merit-no-type-filter, merit-no-dense,
    /// merit-no-bm25, merit-random-same-type, merit-cross-database, merit-same-database.
    #[arg(long, value_delimiter = ',', default_value = "iterative,merit")]
    pub methods: Vec<String>,
    /// Stream seeds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub seeds: Vec<u64>,
    /// Repair budget K.
    #[arg(long, default_value_t = 7)]
    pub k: u32,
    /// Use N questions spread evenly over the usable ones (default: all).
    #[arg(long)]
    pub limit: Option<usize>,
    /// New run directory.
    #[arg(long, conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue an interrupted run in this directory (same settings).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// OpenAI-compatible chat server (e.g. http://localhost:8000); default: embedded model.
    #[arg(long, requires = "llm_model")]
    pub llm_url: Option<String>,
    /// Model name on the chat server.
    #[arg(long)]
    pub llm_model: Option<String>,
    /// OpenAI-compatible embedding server; default: embedded all-MiniLM-L6-v2.
    #[arg(long, requires = "embed_model")]
    pub embed_url: Option<String>,
    /// Model name on the embedding server.
    #[arg(long)]
    pub embed_model: Option<String>,
    /// Embedded chat model name.
    #[arg(long, default_value = merit_models::registry::DEFAULT_CHAT_MODEL)]
    pub model: String,
    /// Path of the embedded chat model's GGUF file (skips pulling).
    #[arg(long)]
    pub model_path: Option<PathBuf>,
    /// Embedded embedder name.
    #[arg(long, default_value = "all-minilm-l6-v2")]
    pub embedder: String,
    /// Reply cache folder (default: `$MERIT_HOME/replies` or `~/.cache/merit/replies`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Streams run at once (default: 4 with a server, 1 with the embedded model). With the
    /// embedded model, N > 1 decodes the calls of concurrent streams together in one model
    /// (continuous batching); replies can then depend on which calls shared a batch, and the
    /// reply cache keeps reruns identical.
    #[arg(long)]
    pub parallel: Option<usize>,
    /// Most tokens per generation.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    /// Repair aid: a revision that repeats an earlier attempt of the episode is not judged
    /// again; the model is asked once more with the repeat named (same step, one more call).
    #[arg(long)]
    pub repeat_guard: bool,
    /// Repair aid: hints read from the database about each failure, comma-separated
    /// (schema, values). Never read from the gold.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub hints: Vec<HintArg>,
    /// Layout of the repair request: paper (the current SQL as a block to correct) or fresh
    /// (the feedback of earlier attempts without their SQL).
    #[arg(long, value_enum, default_value = "paper")]
    pub layout: LayoutArg,
    /// Repair aid: decode repairs under a grammar that allows only the database's table and
    /// column names, SQL keywords and short aliases (embedded model; llama.cpp servers).
    #[arg(long)]
    pub grammar: bool,
    /// Embedded chat model for the repairs (default: `--model`, which writes the shared initial
    /// predictions either way).
    #[arg(long)]
    pub repair_model: Option<String>,
    /// Path of the repair model's GGUF file (skips pulling).
    #[arg(long, requires = "repair_model")]
    pub repair_model_path: Option<PathBuf>,
    /// Context window of the embedded chat model, in tokens. Repair prompts carry the whole
    /// local history and grow with every step; a prompt that still does not fit ends that
    /// episode's repairs (recorded in its log), never the run. Qwen2.5-Coder handles 32,768.
    #[arg(long, default_value_t = RUN_CONTEXT_SIZE)]
    pub context_size: u32,
}

/// What a run directory's settings are; a resume must present the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Manifest {
    dataset: String,
    questions: Vec<String>,
    methods: Vec<String>,
    seeds: Vec<u64>,
    k: u32,
    chat_model: String,
    embedder: String,
    prompt_family: String,
    max_tokens: u32,
    sqlite_version: String,
    /// The repair model when it differs from the initial one (absent in older runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repair_model: Option<String>,
    /// The method-neutral repair aids (absent in older runs: the paper's setting).
    #[serde(default, skip_serializing_if = "RepairAids::is_paper")]
    aids: RepairAids,
}

impl RunArgs {
    /// The repair aids these arguments ask for.
    pub fn aids(&self) -> RepairAids {
        RepairAids {
            repeat_guard: self.repeat_guard,
            hints: HintKinds {
                schema: self.hints.contains(&HintArg::Schema),
                values: self.hints.contains(&HintArg::Values),
            },
            layout: match self.layout {
                LayoutArg::Paper => RepairLayout::Paper,
                LayoutArg::Fresh => RepairLayout::Fresh,
            },
            grammar: self.grammar,
        }
    }
}

/// One shared initial prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct InitialPrediction {
    question_id: String,
    sql: String,
    prompt_tokens: u32,
    completion_tokens: u32,
}

/// `count` indices spread evenly over `0..available` (all of them when `count` is larger).
fn spread(available: usize, count: Option<usize>) -> Vec<usize> {
    match count {
        Some(count) if count < available => (0..count).map(|i| i * available / count).collect(),
        _ => (0..available).collect(),
    }
}

pub(crate) fn load_questions(
    args: &RunArgs,
) -> Result<(Benchmark, Vec<Question>, HashMap<String, String>)> {
    let (benchmark, questions, tables) = match (args.dataset, args.split) {
        (DatasetArg::Spider, SplitArg::Dev) => (
            Benchmark::Spider,
            merit_data::load_spider_questions(args.data.join("dev.json"), "dev")?,
            merit_data::load_tables(args.data.join("tables.json"))?,
        ),
        (DatasetArg::Spider, SplitArg::Train) => (
            Benchmark::Spider,
            merit_data::load_spider_questions(args.data.join("train.json"), "train")?,
            merit_data::load_tables(args.data.join("tables.json"))?,
        ),
        (DatasetArg::Bird, SplitArg::Dev) => (
            Benchmark::Bird,
            merit_data::load_bird_questions(args.data.join("dev.json"), "dev")?,
            merit_data::load_tables(args.data.join("dev_tables.json"))?,
        ),
        (DatasetArg::Bird, SplitArg::Train) => (
            Benchmark::Bird,
            merit_data::load_bird_questions(args.data.join("train.json"), "train")?,
            merit_data::load_tables(args.data.join("train_tables.json"))?,
        ),
    };
    let schemas = tables
        .iter()
        .map(|schema| (schema.db_id.clone(), render_create_tables(schema)))
        .collect();
    Ok((benchmark, questions, schemas))
}

fn method_memory(
    method: &str,
    seed: u64,
) -> Result<Option<(merit_memory::RetrievalConfig, FinalizePolicy)>, String> {
    let variant = match method {
        "iterative" | "reflexion" => return Ok(None),
        "merit" => Variant::Merit,
        "merit-type-rel" => Variant::TypeReliability,
        "dynamic-rag" => Variant::DynamicRag,
        // The database-scope ablations are named for what they keep, as in `--help`.
        "merit-cross-database" => Variant::CrossDatabaseOnly,
        "merit-same-database" => Variant::SameDatabaseOnly,
        other => {
            let name = other.strip_prefix("merit-").unwrap_or(other);
            Variant::parse(name).ok_or_else(|| format!("unknown method {other:?}"))?
        }
    };
    // Dynamic RAG's finalization never creates negative entries (paper, appendix E).
    let policy = match variant {
        Variant::DynamicRag | Variant::PositiveOnly => FinalizePolicy::PositiveOnly,
        _ => FinalizePolicy::PositiveAndNegative,
    };
    Ok(Some((variant.config(seed), policy)))
}

struct Factory {
    embedder: Arc<dyn Embedder>,
}

impl MethodFactory for Factory {
    fn reflects(&self, method: &str) -> bool {
        method == "reflexion"
    }

    fn memory(
        &self,
        stream: &StreamSpec,
        folder: &Path,
    ) -> Result<Box<dyn RepairMemory + Send>, String> {
        match method_memory(&stream.method, stream.seed)? {
            None => Ok(Box::new(NoMemory)),
            Some((config, policy)) => MeritMemory::open(
                folder,
                config,
                policy,
                Arc::clone(&self.embedder),
                &stream.method,
            )
            .map(|memory| Box::new(memory) as Box<dyn RepairMemory + Send>)
            .map_err(|e| e.to_string()),
        }
    }
}

/// Streams run at once when `--parallel` is not given with the embedded model: one. Batching
/// concurrent streams through the embedded model works (`--parallel N`), but on the 2-core
/// reference machine it gained little on real runs (repair prompts are mostly prompt
/// evaluation, which is compute-bound and does not batch; README, "Several streams at once"),
/// and one at a time keeps live runs independent of thread timing. Machines with more cores
/// gain more: measure with `merit bench models --streams`.
pub const EMBEDDED_STREAMS_AT_ONCE: usize = 1;

/// How many streams of `args` run at once: `--parallel`, else 4 against a server and, with
/// the embedded model, [`EMBEDDED_STREAMS_AT_ONCE`] (never more than there are streams).
fn streams_at_once(args: &RunArgs) -> usize {
    let streams = (args.methods.len() * args.seeds.len()).max(1);
    args.parallel.unwrap_or(if args.llm_url.is_some() {
        4
    } else {
        EMBEDDED_STREAMS_AT_ONCE.min(streams)
    })
}

/// How the embedded models of a run are loaded: one batched conversation per stream run at
/// once, and, with Reflexion, a second cache slot (its reflection and repair prompts differ
/// from their first sentence, so each keeps its own prefix).
fn embedded_load(args: &RunArgs) -> ChatLoad {
    ChatLoad {
        cache_slots: if args.methods.iter().any(|m| m == "reflexion") {
            2
        } else {
            1
        },
        parallel: streams_at_once(args),
        ..ChatLoad::new(args.context_size)
    }
}

fn build_models(args: &RunArgs, store: Arc<ReplyStore>) -> Result<RunModels> {
    let chat: Arc<dyn ChatModel> = match (&args.llm_url, &args.llm_model) {
        (Some(url), Some(model)) => Arc::new(OpenAiChat::new(OpenAiConfig::new(url, model))?),
        _ => Arc::new(load_chat_model_with(
            &args.model,
            args.model_path.as_deref(),
            embedded_load(args),
        )?),
    };
    let embedder: Arc<dyn Embedder> = match (&args.embed_url, &args.embed_model) {
        (Some(url), Some(model)) => {
            Arc::new(OpenAiEmbedder::new(OpenAiConfig::new(url, model), None)?)
        }
        _ => Arc::new(load_embedder(&args.embedder, None)?),
    };
    let repair: Option<Arc<dyn ChatModel>> = match (&args.llm_url, &args.repair_model) {
        (_, None) => None,
        (Some(url), Some(model)) => Some(Arc::new(OpenAiChat::new(OpenAiConfig::new(url, model))?)),
        (None, Some(model)) => Some(Arc::new(load_chat_model_with(
            model,
            args.repair_model_path.as_deref(),
            embedded_load(args),
        )?)),
    };
    let chat: Arc<dyn ChatModel> = Arc::new(CachedChat::from_arc(chat, Arc::clone(&store)));
    let repair: Arc<dyn ChatModel> = match repair {
        Some(repair) => Arc::new(CachedChat::from_arc(repair, Arc::clone(&store))),
        None => Arc::clone(&chat),
    };
    let embedder: Arc<dyn Embedder> = Arc::new(CachedEmbedder::from_arc(embedder, store));
    Ok(RunModels {
        initial: chat,
        repair,
        embedder,
    })
}

/// Generates (or reloads) the shared initial predictions, one per question, in file order.
fn initial_predictions(
    dir: &Path,
    benchmark: Benchmark,
    questions: &[(Question, String)],
    chat: &dyn ChatModel,
    max_tokens: u32,
    parallel: usize,
) -> Result<HashMap<String, InitialPrediction>> {
    let path = dir.join("initial.jsonl");
    let loaded = read_records::<InitialPrediction>(&path)?;
    truncate_torn_tail(&path, loaded.torn_bytes)?;
    let mut known: HashMap<String, InitialPrediction> = loaded
        .records
        .into_iter()
        .map(|p| (p.question_id.clone(), p))
        .collect();
    let missing: Vec<&(Question, String)> = questions
        .iter()
        .filter(|(q, _)| !known.contains_key(&q.id))
        .collect();
    if missing.is_empty() {
        return Ok(known);
    }
    let bar = crate::files::progress_bar(missing.len(), "initial SQL");
    let mut appender = Appender::open(&path)?;
    let predict = |(question, schema): &(Question, String)| -> Result<InitialPrediction> {
        let task = InitialTask {
            benchmark,
            dialect: Dialect::Sqlite,
            schema,
            question: &question.question,
            evidence: (benchmark == Benchmark::Bird).then_some(question.evidence.as_str()),
        };
        let decoding = Decoding {
            max_tokens,
            ..Decoding::default()
        };
        let reply = chat
            .chat(&initial_request(&task, decoding))
            .with_context(|| format!("initial prediction for {}", question.id))?;
        // A reply without SQL still is the shared initial prediction: it fails, and repair
        // starts from the extraction error.
        Ok(InitialPrediction {
            question_id: question.id.clone(),
            sql: extract_sql(&reply.text).unwrap_or_default(),
            prompt_tokens: reply.prompt_tokens,
            completion_tokens: reply.completion_tokens,
        })
    };
    // `parallel` questions at a time (a batched model decodes them together); each group is
    // appended in question order once all of it is answered, so the file does not depend on
    // which call finished first, and a kill loses at most the group in flight.
    for group in missing.chunks(parallel.max(1)) {
        let answers = crate::files::all_at_once(group, "an initial prediction", |q| predict(q));
        for answer in answers {
            let record = answer?;
            appender.append(&record)?;
            known.insert(record.question_id.clone(), record);
            bar.inc(1);
            crate::files::log_progress_when_not_a_terminal(&bar, 25);
        }
    }
    bar.finish_and_clear();
    Ok(known)
}

/// Runs (or resumes) an experiment and writes its report; returns the run directory.
pub fn run(args: RunArgs) -> Result<PathBuf> {
    run_with_models(args, None)
}

/// The models a run uses, already wrapped in the reply cache.
pub struct RunModels {
    /// Writes the shared initial predictions.
    pub initial: Arc<dyn ChatModel>,
    /// Writes the repairs (and reflections); the initial model unless `--repair-model`.
    pub repair: Arc<dyn ChatModel>,
    /// Embeds memory entries and queries.
    pub embedder: Arc<dyn Embedder>,
}

impl RunModels {
    /// One chat model for the initial predictions and the repairs.
    pub fn single(chat: Arc<dyn ChatModel>, embedder: Arc<dyn Embedder>) -> RunModels {
        RunModels {
            initial: Arc::clone(&chat),
            repair: chat,
            embedder,
        }
    }
}

/// [`run`] with the models supplied by the caller (`None`: built from the arguments). The
/// replay benchmark passes cache-only models here, so that it times the harness alone.
pub fn run_with_models(args: RunArgs, models: Option<RunModels>) -> Result<PathBuf> {
    if args.llm_url.is_none() && models.is_none() {
        crate::models::reexec_with_bounded_openmp_spin();
    }
    let dir = match (&args.out, &args.resume) {
        (_, Some(dir)) => {
            if !dir.join("manifest.json").is_file() {
                bail!(
                    "{} is not a run directory (no manifest.json)",
                    dir.display()
                );
            }
            dir.clone()
        }
        (Some(dir), None) => dir.clone(),
        (None, None) => bail!("give --out DIR for a new run or --resume DIR"),
    };
    for method in &args.methods {
        method_memory(method, 0).map_err(|e| anyhow!(e))?;
    }
    if args.seeds.is_empty() || args.methods.is_empty() {
        bail!("give at least one method and one seed");
    }
    let (benchmark, questions, schemas) = load_questions(&args)?;
    let databases = DatabaseDir::new(&args.db_dir);
    let availability = databases.availability(&questions);
    eprintln!(
        "{}: {}",
        args.dataset
            .to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default(),
        availability.summary()
    );
    let chosen: Vec<Question> = spread(availability.usable.len(), args.limit)
        .into_iter()
        .map(|i| questions[availability.usable[i]].clone())
        .collect();
    let evaluator = Arc::new(Evaluator::new(EvalConfig::default()));
    let (oracle, _) = Oracle::new(benchmark, Arc::clone(&evaluator), &chosen, &databases);
    let failing = oracle.warm_up();
    if !failing.is_empty() {
        eprintln!(
            "warning: {} questions have a failing gold query and are skipped: {failing:?}",
            failing.len()
        );
    }
    let chosen: Vec<(Question, String)> = chosen
        .into_iter()
        .filter(|q| !failing.contains(&q.id))
        .map(|q| {
            let schema = schemas.get(&q.db_id).cloned().unwrap_or_default();
            (q, schema)
        })
        .collect();
    if chosen.is_empty() {
        bail!("no usable questions");
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // One process per run directory: a second `merit run` (or resume) of the same folder
    // would append to the same logs. Held until this function returns.
    let _lock = crate::files::lock_run_dir(&dir)?;
    let store = Arc::new(
        ReplyStore::open(
            args.cache
                .clone()
                .unwrap_or_else(|| merit_home().join("replies")),
        )
        .context("cannot open the reply cache")?,
    );
    let RunModels {
        initial: chat,
        repair: repair_chat,
        embedder,
    } = match models {
        Some(models) => models,
        None => build_models(&args, store)?,
    };
    let manifest = Manifest {
        dataset: format!("{benchmark}"),
        questions: chosen.iter().map(|(q, _)| q.id.clone()).collect(),
        methods: args.methods.clone(),
        seeds: args.seeds.clone(),
        k: args.k,
        chat_model: chat.id(),
        embedder: embedder.id(),
        prompt_family: "merit-prompts-v3".into(),
        max_tokens: args.max_tokens,
        sqlite_version: rusqlite_version(),
        repair_model: args.repair_model.is_some().then(|| repair_chat.id()),
        aids: args.aids(),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    ensure_manifest(&dir, &manifest)?;
    let initial = initial_predictions(
        &dir,
        benchmark,
        &chosen,
        chat.as_ref(),
        args.max_tokens,
        streams_at_once(&args),
    )?;
    let prepared: Vec<PreparedQuestion> = chosen
        .iter()
        .map(|(q, schema)| PreparedQuestion {
            view: QuestionView {
                id: q.id.clone(),
                db_id: q.db_id.clone(),
                question: q.question.clone(),
                evidence: q.evidence.clone(),
            },
            schema: schema.clone(),
            initial_sql: initial
                .get(&q.id)
                .map(|p| p.sql.clone())
                .unwrap_or_default(),
            initial_tokens: initial.get(&q.id).map_or((0, 0), |p| {
                (u64::from(p.prompt_tokens), u64::from(p.completion_tokens))
            }),
        })
        .collect();
    let streams: Vec<StreamSpec> = args
        .methods
        .iter()
        .flat_map(|method| {
            args.seeds.iter().map(|&seed| StreamSpec {
                method: method.clone(),
                seed,
            })
        })
        .collect();
    let template = EpisodeSettings {
        benchmark,
        dialect: dialect_name(Dialect::Sqlite).to_string(),
        max_revisions: args.k,
        decoding: Decoding {
            max_tokens: args.max_tokens,
            ..Decoding::default()
        },
        reflect: false,
        method: String::new(),
        seed: 0,
        aids: args.aids(),
    };
    let parallel = streams_at_once(&args);
    let progress = indicatif::MultiProgress::new();
    let bars: BTreeMap<String, indicatif::ProgressBar> = streams
        .iter()
        .map(|stream| {
            let bar = progress.add(crate::files::progress_bar(prepared.len(), "stream"));
            bar.set_message(stream.label());
            (stream.label(), bar)
        })
        .collect();
    let correct: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
    let on_episode = |stream: &StreamSpec, record: &EpisodeRecord| {
        let label = stream.label();
        let mut correct = correct.lock().unwrap_or_else(|e| e.into_inner());
        let hits = correct.entry(label.clone()).or_default();
        *hits += usize::from(record.finally_correct());
        if let Some(bar) = bars.get(&label) {
            bar.inc(1);
            let done = bar.position().max(1) as f64;
            bar.set_message(format!("{label} acc {:.1}%", *hits as f64 / done * 100.0));
            crate::files::log_progress_when_not_a_terminal(bar, 10);
        }
    };
    let hints = DatabaseHints::new(DatabaseDir::new(&args.db_dir));
    let deps = EpisodeDeps {
        model: repair_chat.as_ref(),
        judge: &oracle,
        classifier: &RuleClassifier,
        database_aids: Some(&hints),
    };
    let plan = RunPlan {
        dir: &dir,
        streams: &streams,
        questions: &prepared,
        template: &template,
        parallel,
    };
    let factory = Factory { embedder };
    run_streams(&plan, &deps, &factory, &on_episode).map_err(|e| {
        anyhow!(
            "{e}\nthe run can be continued with: merit run --resume {} (and the same options)",
            dir.display()
        )
    })?;
    for bar in bars.values() {
        bar.finish_and_clear();
    }
    let episodes = load_episodes(&dir, &streams)?;
    merit_lab::report::write_report_files(&dir.join("report"), &episodes)?;
    print!("{}", render_markdown(&build_report(&episodes)));
    eprintln!("run directory: {}", dir.display());
    Ok(dir)
}

fn rusqlite_version() -> String {
    merit_sql::sqlite_version().to_string()
}

/// Arguments of `merit demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run directory (resumed when it already holds this demo).
    #[arg(long, default_value = "merit-demo")]
    out: PathBuf,
    /// Questions in the slice.
    #[arg(long, default_value_t = 12)]
    limit: usize,
    /// Repair budget K.
    #[arg(long, default_value_t = 7)]
    k: u32,
    /// Path of the chat model's GGUF file (skips pulling).
    #[arg(long)]
    model_path: Option<PathBuf>,
    /// Path of the repair model's GGUF file (skips pulling; not with `--paper-setting`).
    #[arg(long, conflicts_with = "paper_setting")]
    repair_model_path: Option<PathBuf>,
    /// The papers' setting: the default model writes the repairs too, in the paper's layout,
    /// with no repair aid (it repairs almost nothing with the 0.5B model; see
    /// docs/results/repair/calibration).
    #[arg(long)]
    paper_setting: bool,
}

/// The repair model of `merit demo`, chosen on the Spider *train* calibration slice
/// (docs/results/repair/calibration/README.md): the 0.5B model writes the initial predictions
/// and this one the repairs.
pub const DEMO_REPAIR_MODEL: &str = "qwen2.5-coder-1.5b-instruct";

/// Where the demo's Spider-format data is: the shared benchmark copy next to the checkout,
/// else the sample shipped in `demo/spider-sample`.
fn demo_data() -> Result<(PathBuf, PathBuf)> {
    let shared = PathBuf::from("../shared/data/spider");
    if shared.join("dev.json").is_file() && shared.join("database").is_dir() {
        return Ok((shared.clone(), shared.join("database")));
    }
    for root in [
        PathBuf::from("demo/spider-sample"),
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../demo/spider-sample"
        )),
    ] {
        if root.join("dev.json").is_file() {
            return Ok((root.clone(), root.join("database")));
        }
    }
    bail!("no demo data: neither ../shared/data/spider nor demo/spider-sample exists here")
}

/// `merit demo`: Iterative vs MERIT on a fixed Spider slice with the embedded models, in the
/// repair configuration chosen on the calibration slice (or the papers' with
/// `--paper-setting`).
pub fn demo(args: DemoArgs) -> Result<()> {
    let (data, db_dir) = demo_data()?;
    eprintln!("demo data: {}", data.display());
    run(demo_run_args(args, data, db_dir)).map(|_| ())
}

/// The `merit run` a demo is: Iterative and MERIT, seed 0, on `data`, in the chosen repair
/// configuration unless `--paper-setting`; resumed when its folder already holds a run.
fn demo_run_args(args: DemoArgs, data: PathBuf, db_dir: PathBuf) -> RunArgs {
    let resume = args.out.join("manifest.json").is_file();
    RunArgs {
        dataset: DatasetArg::Spider,
        split: SplitArg::Dev,
        data,
        db_dir,
        methods: vec!["iterative".into(), "merit".into()],
        seeds: vec![0],
        k: args.k,
        limit: Some(args.limit),
        out: (!resume).then(|| args.out.clone()),
        resume: resume.then(|| args.out.clone()),
        llm_url: None,
        llm_model: None,
        embed_url: None,
        embed_model: None,
        model: merit_models::registry::DEFAULT_CHAT_MODEL.to_string(),
        model_path: args.model_path,
        embedder: "all-minilm-l6-v2".into(),
        cache: None,
        parallel: None,
        max_tokens: 256,
        // The configuration chosen on the calibration slice, unless the paper's is asked for.
        repeat_guard: !args.paper_setting,
        hints: if args.paper_setting {
            Vec::new()
        } else {
            vec![HintArg::Schema, HintArg::Values]
        },
        layout: if args.paper_setting {
            LayoutArg::Paper
        } else {
            LayoutArg::Fresh
        },
        grammar: !args.paper_setting,
        repair_model: (!args.paper_setting).then(|| DEMO_REPAIR_MODEL.to_string()),
        repair_model_path: args.repair_model_path,
        context_size: RUN_CONTEXT_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The demo runs the configuration chosen on the calibration slice (the 1.5B repair model
    /// with every aid), and `--paper-setting` the papers' (one model, no aid).
    #[test]
    fn the_demo_runs_the_chosen_configuration_unless_the_papers_is_asked_for() {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            demo: DemoArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["demo", "--out", "/nonexistent/merit-demo-test"];
            argv.extend(extra);
            <Wrapper as clap::Parser>::try_parse_from(argv)
                .unwrap()
                .demo
        };
        let folder = PathBuf::from("data");
        let chosen = demo_run_args(parse(&[]), folder.clone(), folder.clone());
        let aids = chosen.aids();
        assert!(aids.repeat_guard && aids.grammar && aids.hints.schema && aids.hints.values);
        assert_eq!(aids.layout, RepairLayout::Fresh);
        assert_eq!(chosen.repair_model.as_deref(), Some(DEMO_REPAIR_MODEL));
        assert_eq!(chosen.methods, ["iterative", "merit"]);
        assert!(chosen.out.is_some() && chosen.resume.is_none());
        let paper = demo_run_args(parse(&["--paper-setting"]), folder.clone(), folder);
        assert!(paper.aids().is_paper() && paper.repair_model.is_none());
    }

    /// Every method `merit run --help` names is one `merit run` accepts.
    #[test]
    fn every_method_in_the_help_is_accepted() {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            run: RunArgs,
        }
        let command = Wrapper::command();
        let help = command
            .get_arguments()
            .find(|arg| arg.get_id() == "methods")
            .and_then(|arg| arg.get_help())
            .map(|help| help.to_string())
            .expect("--methods has a help text");
        let listed = help
            .split_once(':')
            .map(|(_, list)| list)
            .expect("the help lists the methods after a colon");
        let names: Vec<&str> = listed
            .split([',', ' ', '.'])
            .map(str::trim)
            .filter(|word| {
                !word.is_empty() && *word != "and" && *word != "the" && *word != "ablations"
            })
            .collect();
        assert!(names.len() >= 12, "{names:?}");
        for name in names {
            assert!(
                method_memory(name, 0).is_ok(),
                "{name} is listed but rejected"
            );
        }
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        run: RunArgs,
    }

    fn sample() -> PathBuf {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../demo/spider-sample"
        ))
    }

    fn args(data: &Path, split: &str) -> RunArgs {
        let data = data.to_str().expect("a UTF-8 temp path");
        Wrapper::try_parse_from([
            "run", "--data", data, "--db-dir", data, "--split", split, "--out", "unused",
        ])
        .expect("the arguments parse")
        .run
    }

    /// `--split train` reads `train.json` (ids `train-N`), `--split dev` reads `dev.json`; a
    /// missing split file is an error that names it. The shipped sample has only a dev split,
    /// so the train split here is a copy of it.
    #[test]
    fn the_split_chooses_the_question_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(sample().join("tables.json"), dir.path().join("tables.json")).unwrap();
        std::fs::copy(sample().join("dev.json"), dir.path().join("dev.json")).unwrap();

        let missing = load_questions(&args(dir.path(), "train")).unwrap_err();
        assert!(format!("{missing:#}").contains("train.json"), "{missing:#}");

        std::fs::copy(sample().join("dev.json"), dir.path().join("train.json")).unwrap();
        let (_, train, _) = load_questions(&args(dir.path(), "train")).unwrap();
        let (_, dev, schemas) = load_questions(&args(dir.path(), "dev")).unwrap();
        assert!(!train.is_empty() && train.len() == dev.len());
        assert!(
            train.iter().all(|q| q.id.starts_with("train-")),
            "{}",
            train[0].id
        );
        assert!(
            dev.iter().all(|q| q.id.starts_with("dev-")),
            "{}",
            dev[0].id
        );
        assert!(train.iter().all(|q| schemas.contains_key(&q.db_id)));
    }
}
