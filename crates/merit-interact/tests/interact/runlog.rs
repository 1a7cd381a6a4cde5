//! The episode log and the resumable driver: resume skips logged tasks, a torn last line is
//! tolerated with a warning, other corruption names file and line, unrunnable tasks are
//! skipped, and a model failure stops the run with the finished episodes kept.

use crate::common::{custom_tasks, warm_task, ScriptedModel};
use merit_core::model::ModelError;
use merit_interact::runlog::EPISODE_FORMAT;
use merit_interact::{
    read_log, run_tasks, sqlite_backend, AgentConfig, EnvConfig, LogError, ReactAgent, RunError,
    RunSpec, ScriptedSimulator, TaskSet,
};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const SOLVE: &str =
    "Thought: done.\nAction: submit('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')";

fn three_tasks() -> (tempfile::TempDir, TaskSet, Vec<String>) {
    let ids: Vec<String> = (1..=3).map(|n| format!("alien_95{n:02}")).collect();
    let records: Vec<_> = ids.iter().map(|id| warm_task(id, false)).collect();
    let (dir, set) = custom_tasks(&records);
    (dir, set, ids)
}

fn run(
    set: &TaskSet,
    ids: &[String],
    log: &Path,
    model: Arc<ScriptedModel>,
) -> Result<merit_interact::RunSummary, RunError> {
    run_at_once(set, ids, log, model, 1)
}

fn run_at_once(
    set: &TaskSet,
    ids: &[String],
    log: &Path,
    model: Arc<ScriptedModel>,
    episodes_at_once: usize,
) -> Result<merit_interact::RunSummary, RunError> {
    let spec = RunSpec {
        set,
        instance_ids: ids,
        log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once,
    };
    let agent = ReactAgent::new(model, AgentConfig::default());
    run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
}

#[test]
fn a_run_logs_every_episode_and_a_rerun_skips_them() {
    let (dir, set, ids) = three_tasks();
    let log = dir.path().join("run/episodes.jsonl");
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    let summary = run(&set, &ids, &log, model.clone()).unwrap();
    assert_eq!((summary.ran, summary.already_logged), (3, 0));
    assert!(summary.warnings.is_empty() && summary.skipped.is_empty());
    let loaded = read_log(&log).unwrap();
    let logged: Vec<&str> = loaded
        .records
        .iter()
        .map(|r| r.instance_id.as_str())
        .collect();
    assert_eq!(logged, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let record = &loaded.records[0];
    assert_eq!(record.format, EPISODE_FORMAT);
    assert_eq!(record.agent_model, "solver");
    assert_eq!(record.prompt_family, "merit-interact-prompts-v1");
    assert!(record.trajectory.outcome.phase1_passed);
    assert_eq!(record.trajectory.steps[0].thought.as_deref(), Some("done."));
    assert_eq!(record.turns[0].reply, SOLVE);
    // Every line ends with a newline: nothing is torn after a clean run.
    assert!(std::fs::read(&log).unwrap().ends_with(b"\n"));
    // Resume: nothing runs again, the model is not called.
    let calls = model.seen().len();
    let again = run(&set, &ids, &log, model.clone()).unwrap();
    assert_eq!((again.ran, again.already_logged), (0, 3));
    assert_eq!(model.seen().len(), calls);
}

#[test]
fn a_torn_last_line_is_dropped_with_a_warning_and_its_task_reruns() {
    let (dir, set, ids) = three_tasks();
    let log = dir.path().join("episodes.jsonl");
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    run(&set, &ids[..1], &log, model.clone()).unwrap();
    // A crash in the middle of writing the second record.
    let full = std::fs::read_to_string(&log).unwrap();
    let torn = full.replace(&ids[0], &ids[1]);
    let mut bytes = full.into_bytes();
    bytes.extend_from_slice(&torn.as_bytes()[..torn.len() / 2]);
    std::fs::write(&log, &bytes).unwrap();
    let loaded = read_log(&log).unwrap();
    assert_eq!(loaded.records.len(), 1);
    assert!(loaded.torn_bytes > 0);
    assert!(
        loaded.warnings[0].contains("incomplete"),
        "{:?}",
        loaded.warnings
    );
    let summary = run(&set, &ids, &log, model).unwrap();
    assert_eq!((summary.ran, summary.already_logged), (2, 1));
    assert_eq!(summary.warnings.len(), 1);
    let after = read_log(&log).unwrap();
    assert_eq!(after.records.len(), 3);
    assert_eq!(after.torn_bytes, 0);
}

#[test]
fn other_corruption_is_an_error_naming_file_and_line() {
    let (dir, set, ids) = three_tasks();
    let log = dir.path().join("episodes.jsonl");
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    run(&set, &ids[..2], &log, model.clone()).unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (bad, expect) in [
        (
            format!("{}\n{{not json\n{}\n", lines[0], lines[1]),
            "not JSON",
        ),
        (
            format!("{}\n{}\n", lines[0], json!({"format": "something-else"})),
            "format",
        ),
        (format!("{}\n{}\n", lines[0], lines[0]), "logged twice"),
        (
            format!(
                "{}\n{}\n",
                lines[0],
                json!({"format": EPISODE_FORMAT, "instance_id": "x"})
            ),
            "not an episode record",
        ),
    ] {
        std::fs::write(&log, &bad).unwrap();
        let error = run(&set, &ids, &log, model.clone()).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, RunError::Log(LogError::Corrupt { line: 2, .. })),
            "{message}"
        );
        assert!(message.contains("episodes.jsonl line 2"), "{message}");
        assert!(message.contains(expect), "{message}");
        // The log was not touched.
        assert_eq!(std::fs::read_to_string(&log).unwrap(), bad);
    }
}

#[test]
fn unrunnable_tasks_are_skipped_and_not_logged() {
    let (dir, set) = custom_tasks(&[
        warm_task("alien_9601", false),
        json!({"instance_id": "alien_9602", "selected_database": "alien",
               "amb_user_query": "No ground truth here."}),
    ]);
    let mini = crate::common::load_mini();
    let missing = mini
        .tasks()
        .iter()
        .find(|t| mini.database(t.database()).unwrap().sqlite_file().is_none())
        .expect("a mini task without a database file");
    let (_dir2, set2) = custom_tasks(&[json!({
        "instance_id": "nodb_1", "selected_database": missing.database(),
        "amb_user_query": "Anything?", "sol_sql": ["SELECT 1"]
    })]);
    let log = dir.path().join("episodes.jsonl");
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    let ids = vec!["alien_9601".to_string(), "alien_9602".to_string()];
    let summary = run(&set, &ids, &log, model.clone()).unwrap();
    assert_eq!(summary.ran, 1);
    assert_eq!(summary.skipped.len(), 1);
    assert!(summary.skipped[0].reason.contains("no ground truth"));
    let summary = run(&set2, &["nodb_1".to_string()], &log, model.clone()).unwrap();
    assert_eq!(summary.skipped.len(), 1, "{summary:?}");
    assert!(
        summary.skipped[0].reason.contains("unavailable"),
        "{summary:?}"
    );
    assert_eq!(read_log(&log).unwrap().records.len(), 1);
    let error = run(&set, &["nope".to_string()], &log, model).unwrap_err();
    assert!(matches!(error, RunError::UnknownTask(_)));
}

#[test]
fn a_model_failure_stops_the_run_and_a_rerun_resumes() {
    let (dir, set, ids) = three_tasks();
    let log = dir.path().join("episodes.jsonl");
    // The model works for the first episode (one call), then the server goes away.
    let flaky = ScriptedModel::new("flaky", |_, i| {
        if i == 0 {
            Ok(SOLVE.into())
        } else {
            Err(ModelError::Transport("connection reset".into()))
        }
    });
    let error = run(&set, &ids, &log, flaky).unwrap_err();
    assert!(matches!(&error, RunError::Episode { instance_id, .. } if instance_id == &ids[1]));
    assert!(error.to_string().contains("connection reset"));
    assert_eq!(read_log(&log).unwrap().records.len(), 1);
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    let summary = run(&set, &ids, &log, model).unwrap();
    assert_eq!((summary.ran, summary.already_logged), (2, 1));
}

/// A solver whose first call is slow, that counts the calls in flight at once.
fn slow_first_solver() -> (Arc<ScriptedModel>, Arc<AtomicUsize>) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (now, seen_most) = (Arc::clone(&in_flight), Arc::clone(&most));
    let model = ScriptedModel::new("solver", move |_, index| {
        let running = now.fetch_add(1, Ordering::SeqCst) + 1;
        seen_most.fetch_max(running, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(if index == 0 {
            300
        } else {
            40
        }));
        now.fetch_sub(1, Ordering::SeqCst);
        Ok(SOLVE.to_string())
    });
    (model, most)
}

#[test]
fn episodes_at_once_finish_out_of_order_and_are_logged_in_task_order() {
    let ids: Vec<String> = (1..=6).map(|n| format!("alien_97{n:02}")).collect();
    let records: Vec<_> = ids.iter().map(|id| warm_task(id, false)).collect();
    let (dir, set) = custom_tasks(&records);
    let one = dir.path().join("one/episodes.jsonl");
    let many = dir.path().join("many/episodes.jsonl");
    let (model, most) = slow_first_solver();
    run_at_once(&set, &ids, &one, model, 1).unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 1);
    let (model, most) = slow_first_solver();
    let summary = run_at_once(&set, &ids, &many, model, 3).unwrap();
    assert_eq!((summary.ran, summary.already_logged), (6, 0));
    // The slow first episode overlapped the others (which finished before it), yet the log is
    // the one-at-a-time log, line for line.
    assert_eq!(most.load(Ordering::SeqCst), 3);
    assert_eq!(
        std::fs::read_to_string(&many).unwrap(),
        std::fs::read_to_string(&one).unwrap()
    );
    // And a rerun at once finds everything logged.
    let (model, _) = slow_first_solver();
    let again = run_at_once(&set, &ids, &many, model.clone(), 3).unwrap();
    assert_eq!((again.ran, again.already_logged), (0, 6));
    assert!(model.seen().is_empty());
}

#[test]
fn the_demo_agent_shows_the_same_solved_examples_to_every_other_task() {
    use crate::common::request_text;
    use merit_interact::memory::StaticDemos;
    use merit_interact::run_tasks_with_demos;
    let (dir, set, ids) = three_tasks();
    // A "training" run whose log supplies the demonstrations.
    let train = dir.path().join("train/episodes.jsonl");
    run(
        &set,
        &ids,
        &train,
        ScriptedModel::replies("solver", vec![SOLVE.into()]),
    )
    .unwrap();
    let records = read_log(&train).unwrap().records;
    let demos = StaticDemos::from_records(&records, 2).unwrap();
    assert_eq!(demos.instance_ids(), vec!["alien_9501", "alien_9502"]);
    // No success, no demonstrations: a clear error.
    let mut failed = records.clone();
    for record in &mut failed {
        record.trajectory.outcome.reward = 0.0;
    }
    let error = StaticDemos::from_records(&failed, 2).unwrap_err();
    assert!(
        error.to_string().contains("no successful episode"),
        "{error}"
    );

    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    let log = dir.path().join("demo/episodes.jsonl");
    let spec = RunSpec {
        set: &set,
        instance_ids: &ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    run_tasks_with_demos(
        &spec,
        &agent,
        &demos,
        sqlite_backend,
        |_| ScriptedSimulator::default(),
        |_| {},
    )
    .unwrap();
    let prompts: Vec<String> = model.seen().iter().map(request_text).collect();
    assert_eq!(prompts.len(), 3);
    // Task 1 and 2 are demonstrations themselves: each sees only the other one; task 3 both.
    let examples = |text: &str| text.matches("[Example ").count();
    assert_eq!(
        prompts.iter().map(|p| examples(p)).collect::<Vec<_>>(),
        vec![1, 1, 2]
    );
    assert!(prompts[2].contains("Worked examples"));
    assert!(
        prompts[2].contains("submit(\"SELECT COUNT(*) FROM observatories WHERE airtempc > 20\")")
    );
    let logged = read_log(&log).unwrap().records;
    let chosen: Vec<Vec<u64>> = logged
        .iter()
        .map(|r| r.injections[0].chosen.clone())
        .collect();
    assert_eq!(chosen, vec![vec![1], vec![0], vec![0, 1]]);
    assert!(logged
        .iter()
        .all(|r| r.injections.len() == 1 && r.injections[0].selector == "demo"));
}

#[test]
fn a_person_at_the_terminal_judges_tasks_without_ground_truth() {
    use merit_interact::HumanSimulator;
    let (dir, set) = custom_tasks(&[json!({
        "instance_id": "own_1", "selected_database": "alien",
        "amb_user_query": "How many observatories are warm?"})]);
    let ids = vec!["own_1".to_string()];
    // The agent asks once, submits a count, is told it is wrong, then submits the right one.
    let model = ScriptedModel::replies(
        "solver",
        vec![
            "Action: ask('What counts as warm?')".into(),
            "Action: submit('SELECT COUNT(*) FROM observatories')".into(),
            SOLVE.into(),
        ],
    );
    // The person answers the question, rejects the first answer with a comment, accepts the
    // second.
    let typed = "above 20 degrees\nthat counts every observatory\ny\n";
    let shown = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let log = dir.path().join("own/episodes.jsonl");
    let spec = RunSpec {
        set: &set,
        instance_ids: &ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: None,
        episodes_at_once: 1,
    };
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    let summary = run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| {
            HumanSimulator::new(
                std::io::Cursor::new(typed),
                SharedBuffer(Arc::clone(&shown)),
            )
        },
        |_| {},
    )
    .unwrap();
    assert_eq!((summary.ran, summary.skipped.len()), (1, 0), "{summary:?}");
    let record = &read_log(&log).unwrap().records[0];
    let steps = &record.trajectory.steps;
    assert!(steps[0].observation.starts_with("above 20 degrees\n"));
    assert!(
        steps[1]
            .observation
            .contains("the user did not accept it and says: that counts every observatory"),
        "{}",
        steps[1].observation
    );
    assert!(record.trajectory.outcome.phase1_passed);
    assert_eq!(record.simulator_usage.asks, 1);
    // The person saw the question, both submissions and a preview of their rows.
    let screen = String::from_utf8(shown.lock().unwrap().clone()).unwrap();
    assert!(
        screen.contains("The agent asks: What counts as warm?"),
        "{screen}"
    );
    assert!(screen.contains("SELECT COUNT(*) FROM observatories WHERE airtempc > 20"));
    assert!(screen.matches("accept?").count() == 2, "{screen}");
    // A closed terminal rejects instead of hanging, and the episode still ends.
    let log = dir.path().join("closed/episodes.jsonl");
    let spec = RunSpec { log: &log, ..spec };
    let model = ScriptedModel::replies("solver", vec![SOLVE.into()]);
    let agent = ReactAgent::new(
        model,
        AgentConfig {
            max_turns: 3,
            ..AgentConfig::default()
        },
    );
    run_tasks(
        &spec,
        &agent,
        sqlite_backend,
        |_| HumanSimulator::new(std::io::Cursor::new(""), std::io::sink()),
        |_| {},
    )
    .unwrap();
    assert!(
        !read_log(&log).unwrap().records[0]
            .trajectory
            .outcome
            .phase1_passed
    );
}

/// A `Write` into a shared buffer (the simulator owns its writer; the test reads it after).
struct SharedBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
