//! The student PRM's training pipeline as `merit interact prm train` runs it: a deterministic
//! three-way split of the annotations, supervised training, the GRPO refinement, and the
//! agreement table of the untrained, SFT and SFT+GRPO students on the held-out pairs.

use super::{
    examples_from_annotations, student_agreement, train_grpo, train_sft, AgreementTable,
    GrpoConfig, RewardWeights, SftConfig, StudentConfig, StudentError, StudentPrm,
};
use merit_core::model::Embedder;
use merit_interact::prm::AnnotationRecord;

/// What keeps related annotations on one side of the split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitBy {
    /// Every (state, memory) pair on its own: one state's pairs may fall on both sides.
    Pair,
    /// All pairs of one state together: the held-out check never sees a trained state.
    State,
    /// All pairs of one task's states together (the state id up to its last `#`, as
    /// `merit interact prm annotate` writes `instance#turn`): neighbouring turns of one
    /// episode, nearly the same state with the same candidates, never fall on both sides.
    Task,
}

/// The split and seed of [`train_student`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudentTraining {
    /// Percent of the pairs held out (1 to 99); the rest is halved between SFT and GRPO.
    pub held_out_percent: u64,
    /// What is kept together.
    pub split_by: SplitBy,
    /// Seed of the network and both training stages.
    pub seed: u64,
}

/// A trained student and how well each stage agrees with the teacher on held-out pairs.
#[derive(Debug)]
pub struct TrainedStudent {
    /// The SFT+GRPO student.
    pub student: StudentPrm,
    /// Untrained, SFT and SFT+GRPO rows.
    pub agreement: AgreementTable,
    /// Pairs with a rubric in the SFT, GRPO and held-out parts.
    pub sizes: (usize, usize, usize),
}

/// The bucket (0..100) of a record: an FNV-1a hash of its state id (and its memory id when
/// splitting by pair; only the task part of the id when splitting by task), so a record always
/// lands in the same part whatever else is annotated.
pub fn bucket(record: &AnnotationRecord, split_by: SplitBy) -> u64 {
    let mut hash = merit_core::hash::Fnv1a::new();
    let key = match split_by {
        SplitBy::Task => record
            .state_id
            .rsplit_once('#')
            .map_or(record.state_id.as_str(), |(task, _)| task),
        SplitBy::Pair | SplitBy::State => record.state_id.as_str(),
    };
    hash.write(key.as_bytes());
    if split_by == SplitBy::Pair {
        hash.write(&record.memory_id.to_le_bytes());
    }
    hash.finish() % 100
}

/// Splits `records` (see [`bucket`]), trains SFT then GRPO, and measures agreement.
pub fn train_student(
    records: Vec<AnnotationRecord>,
    embedder: &dyn Embedder,
    training: StudentTraining,
) -> Result<TrainedStudent, StudentError> {
    if training.held_out_percent == 0 || training.held_out_percent >= 100 {
        return Err(StudentError::Input(
            "the held-out percent must be between 1 and 99".into(),
        ));
    }
    let judged = records
        .iter()
        .filter(|r| r.result.rubric().is_some())
        .count();
    if judged < 10 {
        return Err(StudentError::Input(format!(
            "only {judged} annotated pairs have a valid rubric; annotate more before training"
        )));
    }
    let (mut held_out, mut sft, mut grpo) = (Vec::new(), Vec::new(), Vec::new());
    let rest = 100 - training.held_out_percent;
    for record in records {
        let b = bucket(&record, training.split_by);
        if b < training.held_out_percent {
            held_out.push(record);
        } else if b < training.held_out_percent + rest / 2 {
            sft.push(record);
        } else {
            grpo.push(record);
        }
    }
    let held_out = examples_from_annotations(&held_out, embedder)?;
    let sft = examples_from_annotations(&sft, embedder)?;
    let grpo = examples_from_annotations(&grpo, embedder)?;
    if sft.is_empty() || grpo.is_empty() || held_out.is_empty() {
        return Err(StudentError::Input(format!(
            "a split is empty ({} SFT, {} GRPO, {} held out); annotate more pairs",
            sft.len(),
            grpo.len(),
            held_out.len()
        )));
    }
    let config = StudentConfig {
        dimension: embedder.dimension(),
        seed: training.seed,
        ..StudentConfig::default()
    };
    let weights = RewardWeights::default();
    let untrained = StudentPrm::new(config.clone())?;
    let mut rows = vec![student_agreement(
        "student (untrained)",
        &untrained,
        &held_out,
        &weights,
    )?];
    let mut student = StudentPrm::new(config)?;
    train_sft(
        &mut student,
        &sft,
        &SftConfig {
            seed: training.seed.wrapping_add(1),
            ..SftConfig::default()
        },
    )?;
    rows.push(student_agreement(
        "student (SFT)",
        &student,
        &held_out,
        &weights,
    )?);
    let reference = student.try_clone()?;
    train_grpo(
        &mut student,
        &reference,
        &grpo,
        &GrpoConfig {
            seed: training.seed.wrapping_add(2),
            ..GrpoConfig::default()
        },
    )?;
    rows.push(student_agreement(
        "student (SFT+GRPO)",
        &student,
        &held_out,
        &weights,
    )?);
    Ok(TrainedStudent {
        student,
        agreement: AgreementTable { rows },
        sizes: (sft.len(), grpo.len(), held_out.len()),
    })
}
