//! One MERIT repair episode, generic over the model, the oracle, the classifier and the memory.
//!
//! The episode follows §3.2 of the repair paper: judge the shared initial prediction; if it is
//! wrong, repeat (classify the failure → retrieve precedents → (reflect) → generate one revision
//! greedily → judge) until the oracle confirms a revision or `K` revisions were made; then
//! finalize, which is the only moment the memory may learn from the episode.
//!
//! Causality is structural here: the memory is asked for precedents with the current stream
//! position and question, and it only receives the episode through [`RepairMemory::finalize`]
//! after the last attempt, so no attempt of the current episode can be retrieved by it.

pub mod prompt;

use crate::extract::extract_sql;
use crate::hints::HintKinds;
use merit_core::episode::{normalize_attempt_sql, AttemptAids, AttemptRecord, EpisodeRecord};
use merit_core::failure::{Classification, FailureType};
use merit_core::model::{ChatMessage, ChatModel, ChatRequest, Decoding, ModelError};
use merit_core::{Benchmark, Feedback, Status};
use prompt::{
    reflection_prompt, reflection_version, repair_prompt, repair_version, repeat_note,
    RepairPromptInput,
};
pub use prompt::{PrecedentView, RepairLayout};

/// A question as the agent may see it: no gold SQL in this type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionView {
    /// Question id (the oracle's key).
    pub id: String,
    /// Database id.
    pub db_id: String,
    /// The request.
    pub question: String,
    /// BIRD evidence (empty for Spider).
    pub evidence: String,
}

/// One attempt as the prompts show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptView {
    /// 0 for the initial prediction.
    pub step: u32,
    /// The judged SQL.
    pub sql: String,
    /// The oracle's status.
    pub status: Status,
    /// DBMS error text.
    pub error: Option<String>,
    /// The classifier's label (for failed attempts, once classified); the memory keeps it.
    pub failure: Option<Classification>,
}

/// Polarity of a retrieved precedent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrecedentPolarity {
    /// An oracle-confirmed failed → correct transition.
    Positive,
    /// The final, still-failing direction of an unsolved episode.
    Negative,
}

/// A retrieved memory entry, as the repair prompt renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precedent {
    /// Memory id.
    pub id: String,
    /// Polarity.
    pub polarity: PrecedentPolarity,
    /// Failure type of the source attempt.
    pub failure_type: FailureType,
    /// Source database.
    pub db_id: String,
    /// Source question.
    pub question: String,
    /// The source's failing SQL.
    pub failing_sql: String,
    /// The source's status name.
    pub status: String,
    /// The source's DBMS error.
    pub error: Option<String>,
    /// The normalised SQL transformation Δ.
    pub delta: String,
}

/// Why the oracle could not judge (never "the SQL is wrong": that is a [`Feedback`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JudgeError(pub String);

/// The benchmark oracle as the episode sees it.
pub trait Judge: Sync {
    /// Judges `sql` for `question_id`.
    fn judge(&self, question_id: &str, sql: &str) -> Result<Feedback, JudgeError>;
}

impl Judge for merit_eval::Oracle {
    fn judge(&self, question_id: &str, sql: &str) -> Result<Feedback, JudgeError> {
        merit_eval::Oracle::judge(self, question_id, sql).map_err(|e| JudgeError(e.to_string()))
    }
}

/// The deterministic failure classifier (status and DBMS text only).
pub trait FailureClassifier: Sync {
    /// The label of a failed attempt.
    fn classify(&self, status: Status, error: Option<&str>) -> Classification;
}

/// What a retrieval is asked with.
#[derive(Debug, Clone, Copy)]
pub struct RetrievalRequest<'a> {
    /// Stream position of the current episode; only earlier positions are visible.
    pub position: usize,
    /// The current question (its own memories are never visible).
    pub question: &'a QuestionView,
    /// The current (failed) SQL.
    pub current_sql: &'a str,
    /// Its status.
    pub status: Status,
    /// Its DBMS error.
    pub error: Option<&'a str>,
    /// Its predicted failure type.
    pub failure_type: FailureType,
    /// The repair step k this retrieval feeds (1 for the first revision). Ablations that
    /// draw precedents at random seed their draw with it, so each step sees a fresh draw.
    pub step: u32,
}

/// A finished episode handed to the memory (the memory turns it into its own
/// `merit_memory::FinalizedEpisode`, hence the other name).
#[derive(Debug, Clone, Copy)]
pub struct EndedEpisode<'a> {
    /// Stream position.
    pub position: usize,
    /// The question.
    pub question: &'a QuestionView,
    /// Schema text the episode saw.
    pub schema: &'a str,
    /// Every attempt, initial prediction first.
    pub attempts: &'a [AttemptView],
    /// `true` when the last attempt is oracle-confirmed correct.
    pub solved: bool,
}

/// Why the memory failed (IO, typically). Fatal for the run: nothing may be lost silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory: {0}")]
pub struct RepairMemoryError(pub String);

/// Cross-query memory as the episode uses it.
pub trait RepairMemory {
    /// Precedents for the next revision.
    fn retrieve(&self, request: &RetrievalRequest<'_>)
        -> Result<Vec<Precedent>, RepairMemoryError>;

    /// Learns from a finished episode; returns the id of the entry written, if any.
    fn finalize(&mut self, episode: &EndedEpisode<'_>)
        -> Result<Option<String>, RepairMemoryError>;
}

/// The Iterative baseline's memory: nothing retrieved, nothing kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMemory;

impl RepairMemory for NoMemory {
    fn retrieve(&self, _: &RetrievalRequest<'_>) -> Result<Vec<Precedent>, RepairMemoryError> {
        Ok(Vec::new())
    }

    fn finalize(&mut self, _: &EndedEpisode<'_>) -> Result<Option<String>, RepairMemoryError> {
        Ok(None)
    }
}

/// What the repair aids read from the live database of a question (read-only, never the
/// gold). Implemented by [`crate::hints::DatabaseHints`]; the episode only asks.
pub trait DatabaseAids: Sync {
    /// Hints about a failed attempt on database `db_id`, in a fixed order.
    fn hints(
        &self,
        db_id: &str,
        sql: &str,
        status: Status,
        error: Option<&str>,
        kinds: HintKinds,
    ) -> Vec<String>;

    /// The decoding grammar of database `db_id` ([`crate::grammar::sql_grammar`]) with the
    /// given alias rule, or `None` when its catalog cannot be read.
    fn sql_grammar(&self, db_id: &str, aliases: crate::grammar::AliasRule) -> Option<String>;
}

/// The method-neutral repair aids of a run (issue 16). They are applied identically to every
/// method, so a comparison between methods stays a comparison of their memories; the default
/// (all off, paper layout) is the paper's plain setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RepairAids {
    /// A revision that normalises to an earlier attempt of the episode is not judged again:
    /// the model is asked once more in the same step, with the repeat named (one more call,
    /// no extra step against K). If the second reply repeats too, that earlier attempt's
    /// feedback stands for it without a new judgement, and the episode's repairs end there
    /// (`stopped_early` says so): a greedy model that repeats after being told does so again.
    pub repeat_guard: bool,
    /// Hints read from the database about each failure (see [`crate::hints`]).
    pub hints: HintKinds,
    /// Repairs are decoded under a grammar that allows only the database's table and column
    /// names, SQL keywords and short aliases ([`crate::grammar`]); embedded backend (and
    /// llama.cpp's server) only.
    #[serde(default)]
    pub grammar: bool,
    /// With `grammar`: how it treats the name after `AS` ([`crate::grammar::AliasRule`]).
    /// Left out of manifests when it is the calibrated default.
    #[serde(default, skip_serializing_if = "crate::grammar::AliasRule::is_listed")]
    pub grammar_aliases: crate::grammar::AliasRule,
    /// Layout of the repair request.
    pub layout: RepairLayout,
    /// How much of each retrieved precedent the request shows (methods without memory show
    /// none, so this changes nothing for them). Left out of manifests when it is the paper's.
    #[serde(default, skip_serializing_if = "PrecedentView::is_full")]
    pub precedents: PrecedentView,
}

impl RepairAids {
    /// `true` for the paper's plain setting.
    pub fn is_paper(&self) -> bool {
        *self == RepairAids::default()
    }

    /// A short label, e.g. `paper` or `fresh+repeat-guard+schema-hints`.
    pub fn label(&self) -> String {
        if self.is_paper() {
            return "paper".to_string();
        }
        let mut parts = vec![self.layout.name().to_string()];
        if self.repeat_guard {
            parts.push("repeat-guard".into());
        }
        if self.hints.schema {
            parts.push("schema-hints".into());
        }
        if self.hints.values {
            parts.push("value-hints".into());
        }
        if self.grammar {
            parts.push("grammar".into());
            if !self.grammar_aliases.is_listed() {
                parts.push("free-aliases".into());
            }
        }
        if !self.precedents.is_full() {
            parts.push(format!("{}-precedents", self.precedents.name()));
        }
        parts.join("+")
    }
}

/// Settings of an episode that do not change within a run.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSettings {
    /// Benchmark (selects prompt variants and version ids).
    pub benchmark: Benchmark,
    /// Dialect name shown in prompts.
    pub dialect: String,
    /// Repair budget K (the paper: 7).
    pub max_revisions: u32,
    /// Decoding for repair and reflection calls (greedy).
    pub decoding: Decoding,
    /// Generate a reflection before each revision (Reflexion-style).
    pub reflect: bool,
    /// Method name written into the record.
    pub method: String,
    /// Stream seed written into the record.
    pub seed: u64,
    /// The method-neutral repair aids (all off: the paper's setting).
    pub aids: RepairAids,
}

/// Why an episode could not be completed. The run stops with this message; the episode is
/// not recorded, so a resumed run redoes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpisodeError {
    /// The model failed after its own retries.
    #[error("question {question_id}: model call failed: {source}")]
    Model {
        /// The question.
        question_id: String,
        /// The model error.
        source: ModelError,
    },
    /// The oracle could not judge.
    #[error("question {question_id}: {source}")]
    Judge {
        /// The question.
        question_id: String,
        /// The oracle error.
        source: JudgeError,
    },
    /// The memory failed.
    #[error("question {question_id}: {source}")]
    Memory {
        /// The question.
        question_id: String,
        /// The memory error.
        source: RepairMemoryError,
    },
}

/// The dependencies of an episode.
pub struct EpisodeDeps<'a> {
    /// The frozen chat model.
    pub model: &'a dyn ChatModel,
    /// The oracle.
    pub judge: &'a dyn Judge,
    /// The failure classifier.
    pub classifier: &'a dyn FailureClassifier,
    /// Where database hints come from (needed only when the aids ask for hints).
    pub database_aids: Option<&'a dyn DatabaseAids>,
}

/// Runs one episode at `position` and finalizes it into `memory`.
pub fn run_episode(
    settings: &EpisodeSettings,
    deps: &EpisodeDeps<'_>,
    memory: &mut dyn RepairMemory,
    question: &QuestionView,
    schema: &str,
    initial_sql: &str,
    position: usize,
) -> Result<EpisodeRecord, EpisodeError> {
    let judge_error = |source| EpisodeError::Judge {
        question_id: question.id.clone(),
        source,
    };
    let model_error = |source| EpisodeError::Model {
        question_id: question.id.clone(),
        source,
    };
    let memory_error = |source| EpisodeError::Memory {
        question_id: question.id.clone(),
        source,
    };
    let feedback = deps
        .judge
        .judge(&question.id, initial_sql)
        .map_err(judge_error)?;
    let mut views = vec![AttemptView {
        step: 0,
        sql: initial_sql.to_string(),
        status: feedback.status,
        error: feedback.error.clone(),
        failure: None,
    }];
    let mut records = vec![AttemptRecord {
        step: 0,
        sql: initial_sql.to_string(),
        status: feedback.status,
        error: feedback.error,
        failure_type: None,
        retrieved: Vec::new(),
        prompt_tokens: 0,
        completion_tokens: 0,
        calls: 0,
        aids: Default::default(),
    }];
    let mut reflections: Vec<String> = Vec::new();
    let mut stopped_early: Option<String> = None;
    let mut step = 0;
    while !views[views.len() - 1].status.is_correct() && step < settings.max_revisions {
        step += 1;
        let current = views.len() - 1;
        let failure = deps
            .classifier
            .classify(views[current].status, views[current].error.as_deref());
        views[current].failure = Some(failure);
        records[current].failure_type = Some(failure.failure_type);
        let hints = match deps.database_aids {
            Some(source) if !settings.aids.hints.is_empty() => source.hints(
                &question.db_id,
                &views[current].sql,
                views[current].status,
                views[current].error.as_deref(),
                settings.aids.hints,
            ),
            _ => Vec::new(),
        };
        records[current].aids.hints = hints.clone();
        let precedents = memory
            .retrieve(&RetrievalRequest {
                position,
                question,
                current_sql: &views[current].sql,
                status: views[current].status,
                error: views[current].error.as_deref(),
                failure_type: failure.failure_type,
                step,
            })
            .map_err(memory_error)?;
        let mut prompt_tokens = 0u64;
        let mut completion_tokens = 0u64;
        let mut calls = 0u32;
        if settings.reflect {
            let request = ChatRequest {
                messages: vec![ChatMessage::user(reflection_prompt(
                    question,
                    settings.benchmark,
                    &settings.dialect,
                    schema,
                    &views,
                ))],
                decoding: settings.decoding.clone(),
                prompt_version: reflection_version(settings.benchmark),
                tools: Vec::new(),
            };
            let reply = match deps.model.chat(&request) {
                Ok(reply) => reply,
                Err(ModelError::InvalidRequest(why)) => {
                    stopped_early = Some(format!("the model refused the reflection prompt: {why}"));
                    break;
                }
                Err(error) => return Err(model_error(error)),
            };
            prompt_tokens += u64::from(reply.prompt_tokens);
            completion_tokens += u64::from(reply.completion_tokens);
            calls += 1;
            reflections.push(reply.text.trim().to_string());
        }
        let text = repair_prompt(
            question,
            &RepairPromptInput {
                benchmark: settings.benchmark,
                dialect: &settings.dialect,
                schema,
                attempts: &views,
                precedents: &precedents,
                precedent_view: settings.aids.precedents,
                reflections: &reflections,
                hints: &hints,
                layout: settings.aids.layout,
            },
        );
        let mut decoding = settings.decoding.clone();
        if settings.aids.grammar {
            decoding.grammar = deps
                .database_aids
                .and_then(|aids| aids.sql_grammar(&question.db_id, settings.aids.grammar_aliases));
        }
        let mut request = ChatRequest {
            messages: vec![ChatMessage::user(text)],
            decoding,
            prompt_version: repair_version(settings.benchmark, settings.aids.layout),
            tools: Vec::new(),
        };
        // An invalid request (a prompt over the context window) would fail the same way on
        // every retry and on every resume, so it ends this episode's repairs rather than the
        // run: the episode finalizes unsolved with the attempts it has, and says why.
        let reply = match deps.model.chat(&request) {
            Ok(reply) => reply,
            Err(ModelError::InvalidRequest(why)) => {
                stopped_early = Some(format!("the model refused the repair prompt: {why}"));
                break;
            }
            Err(error) => return Err(model_error(error)),
        };
        prompt_tokens += u64::from(reply.prompt_tokens);
        completion_tokens += u64::from(reply.completion_tokens);
        calls += 1;
        let mut aids = AttemptAids::default();
        let mut extracted = extract_sql(&reply.text);
        if settings.aids.repeat_guard {
            if let Some(earlier) = extracted
                .as_ref()
                .ok()
                .and_then(|sql| earlier_attempt(&views, sql))
            {
                // Ask once more in the same step, as a follow-up turn: the first prompt stays
                // a cached prefix, and the note names the attempt that was repeated.
                aids.repeat_of = Some(views[earlier].step);
                request
                    .messages
                    .push(ChatMessage::assistant(reply.text.clone()));
                request
                    .messages
                    .push(ChatMessage::user(repeat_note(&views[earlier])));
                match deps.model.chat(&request) {
                    Ok(second) => {
                        prompt_tokens += u64::from(second.prompt_tokens);
                        completion_tokens += u64::from(second.completion_tokens);
                        calls += 1;
                        extracted = extract_sql(&second.text);
                    }
                    // The follow-up grew past the context: keep the first reply's repeat.
                    Err(ModelError::InvalidRequest(_)) => {}
                    Err(error) => return Err(model_error(error)),
                }
            }
        }
        // A reply without SQL is a failed attempt, not a crash: the empty query is judged
        // (and fails) and the extraction message is what the next prompt shows.
        let (sql, feedback) = match extracted {
            Ok(sql) => match earlier_attempt(&views, &sql).filter(|_| settings.aids.repeat_guard) {
                // Still a repeat: the oracle is deterministic, so its earlier verdict stands.
                Some(earlier) => {
                    aids.not_rejudged = true;
                    let feedback = Feedback {
                        status: views[earlier].status,
                        error: views[earlier].error.clone(),
                    };
                    (sql, feedback)
                }
                None => {
                    let feedback = deps.judge.judge(&question.id, &sql).map_err(judge_error)?;
                    (sql, feedback)
                }
            },
            Err(no_sql) => (
                String::new(),
                Feedback {
                    status: Status::ExecutionError,
                    error: Some(no_sql.to_string()),
                },
            ),
        };
        views.push(AttemptView {
            step,
            sql: sql.clone(),
            status: feedback.status,
            error: feedback.error.clone(),
            failure: None,
        });
        let stuck = aids.not_rejudged.then_some(aids.repeat_of).flatten();
        records.push(AttemptRecord {
            step,
            sql,
            status: feedback.status,
            error: feedback.error,
            failure_type: None,
            retrieved: precedents.iter().map(|p| p.id.clone()).collect(),
            prompt_tokens,
            completion_tokens,
            calls,
            aids,
        });
        // Told that its query repeats an earlier attempt, the model wrote it again. Greedy
        // decoding on the next step's prompt, which differs from this one by one more history
        // line, gives the same query (seen on every such episode of the calibration), so the
        // rest of K would buy nothing: the repairs end here, and the log says why.
        if let Some(earlier) = stuck {
            stopped_early = Some(format!(
                "the repeat guard: the model repeated attempt {earlier} again after being told"
            ));
            break;
        }
    }
    let solved = views[views.len() - 1].status.is_correct();
    let memory_written = if views.len() > 1 {
        // Initially correct questions create no memory: no corrective transition was seen.
        let last = views.len() - 1;
        if !solved {
            let failure = deps
                .classifier
                .classify(views[last].status, views[last].error.as_deref());
            views[last].failure = Some(failure);
            records[last].failure_type = Some(failure.failure_type);
        }
        memory
            .finalize(&EndedEpisode {
                position,
                question,
                schema,
                attempts: &views,
                solved,
            })
            .map_err(memory_error)?
    } else {
        None
    };
    Ok(EpisodeRecord {
        method: settings.method.clone(),
        seed: settings.seed,
        position,
        question_id: question.id.clone(),
        db_id: question.db_id.clone(),
        attempts: records,
        memory_written,
        stopped_early,
    })
}

/// The index of the earliest attempt whose SQL normalises to the same text as `sql`.
fn earlier_attempt(views: &[AttemptView], sql: &str) -> Option<usize> {
    let normalized = normalize_attempt_sql(sql);
    views
        .iter()
        .position(|view| normalize_attempt_sql(&view.sql) == normalized)
}

#[cfg(test)]
mod tests;
