//! The live-mode experiment on real Spider dev questions with a scripted repair model: arms
//! differ only in memory and feedback, the oracle stays hidden from the agent, and an arm cut
//! short resumes to exactly the answers of an uninterrupted one.

use merit_core::model::{ChatModel, ChatReply, ChatRequest, Embedder, ModelError};
use merit_core::Benchmark;
use merit_data::DatabaseDir;
use merit_lab::experiment::{choose_questions, load_benchmark, InitialPrediction, Split};
use merit_lab::live::{LiveAnswerRecord, LiveArm, LiveExperiment};
use merit_live::LiveConfig;
use merit_memory::HashEmbedder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn spider() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider"
    ))
}

/// Answers a repair prompt with the gold SQL of the question it names (the prompts quote the
/// request), which is what a perfect repairer would write.
struct GoldRepairer(Vec<(String, String)>);

impl ChatModel for GoldRepairer {
    fn id(&self) -> String {
        "gold-repairer".into()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let prompt: String = request
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let sql = self
            .0
            .iter()
            .filter(|(question, _)| prompt.contains(question.as_str()))
            .max_by_key(|(question, _)| question.len())
            .map_or("SELECT 1", |(_, gold)| gold.as_str());
        Ok(ChatReply {
            text: format!("```sql\n{sql}\n```"),
            prompt_tokens: 1,
            completion_tokens: 1,
            latency: Duration::ZERO,
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

fn run(dir: &Path, arm: &str, limit: usize) -> Vec<LiveAnswerRecord> {
    let (questions, schemas) = load_benchmark(Benchmark::Spider, Split::Dev, &spider()).unwrap();
    let databases = DatabaseDir::new(spider().join("database"));
    let chosen = choose_questions(
        Benchmark::Spider,
        &questions,
        &schemas,
        &databases,
        Some(12),
    )
    .unwrap();
    // Every other question starts from SQL that does not execute.
    let initial: HashMap<String, InitialPrediction> = chosen
        .questions
        .iter()
        .enumerate()
        .map(|(i, (q, _))| {
            let sql = if i % 2 == 0 {
                "SELECT no_such_column FROM no_such_table".to_string()
            } else {
                q.gold_sql.clone()
            };
            (
                q.id.clone(),
                InitialPrediction {
                    question_id: q.id.clone(),
                    sql,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                },
            )
        })
        .collect();
    let model = GoldRepairer(
        chosen
            .questions
            .iter()
            .map(|(q, _)| (q.question.clone(), q.gold_sql.clone()))
            .collect(),
    );
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(64));
    let experiment = LiveExperiment {
        chosen: &chosen,
        initial: &initial,
        databases: &spider().join("database"),
        seed: 0,
        finalize_after: 3,
        config: LiveConfig {
            k: 2,
            ..LiveConfig::default()
        },
        model: &model,
        embedder,
        aids: None,
    };
    let arm = LiveArm::parse(arm, 0).unwrap();
    let answers = experiment.run_arm(dir, &arm, &|_| {}).unwrap();
    assert_eq!(answers.len(), limit);
    answers
}

#[test]
fn arms_answer_the_same_stream_and_only_memory_arms_retrieve() {
    let none_dir = tempfile::tempdir().unwrap();
    let none = run(none_dir.path(), "none", 12);
    assert!(none.iter().all(|a| a.memories_used == 0));
    assert!(none.iter().all(|a| a.feedback.is_none()));
    // The repairer writes the gold, so every answer is right; half needed a repair.
    assert_eq!(none.iter().filter(|a| a.correct).count(), 12, "{none:?}");
    assert_eq!(none.iter().filter(|a| a.attempts > 1).count(), 6);

    let oracle_dir = tempfile::tempdir().unwrap();
    let oracle = run(oracle_dir.path(), "oracle", 12);
    assert!(oracle.iter().all(|a| a.feedback.is_some()));
    assert!(
        oracle.iter().any(|a| a.memories_used > 0),
        "confirmed repairs become memories later repairs retrieve"
    );
    let same_order: Vec<&str> = none.iter().map(|a| a.question_id.as_str()).collect();
    let oracle_order: Vec<&str> = oracle.iter().map(|a| a.question_id.as_str()).collect();
    assert_eq!(same_order, oracle_order);
}

#[test]
fn an_arm_cut_short_resumes_to_the_uninterrupted_answers() {
    let whole_dir = tempfile::tempdir().unwrap();
    let whole = run(whole_dir.path(), "p=0.5,e=0.2", 12);

    let cut_dir = tempfile::tempdir().unwrap();
    run(cut_dir.path(), "p=0.5,e=0.2", 12);
    // Keep five answers, and a journal that also holds the sixth ask (a kill between the
    // journal write and the answers line), then resume.
    let answers = cut_dir.path().join("answers.jsonl");
    let text = std::fs::read_to_string(&answers).unwrap();
    let kept: Vec<&str> = text.lines().take(5).collect();
    std::fs::write(&answers, format!("{}\n", kept.join("\n"))).unwrap();
    let journal = cut_dir.path().join("live.jsonl");
    let events = std::fs::read_to_string(&journal).unwrap();
    let mut lines = Vec::new();
    let mut asked = 0;
    for line in events.lines() {
        if line.contains("\"event\":\"asked\"") {
            asked += 1;
            if asked > 6 {
                break;
            }
        }
        lines.push(line);
    }
    std::fs::write(&journal, format!("{}\n", lines.join("\n"))).unwrap();
    let resumed = run(cut_dir.path(), "p=0.5,e=0.2", 12);
    assert_eq!(resumed, whole);
    let asks = |dir: &Path| {
        std::fs::read_to_string(dir.join("live.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"event\":\"asked\""))
            .count()
    };
    assert_eq!(
        asks(cut_dir.path()),
        asks(whole_dir.path()),
        "nothing was asked twice"
    );
}
