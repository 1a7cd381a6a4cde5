//! Task generation, SQL first (the paper's §4 and appendix A, rebuilt in our own words).
//!
//! The pipeline runs in four stages, each usable on its own:
//!
//! 1. [`seed`]: seed SQL from Spider gold files (`SQL<TAB>db_id`) or `train.json`/`dev.json`.
//! 2. [`perturb`]: parse each seed with `sqlparser`, apply constrained perturbations (a
//!    type-compatible non-key column swap inside one table, a numeric literal change, a flipped
//!    sort direction, a changed or added LIMIT) with a seeded ChaCha RNG, and keep only targets
//!    that run read-only within a deadline and return at least one row. Duplicates (by
//!    normalised SQL) are dropped.
//! 3. [`request`] + [`mod@verify`] + [`revise`]: a model writes a fully specified request, an
//!    underspecified one and an ambiguity map as strict JSON (one retry with the parse error
//!    fed back); verification finds a term not verbatim in the request, a snippet not verbatim
//!    in the SQL, a map of fewer than 2 or more than 6 entries, user text that leaks schema
//!    identifiers or SQL (the rule is documented on [`verify::find_leaks`]), and the other
//!    faults [`verify`](mod@verify) lists; a well-formed draft with faults is sent back once
//!    with them named ([`revise`], on by default), and rejected only if the revision fails
//!    too.
//! 4. [`record`] + [`run`]: BIRD-Interact records with ground truth, appended one JSON line at
//!    a time with fsync, resumable by a stable target id; [`stats`] computes the paper's
//!    diversity and quality figures.
//!
//! Two optional stages extend the query targets before stage 3 ([`extend_targets`]):
//! [`follow`] attaches a phase-2 follow-up with exact ground truth, and [`mod@write`] derives
//! Management (DELETE/UPDATE) targets judged by state-checking test cases. One optional stage
//! extends verified records: [`knowledge`] turns a blurred row condition into a
//! knowledge-base entry, visible or deleted for the task.
//!
//! [`sqlast`] holds what the stages need from `sqlparser`: parsing, normalised text for
//! deduplication, AST skeletons and structural features for the statistics.
//!
//! Nothing here knows about terminals or arguments; a CLI calls [`seed::load_seeds`],
//! [`perturb::perturb_seeds`], [`run::generate_tasks`] and [`stats::compute_stats`].

#![warn(missing_docs)]

pub mod follow;
pub mod knowledge;
pub mod perturb;
pub mod record;
pub mod request;
pub mod revise;
pub mod run;
pub mod seed;
pub mod sqlast;
pub mod stats;
pub mod verify;
pub mod write;

use std::path::PathBuf;

pub use follow::{follow_up_for, FollowUpSpec};
pub use knowledge::{add_knowledge, write_knowledge_files, KnowledgeLine, KnowledgeReport};
pub use perturb::{perturb_seeds, PerturbConfig, PerturbKind, PerturbReport, Target};
pub use record::{
    read_generated, rewrite_generated, schema_of_sqlite, write_spider_metafiles, GeneratedTask,
    GEN_RECORD_FORMAT,
};
pub use request::{Draft, DraftAmbiguity, AMBIGUITY_TYPES, GEN_PROMPT_FAMILY};
pub use run::{generate_tasks, GenConfig, GenReport, TargetOutcome};
pub use seed::{load_seeds, spread_over_databases, Seed};
pub use stats::{compute_stats, self_bleu, GenStats, StructureStats};
pub use verify::{verify, RejectReason};
pub use write::{write_targets, WriteReport, WriteSpec};

/// What [`extend_targets`] adds to the query targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extensions {
    /// Attach a phase-2 follow-up to every query target that has one ([`follow`]).
    pub follow_ups: bool,
    /// Derive a Management target from every query target that allows one ([`mod@write`]), placed
    /// right after it, so a run cut short by `--limit` still mixes both kinds.
    pub writes: bool,
}

/// Counts of [`extend_targets`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExtensionReport {
    /// Query targets given a follow-up.
    pub follow_ups: usize,
    /// What the write stage did.
    pub writes: WriteReport,
}

/// Adds follow-ups and Management targets to perturbed query targets (see [`Extensions`]).
pub fn extend_targets(
    targets: Vec<Target>,
    schemas: &std::collections::BTreeMap<String, merit_data::DatabaseSchema>,
    databases: &merit_data::DatabaseDir,
    extensions: Extensions,
    timeout: std::time::Duration,
) -> Result<(Vec<Target>, ExtensionReport), GenError> {
    let mut report = ExtensionReport::default();
    let limits = merit_sql::ExecLimits::with_timeout(timeout);
    let mut open: std::collections::BTreeMap<String, merit_sql::SqliteDatabase> =
        std::collections::BTreeMap::new();
    let mut out = Vec::with_capacity(targets.len());
    // A write's id hashes its statement: one task per statement, whichever query gave it first.
    let mut writes_seen = std::collections::BTreeSet::new();
    for mut target in targets {
        if extensions.follow_ups {
            if !open.contains_key(&target.db_id) {
                if let Ok(path) = databases.locate(&target.db_id) {
                    let database =
                        merit_sql::SqliteDatabase::open(&path).map_err(|e| GenError::Database {
                            database: target.db_id.clone(),
                            message: e.to_string(),
                        })?;
                    open.insert(target.db_id.clone(), database);
                }
            }
            if let Some(database) = open.get(&target.db_id) {
                target.follow_up = follow_up_for(&target, database, &limits);
                report.follow_ups += usize::from(target.follow_up.is_some());
            }
        }
        let write = if extensions.writes {
            let (mut made, counts) =
                write_targets(std::slice::from_ref(&target), schemas, databases, timeout)?;
            report.writes.offered += counts.offered;
            report.writes.eligible += counts.eligible;
            report.writes.discarded += counts.discarded;
            report.writes.kept += counts.kept;
            made.pop().filter(|write| {
                let fresh = writes_seen.insert(write.target_id.clone());
                if !fresh {
                    report.writes.kept -= 1;
                    report.writes.duplicates += 1;
                }
                fresh
            })
        } else {
            None
        };
        out.push(target);
        out.extend(write);
    }
    Ok((out, report))
}

/// Why a generation stage could not run. Bad model output is never an error: it becomes a
/// rejection that is counted.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A Spider file (seeds, `tables.json`) could not be loaded.
    #[error(transparent)]
    Data(#[from] merit_data::DataError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// An output or rejection log holds a line that is not one of our records.
    #[error("{path}:{line}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A database could not be opened or read while preparing metafiles or statistics.
    #[error("database `{database}`: {message}")]
    Database {
        /// The database id.
        database: String,
        /// The engine's or the locator's message.
        message: String,
    },
    /// The model backend failed (transport, server, unavailable). The run stops so that a
    /// rerun retries the target instead of recording a rejection it did not earn.
    #[error("target `{target_id}`: the model failed: {source}")]
    Model {
        /// The target being written.
        target_id: String,
        /// The backend's error.
        source: merit_core::model::ModelError,
    },
    /// The embedder failed while computing statistics.
    #[error("embedding the requests failed: {0}")]
    Embed(merit_core::model::ModelError),
    /// A seed file has an extension this module does not know.
    #[error("{path}: unknown seed file kind (expected a `.json` question file or a `SQL<TAB>db_id` gold file)")]
    UnknownSeedFile {
        /// The file.
        path: PathBuf,
    },
}

pub(crate) fn io_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> GenError + '_ {
    move |source| GenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) use merit_core::hash::fnv1a;
