//! `merit bench repair --scripted`: the harness benchmark at any scale without a model. The
//! scripted run is made, replayed from its cache with every reply a hit, and the replay must
//! reproduce the episode logs byte for byte, or the benchmark fails.

use std::path::PathBuf;
use std::process::Command;

fn shared(path: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"))
        .join(path)
        .display()
        .to_string()
}

fn bench(limit: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args([
            "bench",
            "repair",
            "--scripted",
            "--dataset",
            "spider",
            "--data",
        ])
        .arg(shared("spider"))
        .arg("--db-dir")
        .arg(shared("spider/database"))
        .args(["--methods", "iterative,reflexion,dynamic-rag,merit"])
        .args([
            "--seeds",
            "0,1",
            "--k",
            "3",
            "--limit",
            limit,
            "--live-calls",
            "0",
        ])
        .output()
        .expect("merit runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn scripted_run_replays_identically_and_reports_the_overhead() {
    let stdout = bench("24");
    let replayed = stdout
        .lines()
        .find(|line| line.starts_with("replayed "))
        .expect("a replay summary line");
    // 24 questions x 4 methods x 2 seeds, every call from the cache, none live.
    assert!(replayed.starts_with("replayed 192 episodes"), "{replayed}");
    assert!(replayed.contains(", 0 live)"), "{replayed}");
    assert!(replayed.contains("episode logs identical"), "{replayed}");
    assert!(stdout.contains("harness overhead: "), "{stdout}");
    // The stand-in repairs some failures and not others, so memory gets both polarities.
    assert!(stdout.contains("| merit | 2 |"), "{stdout}");
    let steps_of = |text: &str| {
        text.lines()
            .find(|line| line.starts_with("replayed "))
            .and_then(|line| line.split('(').nth(1))
            .and_then(|counts| counts.split(')').next())
            .map(str::to_string)
    };
    // The stand-in is deterministic: a second benchmark replays the same steps and calls.
    assert_eq!(steps_of(&stdout), steps_of(&bench("24")));
}
