//! `merit interact report`: the summary of run directories and the paired comparison with a
//! baseline, on logs written by the real run driver (scripted agents, real mini-interact
//! database); the report never modifies a log.

use merit_core::model::{ChatModel, ChatReply, ChatRequest, ModelError};
use merit_interact::{
    run_tasks, sqlite_backend, AgentConfig, EnvConfig, ReactAgent, RunSpec, ScriptedSimulator,
    TaskSet,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Always submits the same SQL.
struct Submitter(&'static str);

impl ChatModel for Submitter {
    fn id(&self) -> String {
        "test:submitter".into()
    }
    fn chat(&self, _: &ChatRequest) -> Result<ChatReply, ModelError> {
        Ok(ChatReply {
            text: format!("Thought: done.\nAction: submit('{}')", self.0),
            prompt_tokens: 10,
            completion_tokens: 5,
            latency: std::time::Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// Two copies of [`task`] (alien_9801, alien_9802) in a task file of a new directory.
fn two_tasks() -> (tempfile::TempDir, Vec<String>, TaskSet) {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = vec!["alien_9801".into(), "alien_9802".into()];
    let file = dir.path().join("tasks.jsonl");
    let lines: Vec<String> = ids.iter().map(|id| task(id).to_string()).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let set = TaskSet::load(&file, &mini_root()).unwrap();
    (dir, ids, set)
}

/// `merit interact report --json` over `runs`, which must succeed.
fn report_json(runs: &[impl AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--json"])
        .args(runs)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn mini_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/interact/mini-interact")
}

fn task(id: &str) -> serde_json::Value {
    serde_json::json!({
        "instance_id": id, "selected_database": "alien",
        "amb_user_query": "How many observatories have warm weather?",
        "query": "How many observatories recorded an air temperature above 20 degrees Celsius?",
        "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE airtempc > 20"],
        "test_cases": [], "category": "Query",
        "conditions": {"decimal": 2, "distinct": false, "order": false},
        "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
        "knowledge_ambiguity": []
    })
}

fn run(set: &TaskSet, ids: &[String], dir: &Path, sql: &'static str) {
    let agent = ReactAgent::new(Arc::new(Submitter(sql)), AgentConfig::default());
    run_agent(set, ids, dir, &agent);
}

fn run_agent(set: &TaskSet, ids: &[String], dir: &Path, agent: &ReactAgent) {
    let log = dir.join("episodes.jsonl");
    let spec = RunSpec {
        set,
        instance_ids: ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    run_tasks(
        &spec,
        agent,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
}

#[test]
fn report_compares_runs_with_a_baseline_and_leaves_logs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (1..=6).map(|n| format!("alien_97{n:02}")).collect();
    let file = dir.path().join("tasks.jsonl");
    // The first task has a follow-up (the same query again, so the submitter passes it).
    let lines: Vec<String> = ids
        .iter()
        .map(|id| {
            let mut task = task(id);
            if id == "alien_9701" {
                task["follow_up"] = serde_json::json!({
                    "query": "The same again, please.",
                    "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE airtempc > 20"],
                    "category": "Query"
                });
            }
            task.to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let set = TaskSet::load(&file, &mini_root()).unwrap();
    let good = dir.path().join("good");
    let bad = dir.path().join("bad");
    run(
        &set,
        &ids,
        &good,
        "SELECT COUNT(*) FROM observatories WHERE airtempc > 20",
    );
    // The baseline solves only the first two tasks: a wrong query for the other four.
    run(
        &set,
        &ids[..2],
        &bad,
        "SELECT COUNT(*) FROM observatories WHERE airtempc > 20",
    );
    run(&set, &ids, &bad, "SELECT COUNT(*) FROM observatories");
    // A torn tail in one log: the report must read around it without cutting it.
    let log = good.join("episodes.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"{\"format\": \"merit-inter");
    std::fs::write(&log, &bytes).unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args([
            "interact",
            "report",
            "--json",
            "--resamples",
            "2000",
            "--baseline",
        ])
        .arg(&bad)
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "the report changed a log"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs[0]["tasks"], 6);
    assert_eq!(runs[0]["phase1_success"], 100.0);
    // Phase 2 over the one task that has a follow-up, beside the rate over all six.
    assert_eq!(runs[0]["follow_ups"], serde_json::json!([1, 100.0]));
    assert!((runs[0]["phase2_success"].as_f64().unwrap() - 100.0 / 6.0).abs() < 1e-9);
    // Word-for-word repeats of the step before: the follow-up's submit repeats phase 1's in
    // both runs; each of the baseline's four failures submits the same wrong query four times
    // until its budget is gone (three repeats each).
    assert_eq!(runs[0]["repeated_steps"], serde_json::json!([7, 1]));
    assert_eq!(runs[0]["episodes_with_three_repeats"], 0);
    assert_eq!(runs[1]["repeated_steps"], serde_json::json!([19, 13]));
    assert_eq!(runs[1]["episodes_with_three_repeats"], 4);
    let baseline_success = runs[1]["phase1_success"].as_f64().unwrap();
    assert!((baseline_success - 100.0 / 3.0).abs() < 1e-9);
    let comparisons = report["comparisons"].as_array().unwrap();
    assert_eq!(
        comparisons.len(),
        1,
        "the baseline is not compared with itself"
    );
    let phase1 = &comparisons[0]["phase1"];
    assert_eq!(comparisons[0]["common_tasks"], 6);
    assert!((phase1["delta_pp"].as_f64().unwrap() - 200.0 / 3.0).abs() < 1e-9);
    let (low, high) = (
        phase1["ci_low_pp"].as_f64().unwrap(),
        phase1["ci_high_pp"].as_f64().unwrap(),
    );
    assert!(
        low > 0.0 && low < 200.0 / 3.0 && high == 100.0,
        "[{low}, {high}]"
    );
    assert_eq!(phase1["resamples"], 2000);

    // The Markdown form carries the same comparison.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--baseline"])
        .arg(&bad)
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("| Δ phase 1 (pp) [95% CI]"), "{text}");
    assert!(text.contains("+66.7 ["), "{text}");
    // Four tasks won, none lost: the exact sign test gives 2 × 0.5^4.
    assert!(text.contains("| 4 / 0 | 0.125 |"), "{text}");
    assert_eq!(phase1["a_better"], 4);
    assert!((phase1["sign_test_p"].as_f64().unwrap() - 0.125).abs() < 1e-12);

    // One compact line per episode, for committing beside results.
    let out = dir.path().join("good-summaries.jsonl");
    let status = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "summaries"])
        .arg(&bad)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let summaries: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(summaries.len(), 6);
    assert_eq!(summaries[0]["instance_id"], "alien_9701");
    assert_eq!(summaries[0]["phase1"], true);
    assert_eq!(summaries[5]["phase1"], false);
    // The wrong query is resubmitted until the budget forces the end.
    assert_eq!(
        summaries[5]["actions"],
        serde_json::json!(vec!["submit"; 4])
    );

    // The two runs read as two tries of one configuration: Pass@1 is the mean success, and
    // Pass@2 counts a task solved by either.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--pass-at-k"])
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    let tries = String::from_utf8(output.stdout).unwrap();
    assert!(tries.contains("2 runs on 6 common tasks"), "{tries}");
    assert!(tries.contains("phase-1 success 66.7% ± 47.1"), "{tries}");
    assert!(
        tries.contains("| 1 | 66.7% |") && tries.contains("| 2 | 100.0% |"),
        "{tries}"
    );
    // Every task is a Query task: the Management column says n/a, not a 0% rate.
    assert!(
        text.contains("| 100.0 (1) | 100.0 / 16.7 | n/a |"),
        "{text}"
    );

    // Leaving tasks out: the follow-up task and one the baseline failed drop from every
    // figure, and the ids are named above the tables.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--json", "--resamples", "200"])
        .args(["--exclude-tasks", "alien_9701,alien_9706", "--baseline"])
        .arg(&bad)
        .arg(&good)
        .arg(&bad)
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["runs"][0]["tasks"], 4);
    assert_eq!(report["runs"][0]["follow_ups"][0], 0);
    assert_eq!(report["comparisons"][0]["common_tasks"], 4);
    assert_eq!(report["comparisons"][0]["phase1"]["a_better"], 3);
    assert_eq!(
        report["excluded_tasks"],
        serde_json::json!(["alien_9701", "alien_9706"])
    );
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--exclude-tasks", "alien_9701"])
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("Left out of every figure below: 1 task(s): alien_9701"),
        "{text}"
    );
    // A mistyped id is an error, not a silent no-op.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--exclude-tasks", "alien_97O1"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("task alien_97O1 is in none of the runs"),
        "{stderr}"
    );
}

/// Executes one query on its first turn, then submits another on every later one (`None`:
/// executes the first query again forever, never submitting).
struct ExecutesThenSubmits(&'static str, Option<&'static str>);

impl ChatModel for ExecutesThenSubmits {
    fn id(&self) -> String {
        "test:executes-then-submits".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let answered = request
            .messages
            .iter()
            .any(|m| m.role == merit_core::model::Role::Assistant);
        let action = match (answered, self.1) {
            (true, Some(submitted)) => format!("submit('{submitted}')"),
            _ => format!("execute('{}')", self.0),
        };
        Ok(ChatReply {
            text: format!("Thought: next.\nAction: {action}"),
            prompt_tokens: 10,
            completion_tokens: 5,
            latency: std::time::Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

#[test]
fn missed_counts_passing_queries_that_were_never_submitted() {
    let (dir, ids, set) = two_tasks();
    let right = "SELECT COUNT(*) FROM observatories WHERE airtempc > 20";
    let wrong = "SELECT COUNT(*) FROM observatories";
    let arms = [
        ("found-then-other", ExecutesThenSubmits(right, Some(wrong))),
        ("never-found", ExecutesThenSubmits(wrong, Some(wrong))),
        ("found-never-submitted", ExecutesThenSubmits(right, None)),
        ("solved", ExecutesThenSubmits(wrong, Some(right))),
    ];
    for (name, model) in arms {
        let config = AgentConfig {
            max_turns: 6,
            ..AgentConfig::default()
        };
        let agent = ReactAgent::new(Arc::new(model), config);
        run_agent(&set, &ids, &dir.path().join(name), &agent);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "missed", "--json", "--tasks"])
        .arg(dir.path().join("tasks.jsonl"))
        .arg("--db-root")
        .arg(mini_root())
        .args(
            [
                "found-then-other",
                "never-found",
                "found-never-submitted",
                "solved",
            ]
            .map(|name| dir.path().join(name)),
        )
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let counts = |run: &serde_json::Value| {
        [
            "failed",
            "with_a_passing_query",
            "submitted_another",
            "never_submitted",
        ]
        .map(|key| run[key].as_u64().unwrap())
    };
    assert_eq!(counts(&runs[0]), [2, 2, 2, 0], "{}", runs[0]);
    assert_eq!(runs[0]["details"][0]["first_passing_turn"], 1);
    assert_eq!(counts(&runs[1]), [2, 0, 0, 0], "{}", runs[1]);
    assert_eq!(counts(&runs[2]), [2, 2, 0, 2], "{}", runs[2]);
    // One distinct query, however often it ran.
    assert_eq!(runs[2]["details"][0]["queries_judged"], 1);
    assert_eq!(counts(&runs[3]), [0, 0, 0, 0], "{}", runs[3]);

    // A task file that holds none of a run's tasks is said, not silently counted as zero.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, task("alien_9899").to_string()).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "missed", "--tasks"])
        .arg(&other)
        .arg("--db-root")
        .arg(mini_root())
        .arg(dir.path().join("never-found"))
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("| 2 | 0 | 0 | 0 | 0 | 2 |"), "{text}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not in the task file"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn report_counts_the_repeats_the_guard_asked_again() {
    let (dir, ids, set) = two_tasks();
    let wrong = "SELECT COUNT(*) FROM observatories";
    let with_guard = |model: Arc<dyn ChatModel>| {
        let config = AgentConfig {
            repeat_guard: true,
            ..AgentConfig::default()
        };
        ReactAgent::new(model, config)
    };
    let guarded = dir.path().join("guarded");
    run_agent(
        &set,
        &ids,
        &guarded,
        &with_guard(Arc::new(Submitter(wrong))),
    );
    let plain = dir.path().join("plain");
    run(&set, &ids, &plain, wrong);
    let gave_way = dir.path().join("gave-way");
    let gives_way = with_guard(Arc::new(GivesWayWhenAskedAgain(wrong)));
    run_agent(&set, &ids, &gave_way, &gives_way);
    let report = report_json(&[&guarded, &plain, &gave_way]);
    let runs = report["runs"].as_array().unwrap();
    // Four failed submits a task until the budget is gone: each of the three repeats was
    // asked again first (and, the scripted model being stubborn, then taken).
    assert_eq!(runs[0]["repeats_asked_again"], serde_json::json!([6, 6]));
    assert_eq!(runs[0]["repeated_steps"], serde_json::json!([8, 6]));
    assert_eq!(runs[1]["repeats_asked_again"], serde_json::json!([0, 0]));
    // Asked again, this model runs a query it has not run before: no repeat is taken.
    let [asked, anyway] = [0, 1].map(|i| runs[2]["repeats_asked_again"][i].as_u64().unwrap());
    assert!(asked > 0 && anyway == 0, "{}", runs[2]);
    let table = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report"])
        .arg(&guarded)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("repeats asked again by the guard (repeated anyway)")
            && table.contains("| 6 (6) |"),
        "{table}"
    );
}

/// Submits the same wrong query, but answers the repeat guard's note with a query it has not
/// run before.
struct GivesWayWhenAskedAgain(&'static str);

impl ChatModel for GivesWayWhenAskedAgain {
    fn id(&self) -> String {
        "test:gives-way".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let asked_again = request
            .messages
            .last()
            .is_some_and(|m| m.content.starts_with("(Not taken:"));
        let reply = Submitter(self.0).chat(request)?;
        if !asked_again {
            return Ok(reply);
        }
        Ok(ChatReply {
            text: format!(
                "Thought: something else.\nAction: execute('SELECT {}')",
                request.messages.len()
            ),
            ..reply
        })
    }
}

/// Runs its query once, then looks at the schema until the budget is gone.
struct ExecuteThenLook(&'static str);

impl ChatModel for ExecuteThenLook {
    fn id(&self) -> String {
        "test:execute-then-look".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let text = if request.messages.len() <= 2 {
            format!("Thought: try it.\nAction: execute('{}')", self.0)
        } else {
            "Thought: look again.\nAction: get_schema()".to_string()
        };
        Ok(ChatReply {
            text,
            ..Submitter(self.0).chat(request)?
        })
    }
}

#[test]
fn report_counts_the_fallback_submits_and_those_that_passed() {
    let (dir, ids, set) = two_tasks();
    let right = "SELECT COUNT(*) FROM observatories WHERE airtempc > 20";
    let wrong = "SELECT COUNT(*) FROM observatories";
    let mut dirs = Vec::new();
    for (name, sql, fallback) in [
        ("plain", right, false),
        ("right", right, true),
        ("wrong", wrong, true),
    ] {
        let agent = ReactAgent::new(
            Arc::new(ExecuteThenLook(sql)),
            AgentConfig {
                forced_submit_fallback: fallback,
                ..AgentConfig::default()
            },
        );
        let out = dir.path().join(name);
        run_agent(&set, &ids, &out, &agent);
        dirs.push(out);
    }
    let report = report_json(&dirs);
    let runs = report["runs"].as_array().unwrap();
    let fallbacks: Vec<&serde_json::Value> =
        runs.iter().map(|run| &run["fallback_submits"]).collect();
    assert_eq!(
        fallbacks,
        [
            &serde_json::json!([0, 0]),
            &serde_json::json!([2, 2]),
            &serde_json::json!([2, 0])
        ]
    );
    assert_eq!(runs[0]["ends"]["submit_refused"], 2);
    // The behaviour table shows them too.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report"])
        .args(&dirs)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("fallback submits (passed)"), "{text}");
}
