//! The interactive environment: one task, one episode (protocol §2, §4, §5, §7).
//!
//! The agent side talks to an [`Environment`] through three things only: the
//! [`PublicTask`], the opening observation, and [`Environment::step`], which takes an
//! [`ActionCall`] and returns the observation text. Every observation is built from public
//! material (schema, column meanings, the task's filtered knowledge base), the agent's own SQL
//! results, the simulator's reply, or fixed messages; a failed submission says *that* it
//! failed and, for the agent's own SQL errors, the engine message, never anything computed from
//! the gold. The [`Trajectory`] records exactly those observations.

use crate::action::{ActionCall, Target, ENVIRONMENT_ACTIONS, USER_ACTIONS};
use crate::backend::{InteractBackend, Rows, SqliteBackend};
use crate::budget::{action_cost, total_budget, Budget, Coins, DEFAULT_PATIENCE};
use crate::error::InteractError;
use crate::harness::PythonHarness;
use crate::judge::{judge_submission, Cell, FailReason, JudgeInput, Verdict};
use crate::meta::DatabaseMeta;
use crate::simulator::{Phase, SimulatorContext, UserSimulator, UserVerdict};
use crate::task::{AmbiguityMap, Category, PublicTask, Task};
use merit_sql::{ExecError, ExecLimits};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Reward for passing phase 1.
pub const PHASE1_REWARD: f64 = 0.7;
/// Reward for passing phase 2.
pub const PHASE2_REWARD: f64 = 0.3;
/// Agent calls per task before it ends unfinished (A's batch script and B).
pub const DEFAULT_MAX_TURNS: usize = 60;
/// Rows fetched for an `execute` observation.
pub const EXECUTE_ROW_CAP: usize = 10_000;
/// Whitespace-separated words kept in an `execute` observation.
pub const EXECUTE_WORD_LIMIT: usize = 500;
/// Rows of a submission shown to the user who judges it (tasks without ground truth).
pub const USER_PREVIEW_ROWS: usize = 20;

/// Which connection the agent's `execute` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ExecutePolicy {
    /// Read-only for every task (B's rule: only reads are useful to explore with).
    ReadOnly,
    /// Read-only for Query tasks; on a writable, freshly reset copy for Management tasks, so
    /// an agent can try its DML (writes never persist: the copy is reset before the next
    /// execute or submit, as in A).
    #[default]
    WritableForManagement,
    /// Writable fresh copy for every task (A and mini exactly).
    Writable,
}

/// Settings of an episode.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvConfig {
    /// Patience `p` of the budget formula (official runs: 6).
    pub patience: u32,
    /// Agent calls before the task ends unfinished.
    pub max_turns: usize,
    /// Statement deadline (PostgreSQL upstream: 60 s; mini has none, merit always has one).
    pub statement_timeout: Duration,
    /// Where `execute` may write.
    pub execute_policy: ExecutePolicy,
    /// How Management test cases run.
    pub harness: PythonHarness,
}

impl Default for EnvConfig {
    fn default() -> EnvConfig {
        EnvConfig {
            patience: DEFAULT_PATIENCE,
            max_turns: DEFAULT_MAX_TURNS,
            statement_timeout: Duration::from_secs(60),
            execute_policy: ExecutePolicy::default(),
            harness: PythonHarness::default(),
        }
    }
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// Still running.
    Running,
    /// Every phase was solved.
    Solved,
    /// A submit was made with the budget used up; the task ended whatever its verdict.
    BudgetExhausted,
    /// The budget was used up and the next action was not a submit.
    SubmitRefused,
    /// The turn cap was reached.
    TurnLimit,
}

/// The result of an episode so far.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Phase 1 passed.
    pub phase1_passed: bool,
    /// Phase 2 passed (implies phase 1).
    pub phase2_passed: bool,
    /// `0.7·P1 + 0.3·P2`, computed from the flags (protocol §11.1).
    pub reward: f64,
    /// How (whether) it ended.
    pub end: EndReason,
    /// Agent calls made.
    pub turns: usize,
    /// Budget spent, in coins.
    pub budget_spent: f64,
}

/// One recorded step: what the agent did and what it saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryStep {
    /// 1-based agent call number.
    pub turn: usize,
    /// The phase the action was taken in.
    pub phase: Phase,
    /// The action.
    pub action: ActionCall,
    /// The observation returned (including the budget note).
    pub observation: String,
    /// What the action cost, in coins.
    pub cost: f64,
    /// Budget left afterwards, in coins.
    pub budget_left: f64,
    /// The agent's state when it chose the action: its reasoning text for this turn (the
    /// model reply without the action), when the caller passed one. Agent-written, so it holds
    /// nothing hidden unless the agent typed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<String>,
}

/// An episode as it may be stored and retrieved: public task, observations, outcome. Nothing in
/// it comes from the hidden task except what the agent was shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The task as the agent saw it.
    pub task: PublicTask,
    /// The starting budget, in coins.
    pub budget_total: f64,
    /// The opening observation.
    pub opening: String,
    /// Every step.
    pub steps: Vec<TrajectoryStep>,
    /// The result.
    pub outcome: Outcome,
}

/// What one step returns to the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// The observation text, ending with the budget note.
    pub observation: String,
    /// What the action cost.
    pub cost: Coins,
    /// `true` when the episode is over.
    pub done: bool,
}

/// One episode of one task.
pub struct Environment<B: InteractBackend, S: UserSimulator> {
    task: Task,
    meta: Arc<DatabaseMeta>,
    backend: B,
    simulator: S,
    config: EnvConfig,
    budget: Budget,
    phase: Phase,
    phase1_passed: bool,
    phase2_passed: bool,
    end: EndReason,
    turns: usize,
    steps: Vec<TrajectoryStep>,
    deleted_knowledge: BTreeSet<i64>,
    passing_phase1_sql: Option<String>,
    /// The newest `execute` of the current phase that ran without an error or timeout.
    newest_clean_query: Option<String>,
    opening: String,
    empty_map: AmbiguityMap,
}

impl<B: InteractBackend, S: UserSimulator> std::fmt::Debug for Environment<B, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("task", self.task.public())
            .field("budget", &self.budget)
            .field("phase", &self.phase)
            .field("end", &self.end)
            .field("turns", &self.turns)
            .finish_non_exhaustive()
    }
}

/// Opens a [`SqliteBackend`] for a task's database (template-copy reset, mini layout).
pub fn sqlite_backend(meta: &DatabaseMeta) -> Result<SqliteBackend, InteractError> {
    match meta.sqlite_file() {
        Some(file) => SqliteBackend::new(meta.name(), file),
        None => Err(InteractError::DatabaseUnavailable {
            database: meta.name().to_string(),
            reason: "the data set ships no SQLite file for it".to_string(),
        }),
    }
}

impl<B: InteractBackend, S: UserSimulator> Environment<B, S> {
    /// Starts an episode. `meta` must be the metafiles of the task's database.
    pub fn new(
        task: &Task,
        meta: Arc<DatabaseMeta>,
        backend: B,
        simulator: S,
        config: EnvConfig,
    ) -> Result<Environment<B, S>, InteractError> {
        if meta.name() != task.database() || backend.database() != task.database() {
            return Err(InteractError::DatabaseUnavailable {
                database: task.database().to_string(),
                reason: format!(
                    "the environment was given metafiles for `{}` and a backend for `{}`",
                    meta.name(),
                    backend.database()
                ),
            });
        }
        let budget = Budget::new(total_budget(task.budget_ambiguities(), config.patience));
        let opening = format!(
            "Database: {}\nTask: {}\nUser question: {}\n{}",
            task.database(),
            task.instance_id(),
            task.public().amb_user_query,
            budget.note()
        );
        Ok(Environment {
            deleted_knowledge: task.hidden().deleted_knowledge(),
            task: task.clone(),
            meta,
            backend,
            simulator,
            config,
            budget,
            phase: Phase::One,
            phase1_passed: false,
            phase2_passed: false,
            end: EndReason::Running,
            turns: 0,
            steps: Vec::new(),
            passing_phase1_sql: None,
            newest_clean_query: None,
            opening,
            empty_map: AmbiguityMap::default(),
        })
    }

    /// The task as the agent may see it.
    pub fn public_task(&self) -> &PublicTask {
        self.task.public()
    }

    /// The first message: database, task id, question and budget.
    pub fn opening(&self) -> &str {
        &self.opening
    }

    /// The database schema as `get_schema()` returns it (without charging anything; the
    /// agent's optional schema-in-opening setting shows it).
    pub fn schema(&self) -> &str {
        self.meta.schema()
    }

    /// The follow-up question, once phase 1 has passed and phase 2 is running.
    pub fn follow_up_query(&self) -> Option<&str> {
        (self.phase == Phase::Two)
            .then(|| self.task.hidden().follow_up.as_ref())
            .flatten()
            .map(|follow_up| follow_up.query.as_str())
    }

    /// The budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The SQL of the newest `execute` of the current phase that ran without an error or a
    /// timeout (rows, no rows, or a statement without rows), if any: what an agent may submit
    /// when the budget leaves it nothing else (`AgentConfig::forced_submit_fallback` in
    /// merit-interact). Structured here so that no caller reads it back out of observation text.
    pub fn newest_clean_query(&self) -> Option<&str> {
        self.newest_clean_query.as_deref()
    }

    /// `true` once the episode has ended.
    pub fn is_done(&self) -> bool {
        self.end != EndReason::Running
    }

    /// The result so far.
    pub fn outcome(&self) -> Outcome {
        let reward = PHASE1_REWARD * f64::from(u8::from(self.phase1_passed))
            + PHASE2_REWARD * f64::from(u8::from(self.phase2_passed));
        Outcome {
            phase1_passed: self.phase1_passed,
            phase2_passed: self.phase2_passed,
            reward,
            end: self.end,
            turns: self.turns,
            budget_spent: Coins(self.budget.total().0 - self.budget.remaining().0).as_f64(),
        }
    }

    /// The steps taken so far, in order.
    pub fn steps(&self) -> &[TrajectoryStep] {
        &self.steps
    }

    /// The episode so far, as it may be logged.
    pub fn trajectory(&self) -> Trajectory {
        Trajectory {
            task: self.task.public().clone(),
            budget_total: self.budget.total().as_f64(),
            opening: self.opening.clone(),
            steps: self.steps.clone(),
            outcome: self.outcome(),
        }
    }

    /// The backend (e.g. to inspect the working copy in tests).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The user simulator (e.g. to read its usage after the episode).
    pub fn simulator(&self) -> &S {
        &self.simulator
    }

    /// The configuration of this episode.
    pub fn config(&self) -> &EnvConfig {
        &self.config
    }

    /// Carries out one agent action.
    ///
    /// The cost is charged before the action runs. With the budget used up, only a submit is
    /// accepted; anything else ends the task unsolved without a charge. Errors are
    /// infrastructure failures (and calling after the end); agent mistakes are observations.
    pub fn step(&mut self, call: ActionCall) -> Result<StepResult, InteractError> {
        self.step_with_thought(call, None)
    }

    /// [`Environment::step`], recording the agent's reasoning for this turn in the trajectory.
    pub fn step_with_thought(
        &mut self,
        call: ActionCall,
        thought: Option<String>,
    ) -> Result<StepResult, InteractError> {
        if self.is_done() {
            return Err(InteractError::EpisodeOver {
                instance_id: self.task.instance_id().to_string(),
            });
        }
        if call.is_submit()
            && !self.phase_has_ground_truth()
            && !self.simulator.judges_without_truth()
        {
            // Checked before charging, so a task without ground truth is not spent by trying.
            return Err(InteractError::NoGroundTruth {
                instance_id: self.task.instance_id().to_string(),
            });
        }
        self.turns += 1;
        let phase = self.phase;
        if self.budget.force_submit() && !call.is_submit() {
            self.end = EndReason::SubmitRefused;
            let text = format!(
                "The budget was used up and the next action had to be a submit. The task ends here.\n{}",
                self.final_note()
            );
            return Ok(self.record(call, phase, Coins(0), text, thought));
        }
        let cost = action_cost(&call.name);
        self.budget.charge(cost);
        let forced = self.budget.force_submit();
        let body = match call.target {
            Target::Environment => self.environment_action(&call)?,
            Target::User => self.user_action(&call, forced)?,
        };
        let mut text = format!("{body}\n{}", self.budget.note());
        if !self.is_done() && self.turns >= self.config.max_turns {
            self.end = EndReason::TurnLimit;
            text.push_str("\nThe turn limit is reached; the task ends here.");
        }
        if self.is_done() {
            text.push('\n');
            text.push_str(&self.final_note());
        }
        Ok(self.record(call, phase, cost, text, thought))
    }

    fn record(
        &mut self,
        call: ActionCall,
        phase: Phase,
        cost: Coins,
        text: String,
        thought: Option<String>,
    ) -> StepResult {
        self.steps.push(TrajectoryStep {
            turn: self.turns,
            phase,
            action: call,
            observation: text.clone(),
            cost: cost.as_f64(),
            budget_left: self.budget.remaining().as_f64(),
            thought,
        });
        StepResult {
            observation: text,
            cost,
            done: self.is_done(),
        }
    }

    fn final_note(&self) -> String {
        format!("[Task finished. Total reward: {}]", self.outcome().reward)
    }

    fn phase_has_ground_truth(&self) -> bool {
        let hidden = self.task.hidden();
        match self.phase {
            Phase::One => !hidden.phase1.sol_sql.is_empty(),
            Phase::Two => hidden
                .follow_up
                .as_ref()
                .is_some_and(|f| !f.truth.sol_sql.is_empty()),
        }
    }

    fn limits(&self, max_rows: Option<usize>) -> ExecLimits {
        ExecLimits {
            timeout: self.config.statement_timeout,
            max_rows,
        }
    }

    fn environment_action(&mut self, call: &ActionCall) -> Result<String, InteractError> {
        let meta = Arc::clone(&self.meta);
        let view = meta.knowledge_view(&self.deleted_knowledge);
        Ok(match call.name.as_str() {
            "execute" => match call.args.first() {
                Some(sql) if call.args.len() == 1 => self.execute(sql)?,
                _ => arity_message("execute", "one argument (the SQL)", call.args.len()),
            },
            "get_schema" => meta.schema().to_string(),
            "get_all_column_meanings" => {
                pretty(&serde_json::Value::Object(meta.column_meanings().clone()))
            }
            "get_column_meaning" => match call.args.as_slice() {
                [table, column] => match meta.column_meaning(table, column) {
                    Some(serde_json::Value::String(text)) => text.clone(),
                    Some(other) => pretty(other),
                    None => {
                        format!("No meaning is recorded for column '{column}' of table '{table}'.")
                    }
                },
                _ => arity_message(
                    "get_column_meaning",
                    "exactly 2 arguments (table, column)",
                    call.args.len(),
                ),
            },
            "get_all_external_knowledge_names" => pretty(&serde_json::json!(view.names())),
            "get_knowledge_definition" => match call.args.as_slice() {
                [name] => match view.lookup(name).as_slice() {
                    // The name is not echoed: an agent guessing a hidden entry's name learns
                    // nothing, and observations never repeat hidden names back.
                    [] => "No accessible knowledge entry has that name.".to_string(),
                    [one] => pretty(&serde_json::json!(one)),
                    several => pretty(&serde_json::json!(several)),
                },
                _ => arity_message(
                    "get_knowledge_definition",
                    "one argument (the knowledge name)",
                    call.args.len(),
                ),
            },
            "get_all_knowledge_definitions" => pretty(&serde_json::json!(view.all())),
            other => format!(
                "Unknown environment action '{other}'. The environment accepts: {}.",
                ENVIRONMENT_ACTIONS.join(", ")
            ),
        })
    }

    fn execute(&mut self, sql: &str) -> Result<String, InteractError> {
        let writable = match self.config.execute_policy {
            ExecutePolicy::ReadOnly => false,
            ExecutePolicy::Writable => true,
            ExecutePolicy::WritableForManagement => self.task.category() == Category::Management,
        };
        self.backend.reset()?;
        let limits = self.limits(Some(EXECUTE_ROW_CAP));
        let result = if writable {
            self.backend
                .run_writable(&[sql.to_string()], &limits)
                .map_err(|failure| failure.error)
        } else {
            self.backend.query_read_only(sql, &limits)
        };
        if result.is_ok() {
            self.newest_clean_query = Some(sql.to_string());
        }
        Ok(render_execute(result))
    }

    fn user_action(&mut self, call: &ActionCall, forced: bool) -> Result<String, InteractError> {
        match call.name.as_str() {
            "ask" => match call.args.as_slice() {
                [question] => {
                    let context = SimulatorContext {
                        task: &self.task,
                        phase: self.phase,
                        schema: self.meta.schema(),
                        empty_map: &self.empty_map,
                    };
                    self.simulator.reply(question, &context).map_err(|error| {
                        InteractError::Simulator {
                            instance_id: self.task.instance_id().to_string(),
                            reason: error.0,
                        }
                    })
                }
                _ => Ok(arity_message(
                    "ask",
                    "one argument (the question)",
                    call.args.len(),
                )),
            },
            "submit" => match call.args.as_slice() {
                [sql] => self.submit(sql, forced),
                _ => {
                    if forced {
                        // A malformed submit under the flag still ends the task.
                        self.end = EndReason::BudgetExhausted;
                    }
                    Ok(arity_message(
                        "submit",
                        "one argument (the SQL)",
                        call.args.len(),
                    ))
                }
            },
            other => Ok(format!(
                "Unknown user action '{other}'. The user accepts: {}.",
                USER_ACTIONS.join(", ")
            )),
        }
    }

    /// The verdict of the user themselves on a task without ground truth: they see the
    /// SQL and a preview of its rows (read-only, the first [`USER_PREVIEW_ROWS`]).
    fn user_verdict(&mut self, sql: &str) -> Result<Verdict, InteractError> {
        self.backend.reset()?;
        let limits = self.limits(Some(USER_PREVIEW_ROWS));
        let preview = render_execute(self.backend.query_read_only(sql, &limits));
        let verdict =
            self.simulator
                .verdict(sql, &preview)
                .map_err(|error| InteractError::Simulator {
                    instance_id: self.task.instance_id().to_string(),
                    reason: error.0,
                })?;
        Ok(match verdict {
            UserVerdict::Accept => Verdict::Pass,
            UserVerdict::Reject(comment) => Verdict::Fail(FailReason::UserRejected(comment)),
        })
    }

    fn submit(&mut self, sql: &str, forced: bool) -> Result<String, InteractError> {
        let verdict = if self.phase_has_ground_truth() {
            self.judge_against_truth(sql)?
        } else {
            self.user_verdict(sql)?
        };
        self.settle_submission(sql, verdict, forced)
    }

    /// Whether `sql`, submitted in phase 1, would pass: the phase-1 judge alone, on a reset
    /// copy, with nothing charged, recorded or said, and the episode's state untouched. For
    /// reading logged episodes (`merit interact missed`: which of an agent's executed queries
    /// would have passed had it submitted them), never for an agent: it consults the hidden
    /// ground truth.
    pub fn would_pass_phase1(&mut self, sql: &str) -> Result<bool, InteractError> {
        let limits = self.limits(None);
        let hidden = self.task.hidden();
        if hidden.phase1.sol_sql.is_empty() {
            return Err(InteractError::NoGroundTruth {
                instance_id: self.task.instance_id().to_string(),
            });
        }
        let input = JudgeInput {
            instance_id: self.task.instance_id(),
            database: self.task.database(),
            prediction: sql,
            truth: &hidden.phase1,
            category: hidden.phase1.category.unwrap_or(self.task.category()),
            setup: Vec::new(),
            limits,
        };
        let verdict = judge_submission(&mut self.backend, &self.config.harness, &input)?;
        Ok(verdict == Verdict::Pass)
    }

    fn judge_against_truth(&mut self, sql: &str) -> Result<Verdict, InteractError> {
        let hidden = self.task.hidden();
        let (truth, category, setup) = match self.phase {
            Phase::One => (&hidden.phase1, hidden.phase1.category, Vec::new()),
            Phase::Two => {
                let follow_up = hidden
                    .follow_up
                    .as_ref()
                    .expect("phase 2 only starts when a follow-up exists");
                // Phase 2 of a Management task starts from the state phase 1 left behind.
                let setup = if self.task.category() == Category::Management {
                    hidden
                        .preprocess_sql
                        .iter()
                        .chain(self.passing_phase1_sql.iter())
                        .chain(hidden.clean_up_sqls.iter())
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                (&follow_up.truth, follow_up.truth.category, setup)
            }
        };
        let input = JudgeInput {
            instance_id: self.task.instance_id(),
            database: self.task.database(),
            prediction: sql,
            truth,
            category: category.unwrap_or(self.task.category()),
            setup,
            limits: self.limits(None),
        };
        judge_submission(&mut self.backend, &self.config.harness, &input)
    }

    /// What a verdict does to the episode, and what the agent is told.
    fn settle_submission(
        &mut self,
        sql: &str,
        verdict: Verdict,
        forced: bool,
    ) -> Result<String, InteractError> {
        let phase_number = match self.phase {
            Phase::One => 1,
            Phase::Two => 2,
        };
        let message = match (verdict, self.phase) {
            (Verdict::Pass, Phase::One) => {
                self.phase1_passed = true;
                self.passing_phase1_sql = Some(sql.to_string());
                let follow_up = self.task.has_follow_up();
                if follow_up && !forced {
                    self.phase = Phase::Two;
                    self.newest_clean_query = None;
                    format!(
                        "Correct: phase 1 is solved (reward {PHASE1_REWARD}). Phase 2 begins. The user follows up: {}",
                        self.follow_up_query().unwrap_or_default()
                    )
                } else {
                    self.end = if follow_up {
                        EndReason::BudgetExhausted
                    } else {
                        EndReason::Solved
                    };
                    format!("Correct: phase 1 is solved (reward {PHASE1_REWARD}).")
                }
            }
            (Verdict::Pass, Phase::Two) => {
                self.phase2_passed = true;
                self.end = EndReason::Solved;
                format!("Correct: phase 2 is solved (reward {PHASE2_REWARD}).")
            }
            (Verdict::Fail(reason), _) => {
                if forced {
                    self.end = EndReason::BudgetExhausted;
                }
                format!(
                    "The phase {phase_number} submission is not correct: {}.",
                    describe_failure(&reason)
                )
            }
        };
        Ok(message)
    }
}

/// The agent-facing reason for a failed submission. Coarse on purpose: only the agent's own
/// SQL error is quoted; nothing derived from gold SQL, gold rows or test-case text is.
fn describe_failure(reason: &FailReason) -> String {
    match reason {
        FailReason::PredictionError(message) => format!("the SQL raised an error: {message}"),
        FailReason::PredictionTimeout => "the SQL ran past the time limit".to_string(),
        FailReason::ResultMismatch | FailReason::ReferenceFailed => {
            "its result does not match the expected result".to_string()
        }
        FailReason::TestFailed(index) => format!("it failed test case {}", index + 1),
        FailReason::TestTimeout => "checking it ran past the time limit".to_string(),
        FailReason::UserRejected(comment) if comment.is_empty() => {
            "the user did not accept it".to_string()
        }
        FailReason::UserRejected(comment) => {
            format!("the user did not accept it and says: {comment}")
        }
    }
}

fn arity_message(action: &str, wanted: &str, got: usize) -> String {
    format!("Action '{action}' takes {wanted}, but {got} were given.")
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The `execute` observation (mini's table format): one ` | `-joined line per row, no header;
/// a lone value for a 1×1 result; fixed messages for no rows and for statements without a
/// result; the engine's text for errors; then cut to [`EXECUTE_WORD_LIMIT`] words. Unlike A
/// (which re-joins words with single spaces), the kept text keeps its line breaks. Values
/// print as Python's `str()` except blank text, which is quoted (`observed_cell`).
pub fn render_execute(result: Result<Rows, ExecError>) -> String {
    let text = match result {
        Err(ExecError::Timeout(limit)) => {
            format!("The query timed out after {} seconds.", limit.as_secs_f64())
        }
        Err(error) => format!("Error: {error}"),
        Ok(rows) if rows.columns.is_empty() => {
            "The statement ran successfully; it returns no rows.".to_string()
        }
        Ok(rows) if rows.rows.is_empty() => "The query returned no rows.".to_string(),
        Ok(rows) if rows.rows.len() == 1 && rows.rows[0].len() == 1 => {
            observed_cell(&rows.rows[0][0])
        }
        Ok(rows) => {
            let mut lines: Vec<String> = rows
                .rows
                .iter()
                .map(|row| {
                    row.iter()
                        .map(observed_cell)
                        .collect::<Vec<_>>()
                        .join(" | ")
                })
                .collect();
            if rows.truncated {
                lines.push(format!(
                    "(only the first {EXECUTE_ROW_CAP} rows were fetched)"
                ));
            }
            lines.join("\n")
        }
    };
    cut_words(&text, EXECUTE_WORD_LIMIT)
}

/// A value as `execute` shows it: Python's `str()`, except text that is empty or only
/// whitespace, which is quoted (`''`, `' '`, `'\n'`). Mini prints nothing for it, so a column
/// of empty strings became a run of blank lines (thousands, uncounted by the word limit) that
/// the agent could not tell from no output at all; in a logged training episode the 1.5B agent
/// then invented the rows it could not see.
fn observed_cell(cell: &Cell) -> String {
    match cell {
        Cell::Text(text) if text.trim().is_empty() => format!("'{}'", text.escape_debug()),
        _ => cell.display(),
    }
}

/// Keeps the text up to the end of its `limit`-th whitespace-separated word, then `...`.
pub fn cut_words(text: &str, limit: usize) -> String {
    let mut words = 0;
    let mut in_word = false;
    for (index, ch) in text.char_indices() {
        if ch.is_whitespace() {
            if in_word {
                words += 1;
                in_word = false;
                if words == limit {
                    let rest = &text[index..];
                    if rest.trim().is_empty() {
                        return text.to_string();
                    }
                    return format!("{} ...", &text[..index]);
                }
            }
        } else {
            in_word = true;
        }
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_cut_after_the_limit() {
        assert_eq!(cut_words("a b c d", 2), "a b ...");
        assert_eq!(cut_words("a b", 2), "a b");
        assert_eq!(cut_words("a b  \n", 2), "a b  \n");
        assert_eq!(cut_words("a\nb\nc", 2), "a\nb ...");
    }

    #[test]
    fn execute_renders_the_mini_table_format() {
        let rows = |rows: Vec<Vec<Cell>>| {
            Ok(Rows {
                columns: vec!["a".into(); rows.first().map_or(1, Vec::len)],
                rows,
                truncated: false,
            })
        };
        assert_eq!(render_execute(rows(vec![vec![Cell::Float(1.0)]])), "1.0");
        assert_eq!(
            render_execute(rows(vec![
                vec![Cell::Int(1), Cell::Text("x".into())],
                vec![Cell::Null, Cell::Float(0.5)]
            ])),
            "1 | x\nNone | 0.5"
        );
        assert_eq!(render_execute(rows(vec![])), "The query returned no rows.");
        // Blank text is quoted: a column of empty strings is not a run of blank lines.
        assert_eq!(
            render_execute(rows(vec![
                vec![Cell::Text(String::new())],
                vec![Cell::Text(" ".into())],
                vec![Cell::Text("\n".into())],
                vec![Cell::Text("rain".into())]
            ])),
            "''\n' '\n'\\n'\nrain"
        );
        assert_eq!(
            render_execute(rows(vec![vec![Cell::Text(String::new())]])),
            "''"
        );
        assert_eq!(
            render_execute(rows(vec![vec![Cell::Text(String::new()), Cell::Int(3)]])),
            "'' | 3"
        );
        assert!(render_execute(Err(ExecError::Sql {
            message: "no such table: t".into()
        }))
        .contains("no such table: t"));
    }
}
