//! Classifier validation in the layout of the paper's Table 5: failure composition, accuracy
//! and macro-F1 of the classifier's labels against reference labels.

use crate::failure::FailureType;
use serde::Serialize;
use std::fmt::Write as _;

/// Precision, recall and F1 of one category.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassScores {
    /// The category.
    pub failure_type: FailureType,
    /// Reference labels of this category.
    pub support: usize,
    /// Classifier labels of this category.
    pub predicted: usize,
    /// Correct classifier labels of this category.
    pub correct: usize,
    /// correct / predicted (0 when nothing was predicted).
    pub precision: f64,
    /// correct / support (0 when the support is 0).
    pub recall: f64,
    /// Harmonic mean of precision and recall (0 when both are 0).
    pub f1: f64,
}

/// The classifier measured against reference labels on one set of failures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Name of the failure set (e.g. `Spider`).
    pub dataset: String,
    /// Number of failures.
    pub total: usize,
    /// `confusion[reference][classifier]`, indexed by [`FailureType::index`].
    pub confusion: [[usize; 7]; 7],
    /// Share of failures where classifier and reference agree, in percent.
    pub accuracy: f64,
    /// Unweighted mean F1 over the categories that occur among the reference or the classifier
    /// labels (as scikit-learn's `average="macro"` does).
    pub macro_f1: f64,
    /// Per-category scores, in [`FailureType::ALL`] order, for categories that occur.
    pub classes: Vec<ClassScores>,
}

impl ValidationReport {
    /// Builds the report from `(classifier label, reference label)` pairs.
    pub fn new(
        dataset: impl Into<String>,
        pairs: impl IntoIterator<Item = (FailureType, FailureType)>,
    ) -> ValidationReport {
        let mut confusion = [[0usize; 7]; 7];
        let mut total = 0;
        for (predicted, reference) in pairs {
            confusion[reference.index()][predicted.index()] += 1;
            total += 1;
        }
        let correct_total: usize = (0..7).map(|i| confusion[i][i]).sum();
        let mut classes = Vec::new();
        for kind in FailureType::ALL {
            let i = kind.index();
            let support: usize = confusion[i].iter().sum();
            let predicted: usize = (0..7).map(|r| confusion[r][i]).sum();
            if support == 0 && predicted == 0 {
                continue;
            }
            let correct = confusion[i][i];
            let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            let precision = ratio(correct, predicted);
            let recall = ratio(correct, support);
            let f1 = if precision + recall == 0.0 {
                0.0
            } else {
                2.0 * precision * recall / (precision + recall)
            };
            classes.push(ClassScores {
                failure_type: kind,
                support,
                predicted,
                correct,
                precision,
                recall,
                f1,
            });
        }
        let macro_f1 = if classes.is_empty() {
            0.0
        } else {
            classes.iter().map(|c| c.f1).sum::<f64>() / classes.len() as f64
        };
        let accuracy = if total == 0 {
            0.0
        } else {
            100.0 * correct_total as f64 / total as f64
        };
        ValidationReport {
            dataset: dataset.into(),
            total,
            confusion,
            accuracy,
            macro_f1,
            classes,
        }
    }

    /// Share (percent) of failures the classifier put in `kinds`.
    pub fn composition(&self, kinds: &[FailureType]) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let count: usize = kinds
            .iter()
            .map(|k| (0..7).map(|r| self.confusion[r][k.index()]).sum::<usize>())
            .sum();
        100.0 * count as f64 / self.total as f64
    }

    /// The paper's Table 5 row layout, one row for this report.
    ///
    /// Composition columns are shares of the classifier's labels: Result Mismatch, Schema
    /// Linking, and Other (Aggregation, Filter/Value, Execution, Syntax, Unknown).
    pub fn table5(&self) -> String {
        table5(std::slice::from_ref(self))
    }

    /// Per-category precision, recall and F1, and the confusion matrix.
    pub fn details(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| type | reference | classifier | correct | precision | recall | F1 |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
        for c in &self.classes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} |",
                c.failure_type, c.support, c.predicted, c.correct, c.precision, c.recall, c.f1
            );
        }
        let _ = writeln!(
            out,
            "\nConfusion matrix (rows: reference, columns: classifier):\n"
        );
        let header: Vec<&str> = FailureType::ALL.iter().map(|k| short(*k)).collect();
        let _ = writeln!(out, "| reference \\ classifier | {} |", header.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(7));
        for (r, kind) in FailureType::ALL.iter().enumerate() {
            let cells: Vec<String> = self.confusion[r].iter().map(|n| n.to_string()).collect();
            let _ = writeln!(out, "| {} | {} |", kind, cells.join(" | "));
        }
        out
    }
}

fn short(kind: FailureType) -> &'static str {
    match kind {
        FailureType::ResultMismatch => "RM",
        FailureType::SchemaLinking => "SL",
        FailureType::Aggregation => "Agg",
        FailureType::FilterValue => "F/V",
        FailureType::Execution => "Exec",
        FailureType::Syntax => "Syn",
        FailureType::Unknown => "Unk",
    }
}

/// Table 5 for several datasets.
pub fn table5(reports: &[ValidationReport]) -> String {
    let mut out = String::from(
        "| Dataset | Failures | Result mismatch | Schema linking | Other | Acc. (%) | Macro-F1 |\n",
    );
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for report in reports {
        let other = [
            FailureType::Aggregation,
            FailureType::FilterValue,
            FailureType::Execution,
            FailureType::Syntax,
            FailureType::Unknown,
        ];
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} |",
            report.dataset,
            report.total,
            report.composition(&[FailureType::ResultMismatch]),
            report.composition(&[FailureType::SchemaLinking]),
            report.composition(&other),
            report.accuracy,
            report.macro_f1
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureType::*;

    #[test]
    fn accuracy_and_macro_f1_match_a_hand_count() {
        // reference: RM RM SL FV ; classifier: RM RM SL RM
        let report = ValidationReport::new(
            "toy",
            [
                (ResultMismatch, ResultMismatch),
                (ResultMismatch, ResultMismatch),
                (SchemaLinking, SchemaLinking),
                (ResultMismatch, FilterValue),
            ],
        );
        assert_eq!(report.total, 4);
        assert!((report.accuracy - 75.0).abs() < 1e-12);
        // RM: p = 2/3, r = 1, F1 = 0.8; SL: 1; F/V: 0  → macro = 1.8 / 3 = 0.6
        assert!((report.macro_f1 - 0.6).abs() < 1e-12);
        assert!((report.composition(&[ResultMismatch]) - 75.0).abs() < 1e-12);
        let table = report.table5();
        assert!(
            table.contains("| toy | 4 | 75.00 | 25.00 | 0.00 | 75.00 | 0.600 |"),
            "{table}"
        );
        assert!(report.details().contains("| Filter/Value | 1 | 0 | 0 |"));
    }

    #[test]
    fn empty_reports_are_all_zero() {
        let report = ValidationReport::new("none", []);
        assert_eq!(report.accuracy, 0.0);
        assert_eq!(report.macro_f1, 0.0);
        assert!(report.classes.is_empty());
    }
}
