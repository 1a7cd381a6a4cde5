//! The turn-level selector's rewards and its held-out check.
//!
//! [`prm_utilities`] values every candidate of every logged turn state with the student PRM
//! (its scalar utility), once; [`PrmRewards`] serves those values to training and scoring.
//! [`HeldOut`] keeps the states of tasks set aside (`split_by_task`) and, after training,
//! scores the trained and untrained selectors and the fixed rules on both parts
//! ([`HeldOutReport`]), so a selector that only memorised its training states shows it.

use crate::selector::PpoTrainer;
use crate::selector::{SelectionExample, SelectorPolicy};
use crate::student::{PairFeatures, PairInput, StudentPrm};
use crate::train::{
    score_rules, split_by_task, train_bandit, BanditReward, RuleScore, TrainError, TurnExample,
    UpdateRecord,
};
use merit_core::model::Embedder;
use merit_interact::prm::{memory_text, scalar_utility, state_text};
use serde::Serialize;

/// Rewards of turn-level choices: the student PRM's scalar utility of every candidate,
/// computed once; choosing none earns `none`.
#[derive(Debug, Clone, PartialEq)]
pub struct PrmRewards {
    /// `utilities[state][candidate]`.
    pub utilities: Vec<Vec<f64>>,
    /// The reward of injecting nothing.
    pub none: f64,
}

impl PrmRewards {
    /// The rewards of the states at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> PrmRewards {
        PrmRewards {
            utilities: indices.iter().map(|&i| self.utilities[i].clone()).collect(),
            none: self.none,
        }
    }
}

impl BanditReward for PrmRewards {
    fn reward(&self, index: usize, choice: usize) -> Result<f64, TrainError> {
        self.utilities
            .get(index)
            .and_then(|row| row.get(choice))
            .copied()
            .ok_or_else(|| {
                TrainError::Tasks(format!("no reward for state {index} choice {choice}"))
            })
    }
    fn none(&self) -> f64 {
        self.none
    }
}

/// The student PRM's utility of every candidate of every state, in order.
pub fn prm_utilities(
    examples: &[TurnExample],
    student: &StudentPrm,
    embedder: &dyn Embedder,
) -> Result<Vec<Vec<f64>>, TrainError> {
    let mut utilities = Vec::with_capacity(examples.len());
    for example in examples {
        let mut texts = vec![state_text(&example.state)];
        texts.extend(example.memories.iter().map(memory_text));
        let vectors = embedder
            .embed(&texts)
            .map_err(|e| TrainError::Collect(e.to_string()))?;
        let inputs: Vec<PairInput> = example
            .memories
            .iter()
            .zip(&vectors[1..])
            .map(|(memory, vector)| PairInput {
                state: vectors[0].clone(),
                memory: vector.clone(),
                features: PairFeatures::from_pair(&example.state, memory),
            })
            .collect();
        let rubrics = student
            .rubrics(&inputs)
            .map_err(|e| TrainError::Collect(e.to_string()))?;
        utilities.push(
            rubrics
                .iter()
                .map(|r| f64::from(scalar_utility(r)))
                .collect(),
        );
    }
    Ok(utilities)
}

/// The turn-level states split for a held-out check, with every state's rewards.
#[derive(Debug, Clone)]
pub struct HeldOut {
    /// Every state's selection problem.
    pub problems: Vec<SelectionExample>,
    /// Every state's rewards.
    pub rewards: PrmRewards,
    /// Indices of the training states.
    pub train: Vec<usize>,
    /// Indices of the held-out states.
    pub held: Vec<usize>,
}

/// The held-out check's result (`<level>-holdout.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOutReport {
    /// Scores on the training states.
    pub training: Vec<RuleScore>,
    /// Scores on the held-out states.
    pub held_out: Vec<RuleScore>,
    /// Training states whose candidates differ in utility (elsewhere only "inject or not"
    /// matters, not which memory).
    pub training_states_with_differing_candidates: usize,
    /// The same among the held-out states.
    pub held_out_states_with_differing_candidates: usize,
}

impl HeldOut {
    /// Scores `trained` (with `untrained` beside it, and the fixed rules) on both parts.
    pub fn report(
        &self,
        untrained: &SelectorPolicy,
        trained: &SelectorPolicy,
    ) -> Result<HeldOutReport, TrainError> {
        let part = |indices: &[usize]| -> Result<Vec<RuleScore>, TrainError> {
            let mut rows = score_rules(
                "trained selector",
                trained,
                &self.problems,
                indices,
                &self.rewards,
            )?;
            let before = score_rules(
                "untrained selector",
                untrained,
                &self.problems,
                indices,
                &self.rewards,
            )?;
            let first = before
                .into_iter()
                .next()
                .ok_or_else(|| TrainError::Tasks("no untrained row".into()))?;
            rows.insert(1, first);
            Ok(rows)
        };
        let differing = |indices: &[usize]| {
            indices
                .iter()
                .filter(|&&i| {
                    let row = &self.rewards.utilities[i];
                    row.iter().any(|u| *u != row[0])
                })
                .count()
        };
        Ok(HeldOutReport {
            training: part(&self.train)?,
            held_out: part(&self.held)?,
            training_states_with_differing_candidates: differing(&self.train),
            held_out_states_with_differing_candidates: differing(&self.held),
        })
    }
}

impl HeldOutReport {
    /// The report as a Markdown paragraph and table; `path` names the JSON file beside it.
    pub fn to_markdown(&self, path: &str) -> String {
        let mut out = format!(
            "\nGreedy choices (at most one memory) valued by the student PRM's utility, on the \
             training states and on the states of the held-out tasks ({path}):\n\n\
             | rule | training states | mean utility | inject rate | held-out states | mean utility | inject rate |\n\
             |---|---:|---:|---:|---:|---:|---:|\n"
        );
        for (train, held) in self.training.iter().zip(&self.held_out) {
            out.push_str(&format!(
                "| {} | {} | {:.3} | {:.2} | {} | {:.3} | {:.2} |\n",
                train.rule,
                train.states,
                train.mean_reward,
                train.inject_rate,
                held.states,
                held.mean_reward,
                held.inject_rate
            ));
        }
        out.push_str(&format!(
            "\nStates whose candidates differ in utility (where *which* memory matters, not only \
             whether to inject one): {} of {} training, {} of {} held-out.\n",
            self.training_states_with_differing_candidates,
            self.training.first().map_or(0, |r| r.states),
            self.held_out_states_with_differing_candidates,
            self.held_out.first().map_or(0, |r| r.states),
        ));
        out
    }
}

/// What [`train_turn_selector`] trained on.
pub struct TurnTraining {
    /// The training states' selection problems, in training order.
    pub problems: Vec<SelectionExample>,
    /// Every state with the split, when tasks were held out (for [`HeldOut::report`]).
    pub held_out: Option<HeldOut>,
}

/// Trains the turn-level selector offline on logged turn states: each candidate's reward is
/// its student-PRM utility (`utilities[state][candidate]`), injecting none earns
/// `none_reward`. With `holdout_tasks > 0`, the states of that many tasks (a seeded choice)
/// are kept out of training and returned for the held-out check.
#[allow(clippy::too_many_arguments)]
pub fn train_turn_selector(
    examples: &[TurnExample],
    utilities: Vec<Vec<f64>>,
    none_reward: f64,
    holdout_tasks: usize,
    trainer: &mut PpoTrainer,
    updates: usize,
    batch: usize,
    seed: u64,
    on_update: impl FnMut(&UpdateRecord),
) -> Result<TurnTraining, TrainError> {
    let all_problems: Vec<SelectionExample> = examples.iter().map(|e| e.example.clone()).collect();
    let all_rewards = PrmRewards {
        utilities,
        none: none_reward,
    };
    let (train, held) = if holdout_tasks > 0 {
        let tasks: Vec<&str> = examples.iter().map(|e| e.instance_id.as_str()).collect();
        split_by_task(&tasks, holdout_tasks, seed)?
    } else {
        ((0..examples.len()).collect(), Vec::new())
    };
    let problems: Vec<SelectionExample> = train.iter().map(|&i| all_problems[i].clone()).collect();
    let rewards = all_rewards.subset(&train);
    train_bandit(
        &problems, &rewards, trainer, updates, batch, seed, on_update,
    )?;
    let held_out = if held.is_empty() {
        None
    } else {
        Some(HeldOut {
            problems: all_problems,
            rewards: all_rewards,
            train,
            held,
        })
    };
    Ok(TurnTraining { problems, held_out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_served_by_state_and_choice_and_a_subset_keeps_its_order() {
        let rewards = PrmRewards {
            utilities: vec![vec![0.1, 0.9], vec![0.5], vec![0.2, 0.3, 0.4]],
            none: 0.25,
        };
        assert_eq!(rewards.reward(0, 1).unwrap(), 0.9);
        assert_eq!(rewards.none(), 0.25);
        assert!(
            rewards.reward(1, 1).is_err(),
            "a choice out of range is an error"
        );
        let part = rewards.subset(&[2, 0]);
        assert_eq!(part.utilities, vec![vec![0.2, 0.3, 0.4], vec![0.1, 0.9]]);
        assert_eq!(part.none, 0.25);
    }

    #[test]
    fn the_report_renders_both_parts_side_by_side() {
        let row = |rule: &str, states: usize| RuleScore {
            rule: rule.to_string(),
            states,
            mean_reward: 0.5,
            inject_rate: 1.0,
        };
        let report = HeldOutReport {
            training: vec![row("trained selector", 8), row("untrained selector", 8)],
            held_out: vec![row("trained selector", 3), row("untrained selector", 3)],
            training_states_with_differing_candidates: 5,
            held_out_states_with_differing_candidates: 1,
        };
        let text = report.to_markdown("out/turn-holdout.json");
        assert!(text.contains("| trained selector | 8 | 0.500 | 1.00 | 3 | 0.500 | 1.00 |"));
        assert!(text.contains("5 of 8 training, 1 of 3 held-out"), "{text}");
        assert!(text.contains("(out/turn-holdout.json)"));
    }
}
