//! Agreement of a PRM with the teacher on held-out pairs: the columns of the paper's Table 5
//! (format validity, accuracy, MAE, MSE) plus the mean matching reward.
//!
//! # Definitions
//! Over n held-out pairs with a teacher rubric each, and one prediction per pair (a rubric,
//! or nothing when the model's reply was unusable):
//!
//! - **Format validity** (%): predictions that are present and pass `Rubric::validate`.
//! - **Score accuracy** (%): exact score matches over all 7·n principle slots; an invalid
//!   prediction counts as 7 misses.
//! - **Flag accuracy** (%): agreeing flags over all 2·n flag slots; invalid = 2 misses.
//! - **Accuracy** (%, the table's "average accuracy"): exact agreement over all 9·n
//!   decisions, i.e. `(7·score + 2·flag) / 9`.
//! - **MAE / MSE**: mean absolute / squared score difference over the 7 scores of the *valid*
//!   predictions only (an invalid prediction has no score to compare; format validity
//!   reports it); absent when no prediction is valid.
//! - **Matching reward**: the mean of `train::matching_reward` (invalid = 0).

use super::train::{matching_reward, RewardWeights, TrainExample};
use super::{PairInput, StudentError, StudentPrm, FLAGS, PRINCIPLES};
use merit_interact::prm::Rubric;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One model's agreement with the teacher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgreementRow {
    /// The model's name in the table (e.g. `student (SFT)`).
    pub model: String,
    /// Held-out pairs.
    pub examples: usize,
    /// Format validity, %.
    pub format_validity: f64,
    /// Exact score agreement over all principle slots, %.
    pub score_accuracy: f64,
    /// Flag agreement over all flag slots, %.
    pub flag_accuracy: f64,
    /// Exact agreement over all nine decisions, %.
    pub accuracy: f64,
    /// Mean absolute score error over valid predictions.
    pub mae: Option<f64>,
    /// Mean squared score error over valid predictions.
    pub mse: Option<f64>,
    /// Mean matching reward (invalid = 0).
    pub matching_reward: f64,
}

/// Agreement of `predictions` (one per teacher rubric, `None` when unusable) with
/// `teachers` (see the module docs).
pub fn agreement(
    model: &str,
    predictions: &[Option<Rubric>],
    teachers: &[Rubric],
    weights: &RewardWeights,
) -> Result<AgreementRow, StudentError> {
    if predictions.len() != teachers.len() {
        return Err(StudentError::Input(format!(
            "{} predictions for {} teacher rubrics",
            predictions.len(),
            teachers.len()
        )));
    }
    if teachers.is_empty() {
        return Err(StudentError::Input("no held-out examples".into()));
    }
    let n = teachers.len();
    let (mut valid, mut score_hits, mut flag_hits) = (0usize, 0usize, 0usize);
    let (mut abs, mut sq) = (0f64, 0f64);
    let mut reward = 0f64;
    for (prediction, teacher) in predictions.iter().zip(teachers) {
        reward += f64::from(matching_reward(prediction.as_ref(), teacher, weights));
        let Some(predicted) = prediction.as_ref().filter(|p| p.validate().is_ok()) else {
            continue;
        };
        valid += 1;
        for (p, t) in predicted.scores().iter().zip(teacher.scores()) {
            let d = f64::from(*p) - f64::from(t);
            score_hits += usize::from(d == 0.0);
            abs += d.abs();
            sq += d * d;
        }
        flag_hits +=
            usize::from(predicted.flags.recommend_injection == teacher.flags.recommend_injection)
                + usize::from(
                    predicted.flags.use_as_warning_only == teacher.flags.use_as_warning_only,
                );
    }
    let percent = |hits: usize, slots: usize| 100.0 * hits as f64 / slots as f64;
    let scored = (valid * PRINCIPLES) as f64;
    Ok(AgreementRow {
        model: model.to_string(),
        examples: n,
        format_validity: percent(valid, n),
        score_accuracy: percent(score_hits, n * PRINCIPLES),
        flag_accuracy: percent(flag_hits, n * FLAGS),
        accuracy: percent(score_hits + flag_hits, n * (PRINCIPLES + FLAGS)),
        mae: (valid > 0).then(|| abs / scored),
        mse: (valid > 0).then(|| sq / scored),
        matching_reward: reward / n as f64,
    })
}

/// Agreement of a student's emitted rubrics with the teacher on `held_out`.
pub fn student_agreement(
    model: &str,
    student: &StudentPrm,
    held_out: &[TrainExample],
    weights: &RewardWeights,
) -> Result<AgreementRow, StudentError> {
    let inputs: Vec<PairInput> = held_out.iter().map(|e| e.input.clone()).collect();
    let predictions: Vec<Option<Rubric>> =
        student.rubrics(&inputs)?.into_iter().map(Some).collect();
    let teachers: Vec<Rubric> = held_out.iter().map(|e| e.teacher.clone()).collect();
    agreement(model, &predictions, &teachers, weights)
}

/// Rows of the agreement table, one per model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgreementTable {
    /// The rows, in display order.
    pub rows: Vec<AgreementRow>,
}

impl AgreementTable {
    /// The table as Markdown (percentages with two decimals, errors with three).
    pub fn to_markdown(&self) -> String {
        let mut out = String::from(
            "| Model | Pairs | Valid format (%) | Score acc. (%) | Flag acc. (%) | Avg. acc. (%) | MAE | MSE | Matching reward |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let error = |value: Option<f64>| value.map_or("—".to_string(), |v| format!("{v:.3}"));
        for row in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.3} |",
                row.model.replace('|', "\\|"),
                row.examples,
                row.format_validity,
                row.score_accuracy,
                row.flag_accuracy,
                row.accuracy,
                error(row.mae),
                error(row.mse),
                row.matching_reward
            );
        }
        out
    }
}
