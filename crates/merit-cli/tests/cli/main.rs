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

/// The PostgreSQL server of the tests that need one (`MERIT_TEST_POSTGRES_URL`), or `None`
/// after a loud skip line naming `what` when it is unset and `MERIT_REQUIRE_POSTGRES` is not 1.
fn postgres_url(what: &str) -> Option<String> {
    match std::env::var("MERIT_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_string()),
        _ => {
            assert!(
                std::env::var("MERIT_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "MERIT_REQUIRE_POSTGRES=1 but MERIT_TEST_POSTGRES_URL is not set"
            );
            eprintln!("\n=== SKIPPED: {what} (MERIT_TEST_POSTGRES_URL unset)\n");
            None
        }
    }
}
