//! Tests of the student process reward model on synthetic teacher annotations whose scores
//! are a deterministic function of the two embeddings and the pair features.

use merit_interact::memory::{TurnMemory, TurnState};
use merit_interact::prm::{Feedback, Flags, Judgement, Principles, Rubric};
use merit_learn::student::{
    agreement, mean_matching_reward, sidecar_path, student_agreement, train_grpo, train_sft,
    AgreementTable, GrpoConfig, PairFeatures, PairInput, RewardWeights, SftConfig, Stage,
    StudentConfig, StudentError, StudentPrm, TrainExample,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    // Box–Muller; 1 − u keeps the logarithm finite.
    let u: f32 = 1.0 - rng.random::<f32>();
    let v: f32 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

fn random_unit(rng: &mut ChaCha8Rng, d: usize) -> Vec<f32> {
    unit((0..d).map(|_| gaussian(rng)).collect())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn rubric(scores: [u8; 7], recommend: bool, warning: bool) -> Rubric {
    Rubric {
        principles: Principles::from_array(scores.map(|score| Judgement {
            score,
            reason: "Synthetic teacher reason.".to_string(),
        })),
        flags: Flags {
            recommend_injection: recommend,
            use_as_warning_only: warning,
        },
        feedback: Feedback {
            one_sentence_summary: "Synthetic summary.".to_string(),
            how_to_use: "Synthetic usage.".to_string(),
        },
    }
}

/// A synthetic teacher: fixed random directions, scores a deterministic function of the
/// embeddings and features.
struct World {
    d: usize,
    directions: [Vec<f32>; 4],
}

impl World {
    fn new(d: usize) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(99);
        World {
            d,
            directions: std::array::from_fn(|_| random_unit(&mut rng, d)),
        }
    }

    fn examples(&self, n: usize, seed: u64) -> Vec<TrainExample> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let d = self.d;
        let root = (d as f32).sqrt();
        let band = |x: f32| x.round().clamp(0.0, 5.0) as u8;
        (0..n)
            .map(|_| {
                let alpha: f32 = rng.random();
                let state = random_unit(&mut rng, d);
                let noise = random_unit(&mut rng, d);
                let memory = unit(
                    state
                        .iter()
                        .zip(&noise)
                        .map(|(s, e)| alpha * s + (1.0 - alpha * alpha).sqrt() * e)
                        .collect(),
                );
                let positive = rng.random::<bool>();
                let same_tool = rng.random::<bool>();
                let features = PairFeatures {
                    memory_positive: positive,
                    episode_reward: if positive { 1.0 } else { 0.0 },
                    same_previous_tool: same_tool,
                    request_overlap: (0.8 * alpha + 0.2 * rng.random::<f32>()).min(1.0),
                };
                let cos = dot(&state, &memory);
                let z = |v: &[f32], k: usize| root * dot(v, &self.directions[k]);
                let state_match = band(5.0 * cos);
                let actionability = band(2.5 + 1.2 * z(&memory, 0));
                let generalizability = band(2.5 + 1.2 * z(&state, 1));
                let reliability = if positive { 4 } else { 1 } + u8::from(z(&memory, 2) > 0.0);
                let clarity = band(2.5 + 1.2 * z(&memory, 3));
                let confidence = band(1.0 + 4.0 * cos);
                let overall = band(
                    (f32::from(state_match) + f32::from(actionability)) / 2.0
                        + if same_tool { 0.5 } else { -0.5 },
                );
                TrainExample {
                    input: PairInput {
                        state,
                        memory,
                        features,
                    },
                    teacher: rubric(
                        [
                            state_match,
                            actionability,
                            generalizability,
                            reliability,
                            clarity,
                            confidence,
                            overall,
                        ],
                        overall >= 3,
                        !positive,
                    ),
                }
            })
            .collect()
    }
}

#[test]
fn trained_student_beats_untrained_and_grpo_keeps_the_reward() {
    let started = std::time::Instant::now();
    let world = World::new(384);
    // As in the paper, GRPO gets its own, larger pool of annotated pairs (5,346 SFT pairs and
    // 42,768 GRPO pairs there); the held-out pairs are seen by neither.
    let train = world.examples(3000, 1);
    let pool = world.examples(4000, 3);
    let held_out = world.examples(300, 2);
    let weights = RewardWeights::default();
    let config = StudentConfig::default();

    let untrained = StudentPrm::new(config.clone()).unwrap();
    let vanilla =
        student_agreement("student (untrained)", &untrained, &held_out, &weights).unwrap();

    let mut student = StudentPrm::new(config).unwrap();
    let sft_report = train_sft(&mut student, &train, &SftConfig::default()).unwrap();
    assert_eq!(student.stage(), Stage::Sft);
    assert!(sft_report.losses.last().unwrap() < sft_report.losses.first().unwrap());
    let sft = student_agreement("student (SFT)", &student, &held_out, &weights).unwrap();

    let reference = student.try_clone().unwrap();
    let grpo_report = train_grpo(&mut student, &reference, &pool, &GrpoConfig::default()).unwrap();
    assert_eq!(student.stage(), Stage::Grpo);
    let grpo = student_agreement("student (SFT+GRPO)", &student, &held_out, &weights).unwrap();
    // The reference is frozen: GRPO moved the student, not the SFT copy.
    assert_eq!(
        student_agreement("reference", &reference, &held_out, &weights)
            .unwrap()
            .accuracy,
        sft.accuracy
    );

    let table = AgreementTable {
        rows: vec![vanilla.clone(), sft.clone(), grpo.clone()],
    };
    eprintln!(
        "{}\nGRPO sampled reward: first {:.3}, last {:.3}; {:.1} s",
        table.to_markdown(),
        grpo_report.mean_rewards[0],
        grpo_report.mean_rewards.last().unwrap(),
        started.elapsed().as_secs_f32()
    );

    for row in [&vanilla, &sft, &grpo] {
        assert_eq!(row.format_validity, 100.0, "{}", row.model);
        assert_eq!(row.examples, 300);
    }
    assert!(
        sft.mae.unwrap() < 0.7 * vanilla.mae.unwrap(),
        "SFT MAE {:?} vs untrained {:?}",
        sft.mae,
        vanilla.mae
    );
    assert!(
        sft.accuracy > vanilla.accuracy + 20.0,
        "SFT accuracy {} vs untrained {}",
        sft.accuracy,
        vanilla.accuracy
    );
    assert!(grpo.mae.unwrap() < vanilla.mae.unwrap());
    assert!(grpo.accuracy > vanilla.accuracy);
    assert!(
        grpo.matching_reward >= sft.matching_reward,
        "GRPO reward {} < SFT reward {}",
        grpo.matching_reward,
        sft.matching_reward
    );
    let direct = mean_matching_reward(&student, &held_out, &weights).unwrap();
    assert!((f64::from(direct) - grpo.matching_reward).abs() < 1e-4);
}

fn small_world_student(seed: u64) -> (StudentPrm, Vec<TrainExample>) {
    let world = World::new(32);
    let train = world.examples(120, 5);
    let mut student = StudentPrm::new(StudentConfig {
        dimension: 32,
        projection: 8,
        hidden: 16,
        seed,
    })
    .unwrap();
    train_sft(
        &mut student,
        &train,
        &SftConfig {
            epochs: 5,
            seed,
            ..SftConfig::default()
        },
    )
    .unwrap();
    let reference = student.try_clone().unwrap();
    train_grpo(
        &mut student,
        &reference,
        &train,
        &GrpoConfig {
            iterations: 5,
            seed,
            ..GrpoConfig::default()
        },
    )
    .unwrap();
    (student, train)
}

fn inputs(examples: &[TrainExample]) -> Vec<PairInput> {
    examples.iter().map(|e| e.input.clone()).collect()
}

#[test]
fn a_checkpoint_round_trip_predicts_identically() {
    let (student, data) = small_world_student(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("student.safetensors");
    let meta = student.save(&path).unwrap();
    assert_eq!(meta.stage, Stage::Grpo);
    assert!(sidecar_path(&path).exists());
    assert!(!dir.path().join("student.safetensors.tmp").exists());
    let loaded = StudentPrm::load(&path).unwrap();
    assert_eq!(loaded.stage(), Stage::Grpo);
    assert_eq!(loaded.config(), student.config());
    let before = student.predict(&inputs(&data)).unwrap();
    let after = loaded.predict(&inputs(&data)).unwrap();
    assert_eq!(before, after);

    // Weights from another save with this sidecar are refused.
    let other = StudentPrm::new(student.config().clone()).unwrap();
    let other_path = dir.path().join("other.safetensors");
    other.save(&other_path).unwrap();
    std::fs::copy(&other_path, &path).unwrap();
    let error = StudentPrm::load(&path).unwrap_err();
    assert!(
        matches!(&error, StudentError::Checkpoint { message, .. } if message.contains("checksum")),
        "{error}"
    );
    // A weights path ending in .json would collide with its sidecar.
    assert!(student.save(&dir.path().join("w.json")).is_err());
}

#[test]
fn training_is_deterministic_for_a_seed() {
    let (a, data) = small_world_student(11);
    let (b, _) = small_world_student(11);
    let (c, _) = small_world_student(12);
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
    );
    a.save(&pa).unwrap();
    b.save(&pb).unwrap();
    assert_eq!(std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap());
    let x = inputs(&data);
    assert_eq!(a.predict(&x).unwrap(), b.predict(&x).unwrap());
    assert_ne!(a.predict(&x).unwrap(), c.predict(&x).unwrap());
}

#[test]
fn bad_inputs_are_errors() {
    let student = StudentPrm::new(StudentConfig {
        dimension: 8,
        projection: 4,
        hidden: 4,
        seed: 0,
    })
    .unwrap();
    let features = PairFeatures {
        memory_positive: true,
        episode_reward: 1.0,
        same_previous_tool: false,
        request_overlap: 0.5,
    };
    let good = vec![0.5f32; 8];
    for (state, memory) in [
        (vec![1.0f32; 7], good.clone()),
        (good.clone(), vec![0.0f32; 8]),
        (good.clone(), vec![f32::NAN; 8]),
    ] {
        let input = PairInput {
            state,
            memory,
            features,
        };
        assert!(matches!(
            student.predict(&[input]),
            Err(StudentError::Input(_))
        ));
    }
    let nan_feature = PairInput {
        state: good.clone(),
        memory: good.clone(),
        features: PairFeatures {
            request_overlap: f32::INFINITY,
            ..features
        },
    };
    assert!(student.predict(&[nan_feature]).is_err());
    let mut student = student;
    assert!(train_sft(&mut student, &[], &SftConfig::default()).is_err());
    let mut invalid = rubric([3; 7], true, false);
    invalid.principles.overall_utility.score = 9;
    let example = TrainExample {
        input: PairInput {
            state: good.clone(),
            memory: good,
            features,
        },
        teacher: invalid,
    };
    assert!(matches!(
        train_sft(&mut student, &[example], &SftConfig::default()),
        Err(StudentError::Input(message)) if message.contains("invalid")
    ));
    assert!(StudentPrm::new(StudentConfig {
        dimension: 0,
        projection: 4,
        hidden: 4,
        seed: 0
    })
    .is_err());
}

#[test]
fn agreement_counts_invalid_predictions_as_misses() {
    let teacher = rubric([3; 7], true, false);
    let teachers = vec![teacher.clone(), teacher.clone(), teacher.clone()];
    let mut off_by_one = rubric([3; 7], true, true);
    off_by_one.principles.state_match.score = 4;
    off_by_one.principles.overall_utility.score = 1;
    let predictions = vec![Some(teacher.clone()), Some(off_by_one), None];
    let weights = RewardWeights::default();
    let row = agreement("llm", &predictions, &teachers, &weights).unwrap();
    assert!((row.format_validity - 200.0 / 3.0).abs() < 1e-9);
    // Scores: 7 + 5 hits of 21; flags: 2 + 1 hits of 6; all: 15 of 27.
    assert!((row.score_accuracy - 100.0 * 12.0 / 21.0).abs() < 1e-9);
    assert!((row.flag_accuracy - 50.0).abs() < 1e-9);
    assert!((row.accuracy - 100.0 * 15.0 / 27.0).abs() < 1e-9);
    // Errors over the two valid predictions: |1| + |2| over 14 scores.
    assert!((row.mae.unwrap() - 3.0 / 14.0).abs() < 1e-9);
    assert!((row.mse.unwrap() - 5.0 / 14.0).abs() < 1e-9);
    assert!(row.matching_reward < 2.0 / 3.0 && row.matching_reward > 0.5);
    let none = agreement("broken", &[None], &[teacher], &weights).unwrap();
    assert_eq!((none.format_validity, none.mae), (0.0, None));
    let markdown = AgreementTable {
        rows: vec![row, none],
    }
    .to_markdown();
    assert!(markdown.contains("| llm | 3 | 66.67 | 57.14 | 50.00 | 55.56 | 0.214 | 0.357 |"));
    assert!(markdown.contains("| broken | 1 | 0.00 | 0.00 | 0.00 | 0.00 | — | — | 0.000 |"));
    assert!(agreement("x", &predictions[..1], &teachers, &weights).is_err());
}

#[test]
fn features_come_from_the_pair() {
    let state = TurnState {
        initial_request: "Average age of singers".into(),
        current_request: "Average age of singers".into(),
        previous_action: Some("EXECUTE SQL: SELECT ?".into()),
        previous_observation: None,
    };
    let memory: TurnMemory = serde_json::from_value(serde_json::json!({
        "format": "merit-interact-memory-turn-v1", "id": 0, "instance_id": "t",
        "database": "db", "stream_pos": 0, "turn": 1,
        "state": {"initial_request": "Average age of the singers",
                  "current_request": "Average age of the singers",
                  "previous_action": "EXECUTE SQL: SELECT name FROM singer",
                  "previous_observation": null},
        "action_skeleton": "GET_SCHEMA", "result": "ok",
        "polarity": "negative", "episode_reward": 2.0
    }))
    .unwrap();
    let features = PairFeatures::from_pair(&state, &memory);
    assert!(!features.memory_positive);
    assert_eq!(features.episode_reward, 1.0);
    assert!(features.same_previous_tool);
    assert!((features.request_overlap - 0.8).abs() < 1e-6);
    assert_eq!(
        features.to_array(),
        [0.0, 1.0, 1.0, features.request_overlap]
    );
}

/// An embedder for tests: a deterministic vector from the text's bytes.
struct ByteEmbedder;

impl merit_core::model::Embedder for ByteEmbedder {
    fn id(&self) -> String {
        "test:bytes".into()
    }
    fn dimension(&self) -> usize {
        8
    }
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, merit_core::model::ModelError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![1.0f32; 8];
                for (i, b) in t.bytes().enumerate() {
                    v[i % 8] += f32::from(b) / 255.0;
                }
                v
            })
            .collect())
    }
}

/// A positive turn memory: a `GET_SCHEMA` step on a singer table.
fn schema_memory() -> merit_interact::memory::TurnMemory {
    serde_json::from_value(serde_json::json!({
        "format": "merit-interact-memory-turn-v1", "id": 4, "instance_id": "t",
        "database": "db", "stream_pos": 0, "turn": 1,
        "state": {"initial_request": "Count the singers", "current_request": "Count the singers",
                  "previous_action": null, "previous_observation": null},
        "action_skeleton": "GET_SCHEMA", "result": "CREATE TABLE singer (id INT)",
        "polarity": "positive", "episode_reward": 1.0
    }))
    .unwrap()
}

#[test]
fn annotations_become_examples_without_failures() {
    use merit_interact::prm::{memory_text, state_text, AnnotationRecord, Judged};
    let state = TurnState {
        initial_request: "Count the singers".into(),
        current_request: "Count the singers".into(),
        previous_action: None,
        previous_observation: None,
    };
    let memory = schema_memory();
    let record = |state_id: &str, result: Judged| AnnotationRecord {
        format: merit_interact::prm::ANNOTATION_FORMAT.into(),
        state_id: state_id.into(),
        memory_id: 4,
        state_text: state_text(&state),
        memory_text: memory_text(&memory),
        state: state.clone(),
        memory: memory.clone(),
        judge_model: "teacher".into(),
        prompt_version: "merit-interact-prm-v1/rubric".into(),
        grammar: false,
        calls: 1,
        prompt_tokens: 0,
        completion_tokens: 0,
        result,
    };
    let teacher = rubric([4, 3, 2, 5, 4, 3, 4], true, false);
    let records = vec![
        record("a", Judged::Failure("no JSON object".into())),
        record("b", Judged::Rubric(Box::new(teacher.clone()))),
    ];
    let examples =
        merit_learn::student::examples_from_annotations(&records, &ByteEmbedder).unwrap();
    assert_eq!(examples.len(), 1);
    let example = &examples[0];
    assert_eq!(example.teacher, teacher);
    let expected = ByteEmbedder
        .embed(&[state_text(&state), memory_text(&memory)])
        .unwrap();
    use merit_core::model::Embedder as _;
    assert_eq!(example.input.state, expected[0]);
    assert_eq!(example.input.memory, expected[1]);
    assert!(example.input.features.memory_positive);
    assert!(example.input.features.same_previous_tool);
    assert_eq!(example.input.features.request_overlap, 1.0);
}

#[test]
fn the_training_pipeline_splits_by_state_trains_and_refuses_too_little() {
    use merit_interact::memory::TurnState;
    use merit_interact::prm::{memory_text, state_text, AnnotationRecord, Judged};
    use merit_learn::student::{bucket, train_student, SplitBy, StudentTraining};
    let state = |n: usize| TurnState {
        initial_request: format!("Count the singers of group {n}"),
        current_request: format!("Count the singers of group {n}"),
        previous_action: None,
        previous_observation: None,
    };
    let memory = schema_memory();
    let record = |n: usize, memory_id: u64| AnnotationRecord {
        format: merit_interact::prm::ANNOTATION_FORMAT.into(),
        state_id: format!("s{n}"),
        memory_id,
        state_text: state_text(&state(n)),
        memory_text: memory_text(&memory),
        state: state(n),
        memory: memory.clone(),
        judge_model: "teacher".into(),
        prompt_version: "merit-interact-prm-v1/rubric".into(),
        grammar: false,
        calls: 1,
        prompt_tokens: 0,
        completion_tokens: 0,
        result: Judged::Rubric(Box::new(rubric(
            [(n % 5 + 1) as u8, 3, 2, 5, 4, 3, (n % 6) as u8],
            n.is_multiple_of(2),
            false,
        ))),
    };
    // Split by state: every pair of a state lands in one bucket.
    for n in 0..20 {
        let buckets: Vec<u64> = (0..4)
            .map(|m| bucket(&record(n, m), SplitBy::State))
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] == w[1]), "{buckets:?}");
    }
    // Split by task: every state of one task (`task#turn`) lands in one bucket, and tasks
    // spread over buckets.
    let turn_of = |task: usize, turn: usize| AnnotationRecord {
        state_id: format!("db_{task}#{turn}"),
        ..record(task, 0)
    };
    for task in 0..20 {
        let buckets: Vec<u64> = (1..6)
            .map(|turn| bucket(&turn_of(task, turn), SplitBy::Task))
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] == w[1]), "{buckets:?}");
    }
    let spread: std::collections::BTreeSet<u64> = (0..20)
        .map(|task| bucket(&turn_of(task, 1), SplitBy::Task))
        .collect();
    assert!(spread.len() > 5, "{spread:?}");
    let records: Vec<AnnotationRecord> = (0..60).map(|n| record(n, 4)).collect();
    let training = StudentTraining {
        held_out_percent: 30,
        split_by: SplitBy::State,
        seed: 7,
    };
    let trained = train_student(records.clone(), &ByteEmbedder, training).unwrap();
    let (sft, grpo, held_out) = trained.sizes;
    assert_eq!(sft + grpo + held_out, 60);
    assert!(sft > 0 && grpo > 0 && held_out > 0);
    let names: Vec<&str> = trained
        .agreement
        .rows
        .iter()
        .map(|r| r.model.as_str())
        .collect();
    assert_eq!(
        names,
        ["student (untrained)", "student (SFT)", "student (SFT+GRPO)"]
    );
    // Deterministic: the same records and seed give the same table.
    let again = train_student(records.clone(), &ByteEmbedder, training).unwrap();
    assert_eq!(
        serde_json::to_string(&again.agreement).unwrap(),
        serde_json::to_string(&trained.agreement).unwrap()
    );
    // Too few judged pairs, or a held-out share out of range: clear errors.
    let error = train_student(records[..5].to_vec(), &ByteEmbedder, training).unwrap_err();
    assert!(
        error.to_string().contains("only 5 annotated pairs"),
        "{error}"
    );
    let bad = StudentTraining {
        held_out_percent: 0,
        ..training
    };
    assert!(train_student(records, &ByteEmbedder, bad)
        .unwrap_err()
        .to_string()
        .contains("between 1 and 99"));
}
