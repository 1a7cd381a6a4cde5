//! Repair episodes as the memory sees them: an ordered list of attempts with their oracle
//! feedback, finalized once, then turned into at most one memory entry.
//!
//! The only way into memory is [`Episode::finalize`] followed by [`crate::Memory::commit`].
//! Nothing here accepts gold SQL or gold rows: [`EpisodeSource::from_question`] copies the
//! question's visible fields and leaves `gold_sql` behind.

use crate::classify::{classify_feedback, Classification};
use crate::delta::sql_delta;
use crate::entry::{Polarity, StreamPos};
use crate::retrieve::RetrievalQuery;
use merit_core::{Feedback, Question};
use serde::{Deserialize, Serialize};

/// What the memory records about the question behind an episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeSource {
    /// Question identifier; memories of the same query are never retrieved for it.
    pub query_id: String,
    /// Database of the question.
    pub db_id: String,
    /// The natural-language question.
    pub question: String,
    /// BIRD's evidence (empty for Spider).
    pub evidence: String,
    /// The schema text the episode showed the model.
    pub schema: String,
    /// Position of the episode in the stream.
    pub stream_pos: StreamPos,
    /// The repair method, e.g. `merit`.
    pub method: String,
    /// A caller-supplied timestamp stored in provenance.
    pub time: String,
}

impl EpisodeSource {
    /// The source of an episode for `question`; its gold SQL is not copied.
    pub fn from_question(
        question: &Question,
        schema: impl Into<String>,
        stream_pos: StreamPos,
        method: impl Into<String>,
        time: impl Into<String>,
    ) -> EpisodeSource {
        EpisodeSource {
            query_id: question.id.clone(),
            db_id: question.db_id.clone(),
            question: question.question.clone(),
            evidence: question.evidence.clone(),
            schema: schema.into(),
            stream_pos,
            method: method.into(),
            time: time.into(),
        }
    }
}

/// One SQL attempt, the oracle's verdict on it, and the classifier's label for it.
///
/// The label is computed once, when the attempt is made ([`Attempt::new`] runs
/// [`crate::classify()`]; a caller that already classified the attempt, as the repair loop
/// does before its retrieval, hands its label over with [`Attempt::classified`]), and it is
/// this label that retrieval and the memory entry use: nothing classifies the attempt again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The SQL that was judged.
    pub sql: String,
    /// Status and DBMS error text.
    pub feedback: Feedback,
    /// The classifier's label; `None` for a correct attempt.
    failure: Option<Classification>,
}

impl Attempt {
    /// An attempt with its feedback, classified here.
    pub fn new(sql: impl Into<String>, feedback: Feedback) -> Attempt {
        let failure = classify_feedback(&feedback);
        Attempt {
            sql: sql.into(),
            feedback,
            failure,
        }
    }

    /// An attempt the caller has already classified (`failure` is `None` for a correct one;
    /// a correct attempt never carries a label, whatever is passed).
    pub fn classified(
        sql: impl Into<String>,
        feedback: Feedback,
        failure: Option<Classification>,
    ) -> Attempt {
        let failure = if feedback.status.is_correct() {
            None
        } else {
            failure.or_else(|| classify_feedback(&feedback))
        };
        Attempt {
            sql: sql.into(),
            feedback,
            failure,
        }
    }

    /// The classifier's label; `None` for a correct attempt.
    pub fn failure(&self) -> Option<Classification> {
        self.failure
    }
}

/// Why an attempt could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpisodeError {
    /// The episode already has a correct attempt; it ends there.
    #[error("episode {query_id} is already solved; no further attempt can be recorded")]
    AlreadySolved {
        /// The query of the episode.
        query_id: String,
    },
}

/// Which entries finalization may produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalizePolicy {
    /// A positive entry for a solved episode, a negative one for an unsolved one (MERIT).
    #[default]
    PositiveAndNegative,
    /// Only positive entries (Dynamic RAG never stores failed directions).
    PositiveOnly,
}

/// An open repair episode at one stream position. Its attempts are local: they are not in
/// any memory and no retrieval can see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    source: EpisodeSource,
    attempts: Vec<Attempt>,
}

impl Episode {
    /// Opens an episode with its shared initial prediction y⁽⁰⁾.
    pub fn begin(source: EpisodeSource, initial: Attempt) -> Episode {
        Episode {
            source,
            attempts: vec![initial],
        }
    }

    /// The question behind the episode.
    pub fn source(&self) -> &EpisodeSource {
        &self.source
    }

    /// The local history H⁽ᵏ⁾ = (y⁽⁰⁾, …, y⁽ᵏ⁾), oldest first.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The latest attempt.
    pub fn current(&self) -> &Attempt {
        // `begin` puts one attempt in and nothing takes attempts out.
        &self.attempts[self.attempts.len() - 1]
    }

    /// Number of revisions after the initial SQL (k).
    pub fn revisions(&self) -> usize {
        self.attempts.len() - 1
    }

    /// `true` once an attempt is correct.
    pub fn is_solved(&self) -> bool {
        self.current().feedback.status.is_correct()
    }

    /// The classifier's label for the current attempt; `None` when it is correct.
    pub fn current_failure(&self) -> Option<Classification> {
        self.current().failure()
    }

    /// Appends revision y⁽ᵏ⁺¹⁾.
    pub fn record(&mut self, revision: Attempt) -> Result<(), EpisodeError> {
        if self.is_solved() {
            return Err(EpisodeError::AlreadySolved {
                query_id: self.source.query_id.clone(),
            });
        }
        self.attempts.push(revision);
        Ok(())
    }

    /// The retrieval request for the next revision, built from the current attempt; `None`
    /// when the episode is solved.
    pub fn retrieval_query(&self) -> Option<RetrievalQuery> {
        let classification = self.current_failure()?;
        let current = self.current();
        Some(RetrievalQuery {
            question: self.source.question.clone(),
            sql: current.sql.clone(),
            status: current.feedback.status,
            error: current.feedback.error.clone(),
            failure_type: classification.failure_type,
            db_id: self.source.db_id.clone(),
            step: self.attempts.len() as u32,
        })
    }

    /// Ends the episode. A solved episode yields its final transition y⁽ᵏ*⁻¹⁾ → y⁽ᵏ*⁾ as a
    /// positive candidate; an unsolved one yields its last *direction* as a negative candidate
    /// (unless `policy` forbids negatives): the last transition y⁽ⁱ⁻¹⁾ → y⁽ⁱ⁾ whose Δ is not
    /// empty; an initially correct episode, a never-revised one, or one whose every revision
    /// left the query unchanged yields nothing.
    ///
    /// Why not simply y⁽ᴷ⁻¹⁾ → y⁽ᴷ⁾, as the paper writes it: the paper's episodes always run
    /// K revisions, and with its models the last one changes the query. Here a small model
    /// often ends an episode by resubmitting the query it was just told had failed (the repeat
    /// guard then stops the episode), and in the calibration runs that made 20 of 24 unsolved
    /// episodes end on a transition with an empty Δ. Stored as it is, such an entry shows
    /// "no change" as the failed direction, which tells a later repair nothing; the last
    /// transition that changed the query is the last direction the episode actually tried.
    pub fn finalize(self, policy: FinalizePolicy) -> FinalizedEpisode {
        let solved = self.is_solved();
        let Episode {
            source,
            mut attempts,
        } = self;
        let polarity = if solved {
            Polarity::Positive
        } else {
            Polarity::Negative
        };
        let allowed = match polarity {
            Polarity::Positive => true,
            Polarity::Negative => policy == FinalizePolicy::PositiveAndNegative,
        };
        // The index of the transition's "after" attempt.
        let last = attempts.len().checked_sub(1).filter(|&last| last >= 1);
        let after_index = match polarity {
            _ if !allowed => None,
            Polarity::Positive => last,
            Polarity::Negative => last.and_then(|last| {
                (1..=last)
                    .rev()
                    .find(|&i| !sql_delta(&attempts[i - 1].sql, &attempts[i].sql).is_empty())
            }),
        };
        let transition = after_index.and_then(|i| {
            attempts.truncate(i + 1);
            let after = attempts.pop();
            let before = attempts.pop();
            before
                .zip(after)
                .map(|(before, after)| CandidateTransition {
                    polarity,
                    before,
                    after,
                    step: i as u32,
                })
        });
        FinalizedEpisode { source, transition }
    }
}

/// The transition a finalized episode contributes, before it is given an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CandidateTransition {
    pub(crate) polarity: Polarity,
    pub(crate) before: Attempt,
    pub(crate) after: Attempt,
    pub(crate) step: u32,
}

/// A finished episode, ready for [`crate::Memory::commit`]. Only [`Episode::finalize`]
/// creates one, which is what makes "entries enter memory only through finalization" a
/// property of the types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizedEpisode {
    pub(crate) source: EpisodeSource,
    pub(crate) transition: Option<CandidateTransition>,
}

impl FinalizedEpisode {
    /// The question behind the episode.
    pub fn source(&self) -> &EpisodeSource {
        &self.source
    }

    /// The polarity of the entry this episode will add, if any.
    pub fn polarity(&self) -> Option<Polarity> {
        self.transition.as_ref().map(|t| t.polarity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_core::Status;

    fn source() -> EpisodeSource {
        EpisodeSource {
            query_id: "dev-1".into(),
            db_id: "concert_singer".into(),
            question: "How many singers?".into(),
            evidence: String::new(),
            schema: "singer(name, age)".into(),
            stream_pos: StreamPos(4),
            method: "merit".into(),
            time: "t4".into(),
        }
    }

    fn failed(sql: &str) -> Attempt {
        Attempt::new(
            sql,
            Feedback {
                status: Status::ExecutionError,
                error: Some("no such column: nme".into()),
            },
        )
    }

    #[test]
    fn initially_correct_episodes_add_nothing() {
        let episode = Episode::begin(source(), Attempt::new("SELECT 1", Feedback::correct()));
        assert!(episode.is_solved());
        assert!(episode.retrieval_query().is_none());
        assert_eq!(episode.finalize(FinalizePolicy::default()).polarity(), None);
    }

    #[test]
    fn solved_episode_yields_its_final_transition() {
        let mut episode = Episode::begin(source(), failed("SELECT a"));
        episode.record(failed("SELECT b")).unwrap();
        episode
            .record(Attempt::new("SELECT c", Feedback::correct()))
            .unwrap();
        assert!(episode.record(failed("SELECT d")).is_err());
        let done = episode.finalize(FinalizePolicy::default());
        let transition = done.transition.unwrap();
        assert_eq!(transition.polarity, Polarity::Positive);
        assert_eq!(transition.before.sql, "SELECT b");
        assert_eq!(transition.after.sql, "SELECT c");
        assert_eq!(transition.step, 2);
    }

    #[test]
    fn unsolved_episode_yields_a_negative_unless_forbidden() {
        let mut episode = Episode::begin(source(), failed("SELECT a"));
        assert_eq!(episode.retrieval_query().unwrap().step, 1);
        episode.record(failed("SELECT b")).unwrap();
        let negative = episode
            .clone()
            .finalize(FinalizePolicy::PositiveAndNegative);
        assert_eq!(negative.polarity(), Some(Polarity::Negative));
        let none = episode.finalize(FinalizePolicy::PositiveOnly);
        assert_eq!(none.polarity(), None);
        let unrevised = Episode::begin(source(), failed("SELECT a"));
        assert_eq!(
            unrevised.finalize(FinalizePolicy::default()).polarity(),
            None
        );
    }

    #[test]
    fn a_negative_is_the_last_revision_that_changed_the_query() {
        // A - B - C - c;  (the last revision resubmits C in other letters): the direction
        // stored is B -> C, the last one the episode tried.
        let mut episode = Episode::begin(source(), failed("SELECT a FROM t"));
        episode.record(failed("SELECT b FROM t")).unwrap();
        episode.record(failed("SELECT c FROM t")).unwrap();
        episode.record(failed("select  C from t;")).unwrap();
        let transition = episode
            .finalize(FinalizePolicy::PositiveAndNegative)
            .transition
            .unwrap();
        assert_eq!(transition.polarity, Polarity::Negative);
        assert_eq!(transition.before.sql, "SELECT b FROM t");
        assert_eq!(transition.after.sql, "SELECT c FROM t");
        assert_eq!(transition.step, 2);

        // Going back to an earlier attempt is a direction too (C -> A changes the query).
        let mut back = Episode::begin(source(), failed("SELECT a FROM t"));
        back.record(failed("SELECT c FROM t")).unwrap();
        back.record(failed("SELECT a FROM t")).unwrap();
        let transition = back.finalize(FinalizePolicy::default()).transition.unwrap();
        assert_eq!(
            (
                transition.before.sql.as_str(),
                transition.after.sql.as_str()
            ),
            ("SELECT c FROM t", "SELECT a FROM t")
        );
        assert_eq!(transition.step, 2);

        // Every revision resubmits the initial query: nothing was tried, nothing is stored.
        let mut stuck = Episode::begin(source(), failed("SELECT a FROM t"));
        stuck.record(failed("SELECT a FROM t")).unwrap();
        stuck.record(failed("select a from t")).unwrap();
        assert_eq!(stuck.finalize(FinalizePolicy::default()).polarity(), None);
    }

    #[test]
    fn sources_built_from_questions_never_hold_the_gold() {
        let question = Question {
            id: "dev-9".into(),
            index: 9,
            db_id: "concert_singer".into(),
            question: "Names?".into(),
            evidence: String::new(),
            gold_sql: "SELECT GOLD_MARKER FROM singer".into(),
            difficulty: None,
        };
        let source = EpisodeSource::from_question(&question, "schema", StreamPos(1), "merit", "0");
        let text = serde_json::to_string(&source).unwrap();
        assert!(!text.contains("GOLD_MARKER"));
    }
}
