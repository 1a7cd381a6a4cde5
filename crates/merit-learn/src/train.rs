//! Training the selectors on real episodes and real states.
//!
//! - **Episode level, online** ([`train_episode_selector`]): each update runs a batch of
//!   training tasks with the agent; before each episode the PPO policy *samples* an episode
//!   memory (or none) from the embedding stage's candidates of a frozen memory bank, the
//!   episode runs to its end, and its terminal reward (0.7·phase 1 + 0.3·phase 2) is the
//!   reward of that one decision. Episodes with no candidate make no transition.
//! - **Turn level, offline** ([`train_bandit`]): the process reward scores a state–memory
//!   pair directly, so no episode has to be run per decision. States are collected once from
//!   logged trajectories ([`turn_examples`]), each with its candidates from the turn bank; an
//!   update samples a choice for a batch of states and rewards it with the PRM's utility of
//!   the chosen memory (choosing none earns [`BanditReward::none`]).
//!
//! Both loops draw everything random from one seeded `ChaCha8Rng` in a fixed order, and
//! every model call goes through the caller's (cached) model, so running a training command
//! again replays its episodes from the reply cache and ends with bit-identical checkpoints:
//! that is how an interrupted training resumes.

use crate::selector::{
    Decision, LearnError, PpoTrainer, SelectionExample, Transition, UpdateStats,
};
use merit_core::model::Embedder;
use merit_interact::agent::{AgentError, ReactAgent};
use merit_interact::memory::{
    AdvisorConfig, InteractMemory, Level, RetrievalAdvisor, RetrievalConfig, SelectError,
    Selection, SelectionInput, Selector, StreamPos, TurnMemory, TurnState,
};
use merit_interact::runlog::EpisodeRecord;
use merit_interact::{
    DatabaseMeta, EnvConfig, Environment, InteractBackend, InteractError, Task, TaskSet,
    UserSimulator,
};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// Why training stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The network or an update failed.
    #[error(transparent)]
    Learn(#[from] LearnError),
    /// An episode could not be run (model backend, database).
    #[error("task `{instance_id}`: {source}")]
    Episode {
        /// The task.
        instance_id: String,
        /// The failure.
        source: AgentError,
    },
    /// A task id is not in the set, or the set has nothing to train on.
    #[error("{0}")]
    Tasks(String),
    /// Embedding or retrieval failed while collecting states.
    #[error("collecting training states: {0}")]
    Collect(String),
}

/// A selector that samples from the training policy and remembers what it did.
struct RecordingSelector<'t> {
    trainer: &'t PpoTrainer,
    rng: &'t Mutex<ChaCha8Rng>,
    decisions: Mutex<Vec<(SelectionExample, Decision)>>,
}

impl Selector for RecordingSelector<'_> {
    fn name(&self) -> String {
        "ppo-rollout".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let example = SelectionExample::from_input(input);
        let decision = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            self.trainer.act(&example, &mut *rng)
        }
        .map_err(|e| {
            SelectError::Model(merit_core::model::ModelError::InvalidRequest(e.to_string()))
        })?;
        let chosen = decision.choice.into_iter().collect();
        self.decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((example, decision));
        Ok(Selection { chosen, note: None })
    }
}

/// A selector that never injects (the turn level during episode-level training when no turn
/// selector is given).
struct Nothing;

impl Selector for Nothing {
    fn name(&self) -> String {
        "none".to_string()
    }
    fn select(&self, _: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        Ok(Selection::default())
    }
}

/// One update of a training run, as logged for the learning curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateRecord {
    /// 1-based update number.
    pub update: usize,
    /// Episodes run (episode level) or states sampled (turn level) for it.
    pub rollouts: usize,
    /// Decisions with a reward (rollouts that had candidates).
    pub transitions: usize,
    /// Mean reward of those decisions.
    pub mean_reward: f64,
    /// Share of decisions that injected a memory.
    pub inject_rate: f64,
    /// The PPO update's statistics; `None` when the batch had no transition.
    pub stats: Option<UpdateStats>,
}

/// What episode-level training runs on.
pub struct EpisodeTraining<'a> {
    /// The training tasks.
    pub set: &'a TaskSet,
    /// Their ids; batches cycle through a seeded shuffle of them.
    pub instance_ids: &'a [String],
    /// The frozen memory the candidates come from (same-instance memories are never shown).
    pub memory: &'a InteractMemory,
    /// Embeds the requests.
    pub embedder: &'a dyn Embedder,
    /// Turn-level selector during the rollouts; `None` switches the turn level off.
    pub turn_selector: Option<&'a dyn Selector>,
    /// Stage sizes.
    pub retrieval: RetrievalConfig,
    /// Each turn memory shown at most once per episode (`AdvisorConfig::turn_memories_once`),
    /// as in the runs the selector will serve.
    pub turn_memories_once: bool,
    /// Environment settings.
    pub env: EnvConfig,
    /// PPO updates to run.
    pub updates: usize,
    /// Episodes per update.
    pub batch: usize,
    /// Seed of the task order and of the sampled decisions.
    pub seed: u64,
}

/// Online PPO for the episode-level selector (see the module docs). `on_update` sees each
/// update's record (for the learning curve and progress).
pub fn train_episode_selector<B, S>(
    spec: &EpisodeTraining<'_>,
    trainer: &mut PpoTrainer,
    agent: &ReactAgent,
    mut make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    mut make_simulator: impl FnMut(&Task) -> S,
    mut on_update: impl FnMut(&UpdateRecord),
) -> Result<EpisodeTrainingOutcome, TrainError>
where
    B: InteractBackend,
    S: UserSimulator,
{
    let mut order: Vec<&Task> = spec
        .instance_ids
        .iter()
        .map(|id| {
            spec.set
                .get(id)
                .ok_or_else(|| TrainError::Tasks(format!("task `{id}` is not in the task set")))
        })
        .collect::<Result<_, _>>()?;
    order.retain(|task| task.has_ground_truth() && spec.set.database(task.database()).is_some());
    if order.is_empty() {
        return Err(TrainError::Tasks(
            "no training task has ground truth and a loaded database".into(),
        ));
    }
    let rng = Mutex::new(ChaCha8Rng::seed_from_u64(spec.seed));
    order.shuffle(&mut *rng.lock().unwrap_or_else(|p| p.into_inner()));
    // After every committed memory: the whole frozen bank is visible to every episode.
    let position = StreamPos(spec.memory.last_committed().map_or(0, |p| p.0 + 1));
    let advisor_config = AdvisorConfig {
        episode_level: true,
        turn_level: spec.turn_selector.is_some(),
        episode_retrieval: spec.retrieval,
        turn_retrieval: spec.retrieval,
        turn_memories_once: spec.turn_memories_once,
    };
    let turn_selector: &dyn Selector = spec.turn_selector.unwrap_or(&Nothing);
    let mut next = 0usize;
    let mut records = Vec::with_capacity(spec.updates);
    let mut examples: Vec<SelectionExample> = Vec::new();
    for update in 1..=spec.updates {
        let mut transitions = Vec::new();
        let mut injected = 0usize;
        for _ in 0..spec.batch {
            let task = order[next % order.len()];
            next += 1;
            let meta = spec.set.database(task.database()).ok_or_else(|| {
                TrainError::Tasks(format!("database of `{}`", task.instance_id()))
            })?;
            let recorder = RecordingSelector {
                trainer,
                rng: &rng,
                decisions: Mutex::new(Vec::new()),
            };
            let episode = (|| -> Result<_, AgentError> {
                let backend = make_backend(meta)?;
                let mut env = Environment::new(
                    task,
                    Arc::clone(meta),
                    backend,
                    make_simulator(task),
                    spec.env.clone(),
                )?;
                let mut advisor = RetrievalAdvisor::new(
                    spec.memory,
                    spec.embedder,
                    &recorder,
                    turn_selector,
                    advisor_config,
                    position,
                );
                agent.run_with_memory(&mut env, &mut advisor)
            })()
            .map_err(|source| TrainError::Episode {
                instance_id: task.instance_id().to_string(),
                source,
            })?;
            let reward = episode.trajectory.outcome.reward;
            for (example, decision) in recorder.decisions.into_inner().unwrap_or_default() {
                injected += usize::from(decision.choice.is_some());
                if !examples.contains(&example) {
                    examples.push(example.clone());
                }
                transitions.push(Transition {
                    example,
                    decision,
                    reward,
                });
            }
        }
        let record = finish_update(update, spec.batch, &transitions, injected, trainer)?;
        on_update(&record);
        records.push(record);
    }
    Ok(EpisodeTrainingOutcome { records, examples })
}

/// What [`train_episode_selector`] returns.
#[derive(Debug, Clone)]
pub struct EpisodeTrainingOutcome {
    /// One record per update, in order.
    pub records: Vec<UpdateRecord>,
    /// Every distinct selection problem met in the rollouts, in first-seen order (to compare
    /// the trained policy's decisions with the untrained one's, see
    /// [`crate::selector::decision_shift`]).
    pub examples: Vec<SelectionExample>,
}

fn finish_update(
    update: usize,
    rollouts: usize,
    transitions: &[Transition],
    injected: usize,
    trainer: &mut PpoTrainer,
) -> Result<UpdateRecord, LearnError> {
    let n = transitions.len();
    let stats = if n == 0 {
        None
    } else {
        Some(trainer.update(transitions)?)
    };
    Ok(UpdateRecord {
        update,
        rollouts,
        transitions: n,
        mean_reward: if n == 0 {
            0.0
        } else {
            transitions.iter().map(|t| t.reward).sum::<f64>() / n as f64
        },
        inject_rate: if n == 0 {
            0.0
        } else {
            injected as f64 / n as f64
        },
        stats,
    })
}

/// One turn-level training state: the selection problem and what its options are.
#[derive(Debug, Clone)]
pub struct TurnExample {
    /// The source task.
    pub instance_id: String,
    /// The 1-based turn the state precedes.
    pub turn: usize,
    /// The state.
    pub state: TurnState,
    /// The selection problem (candidates in embedding rank order).
    pub example: SelectionExample,
    /// The candidates as memories, in the same order.
    pub memories: Vec<TurnMemory>,
}

/// The turn-level training states of logged episodes: before every turn of every record from
/// the second on (the agent consults turn memory only once a step has been taken; before the
/// first turn the episode level serves), the state and its candidates from `memory`'s turn
/// bank (all of it visible, the record's own task excluded). States without a candidate are
/// dropped.
pub fn turn_examples(
    records: &[EpisodeRecord],
    memory: &InteractMemory,
    embedder: &dyn Embedder,
    retrieval: &RetrievalConfig,
) -> Result<Vec<TurnExample>, TrainError> {
    let position = StreamPos(memory.last_committed().map_or(0, |p| p.0 + 1));
    let chars = memory.config().turn_observation_chars;
    let mut out = Vec::new();
    for record in records {
        let trajectory = &record.trajectory;
        // The state after `taken` steps precedes turn `taken + 1`.
        let states: Vec<TurnState> = (1..trajectory.steps.len())
            .map(|taken| TurnState::at(&trajectory.task, &trajectory.steps[..taken], chars))
            .collect();
        let texts: Vec<String> = states.iter().map(TurnState::signature).collect();
        if texts.is_empty() {
            continue;
        }
        let vectors = embedder
            .embed(&texts)
            .map_err(|e| TrainError::Collect(e.to_string()))?;
        let view = memory.turns_at(position, &record.instance_id);
        for (index, (state, vector)) in states.into_iter().zip(vectors).enumerate() {
            let taken = index + 1;
            let candidates = view
                .candidates(&state, &vector, retrieval)
                .map_err(|e| TrainError::Collect(e.to_string()))?;
            if candidates.is_empty() {
                continue;
            }
            let unit = merit_memory_unit(&vector);
            let example = SelectionExample {
                level: Level::Turn,
                query_embedding: unit,
                candidates: candidates
                    .iter()
                    .map(|c| crate::selector::ExampleCandidate {
                        embedding: c.embedding.to_vec(),
                        features: c.features,
                    })
                    .collect(),
            };
            out.push(TurnExample {
                instance_id: record.instance_id.clone(),
                turn: taken + 1,
                state,
                example,
                memories: candidates.iter().map(|c| c.entry.clone()).collect(),
            });
        }
    }
    Ok(out)
}

/// `vector` scaled to unit length (zero stays zero).
fn merit_memory_unit(vector: &[f32]) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        vector.to_vec()
    } else {
        vector.iter().map(|x| x / norm).collect()
    }
}

/// Splits states by task: given each state's task id, the states of `holdout_tasks` tasks
/// (drawn with a `seed`ed shuffle of the distinct ids, sorted first so the draw does not
/// depend on the log's order) are held out, the others trained on. Returns the indices of
/// both parts, each in input order. The states of one episode are near-duplicates of each
/// other, so a split by state would leak the held-out answers into training.
pub fn split_by_task(
    task_of_state: &[&str],
    holdout_tasks: usize,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>), TrainError> {
    let mut tasks: Vec<&str> = task_of_state.to_vec();
    tasks.sort_unstable();
    tasks.dedup();
    if holdout_tasks >= tasks.len() {
        return Err(TrainError::Tasks(format!(
            "cannot hold out {holdout_tasks} of the {} tasks with states and still train on one",
            tasks.len()
        )));
    }
    tasks.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let held: std::collections::HashSet<&str> = tasks[..holdout_tasks].iter().copied().collect();
    let (mut train, mut held_out) = (Vec::new(), Vec::new());
    for (i, task) in task_of_state.iter().enumerate() {
        if held.contains(task) {
            held_out.push(i);
        } else {
            train.push(i);
        }
    }
    Ok((train, held_out))
}

/// How a selection rule does on a set of states, valued by a [`BanditReward`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleScore {
    /// The rule's name.
    pub rule: String,
    /// States scored.
    pub states: usize,
    /// Mean reward of the rule's choices.
    pub mean_reward: f64,
    /// Share of states where the rule injects a memory.
    pub inject_rate: f64,
}

/// Scores the greedy choice (at most one memory) of `policy`, and the fixed rules beside it,
/// on `examples[indices]`: "always the top candidate" (what a plain embedding retriever
/// does), "never" (no memory) and "oracle" (the best option of each state: the ceiling any
/// selector could reach under this reward). The rows come in that order, the policy first.
pub fn score_rules(
    policy_name: &str,
    policy: &crate::selector::SelectorPolicy,
    examples: &[SelectionExample],
    indices: &[usize],
    reward: &dyn BanditReward,
) -> Result<Vec<RuleScore>, TrainError> {
    let chosen: Vec<SelectionExample> = indices.iter().map(|&i| examples[i].clone()).collect();
    let greedy: Vec<Option<usize>> = policy
        .probabilities_batch(&chosen)?
        .iter()
        .map(|p| p.choose(1).first().copied())
        .collect();
    let mut oracle = Vec::with_capacity(indices.len());
    for (&index, example) in indices.iter().zip(&chosen) {
        let mut best = (reward.none(), None);
        for choice in 0..example.candidates.len() {
            let value = reward.reward(index, choice)?;
            if value > best.0 {
                best = (value, Some(choice));
            }
        }
        oracle.push(best.1);
    }
    let rules: [(&str, Vec<Option<usize>>); 4] = [
        (policy_name, greedy),
        (
            "always the top candidate",
            chosen
                .iter()
                .map(|e| (!e.candidates.is_empty()).then_some(0))
                .collect(),
        ),
        ("never", vec![None; indices.len()]),
        ("oracle", oracle),
    ];
    let mut rows = Vec::with_capacity(rules.len());
    for (name, choices) in rules {
        let mut total = 0.0;
        for (&index, choice) in indices.iter().zip(&choices) {
            total += match choice {
                Some(choice) => reward.reward(index, *choice)?,
                None => reward.none(),
            };
        }
        let n = indices.len().max(1) as f64;
        rows.push(RuleScore {
            rule: name.to_string(),
            states: indices.len(),
            mean_reward: total / n,
            inject_rate: choices.iter().filter(|c| c.is_some()).count() as f64 / n,
        });
    }
    Ok(rows)
}

/// The process reward of a turn-level choice.
pub trait BanditReward {
    /// The reward of injecting candidate `choice` of `examples[index]`.
    fn reward(&self, index: usize, choice: usize) -> Result<f64, TrainError>;

    /// The reward of injecting nothing: the utility a memory must beat to be worth showing.
    fn none(&self) -> f64;
}

/// Offline PPO on one-step selection problems with a reward function (the turn level; see
/// the module docs). Each update samples `batch` examples (a seeded shuffle, cycled).
pub fn train_bandit(
    examples: &[SelectionExample],
    reward: &dyn BanditReward,
    trainer: &mut PpoTrainer,
    updates: usize,
    batch: usize,
    seed: u64,
    mut on_update: impl FnMut(&UpdateRecord),
) -> Result<Vec<UpdateRecord>, TrainError> {
    if examples.is_empty() {
        return Err(TrainError::Tasks(
            "no training state has a candidate".into(),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..examples.len()).collect();
    order.shuffle(&mut rng);
    let mut next = 0usize;
    let mut records = Vec::with_capacity(updates);
    for update in 1..=updates {
        let picked: Vec<usize> = (0..batch)
            .map(|_| {
                let index = order[next % order.len()];
                next += 1;
                index
            })
            .collect();
        let batch_examples: Vec<SelectionExample> =
            picked.iter().map(|&i| examples[i].clone()).collect();
        let decisions = trainer.act_batch(&batch_examples, &mut rng)?;
        let mut transitions = Vec::with_capacity(batch);
        let mut injected = 0usize;
        for ((index, example), decision) in picked.iter().zip(batch_examples).zip(decisions) {
            let value = match decision.choice {
                Some(choice) => {
                    injected += 1;
                    reward.reward(*index, choice)?
                }
                None => reward.none(),
            };
            transitions.push(Transition {
                example,
                decision,
                reward: value,
            });
        }
        let record = finish_update(update, batch, &transitions, injected, trainer)?;
        on_update(&record);
        records.push(record);
    }
    Ok(records)
}
