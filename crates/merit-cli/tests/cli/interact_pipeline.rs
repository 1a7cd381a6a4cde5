//! The whole interact pipeline through the `merit` binary against an OpenAI-compatible server
//! (a small stand-in started by the test): a memory run with native tool calls, teacher
//! annotations, the student PRM and its agreement table, both selectors trained with PPO, an
//! evaluation run with the learned checkpoints, and the paired report.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const RIGHT: &str = "SELECT COUNT(*) FROM observatories WHERE airtempc > 20";
const WORDS: [&str; 5] = ["observatories", "warm", "weather", "hot", "count"];

fn all_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn rubric(text: &str) -> String {
    let overall = (text.len() % 6) as u64;
    let mut principles = serde_json::Map::new();
    for key in [
        "state_match",
        "actionability_value",
        "pattern_generalizability",
        "outcome_reliability",
        "clarity_for_agent",
        "confidence_in_assessment",
        "overall_utility",
    ] {
        let score = if key == "overall_utility" { overall } else { 3 };
        principles.insert(
            key.into(),
            json!({"score": score, "reason": format!("The {key} is as scored.")}),
        );
    }
    json!({
        "principles": principles,
        "flags": {"recommend_injection": overall >= 3, "use_as_warning_only": false},
        "feedback": {"one_sentence_summary": "A scripted grade.", "how_to_use": "Copy it when it fits."}
    })
    .to_string()
}

/// A task-generation draft for the SQL in a generation prompt: two blurred details whose
/// snippets are the first two words and the last word of the SQL.
fn draft_for(text: &str) -> String {
    let sql = text
        .split("The query:\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or("");
    let words: Vec<&str> = sql.split(' ').collect();
    let head = words[..2.min(words.len())].join(" ");
    let tail = words[words.len().saturating_sub(1)..].join(" ");
    let mut ambiguities = vec![
        json!({"term": "usual summary", "sql_snippet": head, "type": "intent_ambiguity"}),
        json!({"term": "standard way", "sql_snippet": tail, "type": "sort_ambiguity"}),
    ];
    // A `column > number` condition is blurred too (what knowledge entries are made from).
    let condition = sql.split(" WHERE ").nth(1).and_then(|rest| {
        let parts: Vec<&str> = rest.split_whitespace().take(3).collect();
        match parts.as_slice() {
            [column, ">" | "<", number]
                if number.parse::<f64>().is_ok()
                    && column.chars().all(|c| c.is_alphanumeric() || c == '_') =>
            {
                Some(parts.join(" "))
            }
            _ => None,
        }
    });
    let amb_query = match condition {
        Some(condition) => {
            ambiguities.push(
                json!({"term": "notable ones", "sql_snippet": condition, "type": "semantic_ambiguity"}),
            );
            "Give me the usual summary of the notable ones, the standard way."
        }
        None => "Give me the usual summary, the standard way.",
    };
    json!({
        "clear_query": "Give me exactly what I asked for, in full detail.",
        "amb_query": amb_query,
        "ambiguities": ambiguities
    })
    .to_string()
}

/// Whether an agent request opens its episode (no assistant message yet).
fn first_agent_turn(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .is_some_and(|messages| messages.iter().all(|m| m["role"] != "assistant"))
}

/// The stand-in server's answer to one chat request.
fn chat(body: &Value) -> Value {
    let text = all_text(body);
    let message = if text.contains("into the requests a person might type") {
        json!({"role": "assistant", "content": draft_for(&text)})
    } else if text.contains("grading a single remembered step") {
        json!({"role": "assistant", "content": rubric(&text)})
    } else if text.contains("full record of one finished attempt") {
        json!({"role": "assistant", "content": r#"{"worked": ["submitted a count"], "failed": [], "key_insight": "Warm means airtempc above 20.", "info_gaps": []}"#})
    } else if text.contains("You play the person who asked") {
        json!({"role": "assistant", "content": "VERDICT: unanswerable"})
    } else if text.contains("You cannot ask the user anything") {
        json!({"role": "assistant", "content": format!("```sql\n{RIGHT}\n```")})
    } else if first_agent_turn(body) {
        // The agent looks at the schema first, so every episode has a second (intermediate)
        // turn where turn-level memory is consulted.
        if body.get("tools").is_some() {
            json!({"role": "assistant", "content": "Thought: the tables first.", "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "get_schema", "arguments": "{}"}}]})
        } else {
            json!({"role": "assistant", "content": "Thought: the tables first.\nAction: get_schema()"})
        }
    } else if body.get("tools").is_some() {
        json!({"role": "assistant", "content": "Thought: I know this one.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "submit", "arguments": json!({"sql": RIGHT}).to_string()}}]})
    } else {
        json!({"role": "assistant", "content": format!("Thought: ok.\nAction: submit('{RIGHT}')")})
    };
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}})
}

fn mini_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/interact/mini-interact")
}

fn task(id: &str, request: &str) -> Value {
    json!({
        "instance_id": id, "selected_database": "alien", "amb_user_query": request,
        "query": "How many observatories recorded an air temperature above 20 degrees Celsius?",
        "sol_sql": [RIGHT], "test_cases": [], "category": "Query",
        "conditions": {"decimal": 2, "distinct": false, "order": false},
        "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
        "knowledge_ambiguity": []
    })
}

/// Six requests for the same count on the mini-interact `alien` database.
const WARM_REQUESTS: [&str; 6] = [
    "How many observatories have warm weather?",
    "Count observatories with hot weather.",
    "How many observatories are warm?",
    "Count the warm observatories.",
    "How many observatories report hot weather?",
    "Count observatories where the weather is warm.",
];

/// A task file in `dir` with one task per request, ids `alien_{prefix}NN`.
fn write_tasks(dir: &Path, prefix: &str, requests: &[&str]) -> PathBuf {
    let tasks: Vec<String> = requests
        .iter()
        .enumerate()
        .map(|(n, r)| task(&format!("alien_{prefix}{n:02}"), r).to_string())
        .collect();
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, tasks.join("\n")).unwrap();
    path
}

/// The stand-in server's flags: `--llm-url`/`--llm-model` where the command chats (`chat`),
/// then `--embed-url`/`--embed-model` and the reply `--cache`.
fn server_args(server: &str, cache: &Path, chat: bool) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    if chat {
        args.extend(["--llm-url", server, "--llm-model", "stand-in"].map(OsString::from));
    }
    args.extend(["--embed-url", server, "--embed-model", "words", "--cache"].map(OsString::from));
    args.push(cache.into());
    args
}

/// Runs `merit` with the server's flags appended where the command takes them.
fn merit(args: &[&str], server: &str, cache: &Path, chat: bool) -> String {
    let stdout = success_stdout(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(args)
            .args(server_args(server, cache, chat)),
    );
    String::from_utf8(stdout).unwrap()
}

/// Runs `command`, which must succeed; returns its stdout.
fn success_stdout(command: &mut Command) -> Vec<u8> {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Runs `command`, which must fail; returns its stderr.
fn failure_stderr(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "{command:?} succeeded where it should fail:\n{stderr}"
    );
    stderr
}

/// Runs `merit` with the server's flags appended as [`merit`] appends them, expecting it to
/// fail; returns its stderr.
fn merit_failing(args: &[&str], server: &str, cache: &Path, chat: bool) -> String {
    failure_stderr(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(args)
            .args(server_args(server, cache, chat)),
    )
}

/// The arguments of `merit interact run --tasks tasks --db-root root --out out`, then `extra`.
fn interact_run_args<'a>(
    tasks: &'a str,
    root: &'a str,
    out: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "interact",
        "run",
        "--tasks",
        tasks,
        "--db-root",
        root,
        "--out",
        out,
    ];
    args.extend(extra);
    args
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn memory_run_prm_selectors_and_learned_evaluation_end_to_end() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let task_file = write_tasks(dir.path(), "99", &WARM_REQUESTS);
    let (tasks_arg, root) = (task_file.to_str().unwrap(), mini_root());
    let root = root.to_str().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();

    // 1. A memory run: native tool calls, memories written, insight drawn.
    let train = path("train");
    merit(
        &interact_run_args(tasks_arg, root, &train, &["--memory", "cosine"]),
        &server,
        &cache,
        true,
    );
    let train_memory = format!("{train}/memory");
    let log = lines(&dir.path().join("train/episodes.jsonl"));
    assert_eq!(log.len(), 6);
    assert!(log
        .iter()
        .all(|r| r["trajectory"]["outcome"]["phase1_passed"] == true));
    assert_eq!(log[0]["turns"][0]["parse"], "NativeToolCall");
    assert!(log[5]["injections"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| !i["chosen"].as_array().unwrap().is_empty()));
    assert_eq!(
        lines(&dir.path().join("train/memory/episodes.jsonl")).len(),
        6
    );

    // Each turn memory at most once per episode, and the repeat guard (which asks again only
    // in the text protocol; the stand-in answers with native tool calls): recorded in the
    // settings only when on (the
    // run above, made without it, keeps the settings it always had), and a continuation
    // without it is refused.
    assert!(
        !std::fs::read_to_string(dir.path().join("train/settings.json"))
            .unwrap()
            .contains("turn_memories_once")
    );
    let once = path("once");
    let once_options = [
        "--memory",
        "cosine",
        "--memory-from",
        &train_memory,
        "--frozen-memory",
        "--limit",
        "2",
    ];
    let with_flag = [
        &once_options[..],
        &[
            "--turn-memories-once",
            "--repeat-guard",
            "--repeat-guard-temperature",
            "0.5",
            "--forced-submit-fallback",
        ],
    ]
    .concat();
    merit(
        &interact_run_args(tasks_arg, root, &once, &with_flag),
        &server,
        &cache,
        true,
    );
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("once/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(settings["memory"]["turn_memories_once"], true);
    assert_eq!(settings["repeat_guard"], true);
    assert_eq!(settings["forced_submit_fallback"], true);
    assert_eq!(settings["repeat_guard_temperature"], 0.5);
    for episode in lines(&dir.path().join("once/episodes.jsonl")) {
        let mut shown: Vec<u64> = episode["injections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["level"] == "turn")
            .flat_map(|i| i["chosen"].as_array().unwrap().iter())
            .map(|id| id.as_u64().unwrap())
            .collect();
        let count = shown.len();
        shown.sort_unstable();
        shown.dedup();
        assert_eq!(shown.len(), count, "{episode}");
    }
    let stderr = merit_failing(
        &interact_run_args(tasks_arg, root, &once, &once_options),
        &server,
        &cache,
        true,
    );
    assert!(stderr.contains("other settings"), "{stderr}");

    // A separate simulator model: recorded in every episode and in the run's settings, so a
    // continuation with another simulator is refused.
    let separate = path("separate-simulator");
    merit(
        &interact_run_args(
            tasks_arg,
            root,
            &separate,
            &[
                "--every",
                "2",
                "--limit",
                "2",
                "--simulator-model",
                "stand-in-user",
            ],
        ),
        &server,
        &cache,
        true,
    );
    let separate_log = lines(&dir.path().join("separate-simulator/episodes.jsonl"));
    // `--every 2`: the first and the third task of the file.
    let file_ids: Vec<serde_json::Value> = lines(Path::new(tasks_arg))
        .into_iter()
        .map(|task| task["instance_id"].clone())
        .collect();
    let run_ids: Vec<serde_json::Value> = separate_log
        .iter()
        .map(|episode| episode["instance_id"].clone())
        .collect();
    assert_eq!(run_ids, [file_ids[0].clone(), file_ids[2].clone()]);
    assert_eq!(separate_log[0]["simulator_model"], "openai:stand-in-user");
    assert_eq!(separate_log[0]["agent_model"], "openai:stand-in");
    let settings =
        std::fs::read_to_string(dir.path().join("separate-simulator/settings.json")).unwrap();
    assert!(settings.contains("stand-in-user"), "{settings}");

    // 2. Teacher annotations of (state, candidate) pairs, resumable.
    let annotations = path("prm/annotations.jsonl");
    let annotate_all = [
        "interact",
        "prm",
        "annotate",
        "--run",
        &train,
        "--out",
        &annotations,
    ];
    merit(
        &[&annotate_all[..], &["--limit", "10"]].concat(),
        &server,
        &cache,
        true,
    );
    assert_eq!(lines(Path::new(&annotations)).len(), 10);
    // Another annotating process on the folder: refused, nothing appended.
    {
        let folder = Path::new(&annotations).parent().unwrap();
        let _held = merit_core::fs::lock_folder(folder)
            .unwrap()
            .expect("the test holds it");
        let stderr = merit_failing(&annotate_all, &server, &cache, true);
        assert!(
            stderr.contains("in use by another merit process"),
            "{stderr}"
        );
        assert_eq!(lines(Path::new(&annotations)).len(), 10);
    }
    // A file holds one decoding setting: judged without the rubric grammar, it is not
    // continued under it.
    let stderr = merit_failing(
        &[&annotate_all[..], &["--grammar"]].concat(),
        &server,
        &cache,
        true,
    );
    assert!(
        stderr.contains("judged without the rubric grammar"),
        "{stderr}"
    );
    assert_eq!(lines(Path::new(&annotations)).len(), 10);
    merit(&annotate_all, &server, &cache, true);
    let annotated = lines(Path::new(&annotations)).len();
    assert!(annotated >= 20, "{annotated} pairs");

    // Contrastive sampling: whole states, K candidates each; pairs already judged count.
    let grouped = path("prm/grouped.jsonl");
    let per_state = |k: &str, limit: &str| {
        let annotate_grouped = [
            "interact", "prm", "annotate", "--run", &train, "--out", &grouped,
        ];
        merit(
            &[&annotate_grouped[..], &["--per-state", k, "--limit", limit]].concat(),
            &server,
            &cache,
            true,
        );
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for record in lines(Path::new(&grouped)) {
            *counts
                .entry(record["state_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        counts
    };
    let first = per_state("2", "6");
    assert_eq!(first.len(), 3, "{first:?}");
    assert!(first.values().all(|&n| n == 2), "{first:?}");
    // One more candidate for each of the same three states, not three new states.
    let second = per_state("3", "3");
    assert_eq!(
        second.keys().collect::<Vec<_>>(),
        first.keys().collect::<Vec<_>>()
    );
    assert!(second.values().all(|&n| n == 3), "{second:?}");

    // 3. The student PRM and its agreement table.
    let prm = path("prm");
    let train_prm = ["interact", "prm", "train", "--annotations", &annotations];
    let table = merit(
        &[&train_prm[..], &["--out", &prm]].concat(),
        &server,
        &cache,
        false,
    );
    for row in ["student (untrained)", "student (SFT)", "student (SFT+GRPO)"] {
        assert!(table.contains(row), "{table}");
    }
    assert!(dir.path().join("prm/agreement.md").is_file());
    assert!(dir.path().join("prm/student.safetensors").is_file());
    // Split by task: the same pairs, another agreement table (no held-out task was seen).
    let by_state = path("prm-by-task");
    let table_by_state = merit(
        &[
            &train_prm[..],
            &[
                "--out",
                &by_state,
                "--split-by",
                "task",
                "--held-out-percent",
                "40",
            ],
        ]
        .concat(),
        &server,
        &cache,
        false,
    );
    assert!(table_by_state.contains("student (SFT)"), "{table_by_state}");
    assert!(dir.path().join("prm-by-task/student.safetensors").is_file());

    // 4. Both selectors, trained with PPO from scratch.
    let selectors = path("selectors");
    let (turn_selector, episode_selector) = (
        format!("{selectors}/turn.safetensors"),
        format!("{selectors}/episode.safetensors"),
    );
    let student = path("prm/student.safetensors");
    let train_turn_selector = [
        "interact",
        "train-selector",
        "--level",
        "turn",
        "--run",
        &train,
        "--prm",
        &student,
    ];
    merit(
        &[
            &train_turn_selector[..],
            &["--out", &selectors, "--updates", "4", "--batch", "8"],
        ]
        .concat(),
        &server,
        &cache,
        false,
    );
    merit(
        &[
            "interact",
            "train-selector",
            "--level",
            "episode",
            "--tasks",
            tasks_arg,
            "--db-root",
            root,
            "--memory-from",
            &train_memory,
            "--with-turn-selector",
            &turn_selector,
            "--out",
            &selectors,
            "--updates",
            "2",
            "--batch",
            "3",
        ],
        &server,
        &cache,
        true,
    );
    for file in [
        "turn.safetensors",
        "turn.json",
        "turn-curve.jsonl",
        "turn-curve.svg",
        "episode.safetensors",
        "episode-curve.jsonl",
        "episode-curve.svg",
        "turn-decisions.json",
        "episode-decisions.json",
    ] {
        assert!(
            dir.path().join("selectors").join(file).is_file(),
            "{file} missing"
        );
    }
    assert_eq!(
        lines(&dir.path().join("selectors/episode-curve.jsonl")).len(),
        2
    );
    // Each command compares its checkpoint's decisions with the untrained network's on the
    // problems it trained on.
    for level in ["turn", "episode"] {
        let text =
            std::fs::read_to_string(dir.path().join(format!("selectors/{level}-decisions.json")))
                .unwrap();
        let shift: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(shift["problems"].as_u64().unwrap() > 0, "{level}: {text}");
        assert!(
            shift["mean_total_variation"].as_f64().unwrap() > 0.0,
            "{level}: {text}"
        );
    }

    // A features-only turn selector with a held-out check: trained on some tasks' states,
    // scored on the others' against the untrained network and the fixed rules.
    let holdout = path("selectors-holdout");
    let table = merit(
        &[
            &train_turn_selector[..],
            &[
                "--out",
                &holdout,
                "--updates",
                "4",
                "--batch",
                "8",
                "--inputs",
                "features",
                "--holdout-tasks",
                "1",
            ],
        ]
        .concat(),
        &server,
        &cache,
        false,
    );
    assert!(table.contains("| trained selector |"), "{table}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("selectors-holdout/turn-holdout.json")).unwrap(),
    )
    .unwrap();
    for part in ["training", "held_out"] {
        let rows = report[part].as_array().unwrap();
        let rules: Vec<&str> = rows.iter().map(|r| r["rule"].as_str().unwrap()).collect();
        assert_eq!(
            rules,
            [
                "trained selector",
                "untrained selector",
                "always the top candidate",
                "never",
                "oracle"
            ]
        );
        assert!(rows[0]["states"].as_u64().unwrap() > 0, "{part}: {report}");
        let oracle = rows[4]["mean_reward"].as_f64().unwrap();
        for row in rows {
            assert!(
                row["mean_reward"].as_f64().unwrap() <= oracle + 1e-9,
                "{report}"
            );
        }
        assert_eq!(rows[3]["inject_rate"].as_f64(), Some(0.0));
    }
    let sidecar: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("selectors-holdout/turn.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(sidecar["config"]["inputs"], "features", "{sidecar}");

    // Both checkpoints scored on a run's states without training: one row each, then the
    // fixed rules, and no rule above the oracle.
    let holdout_checkpoint = format!("{holdout}/turn.safetensors");
    let score_selectors = [
        "interact",
        "score-selector",
        "--run",
        &train,
        "--prm",
        &student,
    ];
    let scored = merit(
        &[
            &score_selectors[..],
            &[
                "--selector",
                &turn_selector,
                "--selector",
                &holdout_checkpoint,
            ],
        ]
        .concat(),
        &server,
        &cache,
        false,
    );
    let rows: Vec<(String, f64)> = scored
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| rule"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[3].parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            turn_selector.as_str(),
            holdout_checkpoint.as_str(),
            "always the top candidate",
            "never",
            "oracle"
        ],
        "{scored}"
    );
    assert!(rows.iter().all(|(_, u)| *u <= rows[4].1 + 1e-9), "{scored}");
    let stderr = merit_failing(
        &[
            &score_selectors[..],
            &["--selector", &format!("{selectors}/absent.safetensors")],
        ]
        .concat(),
        &server,
        &cache,
        false,
    );
    assert!(
        stderr.contains("absent.safetensors") && !stderr.contains("panicked"),
        "{stderr}"
    );

    // `--memory learned` without a checkpoint for a level it uses is an error naming the
    // option (it used to fall back to cosine silently); `cosine` says so explicitly.
    let stderr = merit_failing(
        &interact_run_args(
            tasks_arg,
            root,
            &path("unselected"),
            &["--memory", "learned", "--turn-selector", &turn_selector],
        ),
        &server,
        &cache,
        true,
    );
    assert!(
        stderr.contains("--episode-selector") && !stderr.contains("panicked"),
        "{stderr}"
    );

    // 5. An evaluation run with the learned checkpoints on the frozen training memory.
    let eval = path("eval");
    let learned = [
        "--memory",
        "learned",
        "--episode-selector",
        &episode_selector,
        "--turn-selector",
        &turn_selector,
        "--memory-from",
        &train_memory,
    ];
    merit(
        &interact_run_args(
            tasks_arg,
            root,
            &eval,
            &[&learned[..], &["--frozen-memory"]].concat(),
        ),
        &server,
        &cache,
        true,
    );
    let eval_log = lines(&dir.path().join("eval/episodes.jsonl"));
    let selectors_used: Vec<&str> = eval_log
        .iter()
        .flat_map(|r| r["injections"].as_array().unwrap().iter())
        .filter_map(|i| i["selector"].as_str())
        .collect();
    assert!(
        selectors_used
            .iter()
            .any(|s| s.starts_with("learned:episode:")),
        "{selectors_used:?}"
    );
    assert!(
        selectors_used
            .iter()
            .any(|s| s.starts_with("learned:turn:")),
        "{selectors_used:?}"
    );

    // The same evaluation three episodes at a time: the same episodes, logged in task order.
    let at_once = path("eval-at-once");
    merit(
        &interact_run_args(
            tasks_arg,
            root,
            &at_once,
            &[&learned[..], &["--frozen-memory", "--parallel", "3"]].concat(),
        ),
        &server,
        &cache,
        true,
    );
    let at_once_log = lines(&dir.path().join("eval-at-once/episodes.jsonl"));
    let essence = |log: &[Value]| -> Vec<(Value, Value, Value)> {
        log.iter()
            .map(|r| {
                (
                    r["instance_id"].clone(),
                    r["trajectory"].clone(),
                    r["injections"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(essence(&at_once_log), essence(&eval_log));
    // Episodes at once are refused where each must see the ones before it.
    for (extra, expected) in [
        (&["--parallel", "2"][..], "--frozen-memory"),
        (&["--parallel", "2", "--frozen-memory"][..], ""),
    ] {
        let out = path("refused");
        let mut args = interact_run_args(tasks_arg, root, &out, &[&learned[..], extra].concat());
        if expected.is_empty() {
            // An online selector learns from every episode, frozen memory or not.
            let at = args.iter().position(|a| *a == "learned").unwrap();
            args[at] = "memrl";
            args.retain(|a| !a.ends_with(".safetensors") && !a.ends_with("-selector"));
        }
        let stderr = failure_stderr(
            Command::new(env!("CARGO_BIN_EXE_merit"))
                .args(&args)
                .args(["--llm-url", &server, "--llm-model", "stand-in"])
                .arg("--cache")
                .arg(&cache),
        );
        let expected = if expected.is_empty() {
            "learns from every"
        } else {
            expected
        };
        assert!(
            stderr.contains(expected) && !stderr.contains("panicked"),
            "{stderr}"
        );
    }

    // The online baselines learn during the run (and replay their log on a rerun); TopicK,
    // the static coverage baseline, runs the same way.
    for baseline in ["memrl", "memento", "topick"] {
        let out = path(baseline);
        for _ in 0..2 {
            merit(
                &interact_run_args(
                    tasks_arg,
                    root,
                    &out,
                    &[
                        "--memory",
                        baseline,
                        "--memory-from",
                        &train_memory,
                        "--frozen-memory",
                    ],
                ),
                &server,
                &cache,
                true,
            );
        }
        let logged = lines(&dir.path().join(baseline).join("episodes.jsonl"));
        assert_eq!(logged.len(), 6);
        assert!(logged
            .iter()
            .all(|r| r["injections"][0]["selector"] == baseline));
    }

    // The non-agentic baseline: one query per task, no tools, no memory.
    let vanilla = path("vanilla");
    merit(
        &interact_run_args(tasks_arg, root, &vanilla, &["--agent", "vanilla"]),
        &server,
        &cache,
        true,
    );
    let logged = lines(&dir.path().join("vanilla/episodes.jsonl"));
    assert_eq!(logged.len(), 6);
    assert!(logged
        .iter()
        .all(|r| r["turns"].as_array().unwrap().len() == 1
            && r["trajectory"]["outcome"]["phase1_passed"] == true));
    let stderr = failure_stderr(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(interact_run_args(
                tasks_arg,
                root,
                &path("refused-vanilla"),
                &["--agent", "vanilla", "--memory", "cosine"],
            ))
            .args(["--llm-url", &server, "--llm-model", "stand-in"]),
    );
    assert!(stderr.contains("--agent vanilla"), "{stderr}");

    // A sampled try (Pass@k): the sampling settings belong to the run directory.
    let sampled = path("sampled");
    merit(
        &interact_run_args(
            tasks_arg,
            root,
            &sampled,
            &["--temperature", "0.8", "--sample-seed", "2"],
        ),
        &server,
        &cache,
        true,
    );
    let settings = std::fs::read_to_string(dir.path().join("sampled/settings.json")).unwrap();
    assert!(
        settings.contains("\"sampling\"") && settings.contains("0.8"),
        "{settings}"
    );
    let stderr = failure_stderr(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(interact_run_args(
                tasks_arg,
                root,
                &path("refused-hot"),
                &["--temperature", "9"],
            ))
            .args(["--llm-url", &server, "--llm-model", "stand-in"]),
    );
    assert!(
        stderr.contains("--temperature") && stderr.contains("9 is outside 0 to 2"),
        "{stderr}"
    );

    // The Demo agent: the training run's first two successes shown to every episode.
    let demo = path("demo");
    let demo_log = format!("{train}/episodes.jsonl");
    merit(
        &interact_run_args(
            tasks_arg,
            root,
            &demo,
            &["--demos", &demo_log, "--demo-count", "2"],
        ),
        &server,
        &cache,
        true,
    );
    let logged = lines(&dir.path().join("demo/episodes.jsonl"));
    assert_eq!(logged.len(), 6);
    assert!(logged
        .iter()
        .all(|r| r["injections"][0]["selector"] == "demo"));
    assert!(
        logged[5]["injections"][0]["chosen"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );
    let settings = std::fs::read_to_string(dir.path().join("demo/settings.json")).unwrap();
    assert!(settings.contains("\"demos\""), "{settings}");

    // 6. The counterfactual at a frozen turn, with all four arms: first two episodes, then
    // the rest, continuing from the forks the first invocation logged.
    let forks = path("forks.md");
    let counterfactual_args = |limit: Option<&'static str>| {
        let mut args = vec![
            "interact",
            "counterfactual",
            "--run",
            &eval,
            "--turn",
            "2",
            "--tasks",
            tasks_arg,
            "--db-root",
            root,
            "--memory-from",
            &train_memory,
            "--turn-selector",
            &turn_selector,
            "--out",
            &forks,
        ];
        if let Some(limit) = limit {
            args.extend(["--limit", limit]);
        }
        args
    };
    let counterfactual =
        |limit: Option<&'static str>| merit(&counterfactual_args(limit), &server, &cache, true);
    let fork_log = dir.path().join("forks.forks.jsonl");
    let first = counterfactual(Some("2"));
    assert!(first.contains("| learned | 2 |"), "{first}");
    assert_eq!(lines(&fork_log).len(), 8);
    // Another process on the forks log's folder: refused, nothing appended.
    {
        let _held = merit_core::fs::lock_folder(dir.path())
            .unwrap()
            .expect("the test holds it");
        let stderr = merit_failing(&counterfactual_args(None), &server, &cache, true);
        assert!(
            stderr.contains("in use by another merit process"),
            "{stderr}"
        );
        assert_eq!(lines(&fork_log).len(), 8);
    }
    let table = counterfactual(None);
    assert_eq!(lines(&fork_log).len(), 24, "only the missing forks ran");
    for arm in [
        "| none | 6 |",
        "| bm25 | 6 |",
        "| cosine | 6 |",
        "| learned | 6 |",
    ] {
        assert!(table.contains(arm), "{table}");
    }
    assert!(dir.path().join("forks.json").is_file());
    // Forks logged at another turn are not taken for this turn's: relabel the logged forks
    // as turn 5 and the turn-2 forks all run again.
    let relabelled: String = lines(&fork_log)
        .into_iter()
        .map(|mut fork| {
            fork["turn"] = json!(5);
            format!("{fork}\n")
        })
        .collect();
    std::fs::write(&fork_log, relabelled).unwrap();
    let again = counterfactual(None);
    assert!(again.contains("| none | 6 |"), "{again}");
    let logged = lines(&fork_log);
    assert_eq!(logged.len(), 48, "the turn-2 forks ran again");
    assert_eq!(logged.iter().filter(|o| o["turn"] == 2).count(), 24);

    // 7. The report compares the two runs.
    let report = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["interact", "report", "--baseline", &train, &train, &eval])
        .output()
        .unwrap();
    let text = String::from_utf8(report.stdout).unwrap();
    assert!(text.contains("Δ phase 1"), "{text}");
    // How the episodes ended: the five end columns of each run add up to its episodes.
    let behaviour: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.contains("refused the forced submit"))
        .skip(2)
        .take_while(|l| l.starts_with("| "))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(behaviour.len(), 2, "{text}");
    for (row, log) in behaviour.iter().zip([&train, &eval]) {
        let ends: usize = row[2..7].iter().map(|c| c.parse::<usize>().unwrap()).sum();
        assert_eq!(
            ends,
            lines(&Path::new(log).join("episodes.jsonl")).len(),
            "{text}"
        );
    }
    // The evaluation run used memory at the turn level: "with a memory / all (shown)" has
    // retrievals that injected one, and at least as many memories as such retrievals. The
    // column is found by its header, so that columns added before it do not move the test.
    let turn_column = text
        .lines()
        .find(|l| l.contains("refused the forced submit"))
        .and_then(|header| {
            header
                .split('|')
                .position(|cell| cell.trim().starts_with("turn retrievals with a memory"))
        })
        .expect("the behaviour table names its turn-retrieval column");
    let counts: Vec<usize> = behaviour[1][turn_column]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 3, "{text}");
    assert!(counts[0] > 0 && counts[0] <= counts[1], "{text}");
    assert!(counts[2] >= counts[0], "{text}");
}

#[test]
fn generated_task_sets_are_usable_as_they_grow_and_have_statistics() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let spider = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/spider");
    let out = dir.path().join("gen");
    // `merit interact gen --split dev` with `options`, from the Spider folder into `out`.
    let gen_command = |out: &Path, options: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_merit"));
        command
            .args(["interact", "gen", "--split", "dev"])
            .args(options)
            .arg("--seeds")
            .arg(spider.join("dev.json"))
            .arg("--tables")
            .arg(spider.join("tables.json"))
            .arg("--db-dir")
            .arg(spider.join("database"))
            .arg("--out")
            .arg(out)
            .args(["--llm-url", &server, "--llm-model", "stand-in", "--cache"])
            .arg(&cache);
        command
    };
    let gen_twelve = |limit: &str| gen_command(&out, &["--seed-sample", "12", "--limit", limit]);
    let gen = |limit: &str| {
        success_stdout(&mut gen_twelve(limit));
    };
    gen("2");
    let first = lines(&out.join("tasks.jsonl"));
    assert_eq!(first.len(), 2);
    // Every database of a written record has its metafiles already.
    for record in &first {
        let db = record["selected_database"].as_str().unwrap();
        assert!(
            out.join(db).join(format!("{db}_schema.txt")).is_file(),
            "{db}"
        );
    }
    gen("2");
    assert_eq!(
        lines(&out.join("tasks.jsonl")).len(),
        4,
        "a second call continues"
    );
    // While another process generates into the folder, a second one is refused and writes
    // nothing.
    {
        let _held = merit_core::fs::lock_folder(&out)
            .unwrap()
            .expect("the test holds it");
        let stderr = failure_stderr(&mut gen_twelve("2"));
        assert!(
            stderr.contains("in use by another merit process"),
            "{stderr}"
        );
        assert_eq!(lines(&out.join("tasks.jsonl")).len(), 4);
    }
    // The set runs with databases from the Spider folder, and has its statistics.
    let tasks = out.join("tasks.jsonl");
    let run = dir.path().join("run");
    merit(
        &interact_run_args(
            tasks.to_str().unwrap(),
            out.to_str().unwrap(),
            run.to_str().unwrap(),
            &[
                "--sqlite-dir",
                spider.join("database").to_str().unwrap(),
                "--max-turns",
                "3",
                "--max-tokens",
                "200",
            ],
        ),
        &server,
        &cache,
        true,
    );
    let episodes = lines(&run.join("episodes.jsonl"));
    assert_eq!(episodes.len(), 4);
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("settings.json")).unwrap()).unwrap();
    assert_eq!(settings["max_turns"], 3);
    assert_eq!(settings["max_tokens"], 200);
    let stats = success_stdout(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(["interact", "stats", "--json", "--db-dir"])
            .arg(spider.join("database"))
            .arg(&tasks)
            .args(server_args(&server, &cache, false)),
    );
    let stats: Value = serde_json::from_slice(&stats).unwrap();
    assert_eq!(stats[0]["generated"]["tasks"], 4);
    assert_eq!(stats[0]["generated"]["execution_rate"], 1.0);

    // With writes and follow-ups: Management tasks with their state checks, and query tasks
    // with a phase 2, written by the same command.
    let mixed = dir.path().join("gen-mixed");
    let report = success_stdout(&mut gen_command(
        &mixed,
        &[
            "--seed-sample",
            "40",
            "--limit",
            "12",
            "--writes",
            "--follow-ups",
            "--knowledge",
        ],
    ));
    let written = lines(&mixed.join("tasks.jsonl"));
    let rejected = mixed.join("tasks.jsonl.rejected.jsonl");
    let rejected = if rejected.is_file() {
        lines(&rejected)
    } else {
        Vec::new()
    };
    let management = written
        .iter()
        .filter(|r| r["category"] == "Management")
        .count();
    let with_follow_up = written
        .iter()
        .filter(|r| r.get("follow_up").is_some())
        .count();
    assert!(
        management > 0 && with_follow_up > 0,
        "{management} management, {with_follow_up} follow-ups of {} written; rejected: {rejected:?}",
        written.len(),
    );
    let write = written
        .iter()
        .find(|r| r["category"] == "Management")
        .unwrap();
    assert!(write["test_cases"][0]
        .as_str()
        .unwrap()
        .contains("def test_case"));
    // With knowledge entries: each one in its database's knowledge base, its task pointing to
    // it, and the report printed after the generation report.
    let with_knowledge: Vec<&Value> = written
        .iter()
        .filter(|r| r.get("knowledge_entry").is_some())
        .collect();
    assert!(
        !with_knowledge.is_empty(),
        "no knowledge entry in {} records",
        written.len()
    );
    for record in &with_knowledge {
        let db = record["selected_database"].as_str().unwrap();
        let base = std::fs::read_to_string(mixed.join(db).join(format!("{db}_kb.jsonl"))).unwrap();
        let entry = &record["knowledge_entry"];
        assert!(
            base.contains(entry["definition"].as_str().unwrap()),
            "{base}"
        );
        assert_eq!(record["external_knowledge"][0], entry["id"]);
    }
    assert!(String::from_utf8_lossy(&report).contains("\"new_entries\""));
    // The mixed set loads and runs.
    let run = dir.path().join("run-mixed");
    merit(
        &interact_run_args(
            mixed.join("tasks.jsonl").to_str().unwrap(),
            mixed.to_str().unwrap(),
            run.to_str().unwrap(),
            &[
                "--sqlite-dir",
                spider.join("database").to_str().unwrap(),
                "--max-turns",
                "2",
            ],
        ),
        &server,
        &cache,
        true,
    );
    assert_eq!(lines(&run.join("episodes.jsonl")).len(), written.len());
}

/// A user's own SQLite database prepared with `merit interact init-db` (its metafiles checked),
/// and one task on it in `tasks.jsonl`; returns the folder, the database root and the task file.
fn own_database_with_a_task() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("field_stations.sqlite");
    let connection = rusqlite::Connection::open(&file).unwrap();
    connection
        .execute_batch(
            "CREATE TABLE sites (site_id INTEGER PRIMARY KEY, region TEXT NOT NULL);
             CREATE TABLE observatories (
                 station TEXT PRIMARY KEY, site_id INTEGER REFERENCES sites(site_id),
                 airtempc REAL);
             INSERT INTO sites VALUES (1, 'north'), (2, 'south');
             INSERT INTO observatories VALUES ('a', 1, 25.0), ('b', 1, 12.5), ('c', 2, 31.0);",
        )
        .unwrap();
    drop(connection);
    let root = dir.path().join("root");
    let (root_arg, file_arg) = (root.to_str().unwrap(), file.to_str().unwrap());

    success_stdout(Command::new(env!("CARGO_BIN_EXE_merit")).args([
        "interact", "init-db", "--sqlite", file_arg, "--out", root_arg,
    ]));
    let folder = root.join("field_stations");
    let schema = std::fs::read_to_string(folder.join("field_stations_schema.txt")).unwrap();
    assert!(
        schema.contains("observatories") && schema.contains("airtempc"),
        "{schema}"
    );
    assert!(schema.contains("site_id"), "{schema}");
    assert!(folder.join("field_stations.sqlite").is_file());
    assert!(folder.join("field_stations_kb.jsonl").is_file());
    assert!(folder
        .join("field_stations_column_meaning_base.json")
        .is_file());
    let mut own = task("field_0001", "How many stations are warm?");
    own["selected_database"] = json!("field_stations");
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, own.to_string()).unwrap();
    (dir, root, tasks)
}

/// Runs the task of `tasks` over `root` into `out` (with `extra` options); its single episode
/// passes phase 1.
fn run_own_task(tasks: &Path, root: &Path, out: &Path, extra: &[&str], server: &str, cache: &Path) {
    let args = interact_run_args(
        tasks.to_str().unwrap(),
        root.to_str().unwrap(),
        out.to_str().unwrap(),
        extra,
    );
    merit(&args, server, cache, true);
    let log = lines(&out.join("episodes.jsonl"));
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["trajectory"]["outcome"]["phase1_passed"], true);
}

/// A user's own database, not from Spider or BIRD: `merit interact init-db` reads its schema
/// from the file (tables, columns, keys) and writes the metafiles beside a copy, and
/// `merit interact run` then serves a task on it (the stand-in agent submits the right query).
#[test]
fn a_users_own_sqlite_database_is_prepared_and_run() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let (dir, root, tasks) = own_database_with_a_task();
    let cache = dir.path().join("cache");
    let root_arg = root.to_str().unwrap();
    run_own_task(&tasks, &root, &dir.path().join("run"), &[], &server, &cache);

    // A task of one's own without ground truth, judged by the person at the terminal
    // (`--simulator human`): the agent's answer and its rows are shown on stderr, the answer
    // typed on stdin decides.
    let own_tasks = dir.path().join("own.jsonl");
    std::fs::write(
        &own_tasks,
        json!({"instance_id": "field_0002", "selected_database": "field_stations",
               "amb_user_query": "How many stations are warm?"})
        .to_string(),
    )
    .unwrap();
    let own_tasks_arg = own_tasks.to_str().unwrap();
    // `merit interact run` of that task into `out` with the person as the simulator.
    let human_run = |out: &Path, extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_merit"));
        command
            .args(interact_run_args(
                own_tasks_arg,
                root_arg,
                out.to_str().unwrap(),
                &[&["--simulator", "human"][..], extra].concat(),
            ))
            .args(["--llm-url", &server, "--llm-model", "stand-in"]);
        command
    };
    let human_out = dir.path().join("run-human");
    let mut child = human_run(&human_out, &[])
        .arg("--cache")
        .arg(&cache)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("The agent submits:") && stderr.contains("accept?"),
        "{stderr}"
    );
    let log = lines(&human_out.join("episodes.jsonl"));
    assert_eq!(log[0]["trajectory"]["outcome"]["phase1_passed"], true);
    // A person answers one episode at a time: --parallel is refused, clearly.
    let stderr = failure_stderr(&mut human_run(
        &dir.path().join("run-h2"),
        &["--parallel", "2"],
    ));
    assert!(stderr.contains("one episode at a time"), "{stderr}");

    // A file that is not a database is refused with its name, not a panic.
    let junk = dir.path().join("notes.sqlite");
    std::fs::write(&junk, "not a database").unwrap();
    let stderr = failure_stderr(
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(["interact", "init-db", "--sqlite", junk.to_str().unwrap()])
            .args(["--out", root_arg]),
    );
    assert!(
        stderr.contains("notes") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// The same user's database on PostgreSQL (`merit interact run --pg-url`): its SQLite file is
/// loaded into a template on the server and the episode works on a clone; the URL (it may
/// hold a password) is not recorded.
#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn a_users_own_database_runs_on_postgresql() {
    let Some(url) = crate::postgres_url("`merit interact run --pg-url`") else {
        return;
    };
    let server = crate::stand_in::serve(chat, &WORDS);
    let (dir, root, tasks) = own_database_with_a_task();
    let cache = dir.path().join("cache");
    let on_pg = dir.path().join("run-pg");
    run_own_task(
        &tasks,
        &root,
        &on_pg,
        &["--pg-url", url.as_str()],
        &server,
        &cache,
    );
    let settings = std::fs::read_to_string(on_pg.join("settings.json")).unwrap();
    assert!(settings.contains("postgres") && !settings.contains(url.as_str()));
}

/// Every file of a run directory (relative path → bytes), except the lock.
fn run_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if !path.ends_with(".lock") && path.file_name().is_some_and(|n| n != ".lock") {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Issue 22, item 4: `merit interact run` with a written memory, killed with SIGKILL at a
/// different moment in each of 20 trials (again and again until a run gets to the end), then
/// resumed: the run directory ends byte-identical to an uninterrupted run's.
#[test]
fn an_interact_run_killed_anywhere_resumes_to_the_uninterrupted_files() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let task_file = write_tasks(dir.path(), "98", &WARM_REQUESTS[..4]);
    let root = mini_root();
    let (tasks_arg, root_arg) = (task_file.to_str().unwrap(), root.to_str().unwrap());
    let command = |out: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_merit"));
        command
            .args(interact_run_args(
                tasks_arg,
                root_arg,
                out.to_str().unwrap(),
                &["--memory", "cosine"],
            ))
            .args(server_args(&server, &cache, true))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    };
    // The logs count the calls served by the reply cache, so the reference runs on the cache
    // state every trial sees: all replies cached by a first run.
    assert!(command(&dir.path().join("warm-up"))
        .status()
        .unwrap()
        .success());
    let reference = dir.path().join("reference");
    let started = std::time::Instant::now();
    assert!(command(&reference).status().unwrap().success());
    // Kill points spread over a whole run's duration (start-up included).
    let span = started.elapsed().as_micros() as u64;
    let expected = run_files(&reference);
    assert!(
        expected.contains_key("episodes.jsonl"),
        "{:?}",
        expected.keys()
    );

    let mut kills = 0;
    for trial in 0..20u64 {
        let out = dir.path().join(format!("trial-{trial}"));
        kills += kill_trial(&command, &out, span, trial, 5);
        assert_same_files(&run_files(&out), &expected, trial);
    }
    assert!(
        kills >= 20,
        "only {kills} kills landed before the runs ended"
    );
    eprintln!("20 trials, {kills} kills, every run directory identical to the reference");
}

/// One kill trial: [`kill_until_done`] from an empty `out`, started again from an empty one
/// with kill points twice as early whenever the run got to its end before the first kill
/// landed (a loaded machine runs unevenly), so that every trial is killed at least once.
fn kill_trial(
    command: &dyn Fn(&Path) -> Command,
    out: &Path,
    span_us: u64,
    trial: u64,
    max_kills: usize,
) -> usize {
    let mut span = span_us;
    loop {
        let kills = kill_until_done(command, out, span, trial, max_kills);
        if kills > 0 {
            return kills;
        }
        std::fs::remove_dir_all(out).unwrap();
        span /= 2;
        assert!(
            span > 0,
            "trial {trial}: no kill landed before the run ended"
        );
    }
}

/// Starts `command(out)` and kills it with SIGKILL at a point of a run lasting `span_us`
/// (different for each `trial` and attempt), again and again until a start reaches the end
/// or `max_kills` kills landed (on a loaded machine start-up alone can outlast the measured
/// span, and a trial must still end); then starts it once more (finding the work done, or
/// finishing it). Returns the kills.
fn kill_until_done(
    command: &dyn Fn(&Path) -> Command,
    out: &Path,
    span_us: u64,
    trial: u64,
    max_kills: usize,
) -> usize {
    let mut kills = 0;
    for attempt in 0..50u64 {
        if kills == max_kills {
            break;
        }
        let mut child = command(out).spawn().unwrap();
        let fraction = 1 + (trial * 7 + attempt * 13) % 19;
        std::thread::sleep(std::time::Duration::from_micros(span_us * fraction / 20));
        if child
            .try_wait()
            .unwrap()
            .is_some_and(|status| status.success())
        {
            break;
        }
        child.kill().unwrap();
        if child.wait().unwrap().success() {
            break;
        }
        kills += 1;
        assert!(attempt < 49, "trial {trial} never got to the end");
    }
    assert!(command(out).status().unwrap().success());
    kills
}

/// Asserts that two sets of files are equal, naming the first file and line that differ.
fn assert_same_files(
    found: &BTreeMap<String, Vec<u8>>,
    expected: &BTreeMap<String, Vec<u8>>,
    trial: u64,
) {
    for (name, bytes) in expected {
        let got = found
            .get(name)
            .map(|b| String::from_utf8_lossy(b).into_owned());
        let want = String::from_utf8_lossy(bytes);
        let first = got.as_deref().and_then(|got| {
            got.lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .map(|line| (line + 1, got.lines().nth(line).unwrap_or("").to_string()))
        });
        assert!(
            got.as_deref() == Some(want.as_ref()),
            "trial {trial}: {name} differs (first differing line: {first:?})"
        );
    }
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "trial {trial}"
    );
}

/// The same 20 kill trials for PRM annotation (an append-only file that resumes) and for
/// turn-level selector training (its outputs written atomically; a killed training starts
/// again from its seed): each ends byte-identical to an uninterrupted run.
#[test]
fn prm_annotation_and_selector_training_killed_anywhere_end_as_uninterrupted() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let task_file = write_tasks(dir.path(), "97", &WARM_REQUESTS);
    let (tasks_arg, root) = (task_file.to_str().unwrap(), mini_root());
    let root = root.to_str().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let run = path("run");
    merit(
        &interact_run_args(tasks_arg, root, &run, &["--memory", "cosine"]),
        &server,
        &cache,
        true,
    );
    let with_models = |args: Vec<String>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_merit"));
        command
            .args(args)
            .args(server_args(&server, &cache, true))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    };
    let timed = |command: &dyn Fn(&Path) -> Command, out: &Path| {
        let started = std::time::Instant::now();
        assert!(command(out).status().unwrap().success());
        started.elapsed().as_micros() as u64
    };

    // PRM annotation of every pair (`--limit` counts per invocation, so a resumed run with a
    // limit would annotate more than an uninterrupted one): one append-only file.
    let annotate = |out: &Path| {
        with_models(
            ["interact", "prm", "annotate", "--run", &run, "--out"]
                .iter()
                .map(|s| s.to_string())
                .chain([out.join("annotations.jsonl").display().to_string()])
                .collect(),
        )
    };
    timed(&annotate, &dir.path().join("annotate-warm-up"));
    let reference = dir.path().join("annotate-reference");
    let span = timed(&annotate, &reference);
    let expected = run_files(&reference);
    let mut kills = 0;
    for trial in 0..20u64 {
        let out = dir.path().join(format!("annotate-{trial}"));
        kills += kill_trial(&annotate, &out, span, trial, 5);
        assert_same_files(&run_files(&out), &expected, trial);
    }
    // Annotation from a full reply cache takes a moment, so some kills come too late; the
    // trials still have to land a fair number.
    assert!(kills >= 10, "annotation: only {kills} kills landed");
    let annotation_kills = kills;

    // Turn-level selector training on a student PRM trained from those annotations.
    let prm = path("prm");
    let annotations = reference.join("annotations.jsonl");
    merit(
        &[
            "interact",
            "prm",
            "train",
            "--annotations",
            annotations.to_str().unwrap(),
            "--out",
            &prm,
        ],
        &server,
        &cache,
        false,
    );
    let student = format!("{prm}/student.safetensors");
    let train = |out: &Path| {
        with_models(
            [
                "interact",
                "train-selector",
                "--level",
                "turn",
                "--run",
                &run,
                "--prm",
                &student,
                "--updates",
                "6",
                "--batch",
                "8",
                "--out",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string()])
            .collect(),
        )
    };
    let reference = dir.path().join("selector-reference");
    let span = timed(&train, &reference);
    let expected = run_files(&reference);
    let mut kills = 0;
    for trial in 0..20u64 {
        let out = dir.path().join(format!("selector-{trial}"));
        // Training starts again from its seed after a kill: two kills, then a full run.
        kills += kill_trial(&train, &out, span, trial, 2);
        assert_same_files(&run_files(&out), &expected, trial);
    }
    assert!(kills >= 10, "selector training: only {kills} kills landed");
    eprintln!(
        "annotation ({annotation_kills} kills) and selector training ({kills} kills): 20 \
         trials each, every output identical"
    );
}

/// Issue 22, storage faults: a disk that fills up (a file-size limit, its signal ignored so
/// that writes fail with EFBIG as on a full disk) stops `merit interact run` with an error
/// that says what failed, and leaves nothing corrupt: run again with room, the run directory ends
/// byte-identical to an uninterrupted run's.
#[test]
fn a_full_disk_stops_an_interact_run_cleanly_and_it_resumes() {
    let server = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let task_file = write_tasks(dir.path(), "96", &WARM_REQUESTS[..4]);
    let root = mini_root();
    let (tasks_arg, root_arg) = (task_file.to_str().unwrap(), root.to_str().unwrap());
    let args = |out: &Path| -> Vec<OsString> {
        let run = interact_run_args(
            tasks_arg,
            root_arg,
            out.to_str().unwrap(),
            &["--memory", "cosine"],
        );
        let run = run.into_iter().map(OsString::from);
        run.chain(server_args(&server, &cache, true)).collect()
    };
    let plain = |out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_merit"))
            .args(args(out))
            .output()
            .unwrap()
    };
    assert!(plain(&dir.path().join("warm-up")).status.success());
    let reference = dir.path().join("reference");
    assert!(plain(&reference).status.success());
    let expected = run_files(&reference);
    let largest = expected.values().map(Vec::len).max().unwrap() as u64;

    // A limit below the largest file, in 1 KiB blocks: the run cannot finish.
    let out = dir.path().join("full-disk");
    let script = format!(
        "trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"",
        (largest / 1024 / 2).max(1)
    );
    let full = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_merit"))
        .args(args(&out))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert!(
        !full.status.success(),
        "the run fit under the limit: {stderr}"
    );
    // The first write over the limit is the episode's working copy of the database (larger
    // than any log line); the error says what failed and how to continue.
    assert!(
        stderr.contains("error:")
            && stderr.contains("File too large")
            && stderr.contains("run the same command again"),
        "a clear error: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // With room again, the same command finishes the run, and nothing written before the
    // failure is corrupt.
    assert!(plain(&out).status.success());
    assert_same_files(&run_files(&out), &expected, 0);
}
