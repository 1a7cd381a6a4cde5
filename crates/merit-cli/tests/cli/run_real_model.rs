//! `merit run` for real: the embedded chat model and embedder repair a few questions of the
//! shipped Spider-format sample, Iterative and MERIT, and `merit report` summarises them. A
//! second run of the same command is served from the reply cache and must write identical
//! episode logs, memory files and report.
//!
//! Needs the default chat model and embedder (the user paths in `MERIT_MODEL_PATH_*`, or the
//! local cache). Without them the test is skipped with a loud message, unless
//! `MERIT_REQUIRE_MODELS=1`, where they are fetched (or the test fails).

use merit_models::registry::{model_for_tests, DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDER};
use std::path::{Path, PathBuf};
use std::process::Command;

fn sample() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../demo/spider-sample"
    ))
}

/// The model files, or `None` (after a loud message) when they are absent and not required.
fn models() -> Option<(PathBuf, PathBuf)> {
    let what = "the real-model `merit run` test";
    let chat = model_for_tests(DEFAULT_CHAT_MODEL, what)?;
    let embedder = model_for_tests(DEFAULT_EMBEDDER, what)?;
    Some((
        chat.main_file().to_path_buf(),
        embedder.main_file().to_path_buf(),
    ))
}

fn merit_run(out: &Path, cache: &Path, chat_model: &Path) {
    merit_run_with(out, cache, chat_model, &[]);
}

fn merit_run_with(out: &Path, cache: &Path, chat_model: &Path, extra: &[&str]) {
    let sample = sample();
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("run")
        .args(["--dataset", "spider", "--data"])
        .arg(&sample)
        .arg("--db-dir")
        .arg(sample.join("database"))
        .args(["--methods", "iterative,merit", "--seeds", "0", "--k", "2"])
        .args(["--limit", "4", "--max-tokens", "160", "--model-path"])
        .arg(chat_model)
        .arg("--cache")
        .arg(cache)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("merit runs");
    assert!(
        output.status.success(),
        "merit run failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn merit_report(run: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("report")
        .arg(run)
        .output()
        .expect("merit report runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 report")
}

/// Every file under `root`, by relative path, with its bytes (the manifest aside: it records
/// the wall-clock start).
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                if relative != "manifest.json" {
                    files.push((relative, std::fs::read(&path).unwrap()));
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn real_model_run_repairs_and_replays_identically_from_the_cache() {
    let Some((chat_model, _embedder)) = models() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("replies");
    let first = scratch.path().join("first");
    let second = scratch.path().join("second");
    merit_run(&first, &cache, &chat_model);

    for method in ["iterative", "merit"] {
        let log = std::fs::read_to_string(first.join(format!("episodes/{method}-seed0.jsonl")))
            .unwrap_or_else(|e| panic!("episode log of {method}: {e}"));
        let episodes: Vec<serde_json::Value> = log
            .lines()
            .map(|line| serde_json::from_str(line).expect("an episode per line"))
            .collect();
        assert_eq!(episodes.len(), 4, "{method}: {log}");
        for episode in &episodes {
            let attempts = episode["attempts"].as_array().expect("attempts");
            // The initial attempt plus at most K = 2 revisions, each one a real model call.
            assert!((1..=3).contains(&attempts.len()), "{episode}");
            for revision in &attempts[1..] {
                assert!(
                    revision["completion_tokens"].as_u64().unwrap() > 0,
                    "{episode}"
                );
            }
        }
    }

    // Served from the cache: no model call differs, so neither does anything written.
    merit_run(&second, &cache, &chat_model);
    assert_eq!(tree(&first), tree(&second));
    let report = merit_report(&first);
    assert!(
        report.contains("iterative") && report.contains("merit"),
        "{report}"
    );
    assert_eq!(report, merit_report(&second));
}

/// The two streams through one batched embedded model (`--parallel 2`: continuous batching,
/// initial predictions two at a time): every episode is run, and a second run from the reply
/// cache writes the same logs, although batched replies depend on which calls shared a batch.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn a_batched_real_model_run_replays_identically_from_the_cache() {
    let Some((chat_model, _embedder)) = models() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("replies");
    let first = scratch.path().join("first");
    let second = scratch.path().join("second");
    merit_run_with(&first, &cache, &chat_model, &["--parallel", "2"]);
    for method in ["iterative", "merit"] {
        let log = std::fs::read_to_string(first.join(format!("episodes/{method}-seed0.jsonl")))
            .unwrap_or_else(|e| panic!("episode log of {method}: {e}"));
        assert_eq!(log.lines().count(), 4, "{method}: {log}");
    }
    merit_run_with(&second, &cache, &chat_model, &["--parallel", "2"]);
    assert_eq!(tree(&first), tree(&second));
}

/// `--prompt-lookup` reaches the embedded model: with it, the per-call debug lines show drafts
/// proposed from the prompt; without it, none. Both runs complete every episode.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn prompt_lookup_reaches_the_embedded_model() {
    let Some((chat_model, _embedder)) = models() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    // Drafted tokens over every call of one run (a fresh reply cache, so every call is real).
    let drafted = |name: &str, extra: &[&str]| -> u64 {
        let sample = sample();
        let output = Command::new(env!("CARGO_BIN_EXE_merit"))
            .env("MERIT_LOG", "merit_models=debug")
            .env("NO_COLOR", "1")
            .arg("run")
            .args(["--dataset", "spider", "--data"])
            .arg(&sample)
            .arg("--db-dir")
            .arg(sample.join("database"))
            .args(["--methods", "iterative", "--seeds", "0", "--k", "1"])
            .args(["--limit", "2", "--max-tokens", "96", "--model-path"])
            .arg(&chat_model)
            .arg("--cache")
            .arg(scratch.path().join(format!("replies-{name}")))
            .arg("--out")
            .arg(scratch.path().join(name))
            .args(extra)
            .output()
            .expect("merit runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "merit run failed\n{stderr}");
        let log = std::fs::read_to_string(
            scratch
                .path()
                .join(name)
                .join("episodes/iterative-seed0.jsonl"),
        )
        .expect("the episode log");
        assert_eq!(log.lines().count(), 2, "{log}");
        let calls: Vec<u64> = stderr
            .lines()
            .filter(|line| line.contains("call done"))
            .map(|line| {
                let after = line
                    .split("drafted=")
                    .nth(1)
                    .unwrap_or_else(|| panic!("{line}"));
                let digits: String = after
                    .chars()
                    .skip_while(|c| !c.is_ascii_digit())
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().unwrap_or_else(|_| panic!("{line}"))
            })
            .collect();
        assert!(!calls.is_empty(), "no call logged:\n{stderr}");
        calls.iter().sum()
    };
    assert_eq!(drafted("plain", &[]), 0);
    assert!(drafted("lookup", &["--prompt-lookup"]) > 0);
}

/// Every word of `sql` outside string literals and quotes is one the grammar allows: a SQL
/// keyword, a table or column name of the database (any case), a number or a short alias, or
/// (the free alias rule) a new name right after `AS`.
fn only_allowed_words(sql: &str, names: &[String]) -> Result<(), String> {
    let mut outside = String::new();
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' || c == '`' => quote = Some(c),
            None => outside.push(c),
        }
    }
    let mut after_as = false;
    for word in outside
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
    {
        let named = std::mem::replace(&mut after_as, word.eq_ignore_ascii_case("as"));
        if named {
            continue;
        }
        let upper = word.to_uppercase();
        let alias = (word.len() == 1 && word.chars().all(|c| c.is_ascii_alphabetic()))
            || ((word.starts_with('t') || word.starts_with('T'))
                && word.len() <= 3
                && word[1..].chars().all(|c| c.is_ascii_digit()));
        let allowed = merit_repair::grammar::KEYWORDS.contains(&upper.as_str())
            || names.iter().any(|n| n.eq_ignore_ascii_case(word))
            || word.chars().all(|c| c.is_ascii_digit())
            || alias;
        if !allowed {
            return Err(format!("{word:?} in {sql}"));
        }
    }
    Ok(())
}

/// Every repair aid at once on the real model (the grammar with its free alias rule, which
/// llama.cpp must accept): the run completes, records its aids, keeps the repairs inside the
/// grammar, logs the hints it showed, and replays byte-identically.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn real_model_run_with_every_repair_aid_stays_in_the_grammar_and_replays() {
    let Some((chat_model, _embedder)) = models() else {
        return;
    };
    let aids = [
        "--repeat-guard",
        "--hints",
        "schema,values",
        "--grammar",
        "--free-aliases",
        "--layout",
        "fresh",
    ];
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("replies");
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    merit_run_with(&first, &cache, &chat_model, &aids);
    let manifest = std::fs::read_to_string(first.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["aids"]["repeat_guard"], true, "{manifest}");
    assert_eq!(manifest["aids"]["grammar"], true, "{manifest}");
    assert_eq!(manifest["aids"]["grammar_aliases"], "free", "{manifest}");
    assert_eq!(manifest["aids"]["layout"], "fresh", "{manifest}");
    let database = merit_sql::SqliteDatabase::open(
        sample().join("database/concert_singer/concert_singer.sqlite"),
    )
    .unwrap();
    let catalog = merit_repair::hints::SchemaCatalog::read(&database).unwrap();
    let names: Vec<String> = catalog
        .tables
        .iter()
        .flat_map(|t| std::iter::once(t.name.clone()).chain(t.columns.iter().cloned()))
        .collect();
    let mut revisions = 0;
    for method in ["iterative", "merit"] {
        let log =
            std::fs::read_to_string(first.join(format!("episodes/{method}-seed0.jsonl"))).unwrap();
        for line in log.lines() {
            let episode: serde_json::Value = serde_json::from_str(line).unwrap();
            let attempts = episode["attempts"].as_array().unwrap();
            for revision in &attempts[1..] {
                revisions += 1;
                let sql = revision["sql"].as_str().unwrap();
                if let Err(word) = only_allowed_words(sql, &names) {
                    panic!("a word outside the grammar: {word}");
                }
            }
            // A failed attempt followed by a revision was shown its hints, if any, and they
            // are logged on it; an execution error always has at least a table list or a
            // name to offer on this database.
            for pair in attempts.windows(2) {
                let error = pair[0]["error"].as_str().unwrap_or("");
                if error.starts_with("no such column") || error.starts_with("no such table") {
                    assert!(
                        pair[0]["aids"]["hints"]
                            .as_array()
                            .is_some_and(|h| !h.is_empty()),
                        "{episode}"
                    );
                }
            }
        }
    }
    assert!(
        revisions > 0,
        "the sample's slice has initial failures to repair"
    );
    merit_run_with(&second, &cache, &chat_model, &aids);
    assert_eq!(tree(&first), tree(&second));
}
