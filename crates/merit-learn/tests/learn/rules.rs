//! The small-data tools around the turn selector: the features-only network, the split of
//! states by task and the scoring of selection rules on held-out states.
//!
//! The bandit here is one a features-only policy can solve and a plain retriever cannot:
//! the useful candidate is the one from a *positive* memory, the top-ranked candidate is a
//! negative one half the time, and when no positive memory is among the candidates the right
//! call is to inject nothing.

use merit_interact::memory::{CandidateFeatures, Level};
use merit_learn::selector::{
    ExampleCandidate, PpoConfig, PpoTrainer, SelectionExample, SelectorConfig, SelectorInputs,
    SelectorPolicy, Transition,
};
use merit_learn::train::{score_rules, split_by_task, BanditReward, TrainError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIM: usize = 12;
const NONE_REWARD: f64 = 0.1;

/// Rewards: 1 for a positive memory, −0.5 for a negative one, [`NONE_REWARD`] for none.
struct ByPolarity<'a>(&'a [SelectionExample]);

impl BanditReward for ByPolarity<'_> {
    fn reward(&self, index: usize, choice: usize) -> Result<f64, TrainError> {
        let positive = self.0[index].candidates[choice].features.positive;
        Ok(if positive { 1.0 } else { -0.5 })
    }
    fn none(&self) -> f64 {
        NONE_REWARD
    }
}

fn example(rng: &mut ChaCha8Rng) -> SelectionExample {
    let unit = |rng: &mut ChaCha8Rng| {
        let v: Vec<f32> = (0..DIM).map(|_| rng.random_range(-1.0..1.0f32)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
    };
    let count = rng.random_range(2..=6usize);
    let positive_at = if rng.random::<f64>() < 0.7 {
        Some(rng.random_range(0..count))
    } else {
        None
    };
    let query = unit(rng);
    let candidates = (0..count)
        .map(|i| ExampleCandidate {
            embedding: unit(rng),
            features: CandidateFeatures {
                rank: i + 1,
                cosine: 0.9 - 0.1 * i as f64,
                cosine_normalized: 1.0 - i as f64 / count as f64,
                bm25: rng.random_range(0.0..4.0),
                bm25_normalized: rng.random_range(0.0..1.0),
                positive: Some(i) == positive_at,
                episode_reward: if Some(i) == positive_at { 1.0 } else { 0.0 },
                age: rng.random_range(1..50),
            },
        })
        .collect();
    SelectionExample {
        level: Level::Turn,
        query_embedding: query,
        candidates,
    }
}

fn examples(seed: u64, n: usize) -> Vec<SelectionExample> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| example(&mut rng)).collect()
}

fn features_only() -> SelectorConfig {
    SelectorConfig::new(Level::Turn, DIM).with_inputs(SelectorInputs::Features)
}

#[test]
fn a_features_only_selector_is_smaller_and_learns_a_feature_rule() {
    let full = SelectorConfig::new(Level::Turn, DIM);
    assert_eq!(full.inputs, SelectorInputs::Full);
    assert_eq!(full.input_len(), 3 * DIM + CandidateFeatures::LEN);
    assert_eq!(features_only().input_len(), CandidateFeatures::LEN);

    let train = examples(1, 2000);
    let reward = ByPolarity(&train);
    let mut trainer = PpoTrainer::new(features_only(), PpoConfig::default(), 3).unwrap();
    let untrained = trainer.policy().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for (number, batch) in train.chunks(128).enumerate() {
        let decisions = trainer.act_batch(batch, &mut rng).unwrap();
        let start = number * 128;
        let transitions: Vec<Transition> = batch
            .iter()
            .zip(decisions)
            .enumerate()
            .map(|(k, (example, decision))| Transition {
                reward: match decision.choice {
                    Some(c) => reward.reward(start + k, c).unwrap(),
                    None => reward.none(),
                },
                example: example.clone(),
                decision,
            })
            .collect();
        trainer.update(&transitions).unwrap();
    }
    let trained = trainer.policy().unwrap();

    // Scored on examples it never saw.
    let test = examples(2, 400);
    let all: Vec<usize> = (0..test.len()).collect();
    let reward = ByPolarity(&test);
    let rows = score_rules("trained", &trained, &test, &all, &reward).unwrap();
    let before = score_rules("untrained", &untrained, &test, &all, &reward).unwrap();
    let (trained_score, top, never, oracle) = (
        rows[0].mean_reward,
        rows[1].mean_reward,
        rows[2].mean_reward,
        rows[3].mean_reward,
    );
    eprintln!(
        "features-only selector on unseen states: trained {trained_score:.3}, untrained {:.3}, \
         top {top:.3}, never {never:.3}, oracle {oracle:.3}",
        before[0].mean_reward
    );
    assert!(trained_score > top + 0.2, "{rows:?}");
    assert!(trained_score > before[0].mean_reward + 0.2, "{rows:?}");
    assert!(trained_score > oracle - 0.1, "{rows:?}");

    // The choice of inputs survives a checkpoint, and the reloaded policy decides the same.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turn.safetensors");
    trained.save(&path).unwrap();
    let reloaded = SelectorPolicy::load_for(&path, Level::Turn, DIM).unwrap();
    assert_eq!(reloaded.config().inputs, SelectorInputs::Features);
    for example in &test[..50] {
        assert_eq!(
            reloaded.choose(example, 1).unwrap(),
            trained.choose(example, 1).unwrap()
        );
    }
}

#[test]
fn a_sidecar_from_before_the_inputs_field_reads_as_a_full_network() {
    let policy = SelectorPolicy::untrained(
        SelectorConfig::new(Level::Turn, DIM),
        PpoConfig::default(),
        0,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turn.safetensors");
    policy.save(&path).unwrap();
    let sidecar = dir.path().join("turn.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sidecar).unwrap()).unwrap();
    assert_eq!(json["config"]["inputs"], "full");
    json["config"].as_object_mut().unwrap().remove("inputs");
    std::fs::write(&sidecar, serde_json::to_string(&json).unwrap()).unwrap();
    let reloaded = SelectorPolicy::load_for(&path, Level::Turn, DIM).unwrap();
    assert_eq!(reloaded.config().inputs, SelectorInputs::Full);
    assert_eq!(reloaded.parameters().unwrap(), policy.parameters().unwrap());
}

#[test]
fn states_are_split_by_whole_tasks_reproducibly() {
    let tasks = ["b", "a", "b", "c", "a", "d", "d", "c", "b"];
    let (train, held) = split_by_task(&tasks, 2, 7).unwrap();
    assert_eq!(train.len() + held.len(), tasks.len());
    let held_tasks: std::collections::BTreeSet<&str> = held.iter().map(|&i| tasks[i]).collect();
    let train_tasks: std::collections::BTreeSet<&str> = train.iter().map(|&i| tasks[i]).collect();
    assert_eq!(held_tasks.len(), 2);
    assert!(
        held_tasks.is_disjoint(&train_tasks),
        "{held_tasks:?} {train_tasks:?}"
    );
    // The same seed draws the same tasks whatever the states' order.
    let mut reversed = tasks;
    reversed.reverse();
    let (_, held_again) = split_by_task(&reversed, 2, 7).unwrap();
    let again: std::collections::BTreeSet<&str> = held_again.iter().map(|&i| reversed[i]).collect();
    assert_eq!(again, held_tasks);
    // Different seeds draw different tasks at least sometimes.
    let draws: std::collections::BTreeSet<Vec<usize>> = (0..10)
        .map(|seed| split_by_task(&tasks, 2, seed).unwrap().1)
        .collect();
    assert!(draws.len() > 1);
    // Holding out every task leaves nothing to train on: an error, not a panic.
    let error = split_by_task(&tasks, 4, 0).unwrap_err().to_string();
    assert!(
        error.contains("cannot hold out 4 of the 4 tasks"),
        "{error}"
    );
}

#[test]
fn rule_scores_are_exact_on_a_hand_made_case() {
    let cases = examples(5, 40);
    let reward = ByPolarity(&cases);
    let indices: Vec<usize> = (0..cases.len()).collect();
    let policy = SelectorPolicy::untrained(features_only(), PpoConfig::default(), 0).unwrap();
    let rows = score_rules("p", &policy, &cases, &indices, &reward).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(names, ["p", "always the top candidate", "never", "oracle"]);
    let n = cases.len() as f64;
    let top: f64 = cases
        .iter()
        .map(|c| {
            if c.candidates[0].features.positive {
                1.0
            } else {
                -0.5
            }
        })
        .sum::<f64>()
        / n;
    let with_positive = cases
        .iter()
        .filter(|c| c.candidates.iter().any(|x| x.features.positive))
        .count() as f64;
    let oracle = (with_positive + (n - with_positive) * NONE_REWARD) / n;
    assert!((rows[1].mean_reward - top).abs() < 1e-12);
    assert_eq!(rows[1].inject_rate, 1.0);
    assert!((rows[2].mean_reward - NONE_REWARD).abs() < 1e-12);
    assert_eq!(rows[2].inject_rate, 0.0);
    assert!((rows[3].mean_reward - oracle).abs() < 1e-12, "{rows:?}");
    assert!((rows[3].inject_rate - with_positive / n).abs() < 1e-12);
    assert!(rows.iter().all(|r| r.states == cases.len()));
}
