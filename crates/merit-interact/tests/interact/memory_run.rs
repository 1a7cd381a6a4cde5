//! The agent with long-term memory in a run: memories reach only later episodes, every
//! retrieval is recorded, a frozen memory is only read, and the memory folder is rebuilt from
//! the log so a resumed run ends with the same files as an uninterrupted one.

use crate::common::{custom_tasks, request_text, warm_task, ScriptedModel};
use merit_core::model::{ChatModel, Embedder, ModelError};
use merit_interact::memory::{
    AdvisorConfig, CosineSelector, InsightConfig, InsightExtractor, Level, MemoryConfig,
    SelectError, Selection, SelectionInput, Selector, EPISODE_FILE, TURN_FILE,
};
use merit_interact::{
    read_log, run_tasks_with_memory, sqlite_backend, AgentConfig, EnvConfig, MemoryRun, ReactAgent,
    RunError, RunSpec, RunSummary, ScriptedSimulator, TaskSet,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;

const SOLVE: &str =
    "Thought: done.\nAction: submit('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')";
const INSIGHT: &str = r#"{"worked": ["submitted a direct count"], "failed": [],
  "key_insight": "Warm means an air temperature above 20 degrees.", "info_gaps": []}"#;

/// Word-count vectors over a few words of the warm task, plus a catch-all axis.
struct WordEmbedder;

const WORDS: [&str; 4] = ["observatories", "warm", "weather", "submit"];

impl Embedder for WordEmbedder {
    fn id(&self) -> String {
        "test:words".into()
    }
    fn dimension(&self) -> usize {
        WORDS.len() + 1
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| {
                let lower = text.to_lowercase();
                let mut v: Vec<f32> = WORDS
                    .iter()
                    .map(|w| lower.matches(w).count() as f32)
                    .collect();
                v.push(1.0);
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / norm).collect()
            })
            .collect())
    }
}

const LOOK: &str = "Thought: look first.\nAction: get_schema()";

/// Agent and insight model in one: insight requests get the insight; the agent reads the
/// schema on its first turn and submits the solution on its second, so every episode has an
/// intermediate turn where turn-level memory is consulted.
fn model() -> Arc<ScriptedModel> {
    ScriptedModel::new("solver", |request, _| {
        Ok(if request.prompt_version.contains("insight") {
            INSIGHT.to_string()
        } else if request.messages.len() <= 2 {
            LOOK.to_string()
        } else {
            SOLVE.to_string()
        })
    })
}

fn tasks() -> (tempfile::TempDir, TaskSet, Vec<String>) {
    let ids: Vec<String> = (1..=3).map(|n| format!("alien_96{n:02}")).collect();
    let records: Vec<_> = ids.iter().map(|id| warm_task(id, false)).collect();
    let (dir, set) = custom_tasks(&records);
    (dir, set, ids)
}

fn run(
    set: &TaskSet,
    ids: &[String],
    dir: &Path,
    base: Option<&Path>,
    write: bool,
    model: Arc<ScriptedModel>,
) -> RunSummary {
    let cosine = CosineSelector::default();
    run_at_once(set, ids, dir, base, write, model, 1, &cosine).expect("the run finishes")
}

#[allow(clippy::too_many_arguments)]
fn run_at_once(
    set: &TaskSet,
    ids: &[String],
    dir: &Path,
    base: Option<&Path>,
    write: bool,
    model: Arc<ScriptedModel>,
    episodes_at_once: usize,
    selector: &dyn Selector,
) -> Result<RunSummary, RunError> {
    let advisor = AdvisorConfig::default();
    run_with_advisor(
        set,
        ids,
        dir,
        base,
        write,
        model,
        episodes_at_once,
        selector,
        advisor,
    )
}

#[allow(clippy::too_many_arguments)]
fn run_with_advisor(
    set: &TaskSet,
    ids: &[String],
    dir: &Path,
    base: Option<&Path>,
    write: bool,
    model: Arc<ScriptedModel>,
    episodes_at_once: usize,
    selector: &dyn Selector,
    advisor: AdvisorConfig,
) -> Result<RunSummary, RunError> {
    let log = dir.join("episodes.jsonl");
    let spec = RunSpec {
        set,
        instance_ids: ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once,
    };
    let agent = ReactAgent::new(model.clone() as Arc<dyn ChatModel>, AgentConfig::default());
    let extractor = InsightExtractor::new(model, InsightConfig::default());
    let memory = MemoryRun {
        dir: dir.join("memory"),
        base: base.map(Path::to_path_buf),
        config: MemoryConfig::default(),
        advisor,
        embedder: &WordEmbedder,
        episode_selector: selector,
        turn_selector: selector,
        insight: Some(&extractor),
        write,
    };
    run_tasks_with_memory(
        &spec,
        &agent,
        &memory,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
}

/// Reads the schema on its first three turns and submits the solution on the fourth: three
/// intermediate turns in nearly the same state, where a retriever keeps finding the same
/// memory.
fn looping_model() -> Arc<ScriptedModel> {
    ScriptedModel::new("looper", |request, _| {
        Ok(if request.prompt_version.contains("insight") {
            INSIGHT
        } else if request.messages.len() <= 6 {
            LOOK
        } else {
            SOLVE
        }
        .to_string())
    })
}

/// The turn memories chosen for the third episode, turn by turn.
fn turn_choices_in_the_third_episode(turn_memories_once: bool) -> Vec<Vec<u64>> {
    let (dir, set, ids) = tasks();
    let advisor = AdvisorConfig {
        turn_memories_once,
        ..AdvisorConfig::default()
    };
    let cosine = CosineSelector::default();
    let model = looping_model();
    run_with_advisor(
        &set,
        &ids,
        dir.path(),
        None,
        true,
        model,
        1,
        &cosine,
        advisor,
    )
    .expect("the run finishes");
    let log = read_log(&dir.path().join("episodes.jsonl")).unwrap();
    log.records[2]
        .injections
        .iter()
        .filter(|i| i.level == Level::Turn)
        .map(|i| i.chosen.clone())
        .collect()
}

#[test]
fn turn_memories_once_shows_each_turn_memory_at_most_once_per_episode() {
    // Without the option the nearly unchanged state finds the same memory again.
    let plain = turn_choices_in_the_third_episode(false);
    assert_eq!(plain.len(), 3, "turns 2 to 4: {plain:?}");
    let mut seen = plain.concat();
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() < 3, "{plain:?}");
    // With it every retrieval picks among the memories not shown yet in this episode.
    let once = turn_choices_in_the_third_episode(true);
    assert_eq!(once.len(), 3, "{once:?}");
    assert!(once.iter().all(|chosen| chosen.len() == 1), "{once:?}");
    let mut all = once.concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 3, "three different memories: {once:?}");
    // The first retrieval is the plain one's: nothing has been shown yet.
    assert_eq!(once[0], plain[0]);
}

fn file(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

#[test]
fn memories_reach_later_episodes_only_and_every_retrieval_is_recorded() {
    let (dir, set, ids) = tasks();
    let model = model();
    let summary = run(&set, &ids, dir.path(), None, true, model.clone());
    assert_eq!(summary.ran, 3);
    let agent_requests: Vec<String> = model
        .seen()
        .iter()
        .filter(|r| r.prompt_version.ends_with("/agent"))
        .map(request_text)
        .collect();
    assert_eq!(agent_requests.len(), 6, "two turns per episode");
    // The first episode has nothing to retrieve; the later ones see the earlier episodes.
    assert!(!agent_requests[0].contains("From your memory"));
    assert!(!agent_requests[1].contains("Memory hint"));
    for episode in agent_requests[2..].chunks(2) {
        let (opening, second) = (&episode[0], &episode[1]);
        assert!(opening.contains("From your memory"), "{opening}");
        assert!(opening.contains("Warm means an air temperature above 20 degrees."));
        // Turn-level memory serves intermediate turns only: the opening has no hint.
        assert!(!opening.contains("Memory hint"), "{opening}");
        assert!(second.contains("Memory hint"), "{second}");
        assert!(
            second.contains("SUBMIT SQL: SELECT COUNT(*) FROM observatories WHERE airtempc > ?")
        );
        // The episode's memories come before the task (as the paper's prompt places them),
        // the turn hint after the first observation.
        let at = |text: &str| second.find(text).unwrap();
        assert!(at("From your memory") < at("Start with your first Thought and Action."));
        assert!(at("Start with your first Thought and Action.") < at("Memory hint"));
    }
    let log = read_log(&dir.path().join("episodes.jsonl")).unwrap();
    let first = &log.records[0];
    assert_eq!(first.injections.len(), 2, "{:?}", first.injections);
    assert!(first.injections.iter().all(|i| i.candidates.is_empty()));
    let third = &log.records[2];
    let episode = third
        .injections
        .iter()
        .find(|i| i.level == Level::Episode)
        .unwrap();
    assert_eq!(episode.turn, 0);
    assert_eq!(episode.candidates.len(), 2, "two earlier episodes");
    assert_eq!(episode.chosen.len(), 1, "the paper's default injects one");
    assert_eq!(episode.selector, "cosine");
    let turn = third
        .injections
        .iter()
        .find(|i| i.level == Level::Turn)
        .unwrap();
    assert_eq!(turn.turn, 2, "the first intermediate turn");
    assert!(third.insight.is_some());
    assert_eq!(third.memory_usage.as_ref().unwrap().insight_calls, 1);
    let memory = dir.path().join("memory");
    assert_eq!(file(&memory, EPISODE_FILE).lines().count(), 3);
    assert_eq!(file(&memory, TURN_FILE).lines().count(), 6, "one per step");
}

#[test]
fn a_resumed_run_rebuilds_the_same_memory_as_an_uninterrupted_one() {
    let (dir, set, ids) = tasks();
    let whole = dir.path().join("whole");
    run(&set, &ids, &whole, None, true, model());
    let parts = dir.path().join("parts");
    run(&set, &ids[..1], &parts, None, true, model());
    // A kill in the middle of a commit: the episode line never reached the memory.
    std::fs::write(parts.join("memory").join(EPISODE_FILE), "").unwrap();
    let resumed_model = model();
    let summary = run(&set, &ids, &parts, None, true, resumed_model.clone());
    assert_eq!((summary.ran, summary.already_logged), (2, 1));
    for name in [
        "episodes.jsonl",
        "memory/episodes.jsonl",
        "memory/turns.jsonl",
    ] {
        assert_eq!(file(&whole, name), file(&parts, name), "{name} differs");
    }
    // Rebuilding asks no model: the insight of logged episodes is in the log.
    let insight_calls = resumed_model
        .seen()
        .iter()
        .filter(|r| r.prompt_version.contains("insight"))
        .count();
    assert_eq!(insight_calls, 2);
}

#[test]
fn a_frozen_memory_is_read_but_not_extended() {
    let (dir, set, ids) = tasks();
    let train = dir.path().join("train");
    run(&set, &ids[..1], &train, None, true, model());
    let eval = dir.path().join("eval");
    let model = model();
    run(
        &set,
        &ids[1..],
        &eval,
        Some(&train.join("memory")),
        false,
        model.clone(),
    );
    for name in [EPISODE_FILE, TURN_FILE] {
        assert_eq!(
            file(&train.join("memory"), name),
            file(&eval.join("memory"), name),
            "{name}: the frozen memory changed"
        );
    }
    let log = read_log(&eval.join("episodes.jsonl")).unwrap();
    for record in &log.records {
        let episode = record
            .injections
            .iter()
            .find(|i| i.level == Level::Episode)
            .unwrap();
        assert_eq!(episode.candidates.len(), 1, "only the base episode");
        assert!(
            record.insight.is_none(),
            "a frozen memory asks for no insight"
        );
    }
    assert!(model
        .seen()
        .iter()
        .all(|r| !r.prompt_version.contains("insight")));
}

/// Picks the first candidate and notes the ages it was shown, per level.
#[derive(Default)]
struct AgeRecorder {
    episode_ages: Mutex<Vec<u64>>,
}

impl Selector for AgeRecorder {
    fn name(&self) -> String {
        "ages".into()
    }
    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        if input.level == Level::Episode {
            let mut ages = self.episode_ages.lock().unwrap();
            ages.extend(input.candidates.iter().map(|c| c.features.age));
        }
        Ok(Selection {
            chosen: (!input.candidates.is_empty())
                .then_some(0)
                .into_iter()
                .collect(),
            note: None,
        })
    }
}

#[test]
fn a_frozen_memory_looks_equally_old_to_every_evaluation_task() {
    // Selector training measures a memory's age from the end of its bank; an evaluation on
    // the frozen bank must show the same age to its first task and to its last.
    let (dir, set, ids) = tasks();
    let train = dir.path().join("train");
    run(&set, &ids[..1], &train, None, true, model());
    let recorder = AgeRecorder::default();
    let eval_ids = vec![ids[1].clone(), ids[2].clone(), ids[1].clone()];
    run_at_once(
        &set,
        &eval_ids,
        &dir.path().join("eval"),
        Some(&train.join("memory")),
        false,
        model(),
        1,
        &recorder,
    )
    .expect("the run finishes");
    let ages = recorder.episode_ages.lock().unwrap().clone();
    assert_eq!(ages, vec![1, 1, 1], "one base memory, seen by three tasks");
}

#[test]
fn forks_at_a_frozen_turn_share_the_prefix_and_differ_by_their_memory() {
    use merit_interact::fork::{fork_episodes, summarise_forks, ForkArm, ForkSpec};
    use merit_interact::memory::{InteractMemory, RetrievalConfig};
    let (dir, set, ids) = tasks();
    // A memory from three solved episodes (one turn each).
    run(&set, &ids, dir.path(), None, true, model());
    let (memory, _) = InteractMemory::open(
        &dir.path().join("memory"),
        &WordEmbedder,
        MemoryConfig::default(),
    )
    .unwrap();
    // A logged episode to fork: schema first, then a submission that is right only when a
    // memory hint is in the prompt.
    let wrong = "Thought: guess.\nAction: submit('SELECT COUNT(*) FROM observatories')";
    let forking = ScriptedModel::new("forker", move |request, _| {
        let last = request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        Ok(if request.messages.len() <= 2 {
            "Thought: look first.\nAction: get_schema()".to_string()
        } else if last.contains("Memory hint") {
            SOLVE.to_string()
        } else {
            wrong.to_string()
        })
    });
    let log_dir = dir.path().join("logged");
    let spec = RunSpec {
        set: &set,
        instance_ids: &ids[..1],
        log: &log_dir.join("episodes.jsonl"),
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(
        forking.clone() as Arc<dyn ChatModel>,
        AgentConfig::default(),
    );
    merit_interact::run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
    let records = read_log(&log_dir.join("episodes.jsonl")).unwrap().records;
    assert!(records[0].turns.len() >= 2);
    assert!(!records[0].trajectory.outcome.phase1_passed);

    let calls_before = forking.seen().len();
    let cosine = CosineSelector::default();
    let arms = [
        ForkArm {
            name: "none".into(),
            selector: None,
        },
        ForkArm {
            name: "cosine".into(),
            selector: Some(&cosine),
        },
    ];
    let fork_spec = ForkSpec {
        set: &set,
        records: &records,
        turn: 2,
        memory: &memory,
        embedder: &WordEmbedder,
        retrieval: RetrievalConfig::default(),
        env: EnvConfig::default(),
    };
    let fork_log = dir.path().join("forks.jsonl");
    let fork = |log: &std::path::Path| {
        fork_episodes(
            &fork_spec,
            &agent,
            &arms,
            log,
            sqlite_backend,
            |_| ScriptedSimulator::default(),
            |_, _| {},
        )
        .unwrap()
    };
    let first = fork(&fork_log);
    assert_eq!((first.ran, first.already_logged), (2, 0));
    let outcomes = first.outcomes;
    let names: Vec<String> = arms.iter().map(|a| a.name.clone()).collect();
    let summary = summarise_forks(&outcomes, &names);
    assert_eq!(summary[0].forks, 1);
    assert_eq!(
        (summary[0].valid_next_action, summary[0].success),
        (0.0, 0.0)
    );
    assert_eq!(
        (summary[1].valid_next_action, summary[1].success),
        (100.0, 100.0)
    );
    // The replayed first turn asked no model; the first new request of each fork already
    // holds the schema observation of the shared prefix.
    let new_requests = &forking.seen()[calls_before..];
    assert!(new_requests.iter().all(|r| r.messages.len() >= 4));
    assert!(new_requests[0].messages[2].content.contains("get_schema()"));

    // Resumable: a second run over the same log runs nothing and reports the same forks; a
    // log cut inside its second line (a kill mid-write) reruns exactly that fork.
    let calls_after = forking.seen().len();
    let again = fork(&fork_log);
    assert_eq!((again.ran, again.already_logged), (0, 2));
    assert_eq!(again.outcomes, outcomes);
    assert_eq!(forking.seen().len(), calls_after);
    let text = std::fs::read_to_string(&fork_log).unwrap();
    let first_line = text.find('\n').unwrap() + 1;
    std::fs::write(&fork_log, &text[..first_line + 10]).unwrap();
    let resumed = fork(&fork_log);
    assert_eq!((resumed.ran, resumed.already_logged), (1, 1));
    assert_eq!(resumed.outcomes, outcomes);
    assert_eq!(std::fs::read_to_string(&fork_log).unwrap(), text);
}

#[test]
fn a_frozen_memory_runs_episodes_at_once_and_logs_what_one_at_a_time_logs() {
    let (dir, set, ids) = tasks();
    let train = dir.path().join("train");
    run(&set, &ids, &train, None, true, model());
    let base = train.join("memory");
    let one = dir.path().join("one");
    let many = dir.path().join("many");
    let cosine = CosineSelector::default();
    run_at_once(&set, &ids, &one, Some(&base), false, model(), 1, &cosine).unwrap();
    let summary = run_at_once(&set, &ids, &many, Some(&base), false, model(), 3, &cosine).unwrap();
    assert_eq!(summary.ran, 3);
    let log = file(&many, "episodes.jsonl");
    assert_eq!(log, file(&one, "episodes.jsonl"));
    let records = read_log(&many.join("episodes.jsonl")).unwrap().records;
    assert!(records.iter().all(|r| !r.injections.is_empty()));
    // The frozen memory is only read.
    assert_eq!(
        file(&many, "memory/episodes.jsonl"),
        file(&base, "episodes.jsonl")
    );
}

#[test]
fn a_written_memory_refuses_episodes_at_once() {
    let (dir, set, ids) = tasks();
    let model = model();
    let error = run_at_once(
        &set,
        &ids,
        dir.path(),
        None,
        true,
        model.clone(),
        2,
        &CosineSelector::default(),
    )
    .unwrap_err();
    assert!(
        matches!(error, RunError::ConcurrentMemoryWrites { at_once: 2 }),
        "{error}"
    );
    assert!(error.to_string().contains("frozen"), "{error}");
    assert!(model.seen().is_empty(), "nothing ran");
}
