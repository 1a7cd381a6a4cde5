//! The experiment layer of MERIT repair: stream orders, metrics and statistics.
//!
//! - [`stream`]: the seeded query orders every method shares;
//! - [`metrics`]: accuracy, repairs, steps, oscillation and cost from episode records;
//! - [`stats`]: mean and sample standard deviation over seeds, and the paired query-cluster
//!   bootstrap of the paper's Table 2.

#![warn(missing_docs)]

pub mod interact;
pub mod jsonl;
pub mod metrics;
pub mod plots;
pub mod report;
pub mod run;
pub mod stats;
pub mod stream;
pub mod validation;
