//! `merit report` over run directories: tables, JSON and figures, byte-identical on re-runs.

use merit_core::episode::{AttemptRecord, EpisodeRecord};
use merit_core::Status;
use std::io::Write;
use std::path::Path;
use std::process::Command;

fn episode(method: &str, seed: u64, position: usize, fixed_at: Option<u32>) -> EpisodeRecord {
    let attempt = |step: u32, status: Status| AttemptRecord {
        step,
        sql: format!("SELECT {step}"),
        status,
        error: None,
        failure_type: Some(merit_core::failure::FailureType::ResultMismatch),
        retrieved: Vec::new(),
        prompt_tokens: if step == 0 { 0 } else { 800 },
        completion_tokens: if step == 0 { 0 } else { 30 },
        calls: u32::from(step > 0),
        aids: Default::default(),
    };
    let mut attempts = vec![attempt(
        0,
        if fixed_at == Some(0) {
            Status::Correct
        } else {
            Status::DenotationMismatch
        },
    )];
    if fixed_at != Some(0) {
        for step in 1..=fixed_at.unwrap_or(7) {
            let status = if Some(step) == fixed_at {
                Status::Correct
            } else {
                Status::ExecutionError
            };
            attempts.push(attempt(step, status));
        }
    }
    EpisodeRecord {
        method: method.into(),
        seed,
        position,
        question_id: format!("dev-{position}"),
        db_id: "concert_singer".into(),
        attempts,
        memory_written: None,
        stopped_early: None,
    }
}

fn write_run(dir: &Path) {
    std::fs::create_dir_all(dir.join("episodes")).unwrap();
    for method in ["iterative", "merit"] {
        for seed in 0..3 {
            let mut file = std::fs::File::create(
                dir.join("episodes")
                    .join(format!("{method}-seed{seed}.jsonl")),
            )
            .unwrap();
            for position in 0..30 {
                let fixed = match (method, position % 5) {
                    (_, 0) => Some(0),
                    ("merit", 1 | 2) => Some(2),
                    ("iterative", 1) => Some(4),
                    _ => None,
                };
                let line = serde_json::to_string(&episode(method, seed, position, fixed)).unwrap();
                writeln!(file, "{line}").unwrap();
            }
        }
    }
}

#[test]
fn report_prints_the_tables_and_writes_identical_files_twice() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path());
    let run = || {
        let output = Command::new(env!("CARGO_BIN_EXE_merit"))
            .arg("report")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let first = run();
    assert!(first.contains("## Table 1"), "{first}");
    assert!(first.contains("| merit | 3 | 60.00 ± 0.00 |"), "{first}");
    assert!(
        first.contains("| iterative | 3 | 40.00 ± 0.00 |"),
        "{first}"
    );
    assert!(
        first.contains("## Table 2") && first.contains("| iterative | +20.00 |"),
        "{first}"
    );
    let report = dir.path().join("report");
    let files = [
        "report.md",
        "report.json",
        "accuracy.svg",
        "repaired_by_step.svg",
        "accuracy_over_stream.svg",
    ];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(report.join(f)).unwrap())
        .collect();
    assert_eq!(first, run());
    let after: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(report.join(f)).unwrap())
        .collect();
    assert_eq!(before, after);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["questions"], 30);
}

/// Two runs of the same methods in different settings, told apart by suffixes: the second
/// run's MERIT is another method to Table 2, compared paired with the first run's.
#[test]
fn suffixes_keep_two_settings_of_one_method_apart() {
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_run(first.path());
    write_run(second.path());
    let report = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .arg("report")
            .arg(first.path())
            .arg(second.path())
            .args(extra)
            .arg("--out")
            .arg(first.path().join("combined"))
            .output()
            .unwrap()
    };
    let output = report(&["--suffixes", ",change"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("| merit+change | 3 | 60.00 ± 0.00 |"),
        "{text}"
    );
    assert!(text.contains("| merit+change | +0.00 |"), "{text}");
    assert!(text.contains("| iterative+change | +20.00 |"), "{text}");
    let output = report(&["--suffixes", "change"]);
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("--suffixes gives 1 suffixes for 2 run directories"),
        "{error}"
    );
    // Table 2 against another method, and a reference the runs lack is refused.
    let output = report(&["--suffixes", ",change", "--reference", "iterative"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    assert!(text.contains("(iterative minus method)"), "{text}");
    assert!(text.contains("| merit | -20.00 |"), "{text}");
    let output = report(&["--suffixes", ",change", "--reference", "reflexion"]);
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("--reference reflexion: no such method"),
        "{error}"
    );
}

/// A one-seed run of another setting pairs with a three-seed run only over the seed both
/// have: `--seeds` keeps those streams.
#[test]
fn seeds_restrict_the_report_to_the_streams_two_runs_share() {
    let (full, single) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_run(full.path());
    write_run(single.path());
    for method in ["iterative", "merit"] {
        for seed in 1..3 {
            std::fs::remove_file(
                single
                    .path()
                    .join(format!("episodes/{method}-seed{seed}.jsonl")),
            )
            .unwrap();
        }
    }
    let report = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .arg("report")
            .arg(full.path())
            .arg(single.path())
            .args(["--suffixes", ",paper", "--out"])
            .arg(full.path().join("combined"))
            .args(extra)
            .output()
            .unwrap()
    };
    let output = report(&[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!text.contains("| merit+paper | +0.00 |"), "{text}");
    let output = report(&["--seeds", "0"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    assert!(text.contains("| merit | 1 |"), "{text}");
    assert!(text.contains("| merit+paper | +0.00 |"), "{text}");
    assert!(text.contains("| iterative+paper | +20.00 |"), "{text}");
    let output = report(&["--seeds", "7"]);
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("no episodes of those seeds"), "{error}");
}

/// Committed results keep their logs gzip-compressed: the report reads them to the same tables.
#[test]
fn compressed_logs_give_the_same_report_and_a_bad_one_a_clear_error() {
    let report = |dir: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_merit"))
            .arg("report")
            .arg(dir)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let plain = tempfile::tempdir().unwrap();
    write_run(plain.path());
    let compressed = tempfile::tempdir().unwrap();
    write_run(compressed.path());
    let episodes = compressed.path().join("episodes");
    for entry in std::fs::read_dir(&episodes).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let gz = std::fs::File::create(path.with_extension("jsonl.gz")).unwrap();
        let mut encoder = flate2::write::GzEncoder::new(gz, flate2::Compression::best());
        encoder.write_all(&bytes).unwrap();
        encoder.finish().unwrap();
        std::fs::remove_file(&path).unwrap();
    }
    let (ok, expected, _) = report(plain.path());
    assert!(ok);
    let (ok, got, stderr) = report(compressed.path());
    assert!(ok, "{stderr}");
    assert_eq!(got, expected);
    std::fs::write(episodes.join("broken.jsonl.gz"), b"not gzip").unwrap();
    let (ok, _, stderr) = report(compressed.path());
    assert!(!ok);
    assert!(stderr.contains("broken.jsonl.gz"), "{stderr}");
}

#[test]
fn report_on_a_folder_that_is_not_a_run_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a run directory"), "{stderr}");
}

/// Two processes never write one run directory: while another holds it, `merit run` (a new run
/// or a resume) refuses with a message naming the folder, and writes nothing there.
#[test]
fn a_run_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir_all(&out).unwrap();
    let held = merit_core::fs::lock_folder(&out)
        .unwrap()
        .expect("the test holds it");
    let sample = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../demo/spider-sample"
    ));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["run", "--dataset", "spider", "--data"])
        .arg(&sample)
        .arg("--db-dir")
        .arg(sample.join("database"))
        .args([
            "--methods",
            "iterative",
            "--seeds",
            "0",
            "--limit",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("in use by another merit process") && stderr.contains("run"),
        "{stderr}"
    );
    assert!(!out.join("manifest.json").exists());
    drop(held);
}
