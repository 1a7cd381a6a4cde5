//! Episode-level PPO on real episodes (scripted models, the real mini-interact `alien`
//! database): the agent solves a task only when the *right* memory is injected, and the most
//! similar memory is a distractor. Training from scratch must learn to skip the distractor,
//! and the checkpoint must change what a run retrieves.

use merit_core::model::{ChatModel, ChatReply, ChatRequest, Embedder, ModelError};
use merit_interact::memory::{
    CosineSelector, InsightConfig, InsightExtractor, InteractMemory, Level, MemoryConfig,
    RetrievalConfig,
};
use merit_interact::{
    read_log, run_tasks_with_memory, sqlite_backend, AgentConfig, EnvConfig, MemoryRun, ReactAgent,
    RunSpec, ScriptedSimulator, TaskSet,
};
use merit_learn::selector::{
    decision_shift, LearnedSelector, PpoConfig, PpoTrainer, SelectionExample, SelectorConfig,
};
use merit_learn::train::{
    train_episode_selector, turn_examples, EpisodeTraining, EpisodeTrainingOutcome, UpdateRecord,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const REQUEST: &str = "How many observatories have warm weather?";
const GOOD_REQUEST: &str = "Please count the observatories where the weather is warm.";
const RIGHT: &str = "SELECT COUNT(*) FROM observatories WHERE airtempc > 20";
const WRONG: &str = "SELECT COUNT(*) FROM observatories";

/// Agent, insight writer and nothing else: solves only when the good memory's insight is in
/// the prompt; the insight of an episode names its request's kind.
struct Model;

impl ChatModel for Model {
    fn id(&self) -> String {
        "test:memory-dependent".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let text: String = request
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let reply = if request.prompt_version.contains("insight") {
            let key = if text.contains(GOOD_REQUEST) {
                "MAGIC: warm means airtempc above 20."
            } else {
                "Nothing special."
            };
            format!(
                r#"{{"worked": ["submitted"], "failed": [], "key_insight": "{key}", "info_gaps": []}}"#
            )
        } else if text.contains("MAGIC") || text.contains(GOOD_REQUEST) {
            format!("Thought: ok.\nAction: submit('{RIGHT}')")
        } else {
            format!("Thought: guess.\nAction: submit('{WRONG}')")
        };
        Ok(ChatReply {
            text: reply,
            prompt_tokens: 10,
            completion_tokens: 5,
            latency: std::time::Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// Counts of a few words plus a constant axis: the distractor's request equals the training
/// request, so it is always the most similar candidate.
struct Words;

impl Embedder for Words {
    fn id(&self) -> String {
        "test:words".into()
    }
    fn dimension(&self) -> usize {
        5
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| {
                let lower = text.to_lowercase();
                let mut v: Vec<f32> = ["observatories", "warm", "how", "please"]
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

fn mini_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/interact/mini-interact")
}

fn task(id: &str, request: &str) -> serde_json::Value {
    serde_json::json!({
        "instance_id": id, "selected_database": "alien",
        "amb_user_query": request,
        "query": "How many observatories recorded an air temperature above 20 degrees Celsius?",
        "sol_sql": [RIGHT], "test_cases": [], "category": "Query",
        "conditions": {"decimal": 2, "distinct": false, "order": false},
        "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
        "knowledge_ambiguity": []
    })
}

/// The memory: a distractor (same request as training, useless insight) and the good one.
fn build_memory(dir: &Path, set: &TaskSet) -> InteractMemory {
    let ids = vec!["alien_9801".to_string(), "alien_9802".to_string()];
    let log = dir.join("source/episodes.jsonl");
    let spec = RunSpec {
        set,
        instance_ids: &ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    let model: Arc<dyn ChatModel> = Arc::new(Model);
    let agent = ReactAgent::new(Arc::clone(&model), AgentConfig::default());
    let extractor = InsightExtractor::new(model, InsightConfig::default());
    let selector = CosineSelector::default();
    let memory = MemoryRun {
        dir: dir.join("source/memory"),
        base: None,
        // Keep both source episodes whatever their outcome.
        config: MemoryConfig {
            retention: merit_interact::memory::Retention::All,
            ..MemoryConfig::default()
        },
        advisor: merit_interact::memory::AdvisorConfig {
            episode_level: false,
            turn_level: false,
            ..Default::default()
        },
        embedder: &Words,
        episode_selector: &selector,
        turn_selector: &selector,
        insight: Some(&extractor),
        write: true,
    };
    run_tasks_with_memory(
        &spec,
        &agent,
        &memory,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
    let (memory, _) =
        InteractMemory::open(&dir.join("source/memory"), &Words, MemoryConfig::default()).unwrap();
    assert_eq!(memory.episode_bank().len(), 2);
    memory
}

fn train(
    set: &TaskSet,
    ids: &[String],
    memory: &InteractMemory,
    updates: usize,
) -> (PpoTrainer, Vec<UpdateRecord>, Vec<SelectionExample>) {
    let ppo = PpoConfig {
        learning_rate: 1e-2,
        ..PpoConfig::default()
    };
    let spec = EpisodeTraining {
        set,
        instance_ids: ids,
        memory,
        embedder: &Words,
        turn_selector: None,
        retrieval: RetrievalConfig::default(),
        turn_memories_once: false,
        env: EnvConfig::default(),
        updates,
        batch: 16,
        seed: 11,
    };
    let (trainer, outcome) = train_from_scratch(&spec, ppo, Arc::new(Model));
    (trainer, outcome.records, outcome.examples)
}

/// The two source tasks (their episodes make the memory), training tasks `alien_98{n}` for
/// `n` in `numbers`, the task set, and the memory built from the source episodes.
fn training_setup(
    numbers: std::ops::Range<u32>,
) -> (tempfile::TempDir, TaskSet, Vec<String>, InteractMemory) {
    let dir = tempfile::tempdir().unwrap();
    let mut records = vec![
        task("alien_9801", REQUEST),
        task("alien_9802", GOOD_REQUEST),
    ];
    let train_ids: Vec<String> = numbers.map(|n| format!("alien_98{n}")).collect();
    records.extend(train_ids.iter().map(|id| task(id, REQUEST)));
    let file = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let set = TaskSet::load(&file, &mini_root()).unwrap();
    let memory = build_memory(dir.path(), &set);
    (dir, set, train_ids, memory)
}

#[test]
fn the_episode_selector_learns_from_terminal_rewards_and_changes_what_a_run_retrieves() {
    let (dir, set, train_ids, memory) = training_setup(10..18);

    let (trainer, curve, examples) = train(&set, &train_ids, &memory, 30);
    // A solved task without follow-up earns 0.7 (phase 1 only). The untrained policy is near
    // uniform over {none, distractor, good}: about a third of its episodes succeed.
    let first = curve[0].mean_reward;
    let late: f64 = curve[25..].iter().map(|r| r.mean_reward).sum::<f64>() / 5.0;
    eprintln!("mean reward: first update {first:.3}, last 5 updates {late:.3}");
    assert!(
        curve.iter().all(|r| r.transitions == 16),
        "every episode had candidates"
    );
    assert!(first < 0.5, "the untrained policy already knew: {first:.3}");
    assert!(
        late > 0.6,
        "the selector did not learn: {first:.3} -> {late:.3}"
    );

    // Determinism: the same seed gives the same curve.
    let (untrained, _, _) = train(&set, &train_ids, &memory, 0);
    let (_, again, _) = train(&set, &train_ids, &memory, 3);
    assert_eq!(again[..], curve[..3]);

    // The problems met in training (all eight tasks share one request: one problem), and the
    // trained policy decides them differently from the untrained network of the same seed.
    assert_eq!(examples.len(), 1, "{examples:?}");
    let shift = decision_shift(
        &untrained.policy().unwrap(),
        &trainer.policy().unwrap(),
        &examples,
        1,
    )
    .unwrap();
    eprintln!("{shift:?}");
    assert_eq!(shift.problems, 1);
    assert!(shift.mean_total_variation > 0.2, "{shift:?}");
    assert!(shift.mean_none_after < shift.mean_none_before, "{shift:?}");
    assert!(shift.inject_rate_after == 1.0, "{shift:?}");

    // The checkpoint changes what a run injects: cosine takes the distractor, the learned
    // selector the good memory, and the run's success follows.
    let checkpoint = dir.path().join("episode-selector.safetensors");
    trainer.save(&checkpoint).unwrap();
    let learned = LearnedSelector::load(&checkpoint, Level::Episode, 5).unwrap();
    let eval_ids: Vec<String> = train_ids[..4].to_vec();
    let mut success = Vec::new();
    for (name, selector) in [
        (
            "cosine",
            &CosineSelector::default() as &dyn merit_interact::memory::Selector,
        ),
        ("learned", &learned),
    ] {
        let run_dir = dir.path().join(name);
        let log = run_dir.join("episodes.jsonl");
        let spec = RunSpec {
            set: &set,
            instance_ids: &eval_ids,
            log: &log,
            env: EnvConfig::default(),
            simulator_model: None,
            episodes_at_once: 1,
        };
        let model: Arc<dyn ChatModel> = Arc::new(Model);
        let agent = ReactAgent::new(Arc::clone(&model), AgentConfig::default());
        let run = MemoryRun {
            dir: run_dir.join("memory"),
            base: Some(dir.path().join("source/memory")),
            config: MemoryConfig::default(),
            advisor: merit_interact::memory::AdvisorConfig {
                turn_level: false,
                ..Default::default()
            },
            embedder: &Words,
            episode_selector: selector,
            turn_selector: selector,
            insight: None,
            write: false,
        };
        run_tasks_with_memory(
            &spec,
            &agent,
            &run,
            sqlite_backend,
            |_| ScriptedSimulator::default(),
            |_| {},
        )
        .unwrap();
        let logged = read_log(&log).unwrap().records;
        let chosen: Vec<Vec<u64>> = logged
            .iter()
            .map(|r| r.injections[0].chosen.clone())
            .collect();
        let good_id = memory
            .episode_bank()
            .entries()
            .iter()
            .find(|m| m.request == GOOD_REQUEST)
            .unwrap()
            .id;
        let expected = if name == "cosine" {
            vec![good_id ^ 1; 4]
        } else {
            vec![good_id; 4]
        };
        assert_eq!(
            chosen,
            expected.into_iter().map(|id| vec![id]).collect::<Vec<_>>(),
            "{name}"
        );
        success.push(
            logged
                .iter()
                .filter(|r| r.trajectory.outcome.phase1_passed)
                .count(),
        );
    }
    assert_eq!(
        success,
        [0, 4],
        "cosine fails every task, the learned selector none"
    );
}

/// [`Model`], counting the agent prompts that carry a turn-level memory hint.
struct CountingHints(std::sync::atomic::AtomicUsize);

impl ChatModel for CountingHints {
    fn id(&self) -> String {
        Model.id()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let last = request.messages.last().map(|m| m.content.as_str());
        if last.is_some_and(|text| text.contains("Memory hint:")) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Model.chat(request)
    }
}

/// Episode-level training of a fresh selector as `spec` says, the agent on `model`.
fn train_from_scratch(
    spec: &EpisodeTraining<'_>,
    ppo: PpoConfig,
    model: Arc<dyn ChatModel>,
) -> (PpoTrainer, EpisodeTrainingOutcome) {
    let mut trainer = PpoTrainer::new(SelectorConfig::new(Level::Episode, 5), ppo, 3).unwrap();
    let agent = ReactAgent::new(model, AgentConfig::default());
    let outcome = train_episode_selector(
        spec,
        &mut trainer,
        &agent,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
    (trainer, outcome)
}

/// [`train_from_scratch`] with the default PPO settings, for what the rollouts show.
fn one_update(spec: EpisodeTraining<'_>, model: Arc<dyn ChatModel>) {
    train_from_scratch(&spec, PpoConfig::default(), model);
}

#[test]
fn episode_training_can_run_with_turn_memory_as_evaluation_does() {
    let (_dir, set, train_ids, memory) = training_setup(20..24);
    assert!(
        !memory.turn_bank().entries().is_empty(),
        "the bank has turn memories"
    );
    let mut hints_seen = Vec::new();
    for turn_selector in [None, Some(&CosineSelector::default())] {
        let model = Arc::new(CountingHints(Default::default()));
        one_update(
            EpisodeTraining {
                set: &set,
                instance_ids: &train_ids,
                memory: &memory,
                embedder: &Words,
                turn_selector: turn_selector.map(|s| s as &dyn merit_interact::memory::Selector),
                retrieval: RetrievalConfig::default(),
                turn_memories_once: false,
                env: EnvConfig::default(),
                updates: 1,
                batch: 4,
                seed: 11,
            },
            model.clone(),
        );
        hints_seen.push(model.0.load(std::sync::atomic::Ordering::SeqCst));
    }
    assert_eq!(hints_seen[0], 0, "no turn memory unless asked for");
    assert!(hints_seen[1] > 0, "turn hints reach the training episodes");
}

/// Looks at the schema first, then answers as [`Model`] does: two-step episodes.
struct LookFirst;

impl ChatModel for LookFirst {
    fn id(&self) -> String {
        "test:look-first".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        if request.messages.len() <= 2 {
            let mut reply = Model.chat(request)?;
            reply.text = "Thought: look first.\nAction: get_schema()".into();
            Ok(reply)
        } else {
            Model.chat(request)
        }
    }
}

#[test]
fn turn_examples_start_at_the_second_turn() {
    let (dir, set, train_ids, memory) = training_setup(20..22);
    assert!(!memory.turn_bank().entries().is_empty());
    let retrieval = RetrievalConfig::default();
    let log = dir.path().join("two-step/episodes.jsonl");
    let spec = RunSpec {
        set: &set,
        instance_ids: &train_ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(Arc::new(LookFirst), AgentConfig::default());
    merit_interact::run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
    let records = read_log(&log).unwrap().records;
    assert_eq!(records.len(), train_ids.len());
    let examples = turn_examples(&records, &memory, &Words, &retrieval).unwrap();
    // One state before each turn from the second on: none before the first turn, where the
    // episode level serves (every state here has candidates: the bank holds other tasks).
    let expected: usize = records.iter().map(|r| r.trajectory.steps.len() - 1).sum();
    assert!(expected > 0);
    assert_eq!(examples.len(), expected);
    for record in &records {
        let turns: Vec<usize> = examples
            .iter()
            .filter(|e| e.instance_id == record.instance_id)
            .map(|e| e.turn)
            .collect();
        let steps = record.trajectory.steps.len();
        assert_eq!(
            turns,
            (2..=steps).collect::<Vec<_>>(),
            "{}",
            record.instance_id
        );
    }
    assert!(examples.iter().all(|e| e.state.previous_action.is_some()));
}

/// Looks at the schema for three turns, then answers as [`Model`] does: every episode has
/// turn-level retrievals before turns 2 to 4.
struct Wander;

impl ChatModel for Wander {
    fn id(&self) -> String {
        "test:wander".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let mut reply = Model.chat(request)?;
        let assistant_turns = request
            .messages
            .iter()
            .filter(|m| m.role == merit_core::model::Role::Assistant)
            .count();
        if !request.prompt_version.contains("insight") && assistant_turns < 3 {
            reply.text = "Thought: look again.\nAction: get_schema()".into();
        }
        Ok(reply)
    }
}

/// Cosine selection that records, for every turn-level call, the candidate ids it was
/// offered and the ids it chose.
#[derive(Default)]
struct RecordingTurns {
    calls: std::sync::Mutex<Vec<(Vec<u64>, Vec<u64>)>>,
}

impl merit_interact::memory::Selector for RecordingTurns {
    fn name(&self) -> String {
        "recording-cosine".into()
    }
    fn select(
        &self,
        input: &merit_interact::memory::SelectionInput<'_>,
    ) -> Result<merit_interact::memory::Selection, merit_interact::memory::SelectError> {
        let selection = CosineSelector::default().select(input)?;
        let offered = input.candidates.iter().map(|c| c.id).collect();
        let chosen = selection
            .chosen
            .iter()
            .map(|&i| input.candidates[i].id)
            .collect();
        self.calls.lock().unwrap().push((offered, chosen));
        Ok(selection)
    }
}

#[test]
fn episode_training_rollouts_show_each_turn_memory_once_when_asked() {
    let (_dir, set, train_ids, memory) = training_setup(30..33);
    let bank = memory.turn_bank().entries().len();
    assert!(
        bank >= 3,
        "enough turn memories for three retrievals: {bank}"
    );
    let mut runs = Vec::new();
    for turn_memories_once in [false, true] {
        let turns = RecordingTurns::default();
        one_update(
            EpisodeTraining {
                set: &set,
                instance_ids: &train_ids,
                memory: &memory,
                embedder: &Words,
                turn_selector: Some(&turns),
                retrieval: RetrievalConfig::default(),
                turn_memories_once,
                env: EnvConfig::default(),
                updates: 1,
                batch: 3,
                seed: 11,
            },
            Arc::new(Wander),
        );
        runs.push(turns.calls.into_inner().unwrap());
    }
    let (plain, once) = (&runs[0], &runs[1]);
    // Without the option every retrieval is offered the whole bank and takes the same memory
    // again and again.
    assert!(
        plain.iter().all(|(offered, _)| offered.len() == bank),
        "{plain:?}"
    );
    assert!(plain.windows(2).any(|w| w[0].1 == w[1].1), "{plain:?}");
    // With it, an episode's first retrieval is offered the whole bank and each later one only
    // what the episode has not been shown yet.
    let mut episodes: Vec<Vec<&(Vec<u64>, Vec<u64>)>> = Vec::new();
    for call in once {
        if call.0.len() == bank || episodes.is_empty() {
            episodes.push(Vec::new());
        }
        episodes.last_mut().unwrap().push(call);
    }
    assert_eq!(episodes.len(), 3, "three episodes: {once:?}");
    for episode in &episodes {
        assert!(episode.len() >= 3, "turns 2 to 4 at least: {episode:?}");
        let mut shown: Vec<u64> = Vec::new();
        for (offered, chosen) in episode {
            assert_eq!(offered.len(), bank - shown.len(), "{episode:?}");
            assert!(offered.iter().all(|id| !shown.contains(id)), "{episode:?}");
            assert_eq!(chosen.len(), 1, "{episode:?}");
            shown.extend(chosen);
        }
    }
}
