//! A repair experiment of paper 000, from a benchmark folder to a finished run directory:
//! which questions, the method catalogue, the run manifest, the shared initial predictions and
//! the streams (run by [`crate::run`]). `merit run`, `merit demo` and `merit bench repair` are
//! this module plus argument parsing, model loading and progress bars.
//!
//! What a run directory holds besides [`crate::run`]'s streams:
//! - `manifest.json`: a [`RunManifest`]; a resume must present the same one;
//! - `initial.jsonl`: one [`InitialPrediction`] per question, shared by every method and seed
//!   (the paper's protocol: all methods repair the same initial SQL).

use crate::copies::{CopyJudge, DatabaseCopies};
use crate::jsonl::{read_records, truncate_torn_tail, Appender, JsonlError};
use crate::run::{
    ensure_manifest, load_episodes, run_streams, MethodFactory, PreparedQuestion, RunError,
    RunPlan, StreamSpec,
};
use merit_core::episode::EpisodeRecord;
use merit_core::model::{ChatModel, Decoding, Embedder, ModelError};
use merit_core::{Benchmark, Question};
use merit_data::{render_create_tables, DataError, DatabaseDir};
use merit_eval::{EvalConfig, Evaluator, Oracle};
use merit_memory::{FinalizePolicy, RetrievalConfig, Variant};
use merit_repair::extract::extract_sql;
use merit_repair::hints::DatabaseHints;
use merit_repair::memory::{MeritMemory, RuleClassifier};
use merit_repair::prompts::initial::{dialect_name, initial_request, InitialTask};
use merit_repair::repair::{
    EpisodeDeps, EpisodeSettings, NoMemory, QuestionView, RepairAids, RepairMemory,
};
use merit_sql::{Dialect, ExecLimits};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The prompt family every run of this version records in its manifest: a run made with other
/// prompts is another run, and a resume across the change is refused.
pub const PROMPT_FAMILY: &str = "merit-prompts-v3";

/// Why an experiment could not be prepared or run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A benchmark file could not be read.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A method name no catalogue entry has.
    #[error("unknown method {0:?}")]
    UnknownMethod(String),
    /// Nothing to run.
    #[error("{0}")]
    Empty(&'static str),
    /// The initial-prediction file could not be read or written.
    #[error(transparent)]
    Journal(#[from] JsonlError),
    /// The model failed on an initial prediction (the run can be resumed).
    #[error("initial prediction for {question_id}: {source}")]
    InitialPrediction {
        /// The question.
        question_id: String,
        /// What the model said.
        source: ModelError,
    },
    /// The streams stopped.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A live-mode arm stopped (the arm can be resumed).
    #[error("live mode: {0}")]
    Live(String),
    /// The database copies do not cover the experiment.
    #[error("{0}")]
    Copy(String),
    /// A database named to restrict the questions has none in the split.
    #[error("no question of the split is on database {0:?} (check the name against the split's db_id values)")]
    UnknownDatabase(String),
}

/// Which split of a benchmark an experiment draws its questions from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// The evaluation split (`dev.json`): report here, tune nowhere.
    Dev,
    /// The training split (`train.json`): where prompts, aids and defaults are calibrated.
    Train,
}

/// A benchmark's questions of one split, and every database's schema rendered as the prompts
/// show it (`CREATE TABLE` text), by database id.
pub fn load_benchmark(
    benchmark: Benchmark,
    split: Split,
    data: &Path,
) -> Result<(Vec<Question>, HashMap<String, String>), ExperimentError> {
    let (questions, tables) = match (benchmark, split) {
        (Benchmark::Spider, Split::Dev) => (
            merit_data::load_spider_questions(data.join("dev.json"), "dev")?,
            merit_data::load_tables(data.join("tables.json"))?,
        ),
        (Benchmark::Spider, Split::Train) => (
            merit_data::load_spider_questions(data.join("train.json"), "train")?,
            merit_data::load_tables(data.join("tables.json"))?,
        ),
        (Benchmark::Bird, Split::Dev) => (
            merit_data::load_bird_questions(data.join("dev.json"), "dev")?,
            merit_data::load_tables(data.join("dev_tables.json"))?,
        ),
        (Benchmark::Bird, Split::Train) => (
            merit_data::load_bird_questions(data.join("train.json"), "train")?,
            merit_data::load_tables(data.join("train_tables.json"))?,
        ),
    };
    let schemas = tables
        .iter()
        .map(|schema| (schema.db_id.clone(), render_create_tables(schema)))
        .collect();
    Ok((questions, schemas))
}

/// `count` indices spread evenly over `0..available` (all of them when `count` is larger or
/// absent): a slice of a benchmark that covers its whole file rather than its first databases.
pub fn spread(available: usize, count: Option<usize>) -> Vec<usize> {
    match count {
        Some(count) if count < available => (0..count).map(|i| i * available / count).collect(),
        _ => (0..available).collect(),
    }
}

/// The questions on the named databases, in file order (all of them when `databases` is
/// empty). A slice spread over a whole split touches many databases with a few questions each;
/// restricting it to a few databases gives each one the density of questions that Spider dev
/// has (about 15 per database in a 300-question dev slice), which is what decides how often a
/// memory method retrieves precedents from the same database. A name with no question is an
/// error, so that a typo does not silently shrink the slice.
pub fn only_databases(
    questions: Vec<Question>,
    databases: &[String],
) -> Result<Vec<Question>, ExperimentError> {
    if databases.is_empty() {
        return Ok(questions);
    }
    if let Some(missing) = databases
        .iter()
        .find(|name| !questions.iter().any(|q| &q.db_id == *name))
    {
        return Err(ExperimentError::UnknownDatabase(missing.clone()));
    }
    Ok(questions
        .into_iter()
        .filter(|q| databases.contains(&q.db_id))
        .collect())
}

/// The questions of an experiment with their schema text, and the oracle that judges them.
pub struct ChosenQuestions {
    /// The questions in file order, each with its database's schema text.
    pub questions: Vec<(Question, String)>,
    /// The benchmark's oracle over exactly these questions (gold results computed).
    pub oracle: Oracle,
    /// How many questions had their database present (a line for the user).
    pub availability: String,
    /// Questions left out because their gold query fails on its own database.
    pub failing_gold: Vec<String>,
}

/// Chooses `limit` questions spread over those whose database is in `databases`, computes
/// their gold results, and leaves out any whose gold query fails.
pub fn choose_questions(
    benchmark: Benchmark,
    questions: &[Question],
    schemas: &HashMap<String, String>,
    databases: &DatabaseDir,
    limit: Option<usize>,
) -> Result<ChosenQuestions, ExperimentError> {
    let availability = databases.availability(questions);
    let chosen: Vec<Question> = spread(availability.usable.len(), limit)
        .into_iter()
        .map(|i| questions[availability.usable[i]].clone())
        .collect();
    let evaluator = Arc::new(Evaluator::new(EvalConfig::default()));
    let (oracle, _) = Oracle::new(benchmark, evaluator, &chosen, databases);
    let failing_gold = oracle.warm_up();
    let questions: Vec<(Question, String)> = chosen
        .into_iter()
        .filter(|q| !failing_gold.contains(&q.id))
        .map(|q| {
            let schema = schemas.get(&q.db_id).cloned().unwrap_or_default();
            (q, schema)
        })
        .collect();
    if questions.is_empty() {
        return Err(ExperimentError::Empty("no usable questions"));
    }
    Ok(ChosenQuestions {
        questions,
        oracle,
        availability: availability.summary(),
        failing_gold,
    })
}

/// The method catalogue: the memory configuration and finalization policy of `method` under
/// stream `seed`, or `None` for the memoryless methods (Iterative, Reflexion).
pub fn method_memory(
    method: &str,
    seed: u64,
) -> Result<Option<(RetrievalConfig, FinalizePolicy)>, ExperimentError> {
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
            Variant::parse(name).ok_or_else(|| ExperimentError::UnknownMethod(other.into()))?
        }
    };
    // Dynamic RAG's finalization never creates negative entries (paper, appendix E).
    let policy = match variant {
        Variant::DynamicRag | Variant::PositiveOnly => FinalizePolicy::PositiveOnly,
        _ => FinalizePolicy::PositiveAndNegative,
    };
    Ok(Some((variant.config(seed), policy)))
}

/// `true` for the methods that reflect before each repair (Reflexion).
pub fn method_reflects(method: &str) -> bool {
    method == "reflexion"
}

/// Builds each stream's memory from the catalogue: none for the memoryless methods, a
/// persistent MERIT memory with the method's configuration otherwise.
pub struct CatalogueMemories {
    /// Embeds memory entries and queries.
    pub embedder: Arc<dyn Embedder>,
}

impl MethodFactory for CatalogueMemories {
    fn reflects(&self, method: &str) -> bool {
        method_reflects(method)
    }

    fn memory(
        &self,
        stream: &StreamSpec,
        folder: &Path,
    ) -> Result<Box<dyn RepairMemory + Send>, String> {
        match method_memory(&stream.method, stream.seed).map_err(|e| e.to_string())? {
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

/// What a run directory's settings are; a resume must present the same (field order and names
/// are the file's format: every existing run directory compares against them byte for byte).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    /// The benchmark (`spider`, `bird`).
    pub dataset: String,
    /// The questions, in file order.
    pub questions: Vec<String>,
    /// The methods, as given.
    pub methods: Vec<String>,
    /// The stream seeds.
    pub seeds: Vec<u64>,
    /// The repair budget K.
    pub k: u32,
    /// The model that wrote the initial predictions (and the repairs, unless `repair_model`).
    pub chat_model: String,
    /// The embedder of the memories.
    pub embedder: String,
    /// [`PROMPT_FAMILY`] when the run was made.
    pub prompt_family: String,
    /// Most tokens per generation.
    pub max_tokens: u32,
    /// The SQLite library the oracle executed with.
    pub sqlite_version: String,
    /// The repair model when it differs from the initial one (absent in older runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_model: Option<String>,
    /// The method-neutral repair aids (absent in older runs: the paper's setting).
    #[serde(default, skip_serializing_if = "RepairAids::is_paper")]
    pub aids: RepairAids,
    /// The engine the candidates ran on when not the benchmark's SQLite files (absent then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// One shared initial prediction (a line of `initial.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitialPrediction {
    /// The question.
    pub question_id: String,
    /// The SQL extracted from the reply (empty when the reply held none).
    pub sql: String,
    /// Prompt tokens of the call.
    pub prompt_tokens: u32,
    /// Completion tokens of the call.
    pub completion_tokens: u32,
}

/// The models of an experiment, already behind the reply cache.
pub struct ExperimentModels {
    /// Writes the shared initial predictions.
    pub initial: Arc<dyn ChatModel>,
    /// Writes the repairs (and reflections); often the initial model.
    pub repair: Arc<dyn ChatModel>,
    /// Embeds memory entries and queries.
    pub embedder: Arc<dyn Embedder>,
}

impl ExperimentModels {
    /// One chat model for the initial predictions and the repairs.
    pub fn single(chat: Arc<dyn ChatModel>, embedder: Arc<dyn Embedder>) -> ExperimentModels {
        ExperimentModels {
            initial: Arc::clone(&chat),
            repair: chat,
            embedder,
        }
    }
}

/// What an experiment reports while it runs (both calls may come from several threads).
pub trait ExperimentProgress: Sync {
    /// One more initial prediction was written (`total`: how many were missing at the start).
    fn initial_predicted(&self, total: usize) {
        let _ = total;
    }

    /// A stream finished (or, on resume, replayed) an episode.
    fn episode(&self, stream: &StreamSpec, record: &EpisodeRecord) {
        let _ = (stream, record);
    }
}

/// Reports nothing.
pub struct Silent;

impl ExperimentProgress for Silent {}

/// A repair experiment: every method under every seed on the same questions and initial SQL.
pub struct RepairExperiment<'a> {
    /// The benchmark.
    pub benchmark: Benchmark,
    /// The questions with their schema text and oracle.
    pub chosen: &'a ChosenQuestions,
    /// Where the databases are (for the hints aid).
    pub databases: &'a Path,
    /// Methods, in the order given.
    pub methods: &'a [String],
    /// Stream seeds.
    pub seeds: &'a [u64],
    /// Repair budget K.
    pub k: u32,
    /// Most tokens per generation.
    pub max_tokens: u32,
    /// The method-neutral repair aids.
    pub aids: RepairAids,
    /// Streams run at once (and initial predictions asked at once).
    pub parallel: usize,
    /// Copies of the databases on another engine to run the candidates on (`None`: the
    /// benchmark's SQLite files).
    pub copies: Option<&'a DatabaseCopies>,
}

impl RepairExperiment<'_> {
    /// Refuses unknown methods and an empty plan before anything is loaded.
    pub fn check(methods: &[String], seeds: &[u64]) -> Result<(), ExperimentError> {
        for method in methods {
            method_memory(method, 0)?;
        }
        if seeds.is_empty() || methods.is_empty() {
            return Err(ExperimentError::Empty(
                "give at least one method and one seed",
            ));
        }
        Ok(())
    }

    /// Every (method, seed) stream, methods first in the order given.
    pub fn streams(&self) -> Vec<StreamSpec> {
        self.methods
            .iter()
            .flat_map(|method| {
                self.seeds.iter().map(|&seed| StreamSpec {
                    method: method.clone(),
                    seed,
                })
            })
            .collect()
    }

    /// The manifest of this experiment with `models` (`separate_repair_model`: the repair model
    /// was chosen apart from the initial one, and is recorded).
    pub fn manifest(&self, models: &ExperimentModels, separate_repair_model: bool) -> RunManifest {
        RunManifest {
            dataset: format!("{}", self.benchmark),
            questions: self
                .chosen
                .questions
                .iter()
                .map(|(q, _)| q.id.clone())
                .collect(),
            methods: self.methods.to_vec(),
            seeds: self.seeds.to_vec(),
            k: self.k,
            chat_model: models.initial.id(),
            embedder: models.embedder.id(),
            prompt_family: PROMPT_FAMILY.into(),
            max_tokens: self.max_tokens,
            sqlite_version: merit_sql::sqlite_version().to_string(),
            repair_model: separate_repair_model.then(|| models.repair.id()),
            aids: self.aids,
            engine: self.copies.map(|c| c.engine.clone()),
        }
    }

    /// Runs (or resumes) the experiment in `dir` under `manifest` and returns every episode
    /// record, streams in [`RepairExperiment::streams`] order.
    pub fn run(
        &self,
        dir: &Path,
        manifest: &RunManifest,
        models: &ExperimentModels,
        progress: &dyn ExperimentProgress,
    ) -> Result<Vec<EpisodeRecord>, ExperimentError> {
        std::fs::create_dir_all(dir).map_err(|e| RunError::Io {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        if self.copies.is_some() && (self.aids.grammar || !self.aids.hints.is_empty()) {
            // Refused before anything is written to the run directory. (The repeat guard and
            // the layout need no database and work on copies too.)
            return Err(ExperimentError::Copy(
                "--hints and --grammar read the SQLite catalogs; run without them on \
                 PostgreSQL copies"
                    .into(),
            ));
        }
        ensure_manifest(dir, manifest)?;
        // On copies the model sees the copy's schema and writes the copy's dialect.
        let (dialect, questions) = match self.copies {
            None => (Dialect::Sqlite, self.chosen.questions.clone()),
            Some(copies) => {
                let questions = self
                    .chosen
                    .questions
                    .iter()
                    .map(|(q, _)| {
                        let schema = copies.schemas.get(&q.db_id).cloned().ok_or_else(|| {
                            ExperimentError::Copy(format!(
                                "no {} copy of database {}",
                                copies.engine, q.db_id
                            ))
                        })?;
                        Ok((q.clone(), schema))
                    })
                    .collect::<Result<Vec<_>, ExperimentError>>()?;
                let dialect = copies
                    .databases
                    .values()
                    .next()
                    .map_or(Dialect::Sqlite, |d| d.dialect());
                (dialect, questions)
            }
        };
        let initial = initial_predictions(
            &dir.join("initial.jsonl"),
            self.benchmark,
            dialect,
            &questions,
            models.initial.as_ref(),
            self.max_tokens,
            self.parallel,
            progress,
        )?;
        let prepared: Vec<PreparedQuestion> = questions
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
        let streams = self.streams();
        let template = EpisodeSettings {
            benchmark: self.benchmark,
            dialect: dialect_name(dialect).to_string(),
            max_revisions: self.k,
            decoding: Decoding {
                max_tokens: self.max_tokens,
                ..Decoding::default()
            },
            reflect: false,
            method: String::new(),
            seed: 0,
            aids: self.aids,
        };
        let hints = DatabaseHints::new(DatabaseDir::new(self.databases));
        let on_copies = self.copies.map(|copies| CopyJudge {
            oracle: &self.chosen.oracle,
            copies,
            limits: ExecLimits::with_timeout(EvalConfig::default().query_timeout),
        });
        let deps = EpisodeDeps {
            model: models.repair.as_ref(),
            judge: match &on_copies {
                Some(judge) => judge,
                None => &self.chosen.oracle,
            },
            classifier: &RuleClassifier,
            database_aids: on_copies.is_none().then_some(&hints as _),
        };
        let plan = RunPlan {
            dir,
            streams: &streams,
            questions: &prepared,
            template: &template,
            parallel: self.parallel,
        };
        let factory = CatalogueMemories {
            embedder: Arc::clone(&models.embedder),
        };
        let on_episode =
            |stream: &StreamSpec, record: &EpisodeRecord| progress.episode(stream, record);
        run_streams(&plan, &deps, &factory, &on_episode)?;
        Ok(load_episodes(dir, &streams)?)
    }
}

/// Generates (or reloads) the shared initial predictions in `path`, one per question.
///
/// `parallel` questions are asked at a time (a batched model decodes them together); each
/// group is appended in question order once all of it is answered, so the file does not
/// depend on which call finished first, and a kill loses at most the group in flight.
// Each argument is a separate setting of the shared stage; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn initial_predictions(
    path: &Path,
    benchmark: Benchmark,
    dialect: Dialect,
    questions: &[(Question, String)],
    chat: &dyn ChatModel,
    max_tokens: u32,
    parallel: usize,
    progress: &dyn ExperimentProgress,
) -> Result<HashMap<String, InitialPrediction>, ExperimentError> {
    let loaded = read_records::<InitialPrediction>(path)?;
    truncate_torn_tail(path, loaded.torn_bytes)?;
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
    let mut appender = Appender::open(path)?;
    let predict = |(question, schema): &(Question, String)| {
        let task = InitialTask {
            benchmark,
            dialect,
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
            .map_err(|source| ExperimentError::InitialPrediction {
                question_id: question.id.clone(),
                source,
            })?;
        // A reply without SQL still is the shared initial prediction: it fails, and repair
        // starts from the extraction error.
        Ok(InitialPrediction {
            question_id: question.id.clone(),
            sql: extract_sql(&reply.text).unwrap_or_default(),
            prompt_tokens: reply.prompt_tokens,
            completion_tokens: reply.completion_tokens,
        })
    };
    for group in missing.chunks(parallel.max(1)) {
        let answers = merit_core::parallel::all_at_once(group, |question| predict(question));
        let answers = answers
            .into_iter()
            .zip(group)
            .map(|(answer, (question, _))| {
                answer.unwrap_or_else(|| {
                    Err(ExperimentError::InitialPrediction {
                        question_id: question.id.clone(),
                        source: ModelError::Unavailable("the model call panicked".to_string()),
                    })
                })
            });
        for answer in answers {
            let record = answer?;
            appender.append(&record)?;
            known.insert(record.question_id.clone(), record);
            progress.initial_predicted(missing.len());
        }
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_covers_the_whole_range_evenly() {
        assert_eq!(spread(10, Some(5)), [0, 2, 4, 6, 8]);
        assert_eq!(spread(3, Some(5)), [0, 1, 2]);
        assert_eq!(spread(4, None), [0, 1, 2, 3]);
    }

    #[test]
    fn only_databases_keeps_file_order_and_names_an_unknown_database() {
        let question = |id: &str, db: &str| Question {
            id: id.into(),
            index: 0,
            db_id: db.into(),
            question: String::new(),
            evidence: String::new(),
            gold_sql: String::new(),
            difficulty: None,
        };
        let questions = vec![
            question("q0", "a"),
            question("q1", "b"),
            question("q2", "a"),
        ];
        let kept = only_databases(questions.clone(), &["a".into()]).unwrap();
        let ids: Vec<&str> = kept.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["q0", "q2"]);
        assert_eq!(only_databases(questions.clone(), &[]).unwrap().len(), 3);
        let error = only_databases(questions, &["a".into(), "typo".into()]).unwrap_err();
        assert!(error.to_string().contains("\"typo\""), "{error}");
    }

    #[test]
    fn the_catalogue_knows_every_method_and_names_an_unknown_one() {
        assert!(method_memory("iterative", 0).unwrap().is_none());
        assert!(method_memory("reflexion", 0).unwrap().is_none());
        let (_, policy) = method_memory("dynamic-rag", 1).unwrap().unwrap();
        assert_eq!(policy, FinalizePolicy::PositiveOnly);
        let (_, policy) = method_memory("merit", 1).unwrap().unwrap();
        assert_eq!(policy, FinalizePolicy::PositiveAndNegative);
        for ablation in [
            "merit-type-rel",
            "merit-positive-only",
            "merit-no-type-filter",
            "merit-no-dense",
            "merit-no-bm25",
            "merit-random-same-type",
            "merit-cross-database",
            "merit-same-database",
        ] {
            assert!(method_memory(ablation, 0).unwrap().is_some(), "{ablation}");
        }
        let error = method_memory("merit-joins", 0).unwrap_err();
        assert!(error.to_string().contains("merit-joins"), "{error}");
        assert!(RepairExperiment::check(&["merit".into()], &[]).is_err());
        assert!(RepairExperiment::check(&["nope".into()], &[0]).is_err());
    }

    /// The manifest's field names and order are the file format existing run directories are
    /// compared against; a change here would refuse every resume.
    #[test]
    fn the_manifest_format_is_stable() {
        let manifest = RunManifest {
            dataset: "spider".into(),
            questions: vec!["dev-0".into()],
            methods: vec!["merit".into()],
            seeds: vec![0],
            k: 7,
            chat_model: "m".into(),
            embedder: "e".into(),
            prompt_family: PROMPT_FAMILY.into(),
            max_tokens: 512,
            sqlite_version: "3".into(),
            repair_model: None,
            aids: RepairAids::default(),
            engine: None,
        };
        let text = serde_json::to_string(&manifest).unwrap();
        assert_eq!(
            text,
            "{\"dataset\":\"spider\",\"questions\":[\"dev-0\"],\"methods\":[\"merit\"],\
             \"seeds\":[0],\"k\":7,\"chat_model\":\"m\",\"embedder\":\"e\",\
             \"prompt_family\":\"merit-prompts-v3\",\"max_tokens\":512,\"sqlite_version\":\"3\"}"
        );
    }

    /// Initial predictions are appended in question order and reloaded on the next call
    /// without asking the model again.
    #[test]
    fn initial_predictions_are_written_once_and_reloaded() {
        use merit_core::model::{ChatReply, ChatRequest};
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Counting(AtomicUsize);
        impl ChatModel for Counting {
            fn id(&self) -> String {
                "counting".into()
            }
            fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                let asked = request.messages.last().map_or(0, |m| m.content.len());
                Ok(ChatReply {
                    text: format!("```sql\nSELECT {asked}\n```"),
                    prompt_tokens: 10,
                    completion_tokens: 5,
                    latency: std::time::Duration::ZERO,
                    cached: false,
                    tool_calls: Vec::new(),
                })
            }
        }
        let question = |id: &str, text: &str| Question {
            id: id.into(),
            index: 0,
            db_id: "db".into(),
            question: text.into(),
            evidence: String::new(),
            gold_sql: "SELECT 1".into(),
            difficulty: None,
        };
        let questions = vec![
            (question("dev-0", "a"), "CREATE TABLE t (a)".to_string()),
            (question("dev-1", "bb"), "CREATE TABLE t (a)".to_string()),
            (question("dev-2", "ccc"), "CREATE TABLE t (a)".to_string()),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("initial.jsonl");
        let model = Counting(AtomicUsize::new(0));
        let first = initial_predictions(
            &path,
            Benchmark::Spider,
            Dialect::Sqlite,
            &questions,
            &model,
            64,
            2,
            &Silent,
        )
        .unwrap();
        assert_eq!(model.0.load(Ordering::SeqCst), 3);
        let lines: Vec<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|line| {
                serde_json::from_str::<InitialPrediction>(line)
                    .unwrap()
                    .question_id
            })
            .collect();
        assert_eq!(lines, ["dev-0", "dev-1", "dev-2"]);
        assert!(first["dev-0"].sql.starts_with("SELECT "));
        let again = initial_predictions(
            &path,
            Benchmark::Spider,
            Dialect::Sqlite,
            &questions,
            &model,
            64,
            2,
            &Silent,
        )
        .unwrap();
        assert_eq!(model.0.load(Ordering::SeqCst), 3, "nothing is asked twice");
        assert_eq!(again, first);
    }
}
