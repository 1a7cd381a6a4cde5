//! Journals: the append-only JSON Lines files every log of both systems is written to.
//!
//! The repair run's episode logs and memory, the interact run log, its memory banks, task
//! generation's records, the PRM annotations and live mode's journal (`live.jsonl`) all keep
//! their state the same way: one JSON record per line, each line written with one
//! `write_all` and fsync'd before the writer moves
//! on, so a killed process leaves every finished record plus at worst one torn last line.
//! [`jsonl`] holds that mechanism and its one error type, once, below every crate that logs.
//! [`settings`] is the other half of a resumable run: the settings a run directory was started
//! with, written once and checked on every later start. [`resume`] is the engine that settles
//! a run's items in order from what the log holds and what is still to run. Atomic whole-file writes and folder
//! locks are in `merit_core::fs`.
#![warn(missing_docs)]

pub mod jsonl;
pub mod resume;
pub mod settings;
