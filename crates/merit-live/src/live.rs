//! One database's live memory: ask, feedback, finalization, retirement, all journaled.
//!
//! The journal (`live.jsonl` in the memory's folder) is the truth: every ask, every piece of
//! feedback, every finalization and every retirement is one fsync'd line, appended before the
//! call that caused it returns. The memory itself is derived: [`LiveMemory::open`] rebuilds it
//! by replaying the journal, then finalizes any episode whose feedback was acknowledged but
//! whose finalization was not written (a kill between the two). So acknowledged feedback is
//! never lost, and a restarted service has exactly the memory it had.
//!
//! Causality: an episode retrieves through a view at the next stream position, which holds
//! only entries of episodes finalized before that retrieval, never its own (positions are
//! assigned at finalization, in finalization order).

use crate::judge::ExecutionJudge;
use crate::signals::{Record, Signal, UserFeedback};
use crate::store::{FileJournal, JournalStore};
pub use crate::types::*;
use merit_core::model::{Decoding, Embedder};
use merit_core::{Benchmark, Status};
use merit_memory::config::Bm25Params;
use merit_memory::retrieve::bm25_corpus_scores;
use merit_memory::text::bm25_tokens;
use merit_memory::{FinalizePolicy, Memory, MemoryId, Polarity, StreamPos};
use merit_repair::extract::extract_sql;
use merit_repair::memory::{memory_episode, precedent_of, retrieval_query, RuleClassifier};
use merit_repair::prompts::initial::{dialect_name, initial_request, InitialTask};
use merit_repair::repair::{
    run_episode, AttemptView, EndedEpisode, EpisodeDeps, EpisodeSettings, FailureClassifier,
    Precedent, QuestionView, RepairMemory, RepairMemoryError, RetrievalRequest,
};
use merit_sql::{Database, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The journal's file name inside a live memory's folder.
pub const JOURNAL_FILE: &str = "live.jsonl";

/// The method name live entries carry in their provenance.
pub const LIVE_METHOD: &str = "merit-live";

#[derive(Debug, Clone)]
struct EntryInfo {
    episode: u64,
    signal: Signal,
    record: Record,
    retired_because: Option<String>,
}

struct Pending {
    asked: Asked,
    feedback: Option<(UserFeedback, Option<LiveAttempt>)>,
}

struct State {
    memory: Memory,
    journal: Box<dyn JournalStore>,
    /// Journal events applied to this state (the next event's number).
    applied: u64,
    pending: BTreeMap<u64, Pending>,
    finalized: BTreeSet<u64>,
    entries: BTreeMap<u64, EntryInfo>,
    next_episode: u64,
    next_position: u64,
    stats: LiveStats,
    /// One point per finalized episode, in finalization order.
    timeline: Vec<TimelinePoint>,
    /// Set when a journal write failed after the memory changed: the memory is ahead of its
    /// journal, and every call is refused until the memory is opened again.
    broken: Option<String>,
}

/// One database's live memory (see the module docs). Shared between threads: asks run their
/// model calls without holding the lock; retrievals, finalizations and journal writes take it.
pub struct LiveMemory {
    db_id: String,
    path: PathBuf,
    embedder: Arc<dyn Embedder>,
    config: LiveConfig,
    state: Mutex<State>,
}

/// The state with the journal claimed for one decision; released when dropped.
struct Claimed<'a> {
    state: MutexGuard<'a, State>,
}

impl std::ops::Deref for Claimed<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Claimed<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        // A release that fails leaves a lock its connection holds until it closes; nothing
        // written depends on it.
        let _ = self.state.journal.release();
    }
}

fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Integer(i) => serde_json::Value::from(*i),
        Value::Real(x) => serde_json::Number::from_f64(*x)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| serde_json::Value::String(x.to_string())),
        Value::Text(_) => serde_json::Value::String(value.display()),
        Value::Blob(bytes) => serde_json::Value::String(format!("<blob of {} bytes>", bytes.len())),
    }
}

fn question_id(episode: u64) -> String {
    format!("live-{episode}")
}

/// The retrieval side of an ask: the live memory's current view, recording what it hands out.
struct Retriever<'a> {
    live: &'a LiveMemory,
    used: RefCell<Vec<UsedMemory>>,
}

impl RepairMemory for Retriever<'_> {
    fn retrieve(
        &self,
        request: &RetrievalRequest<'_>,
    ) -> Result<Vec<Precedent>, RepairMemoryError> {
        if !self.live.config.use_memory {
            return Ok(Vec::new());
        }
        let state = self.live.refreshed();
        let view = state
            .memory
            .view_at(StreamPos(state.next_position), &request.question.id);
        let retrieval = view
            .retrieve(
                &retrieval_query(request),
                &self.live.config.retrieval,
                self.live.embedder.as_ref(),
            )
            .map_err(|e| RepairMemoryError(e.to_string()))?;
        let mut used = self.used.borrow_mut();
        Ok(retrieval
            .precedents
            .iter()
            .map(|p| {
                used.push(UsedMemory {
                    id: p.entry.id.0,
                    polarity: p.entry.polarity,
                    score: p.score.score,
                    cosine: p.score.dense,
                    step: request.step,
                });
                precedent_of(p.entry)
            })
            .collect())
    }

    fn finalize(
        &mut self,
        _episode: &EndedEpisode<'_>,
    ) -> Result<Option<String>, RepairMemoryError> {
        // Live episodes are finalized by feedback or the wait, not when the loop ends.
        Ok(None)
    }
}

impl LiveMemory {
    /// Opens (creating) the live memory of database `db_id` in `dir`, replaying its journal
    /// file ([`JOURNAL_FILE`]).
    pub fn open(
        dir: &Path,
        db_id: &str,
        embedder: Arc<dyn Embedder>,
        config: LiveConfig,
    ) -> Result<(LiveMemory, OpenReport), LiveError> {
        let journal = FileJournal::open(&dir.join(JOURNAL_FILE))?;
        LiveMemory::open_with_store(Box::new(journal), db_id, embedder, config)
    }

    /// Opens the live memory of database `db_id` whose journal is `journal` (a file, or a
    /// table that several replicas share: see [`crate::store`]), replaying it.
    pub fn open_with_store(
        journal: Box<dyn JournalStore>,
        db_id: &str,
        embedder: Arc<dyn Embedder>,
        config: LiveConfig,
    ) -> Result<(LiveMemory, OpenReport), LiveError> {
        let mut report = OpenReport {
            events: 0,
            torn_bytes: journal.torn_bytes(),
            finalized_on_open: 0,
        };
        let live = LiveMemory {
            db_id: db_id.to_string(),
            path: PathBuf::from(journal.describe()),
            embedder: Arc::clone(&embedder),
            config,
            state: Mutex::new(State {
                memory: Memory::for_embedder(embedder.as_ref()),
                journal,
                applied: 0,
                pending: BTreeMap::new(),
                finalized: BTreeSet::new(),
                entries: BTreeMap::new(),
                next_episode: 0,
                next_position: 0,
                stats: LiveStats::default(),
                timeline: Vec::new(),
                broken: None,
            }),
        };
        {
            // Claimed: replaying and repairing what a kill left is a decision like any other.
            let mut state = live.lock_usable()?;
            report.events = state.applied as usize;
            // Acknowledged feedback whose finalization was not written: finalize it now.
            let waiting: Vec<u64> = state
                .pending
                .iter()
                .filter(|(_, p)| p.feedback.is_some())
                .map(|(&episode, _)| episode)
                .collect();
            for episode in waiting {
                let time = state.pending[&episode].asked.time_ms;
                live.finalize_locked(&mut state, episode, time)?;
                report.finalized_on_open += 1;
            }
            // Retirements the policy decided but a kill kept from the journal.
            let due: Vec<u64> = state
                .entries
                .iter()
                .filter(|(_, info)| {
                    info.retired_because.is_none() && live.config.retirement.retires(info.record)
                })
                .map(|(&id, _)| id)
                .collect();
            for id in due {
                live.retire_locked(&mut state, id, true, "retirement policy (on open)", 0)?;
            }
        }
        Ok((live, report))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies the journal's events this state has not seen (another replica's, or all of
    /// them at open).
    fn catch_up(&self, state: &mut State) -> Result<(), LiveError> {
        let from = state.applied;
        for event in state.journal.read_from(from)? {
            self.replay(state, event)?;
            state.applied += 1;
        }
        Ok(())
    }

    /// The state for reading, caught up with the journal as far as it can be read now (a
    /// journal that cannot be read leaves the last state read; writers report the error).
    fn refreshed(&self) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        if state.broken.is_none() {
            let _ = self.catch_up(&mut state);
        }
        state
    }

    /// The state for a decision that writes: the journal claimed for this writer alone and
    /// caught up, unless a failed journal write left the state ahead of its journal.
    fn lock_usable(&self) -> Result<Claimed<'_>, LiveError> {
        let mut state = self.lock();
        if let Some(reason) = &state.broken {
            return Err(LiveError::Broken(reason.clone()));
        }
        state.journal.claim()?;
        let mut claimed = Claimed { state };
        self.catch_up(&mut claimed)?;
        Ok(claimed)
    }

    fn corrupt(&self, message: String) -> LiveError {
        LiveError::Corrupt {
            path: self.path.clone(),
            message,
        }
    }

    /// Applies one journal event to the state (no journal writes).
    fn replay(&self, state: &mut State, event: LiveEvent) -> Result<(), LiveError> {
        match event {
            LiveEvent::Asked(asked) => {
                let episode = asked.episode;
                if state.pending.contains_key(&episode) || state.finalized.contains(&episode) {
                    return Err(self.corrupt(format!("episode {episode} is asked twice")));
                }
                state.next_episode = state.next_episode.max(episode + 1);
                count_ask(&mut state.stats, &asked);
                state.pending.insert(
                    episode,
                    Pending {
                        asked,
                        feedback: None,
                    },
                );
            }
            LiveEvent::Feedback {
                episode,
                feedback,
                correction,
                ..
            } => {
                let pending = state.pending.get_mut(&episode).ok_or_else(|| {
                    self.corrupt(format!("feedback for episode {episode}, which is not open"))
                })?;
                pending.feedback = Some((feedback, correction));
            }
            LiveEvent::Finalized {
                episode,
                position,
                signal,
                memory,
                ..
            } => {
                if position != state.next_position {
                    return Err(self.corrupt(format!(
                        "episode {episode} finalized at position {position}, expected {}",
                        state.next_position
                    )));
                }
                // The journal records what the policy decided when the episode was
                // finalized; replay follows it, so a memory reopened under another
                // `negative_memory` setting rebuilds the same entries (the setting applies
                // to what is finalized from then on).
                let written = self.commit_locked(state, episode, memory.is_some())?;
                if written.memory != memory || written.signal != signal {
                    return Err(self.corrupt(format!(
                        "replaying episode {episode} gave memory {:?} ({:?}), the journal says \
                         {memory:?} ({signal:?})",
                        written.memory, written.signal
                    )));
                }
            }
            LiveEvent::Retired { memory, reason, .. } => {
                state.memory.set_retired(MemoryId(memory), true)?;
                let info = state
                    .entries
                    .get_mut(&memory)
                    .ok_or(LiveError::UnknownMemory(memory))?;
                info.retired_because = Some(reason);
                state.stats.retired += 1;
            }
            LiveEvent::Restored { memory, .. } => {
                state.memory.set_retired(MemoryId(memory), false)?;
                let info = state
                    .entries
                    .get_mut(&memory)
                    .ok_or(LiveError::UnknownMemory(memory))?;
                info.retired_because = None;
                info.record = Record::default();
                state.stats.retired = state.stats.retired.saturating_sub(1);
            }
        }
        Ok(())
    }

    fn append(&self, state: &mut State, event: &LiveEvent) -> Result<(), LiveError> {
        let at = state.applied;
        state.journal.append_at(at, event)?;
        state.applied += 1;
        Ok(())
    }

    /// Answers `request`: the initial SQL (the caller's or the model's), then repairs from
    /// execution feedback with precedents from this memory, journaled before it returns.
    pub fn ask(
        &self,
        request: &AskRequest<'_>,
        deps: &LiveDeps<'_>,
        now_ms: u64,
    ) -> Result<Answer, LiveError> {
        // The id needs no claim: the store hands out each id once (a file journal counts under
        // this mutex; a shared one atomically on its server).
        let episode = {
            let mut state = self.lock();
            if let Some(reason) = &state.broken {
                return Err(LiveError::Broken(reason.clone()));
            }
            let local = state.next_episode;
            let episode = state.journal.allocate_episode(local)?;
            state.next_episode = episode + 1;
            episode
        };
        let benchmark = if request.evidence.trim().is_empty() {
            Benchmark::Spider
        } else {
            Benchmark::Bird
        };
        let decoding = Decoding {
            max_tokens: self.config.max_tokens,
            ..Decoding::default()
        };
        let initial_sql = match request.initial_sql {
            Some(sql) => sql.to_string(),
            None => {
                let task = InitialTask {
                    benchmark,
                    dialect: deps.database.dialect(),
                    schema: request.schema,
                    question: request.question,
                    evidence: (benchmark == Benchmark::Bird).then_some(request.evidence),
                };
                let reply = deps
                    .initial_model
                    .unwrap_or(deps.model)
                    .chat(&initial_request(&task, decoding.clone()))
                    .map_err(|e| LiveError::Model(e.to_string()))?;
                extract_sql(&reply.text).unwrap_or_default()
            }
        };
        let judge = ExecutionJudge::new(deps.database, self.config.limits);
        let settings = EpisodeSettings {
            benchmark,
            dialect: dialect_name(deps.database.dialect()).to_string(),
            max_revisions: self.config.k,
            decoding,
            reflect: false,
            method: LIVE_METHOD.to_string(),
            seed: 0,
            aids: self.config.aids,
        };
        let episode_deps = EpisodeDeps {
            model: deps.model,
            judge: &judge,
            classifier: &RuleClassifier,
            database_aids: deps.aids,
        };
        let mut retriever = Retriever {
            live: self,
            used: RefCell::new(Vec::new()),
        };
        let question = QuestionView {
            id: question_id(episode),
            db_id: request.database.unwrap_or(&self.db_id).to_string(),
            question: request.question.to_string(),
            evidence: request.evidence.to_string(),
        };
        let record = run_episode(
            &settings,
            &episode_deps,
            &mut retriever,
            &question,
            request.schema,
            &initial_sql,
            0,
        )
        .map_err(|e| LiveError::Repair(e.to_string()))?;
        let attempts: Vec<LiveAttempt> = record
            .attempts
            .iter()
            .map(|a| LiveAttempt {
                step: a.step,
                sql: a.sql.clone(),
                status: a.status,
                error: a.error.clone(),
                failure_type: a.failure_type,
            })
            .collect();
        let asked = Asked {
            episode,
            time_ms: now_ms,
            database: request
                .database
                .filter(|db| *db != self.db_id)
                .unwrap_or_default()
                .to_string(),
            question: request.question.to_string(),
            evidence: request.evidence.to_string(),
            schema: request.schema.to_string(),
            attempts,
            used: retriever.used.into_inner(),
        };
        let answer = asked.answer().clone();
        let result = answer
            .status
            .is_correct()
            .then(|| judge.result_of(&answer.sql))
            .flatten();
        {
            let mut state = self.lock_usable()?;
            self.append(&mut state, &LiveEvent::Asked(asked.clone()))?;
            count_ask(&mut state.stats, &asked);
            state.pending.insert(
                episode,
                Pending {
                    asked: asked.clone(),
                    feedback: None,
                },
            );
        }
        let (columns, rows, truncated) = match result {
            Some(result) => (
                result.columns,
                result
                    .rows
                    .iter()
                    .map(|row| row.iter().map(to_json).collect())
                    .collect(),
                result.truncated,
            ),
            None => (Vec::new(), Vec::new(), false),
        };
        Ok(Answer {
            episode,
            sql: answer.sql.clone(),
            executed: answer.status.is_correct(),
            error: answer.error.clone(),
            columns,
            rows,
            truncated,
            attempts: asked.attempts,
            memories_used: asked.used,
        })
    }

    /// Records the user's feedback on an answer and finalizes its episode. A correction must
    /// execute on `database`; confirming an answer that did not execute is refused. Returns
    /// once the feedback and the finalization are on disk.
    pub fn feedback(
        &self,
        episode: u64,
        feedback: UserFeedback,
        database: &dyn Database,
        now_ms: u64,
    ) -> Result<Finalization, LiveError> {
        // The correction runs outside the lock: it may take the whole time limit.
        let correction = match &feedback {
            UserFeedback::Correct { sql } => {
                let judge = ExecutionJudge::new(database, self.config.limits);
                let result = judge.execute(sql);
                if !result.status.is_correct() {
                    return Err(LiveError::Feedback(format!(
                        "the corrected SQL does not execute: {}",
                        result.error.unwrap_or_default()
                    )));
                }
                Some(LiveAttempt {
                    step: 0,
                    sql: sql.clone(),
                    status: Status::Correct,
                    error: None,
                    failure_type: None,
                })
            }
            _ => None,
        };
        let mut state = self.lock_usable()?;
        let pending = match state.pending.get(&episode) {
            Some(pending) => pending,
            None if state.finalized.contains(&episode) => {
                return Err(LiveError::AlreadyFinalized(episode))
            }
            None => return Err(LiveError::UnknownEpisode(episode)),
        };
        if feedback == UserFeedback::Confirm && !pending.asked.executed() {
            return Err(LiveError::Feedback(format!(
                "episode {episode}'s answer did not execute, so it cannot be confirmed; reject \
                 it or send a correction"
            )));
        }
        let correction = correction.map(|mut c| {
            c.step = pending.asked.answer().step + 1;
            c
        });
        self.append(
            &mut state,
            &LiveEvent::Feedback {
                episode,
                time_ms: now_ms,
                feedback: feedback.clone(),
                correction: correction.clone(),
            },
        )?;
        if let Some(pending) = state.pending.get_mut(&episode) {
            pending.feedback = Some((feedback, correction));
        }
        self.finalize_locked(&mut state, episode, now_ms)
    }

    /// Finalizes every answer that has waited longer than the configured wait without
    /// feedback, oldest first.
    pub fn finalize_expired(&self, now_ms: u64) -> Result<Vec<Finalization>, LiveError> {
        let mut state = self.lock_usable()?;
        let due: Vec<u64> = state
            .pending
            .iter()
            .filter(|(_, p)| {
                p.feedback.is_none()
                    && now_ms.saturating_sub(p.asked.time_ms) >= self.config.finalize_after_ms
            })
            .map(|(&episode, _)| episode)
            .collect();
        due.into_iter()
            .map(|episode| self.finalize_locked(&mut state, episode, now_ms))
            .collect()
    }

    /// Commits `episode` into memory, journals the finalization, then applies the retirement
    /// policy to the memories the episode used. The memory is derived from the journal: when
    /// the journal write fails the memory is ahead of it, so this memory refuses every later
    /// call until it is opened again (which rebuilds it from the journal and finalizes the
    /// episode anew from its acknowledged feedback).
    fn finalize_locked(
        &self,
        state: &mut State,
        episode: u64,
        now_ms: u64,
    ) -> Result<Finalization, LiveError> {
        let position = state.next_position;
        let committed = self.commit_locked(state, episode, self.config.negative_memory)?;
        let written = self.append(
            state,
            &LiveEvent::Finalized {
                episode,
                time_ms: now_ms,
                position,
                signal: committed.signal,
                memory: committed.memory,
            },
        );
        if let Err(error) = written {
            state.broken = Some(error.to_string());
            return Err(error);
        }
        let polarity = committed.memory.and_then(|id| {
            state
                .memory
                .view_all()
                .get(MemoryId(id))
                .map(|e| e.polarity)
        });
        let mut finalization = Finalization {
            episode,
            signal: committed.signal,
            memory: committed.memory,
            polarity,
            retired: Vec::new(),
        };
        let used: BTreeSet<u64> = committed.used.iter().map(|u| u.id).collect();
        for id in used {
            let due = state.entries.get(&id).is_some_and(|info| {
                info.retired_because.is_none() && self.config.retirement.retires(info.record)
            });
            if due {
                let reason = state.entries.get(&id).map_or(String::new(), |info| {
                    format!(
                        "retrieved into {} rejected answers and {} confirmed ones since it was \
                         committed or restored (last: episode {episode})",
                        info.record.rejected, info.record.confirmed
                    )
                });
                self.retire_locked(state, id, true, &reason, now_ms)?;
                finalization.retired.push(id);
            }
        }
        Ok(finalization)
    }

    /// Commits a pending episode into memory at the next position and updates the records
    /// of the memories it used. Shared by live finalization and journal replay. An unsolved
    /// episode leaves a negative entry only when `keep_negative`.
    fn commit_locked(
        &self,
        state: &mut State,
        episode: u64,
        keep_negative: bool,
    ) -> Result<Committed, LiveError> {
        let pending = state
            .pending
            .remove(&episode)
            .ok_or(LiveError::UnknownEpisode(episode))?;
        let position = state.next_position;
        let (attempts, signal) = conclude(&pending);
        let database = if pending.asked.database.is_empty() {
            self.db_id.clone()
        } else {
            pending.asked.database.clone()
        };
        let question = QuestionView {
            id: question_id(episode),
            db_id: database,
            question: pending.asked.question.clone(),
            evidence: pending.asked.evidence.clone(),
        };
        let views: Vec<AttemptView> = attempts
            .iter()
            .map(|a| AttemptView {
                step: a.step,
                sql: a.sql.clone(),
                status: a.status,
                error: a.error.clone(),
                failure: (!a.status.is_correct())
                    .then(|| RuleClassifier.classify(a.status, a.error.as_deref())),
            })
            .collect();
        let solved = views.last().is_some_and(|v| v.status.is_correct());
        let finalized = EndedEpisode {
            position: position as usize,
            question: &question,
            schema: &pending.asked.schema,
            attempts: &views,
            solved,
        };
        let memory = match (signal, memory_episode(&finalized, LIVE_METHOD, "")) {
            (Some(_), Ok(Some(open))) => {
                let policy = if keep_negative {
                    FinalizePolicy::PositiveAndNegative
                } else {
                    FinalizePolicy::PositiveOnly
                };
                let finalized = open.finalize(policy);
                state.memory.commit(finalized, self.embedder.as_ref())?
            }
            (_, Err(error)) => return Err(LiveError::Repair(error.to_string())),
            _ => None,
        };
        let last = state.timeline.last().copied().unwrap_or_default();
        let (confirmed, with_feedback) = match &pending.feedback {
            Some((UserFeedback::Confirm, _)) => (1, 1),
            Some(_) => (0, 1),
            None => (0, 0),
        };
        state.next_position += 1;
        state.finalized.insert(episode);
        let signal_name = signal.map_or("none".to_string(), |s| {
            serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        });
        *state.stats.finalized.entry(signal_name).or_default() += 1;
        if let (Some(id), Some(signal)) = (memory, signal) {
            let polarity = state
                .memory
                .view_all()
                .get(id)
                .map_or(Polarity::Positive, |e| e.polarity);
            *state
                .stats
                .memories
                .entry(format!("{polarity:?}").to_lowercase())
                .or_default() += 1;
            state.entries.insert(
                id.0,
                EntryInfo {
                    episode,
                    signal,
                    record: Record::default(),
                    retired_because: None,
                },
            );
        }
        // The memories this answer was built with learn how it fared.
        let used: BTreeSet<u64> = pending.asked.used.iter().map(|u| u.id).collect();
        for id in &used {
            if let Some(info) = state.entries.get_mut(id) {
                match signal {
                    Some(s) if s.answer_was_rejected() => info.record.rejected += 1,
                    Some(Signal::UserConfirmed) => info.record.confirmed += 1,
                    _ => {}
                }
            }
        }
        state.stats.pending = state.pending.len() as u64;
        state.timeline.push(TimelinePoint {
            position,
            episode,
            memories: state.entries.len() as u64,
            confirmed: last.confirmed + confirmed,
            with_feedback: last.with_feedback + with_feedback,
        });
        Ok(Committed {
            memory: memory.map(|id| id.0),
            signal,
            used: pending.asked.used,
        })
    }

    fn retire_locked(
        &self,
        state: &mut State,
        id: u64,
        automatic: bool,
        reason: &str,
        now_ms: u64,
    ) -> Result<(), LiveError> {
        if !state.entries.contains_key(&id) {
            return Err(LiveError::UnknownMemory(id));
        }
        self.append(
            state,
            &LiveEvent::Retired {
                memory: id,
                time_ms: now_ms,
                automatic,
                reason: reason.to_string(),
            },
        )?;
        state.memory.set_retired(MemoryId(id), true)?;
        if let Some(info) = state.entries.get_mut(&id) {
            info.retired_because = Some(reason.to_string());
        }
        state.stats.retired += 1;
        Ok(())
    }

    /// Takes memory `id` out of use (an operator's decision, logged with `reason`). Retiring
    /// a retired memory changes nothing.
    pub fn retire(&self, id: u64, reason: &str, now_ms: u64) -> Result<MemoryInfo, LiveError> {
        let mut state = self.lock_usable()?;
        let retired = state
            .entries
            .get(&id)
            .ok_or(LiveError::UnknownMemory(id))?
            .retired_because
            .is_some();
        if !retired {
            self.retire_locked(&mut state, id, false, reason, now_ms)?;
        }
        info_of(&state, id).ok_or(LiveError::UnknownMemory(id))
    }

    /// Brings a retired memory back, with a fresh record. Restoring an active memory changes
    /// nothing.
    pub fn restore(&self, id: u64, now_ms: u64) -> Result<MemoryInfo, LiveError> {
        let mut state = self.lock_usable()?;
        let retired = state
            .entries
            .get(&id)
            .ok_or(LiveError::UnknownMemory(id))?
            .retired_because
            .is_some();
        if retired {
            self.append(
                &mut state,
                &LiveEvent::Restored {
                    memory: id,
                    time_ms: now_ms,
                },
            )?;
            state.memory.set_retired(MemoryId(id), false)?;
            if let Some(info) = state.entries.get_mut(&id) {
                info.retired_because = None;
                info.record = Record::default();
            }
            state.stats.retired = state.stats.retired.saturating_sub(1);
        }
        info_of(&state, id).ok_or(LiveError::UnknownMemory(id))
    }

    /// Every memory, oldest first.
    pub fn memories(&self) -> Vec<MemoryInfo> {
        let state = self.refreshed();
        state
            .entries
            .keys()
            .filter_map(|&id| info_of(&state, id))
            .collect()
    }

    /// The memories that match `query` best, by BM25 over each memory's question, failing
    /// SQL, DBMS error and revised SQL (the repair memory's tokenizer and formula, with these
    /// memories as the collection), best first, ties by id; memories that share no term with
    /// the query are left out. What a person looking for "the fix for that join" searches.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(f64, MemoryInfo)> {
        let memories = self.memories();
        let documents: Vec<Vec<String>> = memories
            .iter()
            .map(|m| {
                bm25_tokens(&format!(
                    "{} {} {} {}",
                    m.question,
                    m.failing_sql,
                    m.error.as_deref().unwrap_or(""),
                    m.revised_sql
                ))
            })
            .collect();
        let terms = bm25_tokens(query);
        let (scores, _) = bm25_corpus_scores(&terms, &documents, Bm25Params::default());
        let mut found: Vec<(f64, MemoryInfo)> = scores
            .into_iter()
            .zip(memories)
            .filter(|(score, _)| *score > 0.0)
            .collect();
        found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
        found.truncate(limit);
        found
    }

    /// One memory.
    pub fn memory(&self, id: u64) -> Option<MemoryInfo> {
        info_of(&self.refreshed(), id)
    }

    /// One point per finalized episode: memory growth and the users' verdicts over time.
    pub fn timeline(&self) -> Vec<TimelinePoint> {
        self.refreshed().timeline.clone()
    }

    /// The counts.
    pub fn stats(&self) -> LiveStats {
        let state = self.refreshed();
        let mut stats = state.stats.clone();
        stats.pending = state.pending.len() as u64;
        stats
    }

    /// The database this memory belongs to.
    pub fn db_id(&self) -> &str {
        &self.db_id
    }
}

struct Committed {
    memory: Option<u64>,
    signal: Option<Signal>,
    used: Vec<UsedMemory>,
}

fn count_ask(stats: &mut LiveStats, asked: &Asked) {
    stats.asked += 1;
    stats.executed += u64::from(asked.executed());
    stats.repaired_attempts += u64::from(asked.attempts.len() > 1);
}

fn info_of(state: &State, id: u64) -> Option<MemoryInfo> {
    let info = state.entries.get(&id)?;
    let entry = state.memory.view_all().get(MemoryId(id))?;
    Some(MemoryInfo {
        id,
        polarity: entry.polarity,
        failure_type: entry.failure_type,
        question: entry.context.question.clone(),
        failing_sql: entry.context.failing_sql.clone(),
        error: entry.context.error.clone(),
        revised_sql: entry.transition.revised_sql.clone(),
        delta: entry.transition.delta.render(),
        episode: info.episode,
        signal: info.signal,
        confidence: info.signal.confidence(),
        record: info.record,
        retired: info.retired_because.is_some(),
        retired_because: info.retired_because.clone(),
    })
}

/// The attempts an episode enters memory with, and the signal that decided it (see
/// [`crate::signals`]): the user's word rewrites the status of the answer (rejected: a result
/// mismatch) and a correction becomes the last attempt; without feedback an executing answer
/// stands.
fn conclude(pending: &Pending) -> (Vec<LiveAttempt>, Option<Signal>) {
    let mut attempts = pending.asked.attempts.clone();
    let executed = pending.asked.executed();
    let reject_answer = |attempts: &mut Vec<LiveAttempt>| {
        if let Some(last) = attempts.last_mut() {
            if last.status.is_correct() {
                last.status = Status::DenotationMismatch;
                last.error = None;
            }
        }
    };
    let repaired = attempts.len() >= 2;
    let signal = match &pending.feedback {
        Some((UserFeedback::Confirm, _)) => Some(Signal::UserConfirmed),
        Some((UserFeedback::Reject, _)) => {
            reject_answer(&mut attempts);
            Some(Signal::UserRejected)
        }
        Some((UserFeedback::Correct { .. }, correction)) => {
            reject_answer(&mut attempts);
            attempts.extend(correction.iter().cloned());
            Some(Signal::UserCorrected)
        }
        None if executed => repaired.then_some(Signal::ExecutedUnconfirmed),
        None => Some(Signal::ExecutionFailed),
    };
    (attempts, signal)
}
