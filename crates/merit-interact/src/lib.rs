//! merit-interact: MERIT's interactive agent, its dual-level memory and its process reward
//! model, on the BIRD-Interact environment (crate `merit-interact-env`, re-exported here).
//!
//! An agent gets an ambiguous question about a database and a budget. It explores the database
//! (`execute` and six metadata tools), asks a simulated user for clarification, and submits
//! SQL; a passing phase-1 submission may unlock a follow-up question (phase 2). The rules are
//! those of `../shared/interact-protocol.md`; the crate README maps each module to its section
//! and lists every deliberate deviation. The environment's modules, re-exported:
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
//! * [`simulator`]: the [`UserSimulator`] trait and a scripted implementation for tests.
//! * [`env`](mod@env): the [`Environment`] that ties them together and records a [`Trajectory`].
//! * [`simulator::model`]: the model-driven two-step user simulator with its gold-SQL filter.
//! * [`gen`] (crate `merit-interact-gen`): task generation, SQL first: seed perturbation,
//!   model-written requests and ambiguity maps (`merit-interact-gen-v2`), verification,
//!   resumable output, statistics.
//!
//! This crate's own modules:
//!
//! * [`agent`]: the ReAct agent ([`ReactAgent`]) and its action reader ([`agent::parse`]).
//! * [`runlog`]: the append-only episode log and the resumable driver [`run_tasks`].
//! * [`missed`]: in logged episodes that failed phase 1, the executed queries the judge would
//!   have passed (answers found and not submitted).
//! * [`prompts`]: the prompt templates (`merit-interact-prompts-v1`).
//! * [`memory`]: the dual-level memory (episode and turn memories built from finished
//!   trajectories, append-only JSONL), two-stage retrieval (embedding top-10, then a
//!   [`memory::Selector`]: BM25, cosine, a prompted model, TopicK, or the MemRL- and
//!   Memento-style online selectors; the PPO-trained selector lives in `merit-learn`;
//!   `merit-interact-memory-v1`), and the Demo agent's static demonstrations.
//! * [`fork`]: the counterfactual at a frozen turn (the paper's Table 4).
//! * [`prm`]: the rubric process reward model: the teacher [`prm::RubricJudge`], the
//!   [`prm::Rubric`] and its scalar reward, resumable annotation files
//!   (`merit-interact-prm-v1`).
//!
//! Data attribution: BIRD-Interact (bird-bench), data CC BY-SA 4.0.

#![warn(missing_docs)]

pub mod agent;
pub mod fork;
pub mod memory;
pub mod missed;
pub mod prm;
pub mod prompts;
pub mod runlog;

// The environment and task generation are crates of their own; their modules are re-exported
// here so that one path (`merit_interact::env`, `merit_interact::gen`, ...) serves both.
pub use merit_interact_env::{
    action, backend, budget, env, error, harness, json, judge, meta, pg, simulator, task,
};
pub use merit_interact_gen as gen;

pub use agent::{
    AgentConfig, AgentError, AgentStop, AgentStyle, EpisodeResult, Injection, InjectionRecord,
    MemoryAdvisor, NoMemory, ReactAgent, ToolCallMode,
};
pub use merit_interact_env::{
    sqlite_backend, ActionCall, Ambiguity, AmbiguityMap, Budget, Category, Cell, Coins,
    DatabaseMeta, EndReason, EnvConfig, Environment, ExecutePolicy, FailReason, HiddenTask,
    HumanSimulator, InteractBackend, InteractError, KnowledgeEntry, KnowledgeView, LoadError,
    MergeReport, ModelSimulator, ModelSimulatorConfig, Outcome, Phase, PostgresBackend,
    PostgresDatabase, PostgresServer, PublicTask, PythonHarness, PythonTarget, Rows,
    ScriptedSimulator, SimulatorContext, SimulatorError, SimulatorUsage, SqliteBackend,
    StatementFailure, StepResult, Target, Task, TaskSet, TestRun, Trajectory, TrajectoryStep,
    UserSimulator, UserVerdict, Verdict, VisibleKnowledge, DEFAULT_PATIENCE, OUT_OF_SCOPE_REPLY,
};
pub use runlog::{
    read_log, run_tasks, run_tasks_with_demos, run_tasks_with_memory, EpisodeLog, EpisodeRecord,
    EpisodeSummary, LogError, MemoryRun, MemoryUsage, RunError, RunSpec, RunSummary,
};
