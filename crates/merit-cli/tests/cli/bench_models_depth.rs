//! `merit bench models --depth` on the embedded default model: a conversation grown past the
//! depth, then timed turns that evaluate only their own tokens on top of it (prefix reuse), with
//! both speeds compared with the cold initial prompt's in the same run, and the last call's
//! whole prompt evaluated again from an empty cache.

use merit_models::registry::{model_for_tests, DEFAULT_CHAT_MODEL};
use std::process::Command;

/// The number after `label` in `line` (`"at depth 1234 tokens"` with `"at depth "`).
fn number_after(line: &str, label: &str) -> f64 {
    let rest = &line[line
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {line}"))
        + label.len()..];
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number
        .parse()
        .unwrap_or_else(|_| panic!("a number after {label:?} in {line}"))
}

#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn speed_deep_in_a_conversation_is_measured_on_top_of_the_reused_conversation() {
    let Some(model) = model_for_tests(DEFAULT_CHAT_MODEL, "the `merit bench models --depth` test")
    else {
        return;
    };
    let databases = crate::spider_databases();
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["bench", "models", "--db-dir"])
        .arg(&databases)
        .arg("--model-path")
        .arg(model.main_file())
        .args([
            "--no-episode",
            "--no-embedder",
            "--repeat",
            "1",
            "--depth",
            "2000",
        ])
        .output()
        .expect("merit runs");
    let (stdout, _) = crate::succeeded(&output);
    let line = stdout
        .lines()
        .find(|line| line.starts_with("at depth "))
        .unwrap_or_else(|| panic!("no depth line in:\n{stdout}"));
    let depth = number_after(line, "at depth ");
    let fresh = number_after(line, "turns; ");
    assert!(depth >= 2000.0, "{line}");
    // Each timed call evaluates one new turn, not the conversation under it.
    assert!(fresh > 0.0 && fresh < depth / 2.0, "{line}");
    // The cold measurement re-evaluates the last timed call's whole prompt.
    let cold = stdout
        .lines()
        .find(|line| line.starts_with("the same "))
        .unwrap_or_else(|| panic!("no cold line in:\n{stdout}"));
    assert!(
        number_after(cold, "the same ") >= depth + fresh - 16.0,
        "{cold}"
    );
    assert!(number_after(cold, "prompt ") > 0.0, "{cold}");
    for ratio in ["prompt ", "generation "] {
        let after = &line[line.find("against the initial prompt").expect("ratios")..];
        assert!(number_after(after, ratio) > 0.0, "{line}");
    }
}
