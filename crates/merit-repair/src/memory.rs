//! The bridge between the repair episode and `merit-memory`.
//!
//! The episode speaks [`RepairMemory`]; `merit-memory` keeps its own causal types
//! (`Episode`, `EndedEpisode`, `MemoryView`). This adapter turns a retrieval request into
//! a view at the episode's stream position and query, and a finished episode into
//! `Episode::begin` → `record` … → `finalize` → `commit`, so every entry still enters memory
//! only through the memory crate's own finalization.

use crate::repair::{
    EndedEpisode, FailureClassifier, Precedent, PrecedentPolarity, RepairMemory, RepairMemoryError,
    RetrievalRequest,
};
use merit_core::failure::Classification;
use merit_core::model::Embedder;
use merit_core::{Feedback, Status};
use merit_memory::{
    Attempt, Episode, EpisodeSource, FailureType, FinalizePolicy, MemoryEntry, PersistentMemory,
    Polarity, RetrievalConfig, RetrievalQuery, StreamPos,
};
use std::path::Path;
use std::sync::Arc;

/// `merit-memory`'s classifier behind the episode's trait.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleClassifier;

impl FailureClassifier for RuleClassifier {
    fn classify(&self, status: Status, error: Option<&str>) -> Classification {
        // `None` only for a correct status, which the loop never classifies.
        merit_memory::classify(status, error).unwrap_or(Classification {
            failure_type: FailureType::Unknown,
            rule: merit_memory::classify::RULE_FALLBACK,
        })
    }
}

/// A persistent MERIT memory with one retrieval policy.
pub struct MeritMemory {
    memory: PersistentMemory,
    config: RetrievalConfig,
    policy: FinalizePolicy,
    embedder: Arc<dyn Embedder>,
    method: String,
}

impl MeritMemory {
    /// Opens (creating) the memory under `dir`.
    pub fn open(
        dir: &Path,
        config: RetrievalConfig,
        policy: FinalizePolicy,
        embedder: Arc<dyn Embedder>,
        method: &str,
    ) -> Result<MeritMemory, RepairMemoryError> {
        let (memory, _) = PersistentMemory::open(dir, embedder.as_ref())
            .map_err(|e| RepairMemoryError(e.to_string()))?;
        Ok(MeritMemory {
            memory,
            config,
            policy,
            embedder,
            method: method.to_string(),
        })
    }
}

/// The memory's retrieval query for a repair step's request.
pub fn retrieval_query(request: &RetrievalRequest<'_>) -> RetrievalQuery {
    RetrievalQuery {
        question: request.question.question.clone(),
        sql: request.current_sql.to_string(),
        status: request.status,
        error: request.error.map(str::to_string),
        failure_type: request.failure_type,
        db_id: request.question.db_id.clone(),
        step: request.step,
    }
}

/// A memory entry as the repair prompt shows it.
pub fn precedent_of(entry: &MemoryEntry) -> Precedent {
    Precedent {
        id: entry.id.to_string(),
        polarity: match entry.polarity {
            Polarity::Positive => PrecedentPolarity::Positive,
            Polarity::Negative => PrecedentPolarity::Negative,
        },
        failure_type: entry.failure_type,
        db_id: entry.provenance.db_id.clone(),
        question: entry.context.question.clone(),
        failing_sql: entry.context.failing_sql.clone(),
        status: entry.context.status.as_str().to_string(),
        error: entry.context.error.clone(),
        delta: entry.transition.delta.render(),
    }
}

/// A finished repair episode as the memory's own [`Episode`], every attempt recorded with the
/// label the loop classified it with (so the entry's failure type cannot disagree with the
/// prompt's and retrieval's); `None` for an episode without attempts. The caller finalizes it
/// under its policy and commits it.
pub fn memory_episode(
    episode: &EndedEpisode<'_>,
    method: &str,
    time: &str,
) -> Result<Option<Episode>, RepairMemoryError> {
    let question = episode.question;
    let source = EpisodeSource {
        query_id: question.id.clone(),
        db_id: question.db_id.clone(),
        question: question.question.clone(),
        evidence: question.evidence.clone(),
        schema: episode.schema.to_string(),
        stream_pos: StreamPos(episode.position as u64),
        method: method.to_string(),
        time: time.to_string(),
    };
    let attempt = |view: &crate::repair::AttemptView| {
        Attempt::classified(
            view.sql.clone(),
            Feedback {
                status: view.status,
                error: view.error.clone(),
            },
            view.failure,
        )
    };
    let mut attempts = episode.attempts.iter();
    let Some(first) = attempts.next() else {
        return Ok(None);
    };
    let mut open = Episode::begin(source, attempt(first));
    for view in attempts {
        open.record(attempt(view))
            .map_err(|e| RepairMemoryError(e.to_string()))?;
    }
    Ok(Some(open))
}

impl RepairMemory for MeritMemory {
    fn retrieve(
        &self,
        request: &RetrievalRequest<'_>,
    ) -> Result<Vec<Precedent>, RepairMemoryError> {
        let view = self
            .memory
            .memory()
            .view_at(StreamPos(request.position as u64), &request.question.id);
        let retrieval = view
            .retrieve(
                &retrieval_query(request),
                &self.config,
                self.embedder.as_ref(),
            )
            .map_err(|e| RepairMemoryError(e.to_string()))?;
        Ok(retrieval
            .precedents
            .iter()
            .map(|p| precedent_of(p.entry))
            .collect())
    }

    fn finalize(
        &mut self,
        episode: &EndedEpisode<'_>,
    ) -> Result<Option<String>, RepairMemoryError> {
        // No wall-clock time: identical inputs must give byte-identical memory files.
        let Some(open) = memory_episode(episode, &self.method, "")? else {
            return Ok(None);
        };
        let finalized = open.finalize(self.policy);
        self.memory
            .commit(finalized, self.embedder.as_ref())
            .map(|id| id.map(|id| id.to_string()))
            .map_err(|e| RepairMemoryError(e.to_string()))
    }
}
