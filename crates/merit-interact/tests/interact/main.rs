//! Integration tests of merit-interact on the real mini-interact files (one test binary).

mod common;
mod env;
mod judge_db;
mod leak;
mod pg;
mod tasks;
