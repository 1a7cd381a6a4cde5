//! The live-mode experiment (beyond both papers): how much of memory's gain survives without
//! an oracle, and how much bad feedback it tolerates.
//!
//! A benchmark stream in a seeded order is answered by live mode ([`merit_live`]): the agent
//! never sees the oracle; the loop repairs from execution feedback only. A seeded
//! [`SimulatedUser`] looks at each answer's true verdict (the hidden oracle's) and, with
//! probability `rate`, says so, wrongly with probability `error`; answers without feedback are
//! finalized after `finalize_after` questions. Each arm is one such stream: no memory, live
//! memory under several (rate, error), and perfect feedback. Accuracy is judged by the oracle
//! when the answer is given.
//!
//! An arm's folder holds the memory's journal (`live.jsonl`, the raw record of every answer,
//! feedback and finalization) and `answers.jsonl` (one line per question: the answer, its
//! verdict, the feedback). It resumes after a kill: questions already in `answers.jsonl` are
//! skipped, and an answer that reached the journal but not `answers.jsonl` is taken from the
//! journal instead of being asked again.

use crate::experiment::{ChosenQuestions, ExperimentError, InitialPrediction};
use crate::jsonl::{read_records, truncate_torn_tail, Appender};
use crate::stream::stream_order;
use merit_core::episode::EpisodeRecord;
use merit_core::hash::fnv1a;
use merit_core::model::{ChatModel, Embedder};
use merit_core::Status;
use merit_live::live::JOURNAL_FILE;
use merit_live::{
    AskRequest, LiveConfig, LiveDeps, LiveError, LiveEvent, LiveMemory, UserFeedback,
};
use merit_repair::repair::DatabaseAids;
use merit_sql::SqliteDatabase;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// A user who gives feedback on a fraction of answers, sometimes wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimulatedUser {
    /// Chance of feedback on an answer (p).
    pub rate: f64,
    /// Chance that feedback says the opposite of the truth (e).
    pub error: f64,
    /// Seeds every draw (with the question's position).
    pub seed: u64,
}

impl SimulatedUser {
    /// What the user says about the answer at stream `position`, which is `correct` by the
    /// hidden oracle and `executed` or not: nothing, a confirmation or a rejection. An answer
    /// that did not execute shows an error, which nobody confirms.
    pub fn feedback(&self, position: usize, correct: bool, executed: bool) -> Option<UserFeedback> {
        let mut rng = ChaCha8Rng::seed_from_u64(fnv1a(
            format!("simulated-user {} {position}", self.seed).as_bytes(),
        ));
        let speaks = rng.random::<f64>() < self.rate;
        let mistaken = rng.random::<f64>() < self.error;
        if !speaks {
            return None;
        }
        let says_correct = correct != mistaken;
        Some(if says_correct && executed {
            UserFeedback::Confirm
        } else {
            UserFeedback::Reject
        })
    }
}

/// One arm: whether memory is retrieved, and who gives feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveArm {
    /// The arm's name (its folder).
    pub name: String,
    /// `false`: nothing is retrieved (the no-memory arm).
    pub use_memory: bool,
    /// The user; `None`: nobody speaks, every answer is finalized by the wait.
    pub user: Option<SimulatedUser>,
}

impl LiveArm {
    /// Parses an arm: `none` (no memory), `silent` (memory, no feedback), `oracle` (memory,
    /// feedback on every answer, never wrong) or `p=RATE,e=ERROR`.
    pub fn parse(text: &str, seed: u64) -> Result<LiveArm, String> {
        let user = |rate, error| SimulatedUser { rate, error, seed };
        let text = text.trim();
        Ok(match text {
            "none" => LiveArm {
                name: "none".into(),
                use_memory: false,
                user: None,
            },
            "silent" => LiveArm {
                name: "silent".into(),
                use_memory: true,
                user: None,
            },
            "oracle" => LiveArm {
                name: "oracle-feedback".into(),
                use_memory: true,
                user: Some(user(1.0, 0.0)),
            },
            _ => {
                let mut rate = None;
                let mut error = None;
                for part in text.split(',') {
                    let (key, value) = part
                        .split_once('=')
                        .ok_or_else(|| format!("arm {text:?}: expected p=RATE,e=ERROR"))?;
                    let value: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| format!("arm {text:?}: {value:?} is not a number"))?;
                    if !(0.0..=1.0).contains(&value) {
                        return Err(format!("arm {text:?}: {value} is outside 0 to 1"));
                    }
                    match key.trim() {
                        "p" => rate = Some(value),
                        "e" => error = Some(value),
                        other => return Err(format!("arm {text:?}: unknown setting {other:?}")),
                    }
                }
                let (Some(rate), Some(error)) = (rate, error) else {
                    return Err(format!("arm {text:?}: give both p and e"));
                };
                LiveArm {
                    name: format!("p{rate}-e{error}"),
                    use_memory: true,
                    user: Some(user(rate, error)),
                }
            }
        })
    }
}

/// One answered question of an arm (a line of `answers.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveAnswerRecord {
    /// Stream position.
    pub position: usize,
    /// The question.
    pub question_id: String,
    /// The live episode.
    pub episode: u64,
    /// The answer's SQL.
    pub sql: String,
    /// Attempts made (1: no repair).
    pub attempts: usize,
    /// `true` when the answer executed.
    pub executed: bool,
    /// The hidden oracle's verdict.
    pub correct: bool,
    /// Memories retrieved into the repairs.
    pub memories_used: usize,
    /// What the simulated user said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<UserFeedback>,
}

/// A live-mode experiment over chosen benchmark questions.
pub struct LiveExperiment<'a> {
    /// The questions and the hidden oracle.
    pub chosen: &'a ChosenQuestions,
    /// The shared initial predictions by question id.
    pub initial: &'a HashMap<String, InitialPrediction>,
    /// Where the databases are (`<db>/<db>.sqlite`).
    pub databases: &'a Path,
    /// The stream order's seed.
    pub seed: u64,
    /// Questions an answer waits for feedback before it is finalized without.
    pub finalize_after: u64,
    /// Repair budget, aids, retrieval (as the repair runs').
    pub config: LiveConfig,
    /// The repair model.
    pub model: &'a dyn ChatModel,
    /// The memory's embedder.
    pub embedder: Arc<dyn Embedder>,
    /// Hints and grammar, when the aids ask for them.
    pub aids: Option<&'a dyn DatabaseAids>,
}

impl LiveExperiment<'_> {
    /// The question ids in stream order (what every arm answers, position by position).
    pub fn stream_ids(&self) -> Vec<String> {
        stream_order(self.chosen.questions.len(), self.seed)
            .into_iter()
            .map(|index| self.chosen.questions[index].0.id.clone())
            .collect()
    }

    /// What an arm's answers depend on, as recorded in its folder ([`ARM_SETTINGS_FILE`]):
    /// the arm, the stream, the wait, the repair configuration and the models.
    pub fn arm_settings(&self, arm: &LiveArm) -> BTreeMap<String, String> {
        let stream = self.stream_ids().join("\n");
        BTreeMap::from([
            ("arm".to_string(), format!("{arm:?}")),
            ("stream seed".to_string(), self.seed.to_string()),
            (
                "questions".to_string(),
                format!(
                    "{} (fnv1a {:016x})",
                    self.chosen.questions.len(),
                    fnv1a(stream.as_bytes())
                ),
            ),
            (
                "finalize after".to_string(),
                self.finalize_after.to_string(),
            ),
            (
                "repair configuration".to_string(),
                format!("{:?}", self.config),
            ),
            ("repair model".to_string(), self.model.id()),
            ("embedder".to_string(), self.embedder.id()),
        ])
    }

    /// Runs (or resumes) `arm` in `dir`; returns its answers in stream order.
    pub fn run_arm(
        &self,
        dir: &Path,
        arm: &LiveArm,
        on_answer: &dyn Fn(&LiveAnswerRecord),
    ) -> Result<Vec<LiveAnswerRecord>, ExperimentError> {
        let live_error = |e: LiveError| ExperimentError::Live(e.to_string());
        std::fs::create_dir_all(dir)
            .map_err(|e| ExperimentError::Live(format!("cannot create {}: {e}", dir.display())))?;
        check_arm_settings(dir, &self.arm_settings(arm))?;
        let answers_path = dir.join("answers.jsonl");
        let loaded = read_records::<LiveAnswerRecord>(&answers_path)?;
        truncate_torn_tail(&answers_path, loaded.torn_bytes)?;
        let mut answers = loaded.records;
        let config = LiveConfig {
            use_memory: arm.use_memory,
            // The clock is the stream position, in ms: one question per ms.
            finalize_after_ms: self.finalize_after,
            ..self.config.clone()
        };
        let (live, _) = LiveMemory::open(dir, "benchmark", Arc::clone(&self.embedder), config)
            .map_err(live_error)?;
        // Answers the journal holds (an ask that a kill kept out of answers.jsonl).
        let journaled: BTreeMap<u64, merit_live::live::Asked> = {
            let parse = |raw: &[u8]| {
                serde_json::from_slice::<LiveEvent>(raw)
                    .map(Some)
                    .map_err(|e| e.to_string())
            };
            let (events, _) = merit_journal::jsonl::read_all(
                &dir.join(JOURNAL_FILE),
                merit_journal::jsonl::Tail::Torn,
                parse,
            )?;
            events
                .into_iter()
                .filter_map(|event| match event {
                    LiveEvent::Asked(asked) => Some((asked.episode, asked)),
                    _ => None,
                })
                .collect()
        };
        let questions = &self.chosen.questions;
        let order = stream_order(questions.len(), self.seed);
        let mut appender = Appender::open(&answers_path)?;
        let mut opened: HashMap<String, SqliteDatabase> = HashMap::new();
        for (position, &index) in order.iter().enumerate().skip(answers.len()) {
            let (question, schema) = &questions[index];
            let now = position as u64;
            live.finalize_expired(now).map_err(live_error)?;
            if !opened.contains_key(&question.db_id) {
                let path = merit_data::DatabaseDir::new(self.databases)
                    .locate(&question.db_id)
                    .map_err(|missing| ExperimentError::Live(missing.to_string()))?;
                let database = SqliteDatabase::open(&path)
                    .map_err(|e| ExperimentError::Live(e.to_string()))?;
                opened.insert(question.db_id.clone(), database);
            }
            let database = &opened[&question.db_id];
            let episode = position as u64;
            let (sql, attempts, executed, used) = match journaled.get(&episode) {
                Some(asked) => {
                    let answer = asked.answer();
                    (
                        answer.sql.clone(),
                        asked.attempts.len(),
                        answer.status.is_correct(),
                        asked.used.len(),
                    )
                }
                None => {
                    let initial = self
                        .initial
                        .get(&question.id)
                        .map(|p| p.sql.as_str())
                        .unwrap_or_default();
                    let answer = live
                        .ask(
                            &AskRequest {
                                database: Some(&question.db_id),
                                question: &question.question,
                                evidence: &question.evidence,
                                schema,
                                initial_sql: Some(initial),
                            },
                            &LiveDeps {
                                model: self.model,
                                initial_model: None,
                                database,
                                aids: self.aids,
                            },
                            now,
                        )
                        .map_err(live_error)?;
                    if answer.episode != episode {
                        return Err(ExperimentError::Live(format!(
                            "{}: answer {position} became episode {}; the journal does not \
                             belong to this stream",
                            dir.display(),
                            answer.episode
                        )));
                    }
                    (
                        answer.sql,
                        answer.attempts.len(),
                        answer.executed,
                        answer.memories_used.len(),
                    )
                }
            };
            let correct = executed
                && self
                    .chosen
                    .oracle
                    .judge(&question.id, &sql)
                    .map_err(|e| ExperimentError::Live(e.to_string()))?
                    .status
                    .is_correct();
            let feedback = arm
                .user
                .and_then(|user| user.feedback(position, correct, executed));
            if let Some(feedback) = &feedback {
                match live.feedback(episode, feedback.clone(), database, now) {
                    // Given before a kill kept it out of answers.jsonl.
                    Ok(_) | Err(LiveError::AlreadyFinalized(_)) => {}
                    Err(error) => return Err(live_error(error)),
                }
            }
            let record = LiveAnswerRecord {
                position,
                question_id: question.id.clone(),
                episode,
                sql,
                attempts,
                executed,
                correct,
                memories_used: used,
                feedback,
            };
            appender.append(&record)?;
            on_answer(&record);
            answers.push(record);
        }
        Ok(answers)
    }
}

/// The file in an arm's folder that records what its answers depend on.
pub const ARM_SETTINGS_FILE: &str = "settings.json";

/// Records `settings` in a new arm folder, or checks them against those recorded: an arm
/// resumed with other options (another K, wait, model, question set or binary whose
/// configuration differs) would mix two experiments in one stream, so that is refused, naming
/// what differs. A folder from before settings were recorded takes the current ones.
fn check_arm_settings(
    dir: &Path,
    settings: &BTreeMap<String, String>,
) -> Result<(), ExperimentError> {
    let path = dir.join(ARM_SETTINGS_FILE);
    let error = |message: String| ExperimentError::Live(format!("{}: {message}", path.display()));
    match std::fs::read(&path) {
        Ok(bytes) => {
            let recorded: BTreeMap<String, String> = serde_json::from_slice(&bytes)
                .map_err(|e| error(format!("not an arm's settings ({e})")))?;
            let differing: Vec<&str> = settings
                .keys()
                .chain(recorded.keys())
                .filter(|key| settings.get(*key) != recorded.get(*key))
                .map(String::as_str)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if differing.is_empty() {
                Ok(())
            } else {
                Err(error(format!(
                    "this arm was started with another {}; continue it with the options it \
                     started with, or give another --out",
                    differing.join(", ")
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = serde_json::to_vec_pretty(settings)
                .map_err(|e| error(format!("cannot serialize the settings: {e}")))?;
            merit_core::fs::write_atomically(&path, &text)
                .map_err(|e| error(format!("cannot write: {e}")))
        }
        Err(e) => Err(error(format!("cannot read: {e}"))),
    }
}

/// Per arm: accuracy after each answer (cumulative, percent), for the stream plot.
pub fn accuracy_over_stream(answers: &[LiveAnswerRecord]) -> Vec<(f64, f64)> {
    let mut correct = 0usize;
    answers
        .iter()
        .enumerate()
        .map(|(index, answer)| {
            correct += usize::from(answer.correct);
            (
                (index + 1) as f64,
                correct as f64 * 100.0 / (index + 1) as f64,
            )
        })
        .collect()
}

/// A stream of the repair experiment (`merit run`'s episode log of one method and seed) as a
/// reference row beside the live arms: the same questions answered with the oracle judging
/// every attempt (the loop stops at the first *correct* query, and MERIT's memory holds
/// oracle-verified entries). `stream_ids` is the live stream's question order; the log must
/// hold the same questions at the same positions, so that rows pair question by question.
pub fn reference_answers(
    name: &str,
    episodes: &[EpisodeRecord],
    stream_ids: &[String],
) -> Result<Vec<LiveAnswerRecord>, String> {
    let mut episodes: Vec<&EpisodeRecord> = episodes.iter().collect();
    episodes.sort_by_key(|episode| episode.position);
    if episodes.len() != stream_ids.len() {
        return Err(format!(
            "reference {name}: {} episodes for a stream of {} questions",
            episodes.len(),
            stream_ids.len()
        ));
    }
    episodes
        .iter()
        .zip(stream_ids)
        .enumerate()
        .map(|(position, (episode, id))| {
            if episode.position != position || &episode.question_id != id {
                return Err(format!(
                    "reference {name}: position {position} holds {} (episode position {}), \
                     the live stream {id}: not the same stream (questions, --limit, seed)",
                    episode.question_id, episode.position
                ));
            }
            let last = episode.attempts.last().ok_or_else(|| {
                format!("reference {name}: {} has no attempt", episode.question_id)
            })?;
            let memories: std::collections::BTreeSet<&str> = episode
                .attempts
                .iter()
                .flat_map(|attempt| attempt.retrieved.iter().map(String::as_str))
                .collect();
            Ok(LiveAnswerRecord {
                position,
                question_id: id.clone(),
                episode: position as u64,
                sql: last.sql.clone(),
                attempts: episode.attempts.len(),
                executed: !matches!(last.status, Status::ExecutionError | Status::Timeout),
                correct: episode.finally_correct(),
                memories_used: memories.len(),
                feedback: None,
            })
        })
        .collect()
}

/// The experiment's report: per row (arm or reference), accuracy with the answers that needed
/// a repair, the repairs that used memory, the feedback given and how much of it was wrong
/// (the realised error rate is below e: an answer that did not execute is always rejected);
/// then each pair of `comparisons` (row, baseline row) on the same questions: the paired
/// difference with its 95% query-bootstrap interval and the exact sign test on the questions
/// where they differ. A pair naming a missing row is left out.
pub fn render_report(
    arms: &[(String, Vec<LiveAnswerRecord>)],
    comparisons: &[(String, String)],
) -> String {
    let mut text = String::from(
        "| row | answers | accuracy | repaired answers | repairs with memory | feedback given | feedback wrong |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (name, answers) in arms {
        let n = answers.len().max(1);
        let correct = answers.iter().filter(|a| a.correct).count();
        let repaired = answers.iter().filter(|a| a.attempts > 1).count();
        let with_memory = answers
            .iter()
            .filter(|a| a.attempts > 1 && a.memories_used > 0)
            .count();
        let feedback = answers.iter().filter(|a| a.feedback.is_some()).count();
        let wrong = answers
            .iter()
            .filter(|a| match &a.feedback {
                Some(UserFeedback::Confirm) => !a.correct,
                Some(UserFeedback::Reject) => a.correct,
                _ => false,
            })
            .count();
        text.push_str(&format!(
            "| {name} | {} | {:.1}% ({correct}) | {repaired} | {with_memory} | {feedback} | {wrong} |\n",
            answers.len(),
            correct as f64 * 100.0 / n as f64
        ));
    }
    let row = |wanted: &str| {
        arms.iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, answers)| answers)
    };
    let pairs: Vec<(
        &String,
        &Vec<LiveAnswerRecord>,
        &String,
        &Vec<LiveAnswerRecord>,
    )> = comparisons
        .iter()
        .filter_map(|(a, b)| Some((a, row(a)?, b, row(b)?)))
        .collect();
    if pairs.is_empty() {
        return text;
    }
    text.push_str(
        "\n| row − baseline | Δ accuracy (pp) | 95% CI | better / worse | exact sign test p |\n\
         |---|---|---|---|---|\n",
    );
    for (name, answers, baseline, base) in pairs {
        let name = format!("{name} − {baseline}");
        let paired: Vec<(Vec<u8>, Vec<u8>)> = answers
            .iter()
            .zip(base)
            .filter(|(a, b)| a.question_id == b.question_id)
            .map(|(a, b)| (vec![u8::from(a.correct)], vec![u8::from(b.correct)]))
            .collect();
        let (a, b): (Vec<Vec<u8>>, Vec<Vec<u8>>) = paired.into_iter().unzip();
        match crate::stats::paired_cluster_bootstrap(&a, &b, 10_000, 0) {
            Ok(d) => text.push_str(&format!(
                "| {name} | {:+.1} | [{:+.1}, {:+.1}] | {} / {} | {} |\n",
                d.delta_pp,
                d.ci_low_pp,
                d.ci_high_pp,
                d.a_better,
                d.b_better,
                crate::report::format_p(crate::stats::exact_sign_test(d.a_better, d.b_better))
            )),
            Err(error) => text.push_str(&format!("| {name} | {error} | | | |\n")),
        }
    }
    text.push_str(
        "\nQuestions resampled with replacement (10,000 draws); better / worse counts the \
         questions only the row / only its baseline answered correctly, and the exact two-sided \
         sign test leaves ties out. The stream has one order, so an interval covers the choice \
         of questions only; each comparison stands alone, with no correction for the others.\n",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(question: usize, correct: bool) -> LiveAnswerRecord {
        LiveAnswerRecord {
            position: question,
            question_id: format!("dev-{question}"),
            episode: question as u64,
            sql: "SELECT 1".into(),
            attempts: 2,
            executed: true,
            correct,
            memories_used: usize::from(correct),
            feedback: None,
        }
    }

    #[test]
    fn the_report_pairs_each_arm_with_the_baseline() {
        let none: Vec<_> = (0..10).map(|q| answer(q, q < 4)).collect();
        let mut live: Vec<_> = (0..10).map(|q| answer(q, q < 6)).collect();
        // Feedback wrong twice: a confirmed wrong answer, a rejected right one.
        live[0].feedback = Some(UserFeedback::Reject);
        live[1].feedback = Some(UserFeedback::Confirm);
        live[9].feedback = Some(UserFeedback::Confirm);
        let comparisons = [
            ("p1-e0".to_string(), "none".to_string()),
            ("missing".to_string(), "none".to_string()),
        ];
        let text = render_report(
            &[("none".into(), none), ("p1-e0".into(), live)],
            &comparisons,
        );
        assert!(
            text.contains("| none | 10 | 40.0% (4) | 10 | 4 | 0 | 0 |"),
            "{text}"
        );
        assert!(
            text.contains("| p1-e0 | 10 | 60.0% (6) | 10 | 6 | 3 | 2 |"),
            "{text}"
        );
        assert!(text.contains("| p1-e0 − none | +20.0 |"), "{text}");
        assert!(text.contains("| 2 / 0 | 0.500 |"), "{text}");
        assert!(!text.contains("missing"), "{text}");
        let series = accuracy_over_stream(&[answer(0, true), answer(1, false)]);
        assert_eq!(series, [(1.0, 100.0), (2.0, 50.0)]);
    }

    fn episode(position: usize, id: &str, statuses: &[Status]) -> EpisodeRecord {
        EpisodeRecord {
            method: "merit".into(),
            seed: 0,
            position,
            question_id: id.into(),
            db_id: "db".into(),
            attempts: statuses
                .iter()
                .enumerate()
                .map(|(step, &status)| merit_core::episode::AttemptRecord {
                    step: step as u32,
                    sql: format!("SELECT {step}"),
                    status,
                    error: None,
                    failure_type: None,
                    retrieved: vec![format!("m{position}"), "m0".into()],
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    calls: 1,
                    aids: Default::default(),
                })
                .collect(),
            memory_written: None,
            stopped_early: None,
        }
    }

    #[test]
    fn a_repair_stream_becomes_a_reference_row_only_when_it_is_the_same_stream() {
        let ids = vec!["dev-3".to_string(), "dev-1".to_string()];
        // Logged out of order: the reference sorts by position.
        let log = [
            episode(
                1,
                "dev-1",
                &[Status::ExecutionError, Status::DenotationMismatch],
            ),
            episode(0, "dev-3", &[Status::ExecutionError, Status::Correct]),
        ];
        let rows = reference_answers("merit", &log, &ids).unwrap();
        assert_eq!(rows[0].question_id, "dev-3");
        assert!(rows[0].correct && rows[0].executed);
        assert_eq!((rows[0].attempts, rows[0].memories_used), (2, 1));
        assert!(!rows[1].correct && rows[1].executed);
        assert_eq!(rows[1].sql, "SELECT 1");
        let swapped = vec!["dev-1".to_string(), "dev-3".to_string()];
        let error = reference_answers("merit", &log, &swapped).unwrap_err();
        assert!(error.contains("not the same stream"), "{error}");
        let error = reference_answers("merit", &log[..1], &ids).unwrap_err();
        assert!(error.contains("1 episodes for a stream of 2"), "{error}");
    }

    #[test]
    fn arms_parse_and_name_themselves() {
        assert!(!LiveArm::parse("none", 0).unwrap().use_memory);
        assert!(LiveArm::parse("silent", 0).unwrap().user.is_none());
        let oracle = LiveArm::parse("oracle", 3).unwrap();
        assert_eq!(oracle.user.unwrap().rate, 1.0);
        let arm = LiveArm::parse("p=0.5, e=0.1", 0).unwrap();
        assert_eq!(arm.name, "p0.5-e0.1");
        assert!(LiveArm::parse("p=2,e=0", 0).is_err());
        assert!(LiveArm::parse("p=0.5", 0).is_err());
        assert!(LiveArm::parse("q=0.5,e=0", 0).is_err());
    }

    #[test]
    fn the_simulated_user_speaks_at_its_rate_errs_at_its_rate_and_is_seeded() {
        let user = SimulatedUser {
            rate: 0.5,
            error: 0.2,
            seed: 7,
        };
        let said: Vec<Option<UserFeedback>> =
            (0..4000).map(|i| user.feedback(i, true, true)).collect();
        let spoke = said.iter().filter(|f| f.is_some()).count();
        let wrong = said
            .iter()
            .filter(|f| **f == Some(UserFeedback::Reject))
            .count();
        assert!((1800..2200).contains(&spoke), "{spoke}");
        assert!((300..500).contains(&wrong), "{wrong}");
        let again: Vec<Option<UserFeedback>> =
            (0..4000).map(|i| user.feedback(i, true, true)).collect();
        assert_eq!(said, again);
        // An error is never confirmed.
        let perfect = SimulatedUser {
            rate: 1.0,
            error: 0.0,
            seed: 1,
        };
        assert_eq!(
            perfect.feedback(0, false, false),
            Some(UserFeedback::Reject)
        );
        assert_eq!(perfect.feedback(0, true, true), Some(UserFeedback::Confirm));
        let liar = SimulatedUser {
            rate: 1.0,
            error: 1.0,
            seed: 1,
        };
        assert_eq!(liar.feedback(0, false, true), Some(UserFeedback::Confirm));
    }
}
