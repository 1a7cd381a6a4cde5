//! The end-to-end tests of the `merit` binary, as one test binary (each separate test file
//! would be another long link of llama.cpp and candle, and a few hundred megabytes in CI).

mod ask_concert_singer;
mod bench_repair_scripted;
mod classify_validate;
mod cli_eval;
mod cli_report;
mod interact_pipeline;
mod interact_report;
mod mcp_tools;
mod run_postgres;
mod run_real_model;
mod serve_process;
mod stand_in;
mod web_page;
