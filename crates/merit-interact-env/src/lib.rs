//! merit-interact-env: the BIRD-Interact environment on which MERIT's interactive agent runs.
//!
//! An agent gets an ambiguous question about a database and a budget. It explores the database
//! (`execute` and six metadata tools), asks a simulated user for clarification, and submits
//! SQL; a passing phase-1 submission may unlock a follow-up question (phase 2). The rules are
//! those of `../shared/interact-protocol.md`; the `merit-interact` README maps each module to
//! its section and lists every deliberate deviation. This crate knows no agent and no memory:
//! anything that chooses actions drives an [`Environment`] through [`Environment::step`].
//!
//! * [`task`]: task files, metafiles and ground truth, split by type into [`PublicTask`] (what
//!   the agent may see) and [`HiddenTask`] (what it must never see).
//! * [`meta`]: schema text, column meanings and the knowledge base, filtered per task.
//! * [`budget`] and [`action`]: action costs, the budget formula, the force-submit flag.
//! * [`backend`]: the database boundary ([`InteractBackend`]) and its SQLite implementation
//!   with template-copy reset; [`pg`]: the PostgreSQL implementation with
//!   template-database reset, and a loader from SQLite files.
//! * [`judge`]: text transforms, Python-exact value normalisation, the default test, and the
//!   Management path through the Python [`harness`].
//! * [`simulator`]: the [`UserSimulator`] trait, a scripted implementation for tests, the
//!   model-driven two-step simulator with its gold-SQL filter ([`simulator::model`]) and a
//!   person at the terminal ([`simulator::human`]).
//! * [`env`](mod@env): the [`Environment`] that ties them together and records a [`Trajectory`].
//! * [`json`]: asking a model for one strict JSON object, with one retry (the simulator's
//!   neighbours on the method side use it too).
//! * [`prompts`]: the prompt family and the simulator's templates.
//! * [`error`]: the crate's errors, worded so that they never quote hidden material.
//!
//! Data attribution: BIRD-Interact (bird-bench), data CC BY-SA 4.0.

#![warn(missing_docs)]

pub mod action;
pub mod backend;
pub mod budget;
pub mod env;
pub mod error;
pub mod harness;
pub mod json;
pub mod judge;
pub mod meta;
pub mod pg;
pub mod prompts;
pub mod simulator;
pub mod task;

pub use action::{ActionCall, Target};
pub use backend::{InteractBackend, PythonTarget, Rows, SqliteBackend, StatementFailure};
pub use budget::{Budget, Coins, DEFAULT_PATIENCE};
pub use env::{
    sqlite_backend, EndReason, EnvConfig, Environment, ExecutePolicy, Outcome, StepResult,
    Trajectory, TrajectoryStep,
};
pub use error::{InteractError, LoadError};
pub use harness::{PythonHarness, TestRun};
pub use judge::{Cell, FailReason, Verdict};
pub use meta::{DatabaseMeta, KnowledgeEntry, KnowledgeView, VisibleKnowledge};
pub use pg::{PostgresBackend, PostgresDatabase, PostgresServer};
pub use simulator::human::HumanSimulator;
pub use simulator::model::{ModelSimulator, ModelSimulatorConfig};
pub use simulator::{
    Phase, ScriptedSimulator, SimulatorContext, SimulatorError, SimulatorUsage, UserSimulator,
    UserVerdict, OUT_OF_SCOPE_REPLY,
};
pub use task::{
    Ambiguity, AmbiguityMap, Category, HiddenTask, MergeReport, PublicTask, Task, TaskSet,
};
