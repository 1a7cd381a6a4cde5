//! The dual-level memory: causality, two-stage retrieval, the selectors on hand examples,
//! insight extraction, retention, and the JSONL files. Trajectories are written by hand; the
//! embedder is a deterministic keyword counter, the chat models are scripted.

use crate::common::{request_text, ScriptedModel};
use merit_core::model::{Embedder, ModelError};
use merit_interact::memory::{
    retrieve, Bm25Selector, CosineSelector, EpisodeMemory, EpisodeQuery, InsightConfig,
    InsightExtractor, InteractMemory, MemoryConfig, MemoryError, ModelSelector, Polarity,
    Retention, RetrievalConfig, RetrievalError, SelectError, Selection, SelectionInput, Selector,
    StreamPos, TurnMemory, TurnState,
};
use merit_interact::{
    ActionCall, EndReason, Outcome, Phase, PublicTask, Trajectory, TrajectoryStep,
};
use std::sync::Mutex;

/// Counts keywords: coordinate i is how often `WORDS[i]` occurs (as a word) in the text; a
/// text with none of them maps to the last axis. Cosines are therefore easy to work out.
struct KeywordEmbedder;

const WORDS: [&str; 5] = ["singer", "concert", "stadium", "country", "year"];

impl Embedder for KeywordEmbedder {
    fn id(&self) -> String {
        "test:keywords".into()
    }
    fn dimension(&self) -> usize {
        WORDS.len() + 1
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| {
                let lower = text.to_lowercase();
                let tokens: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
                let mut v: Vec<f32> = WORDS
                    .iter()
                    .map(|w| tokens.iter().filter(|t| *t == w).count() as f32)
                    .collect();
                v.push(if v.iter().all(|x| *x == 0.0) {
                    1.0
                } else {
                    0.0
                });
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / norm).collect()
            })
            .collect())
    }
}

fn step(turn: usize, action: ActionCall, observation: &str) -> TrajectoryStep {
    TrajectoryStep {
        turn,
        phase: Phase::One,
        action,
        observation: format!("{observation}\n[Budget: 3.0/6.0 left.]"),
        cost: 0.5,
        budget_left: 3.0,
        thought: None,
    }
}

/// A finished trajectory of task `id` with `request`; solved when `reward > 0`.
fn trajectory(id: &str, request: &str, reward: f64) -> Trajectory {
    let steps = vec![
        step(
            1,
            ActionCall::get_schema(),
            "CREATE TABLE singer (name TEXT, age INT)",
        ),
        step(
            2,
            ActionCall::execute("SELECT name FROM singer WHERE age > 30"),
            "Ann\nBob",
        ),
        step(
            3,
            ActionCall::submit("SELECT name FROM singer WHERE age > 30"),
            if reward > 0.0 {
                "Correct: phase 1 is solved (reward 0.7)."
            } else {
                "The phase 1 submission is not correct: its result does not match the expected result."
            },
        ),
    ];
    Trajectory {
        task: PublicTask {
            instance_id: id.to_string(),
            selected_database: "concert_singer".to_string(),
            amb_user_query: request.to_string(),
        },
        budget_total: 6.0,
        opening: format!("Database: concert_singer\nTask: {id}\nUser question: {request}"),
        outcome: Outcome {
            phase1_passed: reward > 0.0,
            phase2_passed: false,
            reward,
            end: if reward > 0.0 {
                EndReason::Solved
            } else {
                EndReason::BudgetExhausted
            },
            turns: steps.len(),
            budget_spent: 1.5,
        },
        steps,
    }
}

fn memory(retention: Retention) -> InteractMemory {
    InteractMemory::in_memory(
        &KeywordEmbedder,
        MemoryConfig {
            retention,
            ..MemoryConfig::default()
        },
    )
}

fn retrieve_ids(
    memory: &InteractMemory,
    position: u64,
    instance: &str,
    request: &str,
    selector: &dyn Selector,
    config: &RetrievalConfig,
) -> (Vec<String>, Vec<String>) {
    let view = memory.episodes_at(StreamPos(position), instance);
    let query = EpisodeQuery {
        request: request.to_string(),
    };
    let result = retrieve(&view, &query, &KeywordEmbedder, selector, config).unwrap();
    let candidates = result
        .candidates
        .iter()
        .map(|c| c.entry.instance_id.clone())
        .collect();
    let chosen = result
        .injected()
        .map(|c| c.entry.instance_id.clone())
        .collect();
    (candidates, chosen)
}

#[test]
fn a_later_episode_or_the_same_instance_is_never_retrieved() {
    let mut memory = memory(Retention::All);
    for (position, id) in [(0, "a"), (1, "b"), (2, "c"), (5, "d")] {
        memory
            .commit(
                StreamPos(position),
                &trajectory(id, "How many singer rows?", 0.7),
                None,
                &KeywordEmbedder,
            )
            .unwrap();
    }
    let all = RetrievalConfig {
        inject: 5,
        ..RetrievalConfig::default()
    };
    let cosine = CosineSelector::default();
    // At position 2 on task b: only a (c is at position 2, d later, b is the same task).
    let (candidates, chosen) = retrieve_ids(&memory, 2, "b", "singer", &cosine, &all);
    assert_eq!(candidates, vec!["a"]);
    assert_eq!(chosen, vec!["a"]);
    // At position 5 on task c: a and b, not c itself, not d (position 5).
    let (candidates, _) = retrieve_ids(&memory, 5, "c", "singer", &cosine, &all);
    assert_eq!(candidates, vec!["a", "b"]);
    // Nothing before the first episode.
    let (candidates, chosen) = retrieve_ids(&memory, 0, "z", "singer", &cosine, &all);
    assert!(candidates.is_empty() && chosen.is_empty());
    // The whole memory after the end, for another task.
    let (candidates, _) = retrieve_ids(&memory, u64::MAX, "z", "singer", &cosine, &all);
    assert_eq!(candidates, vec!["a", "b", "c", "d"]);
    // Turn memories obey the same boundary.
    let view = memory.turns_at(StreamPos(2), "b");
    let seen: Vec<&str> = view.entries().map(|t| t.instance_id.as_str()).collect();
    assert_eq!(seen, vec!["a", "a", "a"]);
    // Commits follow the stream: an earlier or repeated position is refused.
    for position in [5, 3] {
        let error = memory
            .commit(
                StreamPos(position),
                &trajectory("e", "singer", 0.7),
                None,
                &KeywordEmbedder,
            )
            .unwrap_err();
        assert!(matches!(error, MemoryError::OutOfOrder { .. }), "{error}");
    }
}

/// What [`Fixed`] was shown once: candidate count, limit, every candidate's feature array.
type Shown = (usize, usize, Vec<[f32; 8]>);

/// A selector that returns whatever it was told and records what it was shown.
struct Fixed {
    answer: Vec<usize>,
    shown: Mutex<Vec<Shown>>,
}

impl Selector for Fixed {
    fn name(&self) -> String {
        "fixed".into()
    }
    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        self.shown.lock().unwrap().push((
            input.candidates.len(),
            input.limit,
            input
                .candidates
                .iter()
                .map(|c| c.features.to_array())
                .collect(),
        ));
        assert_eq!(input.query_embedding.len(), 6);
        assert!(input.candidates.iter().all(|c| c.embedding.len() == 6));
        Ok(Selection {
            chosen: self.answer.clone(),
            note: None,
        })
    }
}

#[test]
fn the_embedding_stage_keeps_ten_then_the_selector_chooses() {
    let mut memory = memory(Retention::All);
    // Requests with 1 to 14 mentions of "singer" and a fixed number of "concert": the
    // cosine with the query "singer" grows with the count. Tasks t0 and t1 are identical,
    // so their cosines tie.
    let requests: Vec<String> = (0..14)
        .map(|i| {
            let singers = if i == 0 { 1 } else { i };
            format!("{} concert concert concert", "singer ".repeat(singers))
        })
        .collect();
    for (i, request) in requests.iter().enumerate() {
        memory
            .commit(
                StreamPos(i as u64),
                &trajectory(&format!("t{i}"), request, 0.7),
                None,
                &KeywordEmbedder,
            )
            .unwrap();
    }
    let fixed = Fixed {
        answer: vec![42, 9, 9, 0],
        shown: Mutex::new(Vec::new()),
    };
    let config = RetrievalConfig::default();
    let (candidates, chosen) = retrieve_ids(&memory, 100, "x", "singer", &fixed, &config);
    // The ten best: t13 down to t4; t0..t3 are dropped.
    let expected: Vec<String> = (4..14).rev().map(|i| format!("t{i}")).collect();
    assert_eq!(candidates, expected);
    // Out-of-range and repeated indices are dropped, and only one memory is injected.
    assert_eq!(chosen, vec!["t4"]);
    let shown = fixed.shown.lock().unwrap();
    assert_eq!((shown[0].0, shown[0].1), (10, 1));
    // Features: ranks 1..10, normalised cosine 1 at the top and 0 at the bottom.
    assert_eq!(shown[0].2[0][0], 1.0);
    assert_eq!(shown[0].2[9][0], 0.1);
    assert_eq!(shown[0].2[0][2], 1.0);
    assert_eq!(shown[0].2[9][2], 0.0);
    drop(shown);
    // Ties keep insertion order: t0 and t1 are identical; a query for "concert" ranks them
    // (highest cosine) first, in commit order.
    let cosine = CosineSelector::default();
    let (candidates, chosen) = retrieve_ids(&memory, 100, "x", "concert", &cosine, &config);
    assert_eq!(&candidates[..2], &["t0", "t1"]);
    assert_eq!(chosen, vec!["t0"]);
    // Up to five may be injected; more is a configuration error.
    let three = RetrievalConfig {
        inject: 3,
        ..config
    };
    let fixed = Fixed {
        answer: vec![7, 2, 2, 5, 1],
        shown: Mutex::new(Vec::new()),
    };
    let (candidates, chosen) = retrieve_ids(&memory, 100, "x", "singer", &fixed, &three);
    assert_eq!(
        chosen,
        vec![
            candidates[7].clone(),
            candidates[2].clone(),
            candidates[5].clone()
        ]
    );
    for inject in [0, 6] {
        let view = memory.episodes_at(StreamPos(100), "x");
        let bad = RetrievalConfig { inject, ..config };
        let query = EpisodeQuery {
            request: "singer".into(),
        };
        let error = retrieve(&view, &query, &KeywordEmbedder, &cosine, &bad).unwrap_err();
        assert!(matches!(error, RetrievalError::Config(_)), "{error}");
    }
}

/// Three turn memories for the selector examples. The current state mentions "stadium" and
/// "year" in its words; memory m1 shares the rare word "capacity" with it (BM25's choice),
/// m2 has the closest embedding (many "stadium" words) but no shared rare word, m3 is about
/// something else.
fn selector_memory() -> InteractMemory {
    let mut memory = memory(Retention::All);
    let requests = [
        ("m1", "Which venue has the largest capacity?"),
        ("m2", "stadium stadium stadium stadium list"),
        ("m3", "How many singer per country?"),
    ];
    for (position, (id, request)) in requests.iter().enumerate() {
        let mut trajectory = trajectory(id, request, 0.7);
        trajectory.steps.truncate(1);
        memory
            .commit(
                StreamPos(position as u64),
                &trajectory,
                None,
                &KeywordEmbedder,
            )
            .unwrap();
    }
    memory
}

fn current_state() -> TurnState {
    TurnState {
        initial_request: "Show the stadium capacity for this year".into(),
        current_request: "Show the stadium capacity for this year".into(),
        previous_action: None,
        previous_observation: None,
    }
}

fn choose(memory: &InteractMemory, selector: &dyn Selector) -> (Vec<String>, Option<String>) {
    let view = memory.turns_at(StreamPos(10), "now");
    let result = retrieve(
        &view,
        &current_state(),
        &KeywordEmbedder,
        selector,
        &RetrievalConfig::default(),
    )
    .unwrap();
    let chosen = result
        .injected()
        .map(|c: &merit_interact::memory::Candidate<'_, TurnMemory>| c.entry.instance_id.clone())
        .collect();
    (chosen, result.note)
}

#[test]
fn each_selector_makes_its_choice_on_a_hand_example() {
    let memory = selector_memory();
    // Cosine: state (stadium 1, year 1) · m2 (stadium 4) = 1/√2 ≈ 0.707 > m1 (no keyword: last
    // axis, cosine 0) and m3 (singer, country: 0).
    assert_eq!(choose(&memory, &CosineSelector::default()).0, vec!["m2"]);
    assert_eq!(
        choose(
            &memory,
            &CosineSelector {
                min_cosine: Some(0.9)
            }
        )
        .0,
        Vec::<String>::new()
    );
    // BM25: "capacity" occurs only in m1 (and the shared words "show", "the", … in all), so
    // m1 scores highest.
    assert_eq!(choose(&memory, &Bm25Selector).0, vec!["m1"]);
    // The prompted selector picks what the model names: the candidates are listed by cosine
    // rank (m2, then m1 and m3 tied at 0, in commit order), so [3] is m3.
    let model = ScriptedModel::replies("selector", vec!["SELECTED: 3".into()]);
    let selector = ModelSelector::new(model.clone(), 64);
    assert_eq!(choose(&memory, &selector).0, vec!["m3"]);
    let request = &model.seen()[0];
    assert_eq!(
        request.prompt_version,
        "merit-interact-memory-v1/select-turn"
    );
    let prompt = request_text(request);
    assert!(prompt.contains("INIT: Show the stadium capacity for this year"));
    assert!(prompt.contains("[1]\nINIT: stadium stadium"));
    assert!(prompt.contains("[3]\nINIT: How many singer per country?"));
    assert!(prompt.contains("OUTCOME: POSITIVE"));
    assert!(prompt.contains("at most 1 may be shown"));
    assert!(!prompt.contains("{{"));
    // A malformed reply selects nothing and says why.
    let model = ScriptedModel::replies("selector", vec!["I would take the third".into()]);
    let (chosen, note) = choose(&memory, &ModelSelector::new(model, 64));
    assert!(chosen.is_empty());
    assert!(note.unwrap().contains("malformed"));
    // So does a refused (too long) request; a broken backend is an error.
    let refusing = ScriptedModel::new("selector", |_, _| {
        Err(ModelError::InvalidRequest("too long".into()))
    });
    assert!(choose(&memory, &ModelSelector::new(refusing, 64))
        .0
        .is_empty());
    let broken = ScriptedModel::new("selector", |_, _| Err(ModelError::Transport("down".into())));
    let view = memory.turns_at(StreamPos(10), "now");
    let error = retrieve(
        &view,
        &current_state(),
        &KeywordEmbedder,
        &ModelSelector::new(broken, 64),
        &RetrievalConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(error, RetrievalError::Select(_)), "{error}");
    // The episode level uses its own template.
    let model = ScriptedModel::replies("selector", vec!["SELECTED: none".into()]);
    let view = memory.episodes_at(StreamPos(10), "now");
    let query = EpisodeQuery {
        request: "stadium capacity".into(),
    };
    let result = retrieve(
        &view,
        &query,
        &KeywordEmbedder,
        &ModelSelector::new(model.clone(), 64),
        &RetrievalConfig::default(),
    )
    .unwrap();
    assert!(result.chosen.is_empty() && result.note.is_none());
    assert_eq!(
        model.seen()[0].prompt_version,
        "merit-interact-memory-v1/select-episode"
    );
    assert!(request_text(&model.seen()[0]).contains("request: How many singer per country?"));
}

/// The paper keeps the experience of successful trajectories only: the solved episode and its
/// helpful steps, nothing of the failed one. `PositiveSteps` (merit's earlier rule) also keeps
/// the helpful steps of the failed episode; `All` keeps everything with its polarity.
#[test]
fn retention_keeps_successful_episodes_by_default_and_other_rules_on_request() {
    assert_eq!(
        MemoryConfig::default().retention,
        Retention::SuccessfulEpisodes
    );
    let mut successful = memory(Retention::SuccessfulEpisodes);
    let mut positive = memory(Retention::PositiveSteps);
    let mut everything = memory(Retention::All);
    for memory in [&mut successful, &mut positive, &mut everything] {
        memory
            .commit(
                StreamPos(0),
                &trajectory("won", "singer", 0.7),
                None,
                &KeywordEmbedder,
            )
            .unwrap();
        memory
            .commit(
                StreamPos(1),
                &trajectory("lost", "singer", 0.0),
                None,
                &KeywordEmbedder,
            )
            .unwrap();
    }
    let ids = |m: &InteractMemory| -> Vec<(String, Polarity)> {
        m.episode_bank()
            .entries()
            .iter()
            .map(|e: &EpisodeMemory| (e.instance_id.clone(), e.polarity))
            .collect()
    };
    assert_eq!(
        ids(&successful),
        vec![("won".to_string(), Polarity::Positive)]
    );
    assert_eq!(
        ids(&positive),
        vec![("won".to_string(), Polarity::Positive)]
    );
    assert_eq!(
        ids(&everything),
        vec![
            ("won".to_string(), Polarity::Positive),
            ("lost".to_string(), Polarity::Negative)
        ]
    );
    let turns = |m: &InteractMemory| -> Vec<(String, Polarity)> {
        m.turn_bank()
            .entries()
            .iter()
            .map(|t: &TurnMemory| (t.instance_id.clone(), t.polarity))
            .collect()
    };
    // Successful episodes only: the won episode's helpful steps, none from the lost one.
    let won_helpful: Vec<(String, Polarity)> = turns(&everything)
        .into_iter()
        .filter(|(id, polarity)| id == "won" && *polarity == Polarity::Positive)
        .collect();
    assert!(!won_helpful.is_empty());
    assert_eq!(turns(&successful), won_helpful);
    assert!(turns(&positive).iter().any(|(id, _)| id == "lost"));
    // The failed submission is the only negative step; positive-only drops it.
    assert_eq!(positive.turn_bank().len(), 5);
    assert_eq!(everything.turn_bank().len(), 6);
    let negative: Vec<&TurnMemory> = everything
        .turn_bank()
        .entries()
        .iter()
        .filter(|t| t.polarity == Polarity::Negative)
        .collect();
    assert_eq!(negative.len(), 1);
    assert_eq!(negative[0].instance_id, "lost");
    assert_eq!(
        negative[0].action_skeleton,
        "SUBMIT SQL: SELECT name FROM singer WHERE age > ?"
    );
    assert_eq!(
        negative[0].state.previous_action.as_deref(),
        Some("EXECUTE SQL: SELECT name FROM singer WHERE age > ?")
    );
    assert_eq!(
        negative[0].state.previous_observation.as_deref(),
        Some("Ann\nBob")
    );
    assert_eq!(positive.last_committed(), Some(StreamPos(1)));
}

#[test]
fn the_turn_state_collects_clarifications_and_the_follow_up() {
    let task = PublicTask {
        instance_id: "t".into(),
        selected_database: "concert_singer".into(),
        amb_user_query: "Show recent concerts".into(),
    };
    let mut steps = vec![
        step(1, ActionCall::ask("Which years?"), "Only 2014 and later."),
        step(2, ActionCall::ask("And the venue?"), merit_interact::OUT_OF_SCOPE_REPLY),
        step(
            3,
            ActionCall::submit("SELECT * FROM concert WHERE year >= 2014"),
            "Correct: phase 1 is solved (reward 0.7). Phase 2 begins. The user follows up: Now count them per stadium.",
        ),
    ];
    steps[2].phase = Phase::One;
    let state = TurnState::at(&task, &steps, 300);
    assert_eq!(
        state.current_request,
        "Show recent concerts\nclarification: Which years? -> Only 2014 and later.\nfollow-up: Now count them per stadium."
    );
    assert_eq!(
        state.previous_action.as_deref(),
        Some("SUBMIT SQL: SELECT * FROM concert WHERE year >= ?")
    );
    assert_eq!(
        state.signature().lines().next(),
        Some("INIT: Show recent concerts")
    );
    let first = TurnState::at(&task, &[], 300);
    assert!(first
        .signature()
        .ends_with("PREV_ACT: (none)\nPREV_OBS: (none)"));
    assert_eq!(
        merit_interact::memory::turn::step_polarity(&steps[1]),
        Polarity::Negative
    );
    assert_eq!(
        merit_interact::memory::turn::step_polarity(&steps[0]),
        Polarity::Positive
    );
}

const INSIGHT: &str = r#"{"worked": ["checked the schema"], "failed": [],
  "key_insight": "Easy read-only request; one query settles it.", "info_gaps": []}"#;

#[test]
fn insights_are_validated_with_one_retry() {
    let model = ScriptedModel::replies(
        "insight",
        vec!["Sure! Here are my thoughts.".into(), INSIGHT.into()],
    );
    let extractor = InsightExtractor::new(model.clone(), InsightConfig::default());
    let trajectory = trajectory("a", "How many singer rows?", 0.7);
    let outcome = extractor.extract(&trajectory).unwrap();
    assert_eq!(outcome.calls, 2);
    assert_eq!(outcome.insight.unwrap().worked, vec!["checked the schema"]);
    let seen = model.seen();
    assert_eq!(seen[0].prompt_version, "merit-interact-memory-v1/insight");
    assert_eq!(
        seen[1].prompt_version,
        "merit-interact-memory-v1/insight-retry"
    );
    let first = request_text(&seen[0]);
    assert!(first.contains("How many singer rows?"));
    assert!(first.contains("2. (phase 1) execute(SELECT name FROM singer WHERE age > 30)"));
    assert!(first.contains("solved phase 1 only (reward 0.7)"));
    assert!(!first.contains("[Budget:"));
    assert!(!first.contains("{{"));
    assert!(request_text(&seen[1]).contains("it contains no JSON object"));
    // Two malformed replies: no insight, the reason of the second.
    let gap = INSIGHT.replace(
        "\"info_gaps\": []",
        "\"info_gaps\": [{\"key\": \"k\", \"question\": \"q\", \"answer\": \"a\", \"effect\": \"e\"}]",
    );
    let model = ScriptedModel::replies("insight", vec!["{".into(), gap]);
    let outcome = InsightExtractor::new(model, InsightConfig::default())
        .extract(&trajectory)
        .unwrap();
    assert_eq!(outcome.calls, 2);
    assert!(outcome
        .insight
        .unwrap_err()
        .contains("answered no question"));
    // A backend failure is an error, a refused request an unusable outcome.
    let broken = ScriptedModel::new("insight", |_, _| Err(ModelError::Transport("down".into())));
    assert!(InsightExtractor::new(broken, InsightConfig::default())
        .extract(&trajectory)
        .is_err());
}

#[test]
fn memory_files_round_trip_and_report_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let insight: merit_interact::memory::Insight =
        merit_interact::memory::insight::parse_insight(INSIGHT, false).unwrap();
    let config = MemoryConfig {
        retention: Retention::All,
        ..MemoryConfig::default()
    };
    let (mut memory, report) =
        InteractMemory::open(dir.path(), &KeywordEmbedder, config.clone()).unwrap();
    assert_eq!((report.episodes, report.turns), (0, 0));
    for (position, (id, reward)) in [("a", 0.7), ("b", 0.0), ("c", 1.0)].iter().enumerate() {
        memory
            .commit(
                StreamPos(position as u64 * 2),
                &trajectory(id, &format!("singer question {id}"), *reward),
                Some(insight.clone()),
                &KeywordEmbedder,
            )
            .unwrap();
    }
    let episodes = memory.episode_bank().entries().to_vec();
    let turns = memory.turn_bank().entries().to_vec();
    let vector = memory.episode_bank().vector(2).unwrap().to_vec();
    drop(memory);
    let (reopened, report) =
        InteractMemory::open(dir.path(), &KeywordEmbedder, config.clone()).unwrap();
    assert_eq!((report.episodes, report.turns), (3, 9));
    assert!(report.warnings.is_empty());
    assert_eq!(reopened.episode_bank().entries(), &episodes[..]);
    assert_eq!(reopened.turn_bank().entries(), &turns[..]);
    assert_eq!(reopened.episode_bank().vector(2), Some(&vector[..]));
    assert_eq!(reopened.episode_bank().vector(3), None);
    assert_eq!(reopened.last_committed(), Some(StreamPos(4)));
    assert_eq!(episodes[1].insight.as_ref(), Some(&insight));
    // Write → read → write gives the same bytes.
    let file = dir.path().join("episodes.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let rewritten: String = episodes
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    assert_eq!(text, rewritten);
    drop(reopened);

    // A torn last line is dropped with a warning and cut off before the next append.
    let mut torn = text.clone();
    torn.push_str("{\"format\":\"merit-interact-memory-episode-v1\",\"id\":3,\"inst");
    std::fs::write(&file, &torn).unwrap();
    let (mut memory, report) =
        InteractMemory::open(dir.path(), &KeywordEmbedder, config.clone()).unwrap();
    assert_eq!(report.warnings.len(), 1);
    assert!(report.warnings[0].contains("episodes.jsonl line 4"));
    assert_eq!(memory.episode_bank().len(), 3);
    memory
        .commit(
            StreamPos(9),
            &trajectory("d", "singer", 0.7),
            None,
            &KeywordEmbedder,
        )
        .unwrap();
    drop(memory);
    let (memory, report) =
        InteractMemory::open(dir.path(), &KeywordEmbedder, config.clone()).unwrap();
    assert!(report.warnings.is_empty());
    assert_eq!(memory.episode_bank().len(), 4);
    drop(memory);

    // Anything else is an error naming the file and the line.
    let good = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = good.lines().collect();
    let cases = [
        (
            format!("{}\nnot json\n{}\n", lines[0], lines[1]),
            "line 2",
            "not JSON",
        ),
        (
            format!("{}\n\n{}\n", lines[0], lines[1]),
            "line 2",
            "empty line",
        ),
        (
            format!("{}\n{}\n", lines[0], lines[0]),
            "line 2",
            "id 0 where id 1",
        ),
        (
            format!("{}\n", lines[0].replace("episode-v1", "episode-v0")),
            "line 1",
            "format",
        ),
        (
            format!("{}\n", lines[0].replacen("{", "{\"surprise\":1,", 1)),
            "line 1",
            "unknown field",
        ),
    ];
    for (content, line, reason) in cases {
        std::fs::write(&file, content).unwrap();
        let error = InteractMemory::open(dir.path(), &KeywordEmbedder, config.clone()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("episodes.jsonl")
                && message.contains(line)
                && message.contains(reason),
            "{message}"
        );
    }
    // Out-of-order stream positions in the turn file.
    std::fs::write(&file, "").unwrap();
    let turns_file = dir.path().join("turns.jsonl");
    let turn_text = std::fs::read_to_string(&turns_file).unwrap();
    let turn_lines: Vec<&str> = turn_text.lines().collect();
    let swapped = format!(
        "{}\n{}\n",
        turn_lines[3].replace("\"id\":3", "\"id\":0"),
        turn_lines[0].replace("\"id\":0", "\"id\":1")
    );
    std::fs::write(&turns_file, swapped).unwrap();
    let message = InteractMemory::open(dir.path(), &KeywordEmbedder, config)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("turns.jsonl line 2") && message.contains("does not follow"),
        "{message}"
    );
}
