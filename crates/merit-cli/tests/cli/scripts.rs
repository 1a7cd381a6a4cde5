//! The experiment scripts the long runs depend on, each on a scratch copy of the project:
//! `scripts/checkpoint.sh`, which carries the run folders and the reply cache across machines
//! (saves are deterministic and leave out what the script says; a restore brings back only
//! what is missing, never over a newer local file), `scripts/experiments-queue.sh`'s
//! pinning (a step whose binary cannot be pinned stops instead of running another build) and
//! its choice of the interact experiment the calibrations' rules adopt (name, options, pin), and
//! `scripts/repair-dev-run.sh`'s wall-clock record (only a resumption that logs episodes adds a
//! line, so restarting a finished run leaves its committed `wall.txt` as it was),
//! `scripts/interact-indomain.py`'s task sets for the in-database memory arm (no evaluation
//! task's seed or reference SQL gets in), and `scripts/prm-grammar-summary.py`'s comparison of
//! the rubric judge with and without its grammar.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch project: `scripts/checkpoint.sh` and `scripts/experiments-queue.sh` copied in
/// (each works relative to its own folder), a `runs/` folder and a reply cache under `home`.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let home = dir.path().join("merit-home");
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
        for name in ["checkpoint.sh", "experiments-queue.sh", "repair-dev-run.sh"] {
            std::fs::copy(scripts.join(name), root.join("scripts").join(name)).unwrap();
        }
        Scratch {
            _dir: dir,
            root,
            home,
        }
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Writes an executable shell script (the queue runs its scripts directly).
    fn write_script(&self, path: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        self.write(path, &format!("#!/usr/bin/env bash\n{body}"));
        std::fs::set_permissions(self.root.join(path), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }

    fn write_segment(&self, name: &str, text: &str) {
        let dir = self.home.join("replies");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(path)).ok()
    }

    fn run(&self, action: &str, extra: &[(&str, &str)]) -> String {
        let output = Command::new("bash")
            .arg(self.root.join("scripts/checkpoint.sh"))
            .arg(action)
            .env("MERIT_HOME", &self.home)
            .envs(extra.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "checkpoint.sh {action}: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned() + &stderr
    }
}

#[test]
fn a_checkpoint_round_trips_what_a_resume_needs_and_nothing_else() {
    let scratch = Scratch::new();
    scratch.write(
        "runs/repair-dev/chosen/episodes/merit-seed0.jsonl",
        "{\"a\":1}\n",
    );
    scratch.write("runs/repair-dev/chosen/manifest.json", "{}\n");
    scratch.write("runs/repair-dev/source-commit", "abc\n");
    // Left out: the pinned binary, a repair stream's memory (rebuilt from its log), logs.
    scratch.write("runs/repair-dev/merit", "binary");
    scratch.write("runs/repair-dev/chosen/memory/positive.jsonl", "{}\n");
    scratch.write("runs/queue.log", "log\n");
    scratch.write_segment("seg-1.jsonl", "{\"reply\":1}\n");
    scratch.run("save", &[]);
    let archive = scratch.root.join("checkpoints/runs.tar.gz");
    let first = std::fs::read(&archive).unwrap();
    // Saving again over unchanged runs gives the same bytes (no new commit).
    scratch.run("save", &[]);
    assert_eq!(std::fs::read(&archive).unwrap(), first);
    assert!(scratch
        .root
        .join("checkpoints/replies/seg-1.jsonl.gz")
        .is_file());

    // A fresh machine: the run folder and the cache come back, the left-out files do not.
    std::fs::remove_dir_all(scratch.root.join("runs")).unwrap();
    std::fs::remove_dir_all(&scratch.home).unwrap();
    scratch.write("runs/repair-dev/source-commit", "newer\n");
    let said = scratch.run("restore", &[]);
    assert!(said.contains("restored 1 reply-cache segments"), "{said}");
    assert_eq!(
        scratch
            .read("runs/repair-dev/chosen/episodes/merit-seed0.jsonl")
            .as_deref(),
        Some("{\"a\":1}\n")
    );
    assert_eq!(
        scratch.read("runs/repair-dev/source-commit").as_deref(),
        Some("newer\n"),
        "a local file is never overwritten"
    );
    for left_out in [
        "runs/repair-dev/merit",
        "runs/repair-dev/chosen/memory/positive.jsonl",
        "runs/queue.log",
    ] {
        assert_eq!(scratch.read(left_out), None, "{left_out}");
    }
    assert_eq!(
        std::fs::read_to_string(scratch.home.join("replies/seg-1.jsonl")).unwrap(),
        "{\"reply\":1}\n"
    );

    // A segment that grew locally stays the local (newer) copy.
    scratch.write_segment("seg-1.jsonl", "{\"reply\":1}\n{\"reply\":2}\n");
    let said = scratch.run("restore", &[]);
    assert!(said.contains("restored 0 reply-cache segments"), "{said}");
    assert_eq!(
        std::fs::read_to_string(scratch.home.join("replies/seg-1.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
}

#[test]
fn a_reply_cache_over_the_limit_is_left_out_with_a_message() {
    let scratch = Scratch::new();
    scratch.write("runs/a/episodes/x.jsonl", "{}\n");
    // Incompressible-enough text well over a 0 MB limit.
    let text: String = (0..20_000)
        .map(|i| format!("{i:x}{}\n", i * 7919))
        .collect();
    scratch.write_segment("seg-big.jsonl", &text);
    let said = scratch.run("save", &[("REPLIES_MAX_MB", "0")]);
    assert!(said.contains("not saved"), "{said}");
    assert!(!scratch.root.join("checkpoints/replies").exists());
    assert!(scratch.root.join("checkpoints/runs.tar.gz").is_file());
}

/// The queue's `live` step with a stand-in `pin-binary.sh` (`mode`: `fail` exits 1, `missing`
/// prints a path with nothing there, `ok` pins an executable) and a stand-in step script that
/// records the binary it was given. Returns the queue's exit success, its output and what the
/// step recorded.
fn queue_live_step(mode: &str) -> (bool, String, Option<String>) {
    let scratch = queue_scratch(mode);
    scratch.write_script(
        "scripts/live-dev-run.sh",
        "echo \"MERIT=${MERIT:-unset}\" > step-ran\n",
    );
    let (ok, text) = run_queue(&scratch, "live");
    (ok, text, scratch.read("step-ran"))
}

/// A scratch project for the queue: checkpoints stubbed out (the queue restores and saves them
/// around its steps; not what these tests look at) and a stand-in `pin-binary.sh` (`mode`:
/// `fail` exits 1, `missing` prints a path with nothing there, `ok` pins an executable).
fn queue_scratch(mode: &str) -> Scratch {
    let scratch = Scratch::new();
    scratch.write_script("scripts/checkpoint.sh", "exit 0\n");
    scratch.write_script(
        "scripts/pin-binary.sh",
        &format!(
            "mode={mode}\ncase $mode in\n  fail) exit 1 ;;\n  missing) echo \"$1/merit\" ;;\n  \
             ok) mkdir -p \"$1\"; printf '#!/bin/sh\\n' > \"$1/merit\"; chmod +x \"$1/merit\"; \
             echo \"$1/merit\" ;;\nesac\n"
        ),
    );
    scratch
}

/// Runs the queue on `steps`; returns its exit success and its output.
fn run_queue(scratch: &Scratch, steps: &str) -> (bool, String) {
    // Output to a file, not a pipe: were the queue to leave its checkpoint timer running, a
    // pipe would stay open until it ended; `status` returns when the queue itself exits.
    let log = scratch.root.join("queue.log");
    let file = std::fs::File::create(&log).unwrap();
    let started = std::time::Instant::now();
    let status = Command::new("bash")
        .arg(scratch.root.join("scripts/experiments-queue.sh"))
        .env("STEPS", steps)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    (status.success(), std::fs::read_to_string(&log).unwrap())
}

/// Phase-1 results of the calibrations `interact-adopted` reads, as `(folder, solved, logged)`
/// (60 logged: finished), each folder with a source commit named after it.
fn write_calibrations(scratch: &Scratch, runs: &[(&str, usize, usize)]) {
    for &(folder, solved, logged) in runs {
        let episodes: String = (0..logged)
            .map(|i| {
                format!(
                    "{{\"trajectory\":{{\"outcome\":{{\"phase1_passed\":{}}}}}}}\n",
                    i < solved
                )
            })
            .collect();
        scratch.write(&format!("{folder}/episodes.jsonl"), &episodes);
        let calibration = Path::new(folder).parent().unwrap();
        let commit = calibration.file_name().unwrap().to_string_lossy();
        scratch.write(
            &format!("{}/source-commit", calibration.display()),
            &format!("{commit}\n"),
        );
    }
}

/// The queue's `interact-adopted` step on calibrations with these phase-1 counts (hint, once,
/// no guard, greedy guard, sampled guard, fallback; the sampled guard's run `logged` lines
/// long): the queue's success and output, and the experiment script's settings (or None).
fn adopted_step(solved: [usize; 6], sampled_logged: usize) -> (bool, String, Option<String>) {
    let scratch = queue_scratch("ok");
    scratch.write_script(
        "scripts/interact-experiments.sh",
        "echo \"RUNS=$RUNS RESULTS=$RESULTS STOP_AFTER=$STOP_AFTER MEMORY_OPTS=$MEMORY_OPTS \
         AGENT_OPTS=$AGENT_OPTS PRM_OPTS=$PRM_OPTS MERIT=$MERIT \
         pin=$(cat \"$RUNS/source-commit\" 2>/dev/null)\" > step-ran\n",
    );
    let [hint, once, unguarded, guarded, sampled, fallback] = solved;
    write_calibrations(
        &scratch,
        &[
            ("runs/interact-hints/train-cosine", hint, 60),
            ("runs/interact-once/train-cosine", once, 60),
            ("runs/interact-hints/train-none", unguarded, 60),
            ("runs/interact-guard/train-none", guarded, 60),
            (
                "runs/interact-guard-sampled/train-none",
                sampled,
                sampled_logged,
            ),
            ("runs/interact-fallback/train-none", fallback, 60),
        ],
    );
    let (ok, text) = run_queue(&scratch, "interact-adopted");
    (ok, text, scratch.read("step-ran"))
}

/// The commit the queue pins every interact-v2 experiment to (`V2_COMMIT`'s default), which
/// must name one commit in full: a short or mistyped one would make the pin build fail, or
/// build another commit, only when the step starts, days after the edit.
fn v2_commit() -> String {
    let queue = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/experiments-queue.sh"),
    )
    .unwrap();
    let commit = queue
        .lines()
        .find_map(|line| line.strip_prefix("V2_COMMIT=${V2_COMMIT:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .expect("experiments-queue.sh sets V2_COMMIT=${V2_COMMIT:-<commit>}");
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "V2_COMMIT is not a full commit id: {commit}"
    );
    commit.to_string()
}

/// The experiment's name and options follow the calibrations' rules; whichever it is, it is
/// pinned to `V2_COMMIT` and its PRM teacher decodes under the rubric grammar.
#[test]
fn the_adopted_interact_experiment_follows_the_calibrations_rules() {
    // As they stand when the greedy guard ended (hint 10 >= 9, once 9 < 10, guard 10 < 12),
    // with the sampled guard below and level with no guard, and the fallback level with it.
    let base = "STOP_AFTER=passk MEMORY_OPTS= AGENT_OPTS=--fold-repeats --schema-in-opening";
    let pin = v2_commit();
    let (ok, text, ran) = adopted_step([10, 9, 12, 10, 11, 12], 60);
    assert!(ok, "{text}");
    assert_eq!(
        ran.as_deref(),
        Some(&*format!(
            "RUNS=runs/interact-v2-fallback RESULTS=docs/results/interact/v2-fallback {base} \
             --forced-submit-fallback PRM_OPTS=--grammar MERIT=runs/interact-v2-fallback/merit \
             pin={pin}\n"
        )),
        "{text}"
    );
    let (ok, text, ran) = adopted_step([10, 9, 12, 10, 12, 12], 60);
    assert!(ok, "{text}");
    assert_eq!(
        ran.as_deref(),
        Some(&*format!(
            "RUNS=runs/interact-v2-sguard-fallback RESULTS=docs/results/interact/v2-sguard-fallback \
             {base} --repeat-guard --repeat-guard-temperature 0.7 --forced-submit-fallback \
             PRM_OPTS=--grammar MERIT=runs/interact-v2-sguard-fallback/merit pin={pin}\n"
        )),
        "{text}"
    );
    // The greedy guard where the sampled one is below it; the once option; no fallback.
    let (ok, text, ran) = adopted_step([10, 10, 12, 12, 11, 11], 60);
    assert!(ok, "{text}");
    assert_eq!(
        ran.as_deref(),
        Some(&*format!(
            "RUNS=runs/interact-v2-once-guard RESULTS=docs/results/interact/v2-once-guard \
             STOP_AFTER=passk MEMORY_OPTS=--turn-memories-once AGENT_OPTS=--fold-repeats \
             --schema-in-opening --repeat-guard PRM_OPTS=--grammar \
             MERIT=runs/interact-v2-once-guard/merit pin={pin}\n"
        )),
        "{text}"
    );
    // An unfinished calibration stops the step; nothing runs.
    let (ok, text, ran) = adopted_step([10, 9, 12, 10, 11, 12], 59);
    assert!(!ok, "{text}");
    assert!(
        text.contains("runs/interact-guard-sampled/train-none is unfinished"),
        "{text}"
    );
    assert_eq!(ran, None, "{text}");
}

#[test]
fn a_queue_step_runs_only_with_its_pinned_binary() {
    for mode in ["fail", "missing"] {
        let (ok, text, ran) = queue_live_step(mode);
        assert!(!ok, "{mode}: {text}");
        assert!(
            text.contains("no pinned binary for runs/pins/live-dev; step stopped"),
            "{mode}: {text}"
        );
        assert!(text.contains("queue: live FAILED"), "{mode}: {text}");
        assert!(!text.contains("Permission denied"), "{mode}: {text}");
        assert_eq!(ran, None, "{mode}: the step must not run");
    }
    let (ok, text, ran) = queue_live_step("ok");
    assert!(ok, "{text}");
    assert_eq!(ran.as_deref(), Some("MERIT=runs/pins/live-dev/merit\n"));
}

/// `scripts/repair-dev-run.sh` with a stand-in `merit`: `run --out DIR` starts a run (manifest,
/// initial predictions, an episode log of `$NEW` lines), `run --resume DIR` appends `$NEW` lines,
/// `report` does nothing. Returns the run's `wall.txt` line count after the script.
fn repair_dev_run(scratch: &Scratch, new_episodes: usize) -> usize {
    let output = Command::new("bash")
        .arg(scratch.root.join("scripts/repair-dev-run.sh"))
        .env("MERIT", scratch.root.join("stand-in-merit"))
        .env("PLAN", "paper:iterative:0")
        .env("NEW", new_episodes.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "repair-dev-run.sh: {stderr}");
    let wall = scratch.read("runs/repair-dev/paper/wall.txt").unwrap();
    // The results folder gets the same file.
    assert_eq!(
        scratch
            .read("docs/results/repair/dev/paper/wall.txt")
            .as_deref(),
        Some(wall.as_str())
    );
    wall.lines().count()
}

#[test]
fn repair_dev_run_records_wall_time_only_for_resumptions_that_run_episodes() {
    let scratch = Scratch::new();
    scratch.write_script(
        "stand-in-merit",
        r#"[ "$1" = report ] && exit 0
while [ $# -gt 0 ]; do
  case $1 in --out | --resume) dir=$2; shift ;; esac
  shift
done
mkdir -p "$dir/episodes"
touch "$dir/manifest.json" "$dir/initial.jsonl" "$dir/episodes/iterative-seed0.jsonl"
for _ in $(seq 1 "$NEW"); do echo '{}' >> "$dir/episodes/iterative-seed0.jsonl"; done
"#,
    );
    // A new run folder (no episode log before it) gets its first line even with nothing run.
    assert_eq!(repair_dev_run(&scratch, 0), 1);
    assert_eq!(repair_dev_run(&scratch, 3), 2);
    // Restarting a run with nothing left to do (the queue does at every start) adds nothing.
    assert_eq!(repair_dev_run(&scratch, 0), 2);
    assert_eq!(repair_dev_run(&scratch, 0), 2);
    assert_eq!(repair_dev_run(&scratch, 1), 3);
}

/// Runs `scripts/interact-indomain.py COMMAND ARGS...`, which must succeed.
fn indomain(args: &[&Path]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/interact-indomain.py");
    crate::succeeded(
        &Command::new("python3")
            .arg(script)
            .args(args)
            .output()
            .unwrap(),
    );
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The `indomain` arm's task sets on the real evaluation split: its seeds are Spider dev
/// questions of the evaluation databases and never an evaluation task's seed (by index or by
/// SQL); its stream leaves out a task whose reference SQL is an evaluation task's, however
/// spaced or cased.
#[test]
fn the_in_database_memory_sets_leave_the_evaluation_tasks_out() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dev_json = crate::spider_databases().join("../dev.json");
    let evaluation = manifest.join("../../data/interact-dev/tasks.jsonl");
    let seeds = dir.path().join("seeds.json");
    indomain(&[Path::new("seeds"), &dev_json, &evaluation, &seeds]);

    let questions: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&dev_json).unwrap()).unwrap();
    let kept: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&seeds).unwrap()).unwrap();
    let tasks = json_lines(&evaluation);
    let databases: std::collections::BTreeSet<&str> = tasks
        .iter()
        .map(|t| t["selected_database"].as_str().unwrap())
        .collect();
    let normalized = |sql: &str| {
        sql.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    for task in &tasks {
        let generation = &task["generation"];
        let index: usize = generation["seed_id"].as_str().unwrap()["dev-".len()..]
            .parse()
            .unwrap();
        assert!(!kept.contains(&questions[index]), "{generation}");
        let sql = normalized(generation["seed_sql"].as_str().unwrap());
        assert!(kept
            .iter()
            .all(|q| normalized(q["query"].as_str().unwrap()) != sql));
    }
    assert!(kept
        .iter()
        .all(|q| databases.contains(q["db_id"].as_str().unwrap())));
    // Every other question of those databases is kept.
    let on_databases = questions
        .iter()
        .filter(|q| databases.contains(q["db_id"].as_str().unwrap()))
        .count();
    assert!(
        kept.len() > on_databases / 2,
        "{} of {on_databases}",
        kept.len()
    );

    // The stream: an evaluation task's SQL respaced and upper-cased is left out, a new one kept.
    let mut copied = tasks[0].clone();
    let sql = copied["sol_sql"][0].as_str().unwrap().to_string();
    copied["sol_sql"] =
        serde_json::json!([format!("  {}", sql.to_uppercase().replace(' ', "\n "))]);
    let mut new = tasks[1].clone();
    new["sol_sql"] = serde_json::json!(["SELECT 'no evaluation task asks this'"]);
    let generated = dir.path().join("tasks.jsonl");
    std::fs::write(&generated, format!("{copied}\n{new}")).unwrap();
    let stream = dir.path().join("stream.jsonl");
    indomain(&[Path::new("stream"), &generated, &evaluation, &stream]);
    assert_eq!(json_lines(&stream), vec![new]);
}

/// One annotation line of `scripts/prm-grammar-summary.py`'s input: a rubric with this
/// recommendation and overall utility, or (`None`) an unusable reply.
fn annotation(state: &str, memory: u64, rubric: Option<(bool, u8)>) -> String {
    let result = match rubric {
        Some((recommend, overall)) => serde_json::json!({"rubric": {
            "principles": {"overall_utility": {"score": overall, "reason": "r"}},
            "flags": {"recommend_injection": recommend, "use_as_warning_only": false},
        }}),
        None => serde_json::json!({"failure": "text after the object"}),
    };
    serde_json::json!({"state_id": state, "memory_id": memory, "result": result}).to_string() + "\n"
}

/// The grammar measurement's summary counts usable replies, tokens and time from the model's
/// log lines (colour codes and all), and compares the settings only on pairs both judged
/// usably: one state's two memories ordered alike though one judgement differs.
#[test]
fn the_grammar_measurement_compares_the_settings_on_pairs_both_could_read() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, lines: &[String]| {
        std::fs::write(dir.path().join(name), lines.concat()).unwrap();
    };
    write(
        "plain.jsonl",
        &[
            annotation("s#1", 1, Some((true, 4))),
            annotation("s#1", 2, Some((false, 2))),
            annotation("t#2", 1, Some((true, 5))),
        ],
    );
    write(
        "grammar.jsonl",
        &[
            annotation("s#1", 1, Some((true, 4))),
            annotation("s#1", 2, Some((true, 1))),
            annotation("t#2", 1, None),
        ],
    );
    let call = |generated: u32, generation_ms: u32| {
        format!(
            "\x1b[2m2026-12-06T11:30:45Z\x1b[0m \x1b[34mDEBUG\x1b[0m call done \
             \x1b[3mprompt\x1b[0m\x1b[2m=\x1b[0m1000 \x1b[3mgenerated\x1b[0m\x1b[2m=\x1b[0m{generated} \
             \x1b[3mprompt_ms\x1b[0m\x1b[2m=\x1b[0m1000 \
             \x1b[3mgeneration_ms\x1b[0m\x1b[2m=\x1b[0m{generation_ms} steps=1\n"
        )
    };
    write("plain.log", &[call(300, 30_000), call(100, 10_000)]);
    write("grammar.log", &[call(200, 25_000)]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/prm-grammar-summary.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .unwrap();
    crate::succeeded(&output);
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), summary);
    assert!(
        summary.contains("| unconstrained | 3 | 3 | 2 | 400 | 40 | 10.00 | 2 | 42 |"),
        "{summary}"
    );
    assert!(
        summary.contains("| `--grammar` | 3 | 2 | 1 | 200 | 25 | 8.00 | 1 | 26 |"),
        "{summary}"
    );
    assert!(
        summary.contains("generated 0.50x the tokens, at 0.80x the unconstrained speed"),
        "{summary}"
    );
    assert!(
        summary.contains("| unconstrained vs `--grammar` | 2 | 1/2 | 1/2 | 0.50 | 1/1 |"),
        "{summary}"
    );
}
