//! Tests of the PPO-trained selectors.
//!
//! The bandit: each example has a query and 4–10 candidates. In 80% of examples one
//! candidate is *useful* (reward 1 when chosen); what marks it is a component along a hidden
//! embedding direction `u`, not its similarity to the query. In 60% of examples the most
//! similar candidate is a near-copy of the query that is never useful (a distractor), so
//! cosine ranking is a poor policy. Choosing "none" earns 0.2 (the right call when nothing is
//! useful), any other candidate 0.

use merit_interact::memory::{
    CandidateFeatures, Level, SelectionInput, Selector, SelectorCandidate,
};
use merit_learn::selector::{
    Decision, ExampleCandidate, KlControl, LearnError, LearnedSelector, OptionProbabilities,
    PpoConfig, PpoTrainer, SelectionExample, SelectorConfig, SelectorPolicy, Transition,
    UpdateStats,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const DIM: usize = 16;
const NONE_REWARD: f64 = 0.2;
const UPDATES: usize = 100;
const BATCH: usize = 128;

/// One bandit example with its hidden answer.
struct Case {
    example: SelectionExample,
    useful: Option<usize>,
}

impl Case {
    fn reward(&self, choice: Option<usize>) -> f64 {
        match choice {
            None => NONE_REWARD,
            Some(i) if Some(i) == self.useful => 1.0,
            Some(_) => 0.0,
        }
    }
}

fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    // Box–Muller; good enough for test data and independent of rand_distr.
    let u1: f64 = rng.random::<f64>().max(1e-12);
    let u2: f64 = rng.random();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

fn noise(rng: &mut ChaCha8Rng, scale: f32) -> Vec<f32> {
    (0..DIM)
        .map(|_| gaussian(rng) * scale / (DIM as f32).sqrt())
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The hidden "useful" direction.
fn hidden_direction() -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    normalize(noise(&mut rng, 1.0))
}

fn case(rng: &mut ChaCha8Rng, u: &[f32]) -> Case {
    // A query orthogonal to u, so similarity to the query says nothing about usefulness.
    let mut q = noise(rng, 1.0);
    let along = dot(&q, u);
    q.iter_mut().zip(u).for_each(|(x, y)| *x -= along * y);
    let q = normalize(q);
    let count = rng.random_range(4..=10usize);
    let has_useful = rng.random::<f64>() < 0.8;
    let distractor = rng.random::<f64>() < 0.6;
    // (embedding, is useful)
    let mut raw: Vec<(Vec<f32>, bool)> = Vec::new();
    if distractor {
        let n = noise(rng, 0.15);
        raw.push((
            normalize(q.iter().zip(n).map(|(a, b)| a + b).collect()),
            false,
        ));
    }
    if has_useful {
        // Somewhat closer to the query than the ordinary candidates, so that without a
        // distractor cosine ranking sometimes finds it.
        let a = rng.random_range(0.7..1.5f32);
        let n = noise(rng, 0.6);
        let v = (0..DIM).map(|j| a * q[j] + n[j] + 0.6 * u[j]).collect();
        raw.push((normalize(v), true));
    }
    while raw.len() < count {
        let a = rng.random_range(0.3..0.9f32);
        let n = noise(rng, 0.6);
        let v = (0..DIM).map(|j| a * q[j] + n[j]).collect();
        raw.push((normalize(v), false));
    }
    // Embedding-stage order: cosine descending.
    let mut scored: Vec<(f32, Vec<f32>, bool)> =
        raw.into_iter().map(|(v, u)| (dot(&q, &v), v, u)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (lo, hi) = (scored.last().map_or(0.0, |s| s.0), scored[0].0);
    let bm25: Vec<f64> = scored.iter().map(|_| rng.random_range(0.0..6.0)).collect();
    let (blo, bhi) = bm25
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &b| (l.min(b), h.max(b)));
    let mut useful = None;
    let candidates = scored
        .into_iter()
        .enumerate()
        .map(|(i, (cosine, embedding, is_useful))| {
            if is_useful {
                useful = Some(i);
            }
            let norm = |x: f64, l: f64, h: f64| if h > l { (x - l) / (h - l) } else { 0.0 };
            ExampleCandidate {
                embedding,
                features: CandidateFeatures {
                    rank: i + 1,
                    cosine: f64::from(cosine),
                    cosine_normalized: norm(f64::from(cosine), f64::from(lo), f64::from(hi)),
                    bm25: bm25[i],
                    bm25_normalized: norm(bm25[i], blo, bhi),
                    positive: true,
                    episode_reward: 1.0,
                    age: rng.random_range(1..200),
                },
            }
        })
        .collect();
    Case {
        example: SelectionExample {
            level: Level::Episode,
            query_embedding: q,
            candidates,
        },
        useful,
    }
}

fn cases(seed: u64, n: usize) -> Vec<Case> {
    let u = hidden_direction();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| case(&mut rng, &u)).collect()
}

fn config() -> SelectorConfig {
    SelectorConfig::new(Level::Episode, DIM)
}

/// Trains for `updates` PPO updates of `BATCH` fresh examples each; the data and the
/// rollouts are seeded too, so the whole run is a function of `seed`.
fn train(seed: u64, updates: usize) -> (PpoTrainer, Vec<UpdateStats>) {
    let mut trainer = PpoTrainer::new(config(), PpoConfig::default(), seed).unwrap();
    let u = hidden_direction();
    let mut data = ChaCha8Rng::seed_from_u64(seed ^ 0xda7a);
    let mut rollout = ChaCha8Rng::seed_from_u64(seed ^ 0x5011);
    let mut history = Vec::new();
    for _ in 0..updates {
        let batch: Vec<Case> = (0..BATCH).map(|_| case(&mut data, &u)).collect();
        let examples: Vec<SelectionExample> = batch.iter().map(|c| c.example.clone()).collect();
        let decisions = trainer.act_batch(&examples, &mut rollout).unwrap();
        let transitions: Vec<Transition> = batch
            .into_iter()
            .zip(decisions)
            .map(|(c, decision)| Transition {
                reward: c.reward(decision.choice),
                example: c.example,
                decision,
            })
            .collect();
        history.push(trainer.update(&transitions).unwrap());
    }
    (trainer, history)
}

struct Trained {
    untrained: SelectorPolicy,
    trained: SelectorPolicy,
    history: Vec<UpdateStats>,
    elapsed: Duration,
}

/// One training shared by the tests that need a trained policy (tests run in parallel).
fn trained() -> &'static Trained {
    static TRAINED: OnceLock<Trained> = OnceLock::new();
    TRAINED.get_or_init(|| {
        let start = Instant::now();
        let (trainer, history) = train(1, UPDATES);
        Trained {
            untrained: SelectorPolicy::untrained(config(), PpoConfig::default(), 1).unwrap(),
            trained: trainer.policy().unwrap(),
            history,
            elapsed: start.elapsed(),
        }
    })
}

fn greedy_reward(policy: &SelectorPolicy, cases: &[Case]) -> f64 {
    cases
        .iter()
        .map(|c| c.reward(policy.choose(&c.example, 1).unwrap().first().copied()))
        .sum::<f64>()
        / cases.len() as f64
}

fn top_cosine_reward(cases: &[Case]) -> f64 {
    // Candidates are in cosine order, so the top-cosine choice is candidate 0.
    cases.iter().map(|c| c.reward(Some(0))).sum::<f64>() / cases.len() as f64
}

/// Greedy decisions through the `Selector` trait, as retrieval would ask.
fn decisions(selector: &dyn Selector, cases: &[Case]) -> Vec<Vec<usize>> {
    cases
        .iter()
        .map(|c| {
            let shown: Vec<SelectorCandidate<'_>> = c
                .example
                .candidates
                .iter()
                .map(|x| SelectorCandidate {
                    id: 0,
                    summary: String::new(),
                    embedding: &x.embedding,
                    features: x.features,
                })
                .collect();
            let input = SelectionInput {
                level: Level::Episode,
                query: "q",
                query_embedding: &c.example.query_embedding,
                candidates: &shown,
                limit: 1,
            };
            selector.select(&input).unwrap().chosen
        })
        .collect()
}

#[test]
fn ppo_learns_the_hidden_property_cosine_misses() {
    let t = trained();
    let held_out = cases(12345, 600);
    let untrained = greedy_reward(&t.untrained, &held_out);
    let learned = greedy_reward(&t.trained, &held_out);
    let cosine = top_cosine_reward(&held_out);
    let first = &t.history[..10];
    let last = &t.history[t.history.len() - 10..];
    let mean = |h: &[UpdateStats]| h.iter().map(|s| s.mean_reward).sum::<f64>() / h.len() as f64;
    eprintln!(
        "selector bandit: greedy reward untrained {untrained:.3}, trained {learned:.3}, \
         top-cosine {cosine:.3}; rollout reward first 10 updates {:.3}, last 10 {:.3}; \
         final entropy {:.3}, kl {:.3}, clip fraction {:.3}; {} updates in {:.1?}",
        mean(first),
        mean(last),
        last[9].entropy,
        last[9].kl,
        last[9].clip_fraction,
        t.history.len(),
        t.elapsed
    );
    // The best possible policy earns 0.8 + 0.2·0.2 = 0.84.
    assert!(learned > 0.65, "trained greedy reward {learned}");
    assert!(
        learned > untrained + 0.4,
        "{learned} vs untrained {untrained}"
    );
    assert!(learned > cosine + 0.3, "{learned} vs top-cosine {cosine}");
    assert!(
        mean(last) > mean(first) + 0.3,
        "rollout reward did not rise"
    );
    assert!(t.history.iter().all(|s| s.steps == 16 && s.kl.is_finite()));
}

#[test]
fn a_saved_checkpoint_reloads_and_changes_decisions() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("episode.safetensors");
    t.trained.save(&path).unwrap();
    assert!(dir.path().join("episode.json").exists());
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let reloaded = LearnedSelector::load(&path, Level::Episode, DIM).unwrap();
    let in_memory = LearnedSelector::new(t.trained.clone()).unwrap();
    let untrained = LearnedSelector::new(t.untrained.clone()).unwrap();
    assert_eq!(reloaded.name(), in_memory.name());
    assert_ne!(reloaded.name(), untrained.name());
    assert_eq!(
        reloaded.policy().parameters().unwrap(),
        t.trained.parameters().unwrap()
    );
    assert_eq!(reloaded.policy().training(), t.trained.training());
    assert_eq!(reloaded.policy().training().updates, UPDATES as u64);

    let held_out = cases(777, 400);
    let after = decisions(&reloaded, &held_out);
    assert_eq!(after, decisions(&in_memory, &held_out));
    let before = decisions(&untrained, &held_out);
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    let nones = after.iter().filter(|d| d.is_empty()).count();
    eprintln!(
        "selector checkpoint: {changed} of {} held-out decisions changed by training; \
         the trained selector injects nothing on {nones}",
        held_out.len()
    );
    assert!(
        changed * 2 > held_out.len(),
        "only {changed} decisions changed"
    );
    // "None" is used, and only where it pays: it is right when nothing is useful.
    assert!(nones > 0);
    let right_nones = held_out
        .iter()
        .zip(&after)
        .filter(|(c, d)| d.is_empty() && c.useful.is_none())
        .count();
    assert!(right_nones * 10 >= nones * 7, "{right_nones} of {nones}");
}

#[test]
fn training_is_bit_deterministic_for_a_seed() {
    let bits = |trainer: &PpoTrainer| -> Vec<(String, Vec<u32>)> {
        trainer
            .policy()
            .unwrap()
            .parameters()
            .unwrap()
            .into_iter()
            .map(|(name, values)| (name, values.iter().map(|v| v.to_bits()).collect()))
            .collect()
    };
    let (a, stats_a) = train(5, 6);
    let (b, stats_b) = train(5, 6);
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(stats_a, stats_b);
    let (c, _) = train(6, 6);
    assert_ne!(bits(&a), bits(&c), "another seed must give other weights");
    // The untrained weights differ from trained ones, so the comparison above is not vacuous.
    let fresh = PpoTrainer::new(config(), PpoConfig::default(), 5).unwrap();
    assert_ne!(bits(&a), bits(&fresh));
}

#[test]
fn wrong_checkpoints_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sel.safetensors");
    let policy = SelectorPolicy::untrained(config(), PpoConfig::default(), 3).unwrap();
    policy.save(&path).unwrap();

    // The caller's embedder has another dimension.
    let error = LearnedSelector::load(&path, Level::Episode, 384).unwrap_err();
    assert!(
        matches!(error, LearnError::DimensionMismatch { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("embedding dimension")
            && message.contains("384")
            && message.contains("16"),
        "{message}"
    );
    // The wrong level.
    let error = LearnedSelector::load(&path, Level::Turn, DIM).unwrap_err();
    assert!(matches!(error, LearnError::LevelMismatch { .. }), "{error}");

    // A sidecar that disagrees with the weights' shapes.
    let sidecar = dir.path().join("sel.json");
    let text = std::fs::read_to_string(&sidecar).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["config"]["embedding_dim"] = serde_json::json!(32);
    std::fs::write(&sidecar, serde_json::to_string(&json).unwrap()).unwrap();
    let error = SelectorPolicy::load(&path).unwrap_err();
    assert!(
        matches!(error, LearnError::DimensionMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("trunk0.weight"), "{error}");

    // Bad JSON, missing files, and weights that are not the sidecar's.
    std::fs::write(&sidecar, "{ not json").unwrap();
    let error = SelectorPolicy::load(&path).unwrap_err();
    assert!(matches!(error, LearnError::Sidecar { .. }), "{error}");
    let error = SelectorPolicy::load(&dir.path().join("absent.safetensors")).unwrap_err();
    assert!(matches!(error, LearnError::Missing { .. }), "{error}");
    policy.save(&path).unwrap();
    let other = dir.path().join("other.safetensors");
    SelectorPolicy::untrained(config(), PpoConfig::default(), 4)
        .unwrap()
        .save(&other)
        .unwrap();
    std::fs::copy(&other, &path).unwrap();
    let error = SelectorPolicy::load(&path).unwrap_err();
    assert!(matches!(error, LearnError::Weights { .. }), "{error}");
    std::fs::remove_file(&path).unwrap();
    let error = SelectorPolicy::load(&path).unwrap_err();
    assert!(matches!(error, LearnError::Missing { .. }), "{error}");
    assert!(SelectorPolicy::load(&dir.path().join("x.json")).is_err());
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let policy = SelectorPolicy::untrained(config(), PpoConfig::default(), 3).unwrap();
    let selector = LearnedSelector::new(policy.clone()).unwrap();
    let mut c = cases(8, 1).pop().unwrap();
    // An embedding of the wrong size, through the trait.
    c.example.candidates[0].embedding.pop();
    let shown: Vec<SelectorCandidate<'_>> = c
        .example
        .candidates
        .iter()
        .map(|x| SelectorCandidate {
            id: 0,
            summary: String::new(),
            embedding: &x.embedding,
            features: x.features,
        })
        .collect();
    let input = SelectionInput {
        level: Level::Episode,
        query: "q",
        query_embedding: &c.example.query_embedding,
        candidates: &shown,
        limit: 1,
    };
    let error = selector.select(&input).unwrap_err();
    assert!(error.to_string().contains("dimensions"), "{error}");
    // No candidates: nothing to select.
    let empty = SelectionInput {
        candidates: &[],
        ..input
    };
    assert!(selector.select(&empty).unwrap().chosen.is_empty());

    // Training rejects impossible transitions and empty batches.
    let mut trainer = PpoTrainer::new(config(), PpoConfig::default(), 3).unwrap();
    assert!(matches!(trainer.update(&[]), Err(LearnError::EmptyBatch)));
    let good = cases(9, 1).pop().unwrap();
    let bad = Transition {
        decision: Decision {
            choice: Some(good.example.candidates.len()),
            logprob: -1.0,
            value: 0.0,
        },
        example: good.example.clone(),
        reward: 1.0,
    };
    assert!(matches!(
        trainer.update(&[bad]),
        Err(LearnError::Transition { index: 0, .. })
    ));
    let nan = Transition {
        decision: Decision {
            choice: None,
            logprob: -1.0,
            value: 0.0,
        },
        example: good.example,
        reward: f64::NAN,
    };
    assert!(trainer.update(&[nan]).is_err());
    // Invalid settings.
    let ppo = PpoConfig {
        kl: KlControl::Adaptive {
            initial: 0.02,
            target: 0.0,
            horizon: 10_000.0,
        },
        ..PpoConfig::default()
    };
    assert!(matches!(
        PpoTrainer::new(config(), ppo, 1),
        Err(LearnError::Config(_))
    ));
    assert!(PpoTrainer::new(SelectorConfig::new(Level::Turn, 0), PpoConfig::default(), 1).is_err());
}

#[test]
fn several_memories_are_taken_in_probability_order_above_none() {
    let probabilities = OptionProbabilities {
        none: 0.2,
        candidates: vec![0.1, 0.3, 0.05, 0.25, 0.1],
    };
    assert_eq!(probabilities.choose(1), vec![1]);
    assert_eq!(probabilities.choose(3), vec![1, 3]);
    assert_eq!(probabilities.choose(0), Vec::<usize>::new());
    let none_first = OptionProbabilities {
        none: 0.5,
        candidates: vec![0.25, 0.25],
    };
    assert!(none_first.choose(5).is_empty());

    // A trained turn-level policy and the adaptive KL controller run too.
    let ppo = PpoConfig {
        kl: KlControl::Adaptive {
            initial: 0.02,
            target: 1e-6,
            horizon: 1000.0,
        },
        ..PpoConfig::default()
    };
    let turn = SelectorConfig::new(Level::Turn, DIM);
    let mut trainer = PpoTrainer::new(turn, ppo, 2).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut data: Vec<Case> = cases(3, 32);
    for c in &mut data {
        c.example.level = Level::Turn;
    }
    let examples: Vec<SelectionExample> = data.iter().map(|c| c.example.clone()).collect();
    let decisions = trainer.act_batch(&examples, &mut rng).unwrap();
    let transitions: Vec<Transition> = data
        .iter()
        .zip(decisions)
        .map(|(c, d)| Transition {
            example: c.example.clone(),
            decision: d,
            reward: c.reward(d.choice),
        })
        .collect();
    let before = trainer.kl_coef();
    let stats = trainer.update(&transitions).unwrap();
    assert_eq!(stats.kl_coef, before);
    assert_eq!(stats.steps, 4);
    // The first update moves the policy off the reference by more than the tiny target, so
    // β grows by the controller's largest step: 1 + 0.2 · 32 / 1000.
    assert!(stats.kl_after > 1e-6, "{}", stats.kl_after);
    assert!(
        (trainer.kl_coef() - before * 1.0064).abs() < 1e-12,
        "{} -> {}",
        before,
        trainer.kl_coef()
    );
    let policy = trainer.policy().unwrap();
    let top = policy.choose(&examples[0], 3).unwrap();
    let p = policy.probabilities(&examples[0]).unwrap();
    assert!(top.len() <= 3);
    assert!(top.iter().all(|&i| p.candidates[i] > p.none));
    assert!(top
        .windows(2)
        .all(|w| p.candidates[w[0]] >= p.candidates[w[1]]));
    // Probabilities sum to one.
    let total: f32 = p.none + p.candidates.iter().sum::<f32>();
    assert!((total - 1.0).abs() < 1e-4, "{total}");
}
