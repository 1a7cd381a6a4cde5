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
//! 3. [`request`] + [`mod@verify`]: a model writes a fully specified request, an underspecified
//!    one and an ambiguity map as strict JSON (one retry with the parse error fed back); a
//!    record is rejected when a term is not verbatim in the request, a snippet not verbatim in
//!    the SQL, the map has fewer than 2 or more than 6 entries, or the user text leaks schema
//!    identifiers or SQL (the rule is documented on [`verify::find_leaks`]).
//! 4. [`record`] + [`run`]: BIRD-Interact records with ground truth, appended one JSON line at
//!    a time with fsync, resumable by a stable target id; [`stats`] computes the paper's
//!    diversity and quality figures.
//!
//! Nothing here knows about terminals or arguments; a CLI calls [`seed::load_seeds`],
//! [`perturb::perturb_seeds`], [`run::generate_tasks`] and [`stats::compute_stats`].

pub mod perturb;
pub mod record;
pub mod request;
pub mod revise;
pub mod run;
pub mod seed;
pub mod sqlast;
pub mod stats;
pub mod verify;

use std::path::PathBuf;

pub use perturb::{perturb_seeds, PerturbConfig, PerturbKind, PerturbReport, Target};
pub use record::{
    read_generated, schema_of_sqlite, write_spider_metafiles, GeneratedTask, GEN_RECORD_FORMAT,
};
pub use request::{Draft, DraftAmbiguity, AMBIGUITY_TYPES, GEN_PROMPT_FAMILY};
pub use run::{generate_tasks, GenConfig, GenReport, TargetOutcome};
pub use seed::{load_seeds, spread_over_databases, Seed};
pub use stats::{compute_stats, self_bleu, GenStats, StructureStats};
pub use verify::{verify, RejectReason};

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
