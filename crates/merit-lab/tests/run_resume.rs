//! A run killed mid-way and resumed ends exactly like an uninterrupted run.

use merit_core::failure::{Classification, FailureType};
use merit_core::model::{ChatModel, ChatReply, ChatRequest, Decoding, ModelError};
use merit_core::{Benchmark, Feedback, Status};
use merit_lab::run::{
    ensure_manifest, episode_log, load_episodes, run_streams, MethodFactory, PreparedQuestion,
    RunPlan, StreamSpec,
};
use merit_repair::repair::{
    EndedEpisode, EpisodeDeps, EpisodeSettings, FailureClassifier, Judge, JudgeError, Precedent,
    PrecedentPolarity, QuestionView, RepairMemory, RepairMemoryError, RetrievalRequest,
};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Deterministic: the reply depends only on the prompt. It finds the fix when a precedent is
/// in the prompt, or on its third try; it can be told to fail after some calls (a crash).
struct PromptModel {
    calls: AtomicUsize,
    fail_after: Option<usize>,
}

impl ChatModel for PromptModel {
    fn id(&self) -> String {
        "prompt-model".into()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_after.is_some_and(|limit| call >= limit) {
            return Err(ModelError::Transport("server went away".into()));
        }
        let prompt = &request.messages[0].content;
        let text = if prompt.contains("[mem-") || prompt.contains("attempt 2:") {
            "SELECT FIX".to_string()
        } else {
            format!("SELECT guess_{}", prompt.len() % 97)
        };
        Ok(ChatReply {
            text,
            prompt_tokens: (prompt.len() / 4) as u32,
            completion_tokens: 5,
            latency: Duration::ZERO,
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

struct FixJudge;

impl Judge for FixJudge {
    fn judge(&self, _: &str, sql: &str) -> Result<Feedback, JudgeError> {
        Ok(if sql.contains("FIX") || sql.contains("good") {
            Feedback::correct()
        } else {
            Feedback {
                status: Status::DenotationMismatch,
                error: None,
            }
        })
    }
}

struct Classifier;

impl FailureClassifier for Classifier {
    fn classify(&self, _: Status, _: Option<&str>) -> Classification {
        Classification {
            failure_type: FailureType::ResultMismatch,
            rule: "test-always-mismatch",
        }
    }
}

/// Keeps solved episodes; retrieves the latest one from an earlier position.
struct ListMemory {
    label: String,
    entries: Vec<(usize, String)>,
    file: std::path::PathBuf,
}

impl RepairMemory for ListMemory {
    fn retrieve(
        &self,
        request: &RetrievalRequest<'_>,
    ) -> Result<Vec<Precedent>, RepairMemoryError> {
        assert!(self.entries.iter().all(|(p, _)| *p < request.position));
        Ok(self
            .entries
            .last()
            .map(|(_, id)| Precedent {
                id: id.clone(),
                polarity: PrecedentPolarity::Positive,
                failure_type: FailureType::ResultMismatch,
                db_id: "db".into(),
                question: "q".into(),
                failing_sql: "SELECT 1".into(),
                status: "denotation_mismatch".into(),
                error: None,
                delta: "changed".into(),
            })
            .into_iter()
            .collect())
    }

    fn finalize(
        &mut self,
        episode: &EndedEpisode<'_>,
    ) -> Result<Option<String>, RepairMemoryError> {
        if !episode.solved {
            return Ok(None);
        }
        let id = format!("mem-{}-{}", self.label, episode.position);
        self.entries.push((episode.position, id.clone()));
        let mut text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.push_str(&id);
        text.push('\n');
        std::fs::write(&self.file, text).map_err(|e| RepairMemoryError(e.to_string()))?;
        Ok(Some(id))
    }
}

struct Factory;

impl MethodFactory for Factory {
    fn reflects(&self, method: &str) -> bool {
        method == "reflexion"
    }

    fn memory(
        &self,
        stream: &StreamSpec,
        folder: &Path,
    ) -> Result<Box<dyn RepairMemory + Send>, String> {
        assert_eq!(
            std::fs::read_dir(folder).unwrap().count(),
            0,
            "memory folder starts empty"
        );
        Ok(Box::new(ListMemory {
            label: stream.label(),
            entries: Vec::new(),
            file: folder.join("entries.txt"),
        }))
    }
}

fn questions() -> Vec<PreparedQuestion> {
    (0..24)
        .map(|i| PreparedQuestion {
            initial_tokens: (100, 10),
            view: QuestionView {
                id: format!("dev-{i}"),
                db_id: "db".into(),
                question: format!("question number {i} {}", "x".repeat(i)),
                evidence: String::new(),
            },
            schema: "CREATE TABLE t (a INTEGER);".into(),
            initial_sql: if i % 4 == 0 {
                "SELECT good".into()
            } else {
                format!("SELECT {i}")
            },
        })
        .collect()
}

fn streams() -> Vec<StreamSpec> {
    let mut streams = Vec::new();
    for method in ["iterative", "merit", "reflexion"] {
        for seed in 0..2 {
            streams.push(StreamSpec {
                method: method.into(),
                seed,
            });
        }
    }
    streams
}

fn settings() -> EpisodeSettings {
    EpisodeSettings {
        benchmark: Benchmark::Spider,
        dialect: "SQLite".into(),
        max_revisions: 7,
        decoding: Decoding::default(),
        reflect: false,
        method: String::new(),
        seed: 0,
        aids: Default::default(),
    }
}

fn run(dir: &Path, model: &PromptModel) -> Result<(), merit_lab::run::RunError> {
    run_with(dir, model, &Classifier)
}

fn run_with(
    dir: &Path,
    model: &PromptModel,
    classifier: &dyn FailureClassifier,
) -> Result<(), merit_lab::run::RunError> {
    let deps = EpisodeDeps {
        model,
        judge: &FixJudge,
        classifier,
        database_aids: None,
    };
    let (streams, questions, settings) = (streams(), questions(), settings());
    let plan = RunPlan {
        dir,
        streams: &streams,
        questions: &questions,
        template: &settings,
        parallel: 3,
    };
    run_streams(&plan, &deps, &Factory, &|_, _| {})
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for stream in streams() {
        let log = episode_log(dir, &stream);
        files.push((stream.label(), std::fs::read(&log).unwrap()));
        let memory = dir.join("memory").join(stream.label()).join("entries.txt");
        files.push((
            format!("{} memory", stream.label()),
            std::fs::read(memory).unwrap_or_default(),
        ));
    }
    files
}

#[test]
fn an_interrupted_run_resumes_to_the_same_bytes() {
    let straight = tempfile::tempdir().unwrap();
    run(
        straight.path(),
        &PromptModel {
            calls: AtomicUsize::new(0),
            fail_after: None,
        },
    )
    .unwrap();
    let episodes = load_episodes(straight.path(), &streams()).unwrap();
    assert_eq!(episodes.len(), 24 * 6);
    // The initial generation is charged to step 0 of every episode (one call, its tokens),
    // so Table 3's cost columns count it; the repair steps carry their own calls.
    for episode in &episodes {
        let initial = &episode.attempts[0];
        assert_eq!(
            (
                initial.prompt_tokens,
                initial.completion_tokens,
                initial.calls
            ),
            (100, 10, 1),
            "{}",
            episode.question_id
        );
    }
    assert!(episodes
        .iter()
        .filter(|e| e.attempts.len() > 1)
        .all(|e| e.attempts[1..].iter().all(|a| a.calls >= 1)));
    // Memory mattered: MERIT repaired at the first step where a precedent existed.
    assert!(episodes
        .iter()
        .any(|e| e.method == "merit" && e.repaired() && e.repair_steps() == 1));

    for fail_after in [5, 40, 111] {
        let interrupted = tempfile::tempdir().unwrap();
        let crash = PromptModel {
            calls: AtomicUsize::new(0),
            fail_after: Some(fail_after),
        };
        let error = run(interrupted.path(), &crash).unwrap_err();
        assert!(error.to_string().contains("server went away"), "{error}");
        // A torn line, as a kill during a write would leave it.
        let log = episode_log(interrupted.path(), &streams()[0]);
        let mut bytes = std::fs::read(&log).unwrap_or_default();
        bytes.extend_from_slice(b"{\"method\":\"iterative\",\"se");
        std::fs::write(&log, bytes).unwrap();
        run(
            interrupted.path(),
            &PromptModel {
                calls: AtomicUsize::new(0),
                fail_after: None,
            },
        )
        .unwrap();
        assert_eq!(
            snapshot(interrupted.path()),
            snapshot(straight.path()),
            "fail_after {fail_after}"
        );
    }
}

#[test]
fn a_manifest_for_different_settings_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    ensure_manifest(dir.path(), &serde_json::json!({"k": 7})).unwrap();
    ensure_manifest(dir.path(), &serde_json::json!({"k": 7})).unwrap();
    let error = ensure_manifest(dir.path(), &serde_json::json!({"k": 5})).unwrap_err();
    assert!(error.to_string().contains("different run"), "{error}");
}

/// Another classifier than the one that wrote the log.
struct OtherClassifier;

impl FailureClassifier for OtherClassifier {
    fn classify(&self, _: Status, _: Option<&str>) -> Classification {
        Classification {
            failure_type: FailureType::SchemaLinking,
            rule: "test-always-schema",
        }
    }
}

/// The log keeps each failure's type, and a resume replays it into memory with the run's
/// classifier: one that labels the logged attempts otherwise would rebuild another memory
/// than the run had, so the resume is refused, naming the log and both types.
#[test]
fn a_log_written_by_another_classifier_is_refused_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let model = || PromptModel {
        calls: AtomicUsize::new(0),
        fail_after: None,
    };
    run(dir.path(), &model()).unwrap();
    let error = run_with(dir.path(), &model(), &OtherClassifier)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("result_mismatch") && error.contains("schema_linking"),
        "{error}"
    );
    assert!(error.contains(".jsonl"), "{error}");
    // The same classifier resumes as before.
    run(dir.path(), &model()).unwrap();
}
