//! Integration tests of merit-interact on the real mini-interact files (one test binary).

mod agent;
mod common;
mod env;
mod gen;
mod judge_db;
mod leak;
mod memory;
mod memory_run;
mod model_sim;
mod pg;
mod prm;
mod runlog;
mod tasks;
