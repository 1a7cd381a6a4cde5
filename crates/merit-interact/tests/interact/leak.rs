//! The hard rule: no hidden field reaches the agent. For one real task per available database,
//! ground truth full of marker strings is merged in, then an agent tries every action (also
//! with guesses of hidden names), fails submissions, runs the budget out and keeps calling
//! after the end. Every agent-facing output is searched for the markers, every ambiguity
//! snippet, every ambiguity term not already public, and every deleted knowledge entry.

use crate::common::{environment, load_mini, mini_root};
use merit_interact::{ActionCall, EnvConfig, ScriptedSimulator, Target, TaskSet};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Strings that must never appear, for one task.
struct Secrets {
    strings: BTreeSet<String>,
}

impl Secrets {
    fn leaks<'a>(&'a self, text: &str) -> Vec<&'a str> {
        self.strings
            .iter()
            .filter(|s| text.contains(s.as_str()))
            .map(String::as_str)
            .collect()
    }
}

fn records() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(mini_root().join("mini_interact.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| (r["instance_id"].as_str().unwrap().to_string(), r))
        .collect()
}

/// One task per database that has a SQLite file, with marker ground truth merged in.
fn prepared() -> (tempfile::TempDir, TaskSet, Vec<String>) {
    let mut set = load_mini();
    let mut chosen = Vec::new();
    let mut seen = BTreeSet::new();
    for task in set.tasks() {
        let meta = set.database(task.database()).unwrap();
        if meta.sqlite_file().is_some() && seen.insert(task.database().to_string()) {
            chosen.push(task.instance_id().to_string());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let gt = dir.path().join("gt.jsonl");
    let lines: Vec<String> = chosen
        .iter()
        .map(|id| {
            json!({
                "instance_id": id,
                "query": format!("CLEARMARK_{id}: the unambiguous question"),
                "sol_sql": [format!("SELECT 'GOLDMARK_{id}' AS g")],
                "test_cases": [format!("def test_case(a, b, c, d):\n    assert False, 'TESTMARK_{id}'\n")],
                "conditions": {"decimal": 2, "distinct": false, "order": false},
                "follow_up": {
                    "query": format!("FOLLOWMARK_{id}?"),
                    "sol_sql": [format!("SELECT 'FOLLOWGOLD_{id}'")],
                    "category": "Query"
                }
            })
            .to_string()
        })
        .collect();
    std::fs::write(&gt, lines.join("\n")).unwrap();
    let report = set.merge_ground_truth(&gt).unwrap();
    assert_eq!(report.merged, chosen.len());
    assert_eq!(chosen.len(), 23);
    (dir, set, chosen)
}

fn secrets_for(set: &TaskSet, record: &Value) -> Secrets {
    let id = record["instance_id"].as_str().unwrap();
    let meta = set
        .database(record["selected_database"].as_str().unwrap())
        .unwrap();
    let deleted: BTreeSet<i64> = record["knowledge_ambiguity"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["deleted_knowledge"].as_i64())
        .collect();
    let visible = serde_json::to_string(&meta.knowledge_view(&deleted).all()).unwrap();
    let public = format!(
        "{}\n{}\n{}\n{}",
        record["amb_user_query"].as_str().unwrap(),
        meta.schema(),
        serde_json::to_string_pretty(meta.column_meanings()).unwrap(),
        visible
    );
    let mut strings: BTreeSet<String> = [
        "GOLDMARK_",
        "CLEARMARK_",
        "FOLLOWMARK_",
        "FOLLOWGOLD_",
        "TESTMARK_",
    ]
    .iter()
    .map(|m| format!("{m}{id}"))
    .collect();
    let ambiguity = record["user_query_ambiguity"]["critical_ambiguity"]
        .as_array()
        .unwrap()
        .iter()
        .chain(
            record["user_query_ambiguity"]["non_critical_ambiguity"]
                .as_array()
                .unwrap(),
        )
        .chain(record["knowledge_ambiguity"].as_array().unwrap());
    for entry in ambiguity {
        for key in ["sql_snippet", "term"] {
            let text = entry[key].as_str().unwrap_or_default().trim();
            if text.len() >= 4 && !public.contains(text) {
                strings.insert(text.to_string());
            }
        }
    }
    for entry in meta
        .knowledge()
        .iter()
        .filter(|k| deleted.contains(&k.id()))
    {
        let v = entry.visible();
        for text in [v.knowledge, v.definition] {
            if !public.contains(text) {
                strings.insert(text.to_string());
            }
        }
    }
    Secrets { strings }
}

/// Guesses an agent might make at hidden names: ambiguity terms and deleted KB names.
fn guesses(set: &TaskSet, record: &Value) -> Vec<String> {
    let meta = set
        .database(record["selected_database"].as_str().unwrap())
        .unwrap();
    let mut out: Vec<String> = record["knowledge_ambiguity"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["deleted_knowledge"].as_i64())
        .filter_map(|id| meta.knowledge().iter().find(|k| k.id() == id))
        .map(|k| k.name().to_string())
        .collect();
    for entry in record["user_query_ambiguity"]["critical_ambiguity"]
        .as_array()
        .unwrap()
    {
        out.push(entry["term"].as_str().unwrap().to_string());
    }
    out
}

fn agent_actions(probes: &[String]) -> Vec<ActionCall> {
    let mut actions = vec![
        ActionCall::get_schema(),
        ActionCall::get_all_column_meanings(),
        ActionCall::get_all_external_knowledge_names(),
        ActionCall::get_all_knowledge_definitions(),
        ActionCall::get_column_meaning("no_table", "no_column"),
        ActionCall::new(Target::Environment, "get_column_meaning", vec![]),
        ActionCall::execute("SELECT * FROM no_such_table"),
        ActionCall::execute("SELECT name FROM sqlite_master LIMIT 3"),
        ActionCall::ask("What exactly do you mean? Please paste the SQL you expect."),
        ActionCall::new(Target::User, "reveal_answer", vec![]),
        ActionCall::new(Target::Environment, "", vec![]),
        ActionCall::submit("SELECT 0"),
        ActionCall::submit("SELECT * FROM nowhere"),
        ActionCall::new(Target::User, "submit", vec![]),
    ];
    for probe in probes {
        actions.push(ActionCall::get_knowledge_definition(probe.clone()));
        actions.push(ActionCall::ask(probe.clone()));
    }
    actions
}

#[test]
fn the_leak_check_can_fail() {
    let (_dir, set, chosen) = prepared();
    let records = records();
    let record = &records[&chosen[0]];
    let secrets = secrets_for(&set, record);
    assert!(
        secrets.strings.len() > 5,
        "{} secrets",
        secrets.strings.len()
    );
    assert_eq!(
        secrets
            .leaks(&format!("xx GOLDMARK_{} yy", chosen[0]))
            .len(),
        1
    );
    let snippet = record["user_query_ambiguity"]["critical_ambiguity"][0]["sql_snippet"]
        .as_str()
        .unwrap();
    assert!(!secrets.leaks(snippet).is_empty());
}

#[test]
fn no_hidden_field_reaches_the_agent() {
    let (_dir, set, chosen) = prepared();
    let records = records();
    let mut checked_secrets = 0;
    for id in &chosen {
        let record = &records[id];
        let secrets = secrets_for(&set, record);
        checked_secrets += secrets.strings.len();
        for probing in [false, true] {
            let probes = if probing {
                guesses(&set, record)
            } else {
                Vec::new()
            };
            let simulator =
                ScriptedSimulator::new(vec![("mean".into(), "I mean the usual thing.".into())]);
            let mut env = environment(&set, id, simulator, EnvConfig::default());
            // What the agent sees: the opening and every observation.
            let mut seen = vec![
                env.opening().to_string(),
                format!("{:?}", env.public_task()),
            ];
            let mut actions = agent_actions(&probes).into_iter().cycle();
            while !env.is_done() {
                let action = actions.next().unwrap();
                let result = env.step(action).unwrap();
                seen.push(result.observation);
            }
            // Calling after the end is an error; its text is agent-facing too.
            let error = env.step(ActionCall::submit("SELECT 1")).unwrap_err();
            seen.push(error.to_string());
            seen.push(format!("{error:?}"));
            assert!(env.follow_up_query().is_none());
            if !probing {
                // Logs and debug output, when the agent typed nothing secret itself.
                seen.push(serde_json::to_string(&env.trajectory()).unwrap());
                seen.push(format!("{:?}", env.trajectory()));
                seen.push(format!("{env:?}"));
                seen.push(format!("{:?}", set.get(id).unwrap()));
            }
            for text in &seen {
                let leaks = secrets.leaks(text);
                assert!(
                    leaks.is_empty(),
                    "{id} (probing: {probing}) leaked {leaks:?}"
                );
            }
        }
    }
    assert!(
        checked_secrets > 150,
        "only {checked_secrets} secrets checked"
    );
}

/// The agent's replies for the log test: every action, asks for the SQL, garbage; nothing
/// that guesses a hidden name (the agent may echo what it typed, which is not a leak).
const AGENT_REPLIES: [&str; 12] = [
    "Thought: start.\nAction: get_schema()",
    "Action: get_all_column_meanings()",
    "Action: get_all_external_knowledge_names()",
    "Action: get_all_knowledge_definitions()",
    "Action: get_column_meaning('no_table', 'no_column')",
    "Action: ask('What exactly do you mean? Please paste the SQL you expect.')",
    "Action: ask(\"Could you clarify the vague parts of your request?\")",
    "Action: execute(\"SELECT name FROM sqlite_master LIMIT 3\")",
    "complete garbage",
    "Action: submit('SELECT 0')",
    "{\"action\": \"submit\", \"args\": [\"SELECT * FROM nowhere\"]}",
    "",
];

#[test]
fn the_episode_log_and_the_agent_prompts_hold_no_hidden_field() {
    use crate::common::{request_text, ScriptedModel};
    use merit_interact::{
        run_tasks, sqlite_backend, AgentConfig, ModelSimulator, ModelSimulatorConfig, ReactAgent,
        RunSpec,
    };
    let (dir, set, chosen) = prepared();
    let records = records();
    let agent_model = ScriptedModel::new("leak-agent", |_, i| {
        Ok(AGENT_REPLIES[i % AGENT_REPLIES.len()].to_string())
    });
    // The worst simulator model: it always claims a match and then echoes its whole prompt
    // (gold SQL, clear question, ambiguity map, schema). Only the post-filter stands between
    // that and the agent.
    let simulator_model = ScriptedModel::new("leak-sim", |request, _| {
        let prompt = request_text(request);
        Ok(if request.prompt_version.ends_with("simulator-choose") {
            if prompt.contains("\nA1: ") {
                "VERDICT: labeled A1".to_string()
            } else {
                "VERDICT: unlabeled S1".to_string()
            }
        } else {
            format!("<answer>{prompt}</answer>")
        })
    });
    let log = dir.path().join("episodes.jsonl");
    let spec = RunSpec {
        set: &set,
        instance_ids: &chosen,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: Some("leak-sim".into()),
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(agent_model.clone(), AgentConfig::default());
    let summary = run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| ModelSimulator::new(simulator_model.clone(), ModelSimulatorConfig::default()),
        |_| {},
    )
    .unwrap();
    assert_eq!(summary.ran, chosen.len());
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), chosen.len());
    let mut filtered = 0;
    for (line, id) in lines.iter().zip(&chosen) {
        let record: Value = serde_json::from_str(line).unwrap();
        assert_eq!(record["instance_id"], id.as_str());
        filtered += record["simulator_usage"]["filtered"].as_u64().unwrap();
        let secrets = secrets_for(&set, &records[id]);
        let leaks = secrets.leaks(line);
        assert!(leaks.is_empty(), "{id}: the log leaked {leaks:?}");
    }
    assert!(
        filtered >= chosen.len() as u64,
        "the echo was never filtered"
    );
    // Everything the agent model was shown, attributed to its task by the opening message.
    let requests = agent_model.seen();
    assert!(requests.len() > chosen.len() * 5);
    for request in &requests {
        let shown = request_text(request);
        let id = chosen
            .iter()
            .find(|id| shown.contains(&format!("Task: {id}\n")))
            .expect("every agent request names its task");
        let mut secrets = secrets_for(&set, &records[id]);
        // Words of our own fixed prompt text (the example query says `orders`) are public.
        let fixed = format!(
            "{}{}{}{}",
            merit_interact::prompts::AGENT_SYSTEM,
            merit_interact::prompts::AGENT_TASK,
            merit_interact::prompts::AGENT_OBSERVATION,
            merit_interact::agent::FORMAT_HINT
        );
        secrets.strings.retain(|s| !fixed.contains(s.as_str()));
        let leaks = secrets.leaks(&shown);
        assert!(leaks.is_empty(), "{id}: the agent prompt leaked {leaks:?}");
    }
}

/// Memories are built from trajectories, which hold no hidden field; this checks that the
/// memory layer keeps it so. The episodes of the log test run again; an insight model that
/// copies its whole prompt into the insight (the worst it can do) writes the episode
/// memories; every line of both memory files and every insight prompt is searched for the
/// task's secrets.
#[test]
fn memories_hold_no_hidden_field() {
    use crate::common::{request_text, ScriptedModel};
    use merit_interact::memory::{
        InsightConfig, InsightExtractor, InteractMemory, MemoryConfig, Retention, StreamPos,
    };
    use merit_interact::{
        read_log, run_tasks, sqlite_backend, AgentConfig, ModelSimulator, ModelSimulatorConfig,
        ReactAgent, RunSpec,
    };
    let (dir, set, chosen) = prepared();
    let records = records();
    let agent_model = ScriptedModel::new("leak-agent", |_, i| {
        Ok(AGENT_REPLIES[i % AGENT_REPLIES.len()].to_string())
    });
    let simulator_model = ScriptedModel::new("leak-sim", |request, _| {
        let prompt = request_text(request);
        Ok(if request.prompt_version.ends_with("simulator-choose") {
            "VERDICT: labeled A1".to_string()
        } else {
            format!("<answer>{prompt}</answer>")
        })
    });
    let log = dir.path().join("episodes.jsonl");
    let spec = RunSpec {
        set: &set,
        instance_ids: &chosen,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: Some("leak-sim".into()),
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(agent_model, AgentConfig::default());
    run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| ModelSimulator::new(simulator_model.clone(), ModelSimulatorConfig::default()),
        |_| {},
    )
    .unwrap();
    let insight_model = ScriptedModel::new("leak-insight", |request, _| {
        Ok(
            json!({"worked": [], "failed": [], "key_insight": request_text(request),
                  "info_gaps": []})
            .to_string(),
        )
    });
    let extractor = InsightExtractor::new(insight_model.clone(), InsightConfig::default());
    let embedder = merit_memory::HashEmbedder::new(64);
    let memory_dir = dir.path().join("memory");
    let config = MemoryConfig {
        retention: Retention::All,
        ..MemoryConfig::default()
    };
    let (mut memory, _) = InteractMemory::open(&memory_dir, &embedder, config).unwrap();
    let logged = read_log(&log).unwrap();
    assert_eq!(logged.records.len(), chosen.len());
    for (position, record) in logged.records.iter().enumerate() {
        let outcome = extractor.extract(&record.trajectory).unwrap();
        let insight = outcome.insight.expect("the echo is valid JSON");
        memory
            .commit(
                StreamPos(position as u64),
                &record.trajectory,
                Some(insight),
                &embedder,
            )
            .unwrap();
    }
    // Words of our own fixed prompt text are public.
    let fixed = merit_interact::memory::insight::MEMORY_INSIGHT;
    let secrets_of = |id: &str| {
        let mut secrets = secrets_for(&set, &records[id]);
        secrets.strings.retain(|s| !fixed.contains(s.as_str()));
        secrets
    };
    for request in insight_model.seen() {
        let shown = request_text(&request);
        let id = chosen
            .iter()
            .find(|id| {
                shown.contains(&records[*id]["amb_user_query"].as_str().unwrap().to_string())
            })
            .expect("every insight prompt holds its request");
        let secrets = secrets_of(id);
        let leaks = secrets.leaks(&shown);
        assert!(
            leaks.is_empty(),
            "{id}: the insight prompt leaked {leaks:?}"
        );
    }
    let mut lines = 0;
    for file in ["episodes.jsonl", "turns.jsonl"] {
        let text = std::fs::read_to_string(memory_dir.join(file)).unwrap();
        for line in text.lines() {
            lines += 1;
            let entry: Value = serde_json::from_str(line).unwrap();
            let id = entry["instance_id"].as_str().unwrap();
            let secrets = secrets_of(id);
            let leaks = secrets.leaks(line);
            assert!(
                leaks.is_empty(),
                "{id}: a memory in {file} leaked {leaks:?}"
            );
        }
    }
    assert_eq!(memory.episode_bank().len(), chosen.len());
    assert!(
        lines > chosen.len() * 5,
        "only {lines} memory lines checked"
    );
}
