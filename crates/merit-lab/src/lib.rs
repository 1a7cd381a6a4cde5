//! The experiment layer of both MERIT systems: repair experiments, stream orders, metrics,
//! statistics, reports, the classifier validation and the interact report.
//!
//! - [`experiment`]: a repair experiment from a benchmark folder to a finished run directory
//!   (question choice, method catalogue, manifest, shared initial predictions);
//! - [`copies`]: a repair experiment whose candidates run on PostgreSQL copies of the
//!   databases;
//! - [`run`]: the streams of a run directory, resumable after `kill -9`;
//! - [`live`]: the live-mode experiment (no oracle for the agent, a simulated user);
//! - [`stream`]: the seeded query orders every method shares;
//! - [`metrics`]: accuracy, repairs, steps, oscillation and cost from episode records;
//! - [`stats`]: mean and sample standard deviation over seeds, the paired query-cluster
//!   bootstrap of the paper's Table 2, exact sign tests and Pass@k;
//! - [`report`] and [`plots`]: the paper's Tables 1–4, Table 5's failure composition and
//!   Table 6 (memory use), as Markdown, JSON and SVG figures;
//! - [`memory_use`]: which precedents each repair step saw (Table 6), from the logs alone;
//! - [`validation`]: the classifier against the reference labeler (the repair paper's Table 5);
//! - [`interact`]: the interact runs' report (summaries, paired comparisons, repeated tries);
//! - [`jsonl`]: run-log reading and appending over `merit_journal::jsonl`.

#![warn(missing_docs)]

pub mod copies;
pub mod experiment;
pub mod interact;
pub mod jsonl;
pub mod live;
pub mod memory_use;
pub mod metrics;
pub mod plots;
pub mod report;
pub mod run;
pub mod stats;
pub mod stream;
pub mod validation;
