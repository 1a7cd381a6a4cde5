//! The repair experiment's arguments and their wiring: `merit run`, `merit demo` and
//! `merit bench repair` turn [`RunArgs`] into a [`merit_lab::experiment::RepairExperiment`]
//! here (models, reply cache, run-directory lock, progress bars, the report files). What an
//! experiment *is* lives in `merit-lab`.

use crate::models::{load_chat_model_with, load_embedder, ChatLoad, RUN_CONTEXT_SIZE};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use merit_core::episode::EpisodeRecord;
use merit_core::model::{ChatModel, Embedder};
use merit_core::{Benchmark, Question};
use merit_data::DatabaseDir;
use merit_lab::copies::DatabaseCopies;
use merit_lab::experiment::{
    choose_questions, load_benchmark, only_databases, ChosenQuestions, ExperimentModels,
    ExperimentProgress, RepairExperiment, Split,
};
use merit_lab::report::{build_report, render_markdown};
use merit_lab::run::StreamSpec;
use merit_models::cache::{CachedChat, CachedEmbedder, ReplyStore};
use merit_models::openai::{OpenAiChat, OpenAiConfig, OpenAiEmbedder};
use merit_repair::grammar::AliasRule;
use merit_repair::hints::HintKinds;
use merit_repair::prompts::initial::schema_from_database;
use merit_repair::repair::{PrecedentView, RepairAids, RepairLayout};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Benchmarks `merit run` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetArg {
    /// Spider (`dev.json` or `train.json`, with `tables.json`).
    Spider,
    /// BIRD (`dev.json` with `dev_tables.json`, or `train.json` with `train_tables.json`).
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

/// Views of a retrieved precedent on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecedentArg {
    /// The paper's: the earlier failing SQL, its feedback and the change.
    Full,
    /// The feedback and the change, without the earlier failing SQL.
    Change,
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
    /// Folder with the benchmark files (Spider: dev.json or train.json, and tables.json; BIRD:
    /// dev.json and dev_tables.json, or train.json and train_tables.json).
    #[arg(long)]
    pub data: PathBuf,
    /// Folder with `<db_id>/<db_id>.sqlite`.
    #[arg(long)]
    pub db_dir: PathBuf,
    /// Run the candidates on PostgreSQL copies of the databases on this server
    /// (`postgresql://USER:PASSWORD@HOST:PORT/ADMIN_DB`, a role that is not a superuser):
    /// each SQLite file is loaded once into a template database there; the model sees the
    /// copy's schema and writes PostgreSQL; the oracle compares the candidate's rows on the
    /// copy with the gold rows from SQLite (Spider only; no --hints or --grammar).
    #[arg(long)]
    pub pg_url: Option<String>,
    /// Question split: dev (`dev.json`) or train (`train.json`, where calibration belongs).
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
    /// Only the questions on these databases (comma-separated db_id values), before --limit
    /// spreads over them: a slice as dense per database as a dev slice.
    #[arg(long, value_delimiter = ',')]
    pub databases: Vec<String>,
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
    /// How much of each retrieved precedent a repair request shows (methods with memory):
    /// full (the paper's: the earlier failing SQL, its feedback and the change) or change
    /// (the same without the earlier failing SQL, which a small model tends to copy).
    #[arg(long, value_enum, default_value = "full")]
    pub precedents: PrecedentArg,
    /// Repair aid: decode repairs under a grammar that allows only the database's table and
    /// column names, SQL keywords and short aliases (embedded model; llama.cpp servers).
    #[arg(long)]
    pub grammar: bool,
    /// With `--grammar`: the name after `AS` may be any new identifier, and must end at
    /// punctuation, a clause keyword or the end of the query (else the grammar splits an alias
    /// such as `total_population` into known words, a syntax error).
    #[arg(long, requires = "grammar")]
    pub free_aliases: bool,
    /// Chat model for the repairs: an embedded model, or with `--llm-url` a model name on the
    /// same server (default: `--model`, which writes the shared initial predictions either
    /// way).
    #[arg(long)]
    pub repair_model: Option<String>,
    /// Path of the repair model's GGUF file (skips pulling; embedded models only).
    #[arg(long, requires = "repair_model")]
    pub repair_model_path: Option<PathBuf>,
    /// Context window of the embedded chat model, in tokens. Repair prompts carry the whole
    /// local history and grow with every step; a prompt that still does not fit ends that
    /// episode's repairs (recorded in its log), never the run. Qwen2.5-Coder handles 32,768.
    #[arg(long, default_value_t = RUN_CONTEXT_SIZE)]
    pub context_size: u32,
    /// Prompt-lookup decoding on the embedded models' greedy calls: drafts copied from the
    /// prompt are checked in one batch. The replies are greedy decoding's up to the rounding of
    /// batched evaluation (a near tie can go the other way, as with `--parallel`), so it is
    /// off by default. Helps where replies copy the prompt (an interact agent repeating
    /// itself); measure with `merit bench models --lookup-sweep` on one's own workload.
    #[arg(long)]
    pub prompt_lookup: bool,
}

impl RunArgs {
    /// The benchmark these arguments name.
    pub fn benchmark(&self) -> Benchmark {
        match self.dataset {
            DatasetArg::Spider => Benchmark::Spider,
            DatasetArg::Bird => Benchmark::Bird,
        }
    }

    /// The split these arguments name.
    pub fn split(&self) -> Split {
        match self.split {
            SplitArg::Dev => Split::Dev,
            SplitArg::Train => Split::Train,
        }
    }

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
            grammar_aliases: AliasRule::free_when(self.free_aliases),
            precedents: match self.precedents {
                PrecedentArg::Full => PrecedentView::Full,
                PrecedentArg::Change => PrecedentView::Change,
            },
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
        prompt_lookup: args.prompt_lookup,
        ..ChatLoad::new(args.context_size)
    }
}

/// The models `args` name, behind the reply cache `store`.
pub(crate) fn build_models(args: &RunArgs, store: Arc<ReplyStore>) -> Result<ExperimentModels> {
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
    Ok(ExperimentModels {
        initial: chat,
        repair,
        embedder,
    })
}

/// The questions of the benchmark and split `args` name (only those on `--databases` when it
/// is given), with every database's schema text.
pub fn load_questions(
    args: &RunArgs,
) -> Result<(Benchmark, Vec<Question>, HashMap<String, String>)> {
    let (questions, schemas) = load_benchmark(args.benchmark(), args.split(), &args.data)?;
    let questions = only_databases(questions, &args.databases)?;
    Ok((args.benchmark(), questions, schemas))
}

/// Runs (or resumes) the experiment `args` describe and writes its report; returns the run
/// directory. `models`: supplied by the caller (the replay benchmark passes cache-only models
/// here, so that it times the harness alone), else built from the arguments.
pub fn run_experiment(args: RunArgs, models: Option<ExperimentModels>) -> Result<PathBuf> {
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
    RepairExperiment::check(&args.methods, &args.seeds)?;
    let (benchmark, questions, schemas) = load_questions(&args)?;
    let databases = DatabaseDir::new(&args.db_dir);
    let chosen = choose_questions(benchmark, &questions, &schemas, &databases, args.limit)?;
    eprintln!(
        "{}: {}",
        args.dataset
            .to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default(),
        chosen.availability
    );
    if !chosen.failing_gold.is_empty() {
        eprintln!(
            "warning: {} questions have a failing gold query and are skipped: {:?}",
            chosen.failing_gold.len(),
            chosen.failing_gold
        );
    }
    let copies = match &args.pg_url {
        Some(url) => Some(postgres_copies(url, benchmark, &chosen, &databases)?),
        None => None,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // One process per run directory: a second `merit run` (or resume) of the same folder
    // would append to the same logs. Held until this function returns.
    let _lock = crate::files::lock_run_dir(&dir)?;
    let store = crate::models::open_store(args.cache.as_ref())?;
    let models = match models {
        Some(models) => models,
        None => build_models(&args, store)?,
    };
    let experiment = RepairExperiment {
        benchmark,
        chosen: &chosen,
        databases: &args.db_dir,
        methods: &args.methods,
        seeds: &args.seeds,
        k: args.k,
        max_tokens: args.max_tokens,
        aids: args.aids(),
        parallel: streams_at_once(&args),
        copies: copies.as_ref(),
    };
    let manifest = experiment.manifest(&models, args.repair_model.is_some());
    let bars = Bars::new(&experiment.streams(), chosen.questions.len());
    let episodes = experiment
        .run(&dir, &manifest, &models, &bars)
        .map_err(|e| {
            anyhow!(
                "{e}\nthe run can be continued with: merit run --resume {} (and the same options)",
                dir.display()
            )
        })?;
    bars.finish();
    merit_lab::report::write_report_files(&dir.join("report"), &episodes)?;
    print!("{}", render_markdown(&build_report(&episodes)));
    eprintln!("run directory: {}", dir.display());
    Ok(dir)
}

/// PostgreSQL copies of the chosen questions' databases on the server at `url` (each SQLite
/// file loaded once into a template there; the run reads the templates).
fn postgres_copies(
    url: &str,
    benchmark: Benchmark,
    chosen: &ChosenQuestions,
    databases: &DatabaseDir,
) -> Result<DatabaseCopies> {
    if benchmark != Benchmark::Spider {
        bail!("--pg-url runs Spider questions only (BIRD's comparison is not offered on copies)");
    }
    let server = merit_interact::PostgresServer::new(url)?;
    let mut copies = DatabaseCopies {
        engine: "postgres".into(),
        databases: HashMap::new(),
        schemas: HashMap::new(),
    };
    for (question, _) in &chosen.questions {
        if copies.databases.contains_key(&question.db_id) {
            continue;
        }
        let file = databases
            .locate(&question.db_id)
            .map_err(|missing| anyhow!("{missing}"))?;
        let template = server
            .ensure_sqlite_template(&question.db_id, &file)
            .with_context(|| format!("cannot load {} into PostgreSQL", question.db_id))?;
        let copy = merit_interact::PostgresDatabase::connect(&server, &template)?;
        let schema = schema_from_database(&copy)
            .with_context(|| format!("cannot read the schema of {template}"))?;
        copies.schemas.insert(question.db_id.clone(), schema);
        copies
            .databases
            .insert(question.db_id.clone(), Box::new(copy));
    }
    eprintln!(
        "candidates run on PostgreSQL copies of {} databases on {}",
        copies.databases.len(),
        server.describe()
    );
    Ok(copies)
}

/// The progress of a run: a bar for the initial predictions, one per stream with its running
/// accuracy (plain lines when standard error is not a terminal).
struct Bars {
    all: indicatif::MultiProgress,
    initial: Mutex<Option<indicatif::ProgressBar>>,
    streams: BTreeMap<String, indicatif::ProgressBar>,
    correct: Mutex<HashMap<String, usize>>,
}

impl Bars {
    fn new(streams: &[StreamSpec], questions: usize) -> Bars {
        let all = indicatif::MultiProgress::new();
        let streams = streams
            .iter()
            .map(|stream| {
                let bar = all.add(crate::files::progress_bar(questions, "stream"));
                bar.set_message(stream.label());
                (stream.label(), bar)
            })
            .collect();
        Bars {
            all,
            initial: Mutex::new(None),
            streams,
            correct: Mutex::new(HashMap::new()),
        }
    }

    fn finish(&self) {
        for bar in self.streams.values() {
            bar.finish_and_clear();
        }
    }
}

impl ExperimentProgress for Bars {
    fn initial_predicted(&self, total: usize) {
        let mut initial = self.initial.lock().unwrap_or_else(|e| e.into_inner());
        let bar = initial.get_or_insert_with(|| {
            self.all
                .insert(0, crate::files::progress_bar(total, "initial SQL"))
        });
        bar.inc(1);
        crate::files::log_progress_when_not_a_terminal(bar, 25);
        if bar.position() as usize >= total {
            bar.finish_and_clear();
        }
    }

    fn episode(&self, stream: &StreamSpec, record: &EpisodeRecord) {
        let label = stream.label();
        let mut correct = self.correct.lock().unwrap_or_else(|e| e.into_inner());
        let hits = correct.entry(label.clone()).or_default();
        *hits += usize::from(record.finally_correct());
        if let Some(bar) = self.streams.get(&label) {
            bar.inc(1);
            let done = bar.position().max(1) as f64;
            bar.set_message(format!("{label} acc {:.1}%", *hits as f64 / done * 100.0));
            crate::files::log_progress_when_not_a_terminal(bar, 10);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use std::path::Path;

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

    /// `--free-aliases` refines `--grammar` and is refused without it; with it, the aids
    /// carry the free alias rule.
    #[test]
    fn free_aliases_need_the_grammar() {
        let base = ["run", "--data", "d", "--db-dir", "d", "--out", "o"];
        let alone = Wrapper::try_parse_from(base.iter().chain(&["--free-aliases"]));
        assert!(alone.is_err());
        let with = Wrapper::try_parse_from(base.iter().chain(&["--grammar", "--free-aliases"]))
            .expect("the arguments parse")
            .run
            .aids();
        assert!(with.grammar);
        assert_eq!(with.grammar_aliases, AliasRule::Free);
        let plain = Wrapper::try_parse_from(base.iter().chain(&["--grammar"]))
            .expect("the arguments parse")
            .run
            .aids();
        assert_eq!(plain.grammar_aliases, AliasRule::Listed);
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
                merit_lab::experiment::method_memory(name, 0).is_ok(),
                "{name} is listed but rejected"
            );
        }
    }
}
