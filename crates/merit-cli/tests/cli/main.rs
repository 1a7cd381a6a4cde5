//! The end-to-end tests of the `merit` binary, as one test binary (each separate test file
//! would be another long link of llama.cpp and candle, and a few hundred megabytes in CI).

mod ask_concert_singer;
mod bench_models_depth;
mod bench_repair_scripted;
mod classify_validate;
mod cli_eval;
mod cli_report;
mod interact_pipeline;
mod interact_report;
mod mcp_tools;
mod prm_grammar_real;
mod run_postgres;
mod run_real_model;
mod scripts;
mod serve_process;
mod stand_in;
mod web_page;

/// The PostgreSQL server of the tests that need one (`MERIT_TEST_POSTGRES_URL`), or `None`
/// after a loud skip line naming `what` (see [`merit_core::optional`]).
fn postgres_url(what: &str) -> Option<String> {
    merit_core::optional::from_env(
        "MERIT_TEST_POSTGRES_URL",
        "MERIT_REQUIRE_POSTGRES",
        what,
        "run `bash scripts/setup-postgres.sh` and export the URL it prints as MERIT_TEST_POSTGRES_URL",
    )
}

/// Spider's database folder in `../shared/data`.
fn spider_databases() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider/database"
    ))
}

/// The stdout and stderr of a `merit` run that must have succeeded (both shown if it did not).
fn succeeded(output: &std::process::Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}
