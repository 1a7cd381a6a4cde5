//! The ReAct agent with scripted models on real mini-interact databases: a walk to a passing
//! submission (both phases), garbage every turn, and model failures.

use crate::common::{custom_tasks, environment, request_text, silent, warm_task, ScriptedModel};
use merit_core::model::{ChatModel, ChatReply, ChatRequest, ModelError, Role, ToolCall};
use merit_interact::agent::parse::ParseKind;
use merit_interact::agent::ToolCallMode;
use merit_interact::{
    AgentConfig, AgentError, AgentStop, EndReason, EnvConfig, ModelSimulator, ModelSimulatorConfig,
    ReactAgent, ScriptedSimulator, Target,
};
use serde_json::json;

fn simulator() -> ModelSimulator {
    let model = ScriptedModel::new("scripted-sim", |request, _| {
        Ok(if request.prompt_version.ends_with("simulator-choose") {
            "VERDICT: labeled A1".into()
        } else {
            "<answer>Warm means above twenty degrees.</answer>".into()
        })
    });
    ModelSimulator::new(model, ModelSimulatorConfig::default())
}

#[test]
fn a_scripted_agent_solves_both_phases() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9101", true)]);
    let mut env = environment(&set, "alien_9101", simulator(), EnvConfig::default());
    let replies = vec![
        "Thought: I should see the tables first.\nAction: get_schema()".to_string(),
        "**Thought:** warm is vague.\n**Action:** ask(\"What do you mean by warm weather?\")"
            .to_string(),
        "Thought: try it.\nAction:\n```python\nexecute(\"\"\"\nSELECT COUNT(*)\nFROM observatories\nWHERE airtempc > 20\n\"\"\")\n```".to_string(),
        "Thought: looks right.\nAction: submit('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')".to_string(),
        "{\"action\": \"submit\", \"args\": [\"SELECT COUNT(*) FROM observatories WHERE airtempc > 20 AND weathprofile = 'Clear'\"]}".to_string(),
    ];
    let model = ScriptedModel::replies("scripted-agent", replies);
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    let result = agent.run(&mut env).unwrap();
    let outcome = result.trajectory.outcome;
    assert!(
        outcome.phase1_passed && outcome.phase2_passed,
        "{outcome:?}"
    );
    assert!((outcome.reward - 1.0).abs() < 1e-9);
    assert_eq!(outcome.end, EndReason::Solved);
    assert_eq!(result.stop, AgentStop::EpisodeEnded);
    assert_eq!(result.turns.len(), 5);
    assert_eq!(result.agent_usage.calls, 5);
    assert_eq!(result.agent_usage.unreadable_replies, 0);
    assert_eq!(result.simulator_usage.labeled, 1);
    assert_eq!(result.turns[4].parse, ParseKind::Json);
    // Every turn is in the trajectory: thought, action, observation, cost, budget left.
    let steps = &result.trajectory.steps;
    assert_eq!(steps.len(), 5);
    assert_eq!(
        steps[0].thought.as_deref(),
        Some("I should see the tables first.")
    );
    assert_eq!(steps[1].thought.as_deref(), Some("warm is vague."));
    assert_eq!(steps[1].action.target, Target::User);
    assert!(steps[1]
        .observation
        .starts_with("Warm means above twenty degrees."));
    assert_eq!(
        steps[2].action.args,
        vec!["\nSELECT COUNT(*)\nFROM observatories\nWHERE airtempc > 20\n"]
    );
    let costs: Vec<f64> = steps.iter().map(|s| s.cost).collect();
    assert_eq!(costs, vec![1.0, 2.0, 1.0, 3.0, 3.0]);
    assert_eq!(steps[4].budget_left, result.trajectory.budget_total - 10.0);
    // The model saw each observation in the next message, and the follow-up question.
    let requests = model.seen();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests[0].messages[0].role, Role::System);
    assert!(requests[0].messages[0].content.contains("SQLite"));
    assert!(request_text(&requests[0]).contains("How many observatories have warm weather?"));
    let last = &requests[4].messages;
    assert_eq!(last.len(), 2 + 2 * 4);
    assert!(last[3].content.starts_with("Observation:\nCREATE TABLE"));
    assert!(last[9].content.contains("And how many of those are clear?"));
    for request in &requests {
        assert_eq!(request.prompt_version, "merit-interact-prompts-v1/agent");
        assert_eq!(request.decoding.temperature, 0.0);
        assert!(!request_text(request).contains("{{"));
    }
}

#[test]
fn garbage_every_turn_ends_by_the_turn_cap_without_panicking() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9102", false)]);
    let mut env = environment(
        &set,
        "alien_9102",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let garbage = [
        "I am not sure.",
        "",
        "Action: (((",
        "{\"foo\": [1, 2",
        "```\n```",
        "Action: frobnicate('x')",
    ];
    let model = crate::common::ScriptedModel::new("garbage", move |_, i| {
        Ok(garbage[i % garbage.len()].to_string())
    });
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    let result = agent.run(&mut env).unwrap();
    // Budget 3+3+2·1+6 = 14 at 0.2 per unknown action outlasts 60 turns.
    assert_eq!(result.trajectory.outcome.end, EndReason::TurnLimit);
    assert_eq!(result.turns.len(), 60);
    assert_eq!(result.agent_usage.unreadable_replies, 60);
    assert!(result
        .trajectory
        .steps
        .iter()
        .all(|s| (s.cost - 0.2).abs() < 1e-9));
    assert!((result.trajectory.outcome.budget_spent - 12.0).abs() < 1e-9);
    // The model was told how to write an action after each unreadable reply.
    let last = model.seen().pop().unwrap();
    assert!(last
        .messages
        .last()
        .unwrap()
        .content
        .contains("Action: name(arguments)"));
}

#[test]
fn garbage_with_a_small_budget_ends_by_the_forced_submit() {
    let (_dir, set) = custom_tasks(&[json!({
        "instance_id": "alien_9103", "selected_database": "alien",
        "amb_user_query": "Count observatories.",
        "sol_sql": ["SELECT COUNT(*) FROM observatories"], "category": "Query"
    })]);
    let config = EnvConfig {
        patience: 0,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_9103", ScriptedSimulator::default(), config);
    let model = ScriptedModel::replies("garbage", vec!["nothing useful".into()]);
    let result = ReactAgent::new(model, AgentConfig::default())
        .run(&mut env)
        .unwrap();
    // Budget 6 lasts 30 unknown actions; the 31st is not a submit.
    assert_eq!(result.trajectory.outcome.end, EndReason::SubmitRefused);
    assert_eq!(result.turns.len(), 31);
    assert_eq!(result.stop, AgentStop::EpisodeEnded);
}

/// A model that runs `queries` first, then writes nothing readable until the budget is gone,
/// on a small-budget task whose answer is `SELECT COUNT(*) FROM observatories`.
fn spend_the_budget_after(queries: &[&str], fallback: bool) -> merit_interact::EpisodeResult {
    let (_dir, set) = custom_tasks(&[json!({
        "instance_id": "alien_9109", "selected_database": "alien",
        "amb_user_query": "Count observatories.",
        "sol_sql": ["SELECT COUNT(*) FROM observatories"], "category": "Query"
    })]);
    let config = EnvConfig {
        patience: 0,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_9109", ScriptedSimulator::default(), config);
    let mut replies: Vec<String> = queries
        .iter()
        .map(|sql| format!("Thought: try.\nAction: execute('{sql}')"))
        .collect();
    replies.push("nothing useful".into());
    let model = ScriptedModel::replies("spender", replies);
    let agent = ReactAgent::new(
        model,
        AgentConfig {
            forced_submit_fallback: fallback,
            ..AgentConfig::default()
        },
    );
    agent.run(&mut env).unwrap()
}

#[test]
fn the_forced_submit_fallback_submits_the_newest_clean_query() {
    let clean = "SELECT COUNT(*) FROM observatories";
    let queries = [clean, "SELECT nothing FROM nowhere"];
    // Without it the budget runs out and the next unreadable reply ends the task unsubmitted.
    let plain = spend_the_budget_after(&queries, false);
    assert_eq!(plain.trajectory.outcome.end, EndReason::SubmitRefused);
    assert!(plain.turns.iter().all(|turn| !turn.fallback_submit));
    // With it the reply under the flag is replaced by a submit of the newest query that ran
    // without an error (the erroring one came later and is passed over).
    let fallback = spend_the_budget_after(&queries, true);
    let outcome = &fallback.trajectory.outcome;
    assert!(outcome.phase1_passed, "{outcome:?}");
    assert_eq!(fallback.turns.len(), plain.turns.len());
    let (last_turn, last_step) = (
        fallback.turns.last().unwrap(),
        fallback.trajectory.steps.last().unwrap(),
    );
    assert!(last_turn.fallback_submit);
    assert_eq!(last_turn.reply, "nothing useful");
    assert!(last_step.action.is_submit());
    assert_eq!(last_step.action.args, vec![clean.to_string()]);
    assert_eq!(
        fallback.turns.iter().filter(|t| t.fallback_submit).count(),
        1
    );
    // Every turn before the flag is the plain run's.
    assert_eq!(
        fallback.trajectory.steps[..plain.trajectory.steps.len() - 1],
        plain.trajectory.steps[..plain.trajectory.steps.len() - 1]
    );
}

#[test]
fn the_forced_submit_fallback_leaves_a_task_without_a_clean_query_as_it_was() {
    let result = spend_the_budget_after(&["SELECT nothing FROM nowhere"], true);
    assert_eq!(result.trajectory.outcome.end, EndReason::SubmitRefused);
    assert!(result.turns.iter().all(|turn| !turn.fallback_submit));
}

#[test]
fn the_agent_turn_cap_holds_even_when_the_environment_allows_more() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9104", false)]);
    let config = EnvConfig {
        max_turns: 1000,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_9104", ScriptedSimulator::default(), config);
    let model = ScriptedModel::replies("garbage", vec!["?".into()]);
    let agent = ReactAgent::new(
        model,
        AgentConfig {
            max_turns: 7,
            ..AgentConfig::default()
        },
    );
    let result = agent.run(&mut env).unwrap();
    assert_eq!(result.stop, AgentStop::TurnCap);
    assert_eq!(result.turns.len(), 7);
    assert!(!env.is_done());
}

#[test]
fn model_failures_stop_or_end_the_episode() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9105", false)]);
    let mut env = environment(
        &set,
        "alien_9105",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let down = ScriptedModel::new("down", |_, _| Err(ModelError::Transport("refused".into())));
    let error = ReactAgent::new(down, AgentConfig::default())
        .run(&mut env)
        .unwrap_err();
    assert!(matches!(error, AgentError::Model(_)), "{error}");
    // A request the model refuses (context too long) ends the episode as unfinished.
    let mut env = environment(
        &set,
        "alien_9105",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let full = ScriptedModel::new("full", |_, i| {
        if i < 2 {
            Ok("Action: get_schema()".into())
        } else {
            Err(ModelError::InvalidRequest(
                "prompt exceeds the context".into(),
            ))
        }
    });
    let result = ReactAgent::new(full, AgentConfig::default())
        .run(&mut env)
        .unwrap();
    assert_eq!(
        result.stop,
        AgentStop::ModelRefused("prompt exceeds the context".into())
    );
    assert_eq!(result.trajectory.steps.len(), 2);
    assert_eq!(result.trajectory.outcome.end, EndReason::Running);
}

#[test]
fn long_observations_are_cut_in_the_prompt_but_kept_in_the_trajectory() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9106", false)]);
    let mut env = environment(
        &set,
        "alien_9106",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let model = ScriptedModel::new("schema", |_, i| {
        Ok(if i == 0 {
            "Action: get_schema()"
        } else {
            "Action: submit('SELECT 1')"
        }
        .into())
    });
    let agent = ReactAgent::new(
        model.clone(),
        AgentConfig {
            observation_chars: 100,
            max_turns: 2,
            ..AgentConfig::default()
        },
    );
    let result = agent.run(&mut env).unwrap();
    assert!(result.trajectory.steps[0].observation.len() > 1000);
    let second = model.seen()[1].messages.last().unwrap().content.clone();
    assert!(second.contains("(cut: the observation was longer than 100 characters)"));
    assert!(second.len() < 300);
}

#[test]
fn a_runaway_reply_is_kept_as_its_one_turn_while_the_log_keeps_it_whole() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9107", false)]);
    let mut env = environment(
        &set,
        "alien_9107",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    // What the small embedded model does: one action, then the same call again and again
    // until the token limit, with an invented observation in between.
    let runaway = format!(
        "Thought: count them.\nAction: execute(\"\"\"\nSELECT COUNT(*) FROM observatories\n\"\"\")\n{}",
        "\nObservation: 3\nAction: submit(\"SELECT 3\")\n".repeat(20)
    );
    let first = runaway.clone();
    let model = ScriptedModel::new("runaway", move |_, i| {
        Ok(if i == 0 {
            first.clone()
        } else {
            "nonsense without an action".into()
        })
    });
    let agent = ReactAgent::new(
        model.clone(),
        AgentConfig {
            max_turns: 3,
            ..AgentConfig::default()
        },
    );
    let result = agent.run(&mut env).unwrap();
    assert_eq!(
        result.turns[0].reply, runaway,
        "the log keeps the reply whole"
    );
    let second = &model.seen()[1];
    let kept = &second.messages[second.messages.len() - 2];
    assert_eq!(kept.role, Role::Assistant);
    assert_eq!(
        kept.content,
        "Thought: count them.\nAction: execute(\"\"\"\nSELECT COUNT(*) FROM observatories\n\"\"\")"
    );
    // An unreadable reply is kept as written, so the format hint after it makes sense.
    let third = &model.seen()[2];
    assert_eq!(
        third.messages[third.messages.len() - 2].content,
        "nonsense without an action"
    );
}

/// Runs one episode of `instance` with scripted `replies` (at most four turns) and the
/// given fold setting; returns the model (to read its prompts) and the trajectory.
fn run_repeater(
    instance: &str,
    replies: &[&str],
    fold_repeats: bool,
) -> (
    std::sync::Arc<ScriptedModel>,
    merit_interact::env::Trajectory,
) {
    let (_dir, set) = custom_tasks(&[warm_task(instance, false)]);
    let mut env = environment(
        &set,
        instance,
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let model = ScriptedModel::replies(
        "repeater",
        replies.iter().map(|reply| reply.to_string()).collect(),
    );
    let agent = ReactAgent::new(
        model.clone(),
        AgentConfig {
            max_turns: 4,
            fold_repeats,
            ..AgentConfig::default()
        },
    );
    agent.run(&mut env).unwrap();
    (model, env.trajectory())
}

#[test]
fn a_word_for_word_repeat_gets_the_agents_note_and_a_first_try_does_not() {
    let (model, trajectory) = run_repeater(
        "alien_9108",
        &[
            "Action: execute(\"SELECT 1\")",
            "Action: execute(\"SELECT 1\")",
            "Action: execute(\"SELECT 2\")",
        ],
        false,
    );
    let last_message = |i: usize| model.seen()[i].messages.last().unwrap().content.clone();
    assert!(!last_message(1).contains(merit_interact::agent::REPEAT_HINT));
    assert!(last_message(2).contains(merit_interact::agent::REPEAT_HINT));
    assert!(!last_message(3).contains(merit_interact::agent::REPEAT_HINT));
    // The environment's own record of the step is untouched by the note.
    assert!(!trajectory
        .steps
        .iter()
        .any(|s| s.observation.contains(merit_interact::agent::REPEAT_HINT)));
}

#[test]
fn folded_repeats_leave_the_conversation_as_it_was_with_a_numbered_note() {
    let (model, trajectory) = run_repeater(
        "alien_9109",
        &[
            "Action: execute(\"SELECT 1\")",
            "Action: execute(\"SELECT 1\")",
            "Action: execute(\"SELECT 1\")",
            "Action: execute(\"SELECT 2\")",
        ],
        true,
    );
    // Every repeat was still taken and charged.
    assert_eq!(trajectory.steps.len(), 4);
    let seen = model.seen();
    let lengths: Vec<usize> = seen.iter().map(|r| r.messages.len()).collect();
    assert_eq!(lengths, [2, 4, 4, 4], "repeats add no turn");
    let last = |i: usize| seen[i].messages.last().unwrap().content.clone();
    assert!(!last(1).contains("(Note"));
    assert!(last(2).contains("(Note 1: you then took `execute(\"SELECT 1\")` again"));
    assert!(last(2).contains("The result was the same as before. [Budget:"));
    assert!(last(3).contains("(Note 2:"), "{}", last(3));
    assert_ne!(last(2), last(3), "each folded prompt differs from the last");
    // The earlier messages never change: only the newest one grows.
    assert_eq!(seen[2].messages[..3], seen[1].messages[..3]);
}

/// Gives the same turn hint before every turn (a memory whose nearest step never changes,
/// as when the agent repeats itself).
struct SameHint;

impl merit_interact::MemoryAdvisor for SameHint {
    fn before_episode(
        &mut self,
        _: &merit_interact::PublicTask,
    ) -> Result<Option<merit_interact::Injection>, AgentError> {
        Ok(None)
    }

    fn before_turn(
        &mut self,
        _: &merit_interact::PublicTask,
        steps: &[merit_interact::TrajectoryStep],
    ) -> Result<Option<merit_interact::Injection>, AgentError> {
        Ok(Some(merit_interact::Injection {
            text: "Memory hint: submit it.".to_string(),
            record: merit_interact::InjectionRecord {
                level: merit_interact::memory::Level::Turn,
                turn: steps.len() + 1,
                candidates: vec![7],
                chosen: vec![7],
                chosen_features: Vec::new(),
                selector: "fixed".to_string(),
                note: None,
            },
        }))
    }
}

#[test]
fn a_folded_repeat_takes_its_turn_hint_with_it() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9110", false)]);
    let mut env = environment(
        &set,
        "alien_9110",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let model = ScriptedModel::replies(
        "repeater",
        ["SELECT 1", "SELECT 1", "SELECT 1", "SELECT 2"]
            .iter()
            .map(|sql| format!("Action: execute(\"{sql}\")"))
            .collect(),
    );
    let agent = ReactAgent::new(
        model.clone(),
        AgentConfig {
            max_turns: 4,
            fold_repeats: true,
            ..AgentConfig::default()
        },
    );
    let result = agent.run_with_memory(&mut env, &mut SameHint).unwrap();
    let seen = model.seen();
    let last = |i: usize| seen[i].messages.last().unwrap().content.clone();
    // One hint per prompt, always after the newest note: the hint shown with a repeat that
    // was folded away does not stay behind to pile up.
    for turn in 1..4 {
        assert_eq!(
            last(turn).matches("Memory hint").count(),
            1,
            "{}",
            last(turn)
        );
        assert!(last(turn).trim_end().ends_with("Memory hint: submit it."));
    }
    assert!(last(3).contains("(Note 1:") && last(3).contains("(Note 2:"));
    // Every hint shown is still on record, one per turn from the second.
    let turns: Vec<usize> = result.injections.iter().map(|i| i.turn).collect();
    assert_eq!(turns, [2, 3, 4]);
}

#[test]
fn a_changed_result_is_shown_in_the_fold_note() {
    let action = merit_interact::action::ActionCall::get_schema();
    let same = merit_interact::agent::fold_note(
        &action,
        1,
        Some("rows\n[Budget: 3/5 left.]"),
        "rows\n[Budget: 2/5 left.]",
        100,
    );
    assert!(
        same.contains("same as before. [Budget: 2/5 left.]"),
        "{same}"
    );
    let changed =
        merit_interact::agent::fold_note(&action, 2, Some("a"), "b\n[Budget: 1/5 left.]", 100);
    assert!(
        changed.contains("Its result:\nb\n[Budget: 1/5 left.]"),
        "{changed}"
    );
    assert!(changed.starts_with("(Note 2: you then took `get_schema()` again"));
}

/// A result longer than the prompt's cut is compared whole: the same long result is not shown
/// again, a changed one is shown cut.
#[test]
fn a_long_unchanged_result_is_not_shown_again_in_the_fold_note() {
    let action = merit_interact::action::ActionCall::execute("SELECT * FROM t");
    let rows = "1|a\n".repeat(100);
    let earlier = format!("{rows}[Budget: 3/5 left.]");
    let note = |repeat, observation: String| {
        merit_interact::agent::fold_note(&action, repeat, Some(&earlier), &observation, 50)
    };
    let same = note(1, format!("{rows}[Budget: 2/5 left.]"));
    assert!(
        same.contains("same as before. [Budget: 2/5 left.]") && !same.contains("1|a"),
        "{same}"
    );
    let changed = note(2, format!("2|b\n{rows}[Budget: 1/5 left.]"));
    assert!(
        changed.contains("Its result:\n2|b\n") && changed.contains("(cut: the observation"),
        "{changed}"
    );
}

#[test]
fn the_schema_can_come_with_the_opening_at_no_charge() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9110", false)]);
    let run = |schema_in_opening: bool| {
        let mut env = environment(
            &set,
            "alien_9110",
            ScriptedSimulator::default(),
            EnvConfig::default(),
        );
        let schema = env.schema().to_string();
        let model = ScriptedModel::replies("one", vec!["Action: execute(\"SELECT 1\")".into()]);
        let agent = ReactAgent::new(
            model.clone(),
            AgentConfig {
                max_turns: 1,
                observation_chars: 1_000_000,
                schema_in_opening,
                ..AgentConfig::default()
            },
        );
        let result = agent.run(&mut env).unwrap();
        let opening = model.seen()[0].messages[1].content.clone();
        (schema, opening, result.trajectory.steps[0].budget_left)
    };
    let (schema, with, budget_with) = run(true);
    let (_, without, budget_without) = run(false);
    assert!(schema.contains("CREATE TABLE"));
    assert!(with.contains(schema.trim()), "{with}");
    assert!(!without.contains("CREATE TABLE"));
    let instruction = without.trim_end().lines().last().unwrap();
    assert!(
        with.trim_end().ends_with(instruction),
        "the instruction stays last"
    );
    assert_eq!(budget_with, budget_without);
}

/// How a [`ToolModel`] answers the `index`-th request.
type Reply = dyn Fn(&ChatRequest, usize) -> ChatReply + Send + Sync;

/// A backend with native tool calls: each reply is produced by `respond(request, index)`;
/// with `reject_tools`, a request that declares tools is answered with HTTP 400.
struct ToolModel {
    respond: Box<Reply>,
    reject_tools: bool,
    requests: std::sync::Mutex<Vec<ChatRequest>>,
}

impl ChatModel for ToolModel {
    fn id(&self) -> String {
        "test:tools".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let index = {
            let mut seen = self.requests.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        if self.reject_tools && !request.tools.is_empty() {
            return Err(ModelError::Server {
                status: 400,
                body: "tools are not supported by this server".into(),
            });
        }
        Ok((self.respond)(request, index))
    }
    fn supports_tools(&self) -> bool {
        true
    }
}

fn reply(text: &str, calls: Vec<ToolCall>) -> ChatReply {
    ChatReply {
        text: text.into(),
        prompt_tokens: 10,
        completion_tokens: 5,
        latency: std::time::Duration::from_millis(1),
        cached: false,
        tool_calls: calls,
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn native_tool_calls_drive_the_episode_and_stay_in_the_conversation() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9201", false)]);
    let mut env = environment(&set, "alien_9201", silent(), EnvConfig::default());
    let model = std::sync::Arc::new(ToolModel {
        respond: Box::new(|_, index| {
            match index {
            0 => reply("Thought: the tables first.", vec![call("c0", "get_schema", "{}")]),
            // A call written as text is still read.
            1 => reply("Thought: count them.\nAction: execute('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')", vec![]),
            _ => reply(
                "",
                vec![call(
                    "c2",
                    "submit_sql",
                    r#"{"sql": "SELECT COUNT(*) FROM observatories WHERE airtempc > 20"}"#,
                )],
            ),
        }
        }),
        reject_tools: false,
        requests: std::sync::Mutex::new(Vec::new()),
    });
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    assert!(agent.uses_native_tools());
    let result = agent.run(&mut env).unwrap();
    assert!(
        result.trajectory.outcome.phase1_passed,
        "{:?}",
        result.trajectory.outcome
    );
    let kinds: Vec<ParseKind> = result.turns.iter().map(|t| t.parse).collect();
    assert_eq!(
        kinds,
        [
            ParseKind::NativeToolCall,
            ParseKind::ActionLine,
            ParseKind::NativeToolCall
        ]
    );
    assert_eq!(result.turns[0].tool_call.as_ref().unwrap().id, "c0");
    assert_eq!(
        result.trajectory.steps[0].thought.as_deref(),
        Some("the tables first.")
    );
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests[0].tools.len(), 9, "the nine actions are declared");
    assert!(requests[0].messages[0]
        .content
        .contains("call exactly one tool"));
    // Turn 2 sees the first call and its result as a tool exchange.
    let second = &requests[1].messages;
    assert_eq!(second[2].role, Role::Assistant);
    assert_eq!(second[2].tool_calls[0].name, "get_schema");
    assert_eq!(second[3].role, Role::Tool);
    assert_eq!(second[3].tool_call_id.as_deref(), Some("c0"));
    assert!(second[3].content.contains("CREATE TABLE"));
    // Turn 3: the text-protocol reply came back as a plain exchange.
    let third = &requests[2].messages;
    assert!(third[4].tool_calls.is_empty());
    assert_eq!(third[5].role, Role::User);
}

#[test]
fn a_server_that_rejects_tools_switches_the_agent_to_text() {
    let (_dir, set) = custom_tasks(&[
        warm_task("alien_9202", false),
        warm_task("alien_9203", false),
    ]);
    let model = std::sync::Arc::new(ToolModel {
        respond: Box::new(|_, _| {
            reply(
                "Thought: done.\nAction: submit('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')",
                vec![],
            )
        }),
        reject_tools: true,
        requests: std::sync::Mutex::new(Vec::new()),
    });
    let agent = ReactAgent::new(model.clone(), AgentConfig::default());
    let mut env = environment(&set, "alien_9202", silent(), EnvConfig::default());
    let result = agent.run(&mut env).unwrap();
    assert!(result.trajectory.outcome.phase1_passed);
    assert_eq!(
        result.agent_usage.calls, 1,
        "the rejected call is not a turn"
    );
    assert!(!agent.uses_native_tools());
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].tools.is_empty());
    assert!(requests[1].messages[0]
        .content
        .contains("Action: <tool>(<arguments>)"));
    // The next episode starts in text form right away.
    let mut env = environment(&set, "alien_9203", silent(), EnvConfig::default());
    agent.run(&mut env).unwrap();
    assert_eq!(model.requests.lock().unwrap().len(), 3);
    // Text mode by configuration never declares tools, even to a backend that has them.
    let text_only = ReactAgent::new(
        model.clone(),
        AgentConfig {
            tool_calls: ToolCallMode::Text,
            ..AgentConfig::default()
        },
    );
    assert!(!text_only.uses_native_tools());
}

fn vanilla() -> AgentConfig {
    AgentConfig {
        style: merit_interact::AgentStyle::Vanilla,
        ..AgentConfig::default()
    }
}

#[test]
fn the_vanilla_baseline_answers_each_phase_once_from_the_schema() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9120", true)]);
    let mut env = environment(&set, "alien_9120", simulator(), EnvConfig::default());
    let replies = vec![
        "Here it is:\n```sql\nSELECT COUNT(*) FROM observatories WHERE airtempc > 20;\n```"
            .to_string(),
        "```sql\nSELECT COUNT(*) FROM observatories WHERE airtempc > 20 AND weathprofile = 'Clear'\n```"
            .to_string(),
    ];
    let model = ScriptedModel::replies("vanilla", replies);
    let result = ReactAgent::new(model.clone(), vanilla())
        .run(&mut env)
        .unwrap();
    let outcome = result.trajectory.outcome;
    assert!(
        outcome.phase1_passed && outcome.phase2_passed,
        "{outcome:?}"
    );
    assert_eq!(result.stop, AgentStop::EpisodeEnded);
    assert_eq!(result.turns.len(), 2);
    // Only submissions: no question, no exploration.
    assert!(result
        .trajectory
        .steps
        .iter()
        .all(|step| step.action.name == "submit" && step.action.target == Target::User));
    let seen = model.seen();
    assert!(seen.iter().all(|r| r.prompt_version.ends_with("/vanilla")));
    let first = request_text(&seen[0]);
    assert!(first.contains("How many observatories have warm weather?"));
    assert!(
        first.contains("observatories") && first.contains("airtempc"),
        "{first}"
    );
    assert!(!first.contains("Action"), "{first}");
    // The follow-up continues the conversation.
    let second = request_text(&seen[1]);
    assert!(
        second.contains("And how many of those are clear?"),
        "{second}"
    );
    assert_eq!(seen[1].messages.len(), 4);
}

#[test]
fn the_vanilla_baseline_submits_a_write_answer_whole() {
    let mut record = warm_task("alien_M_9123", false);
    record["category"] = serde_json::json!("Management");
    record["sol_sql"] = serde_json::json!(["DELETE FROM observatories WHERE airtempc > 20"]);
    let (_dir, set) = custom_tasks(&[record]);
    let mut env = environment(&set, "alien_M_9123", simulator(), EnvConfig::default());
    let statement = "UPDATE observatories SET airtempc = (SELECT MAX(airtempc) FROM observatories);\nDELETE FROM observatories WHERE airtempc > 20;";
    let model = ScriptedModel::replies("vanilla", vec![format!("```sql\n{statement}\n```")]);
    let result = ReactAgent::new(model, vanilla()).run(&mut env).unwrap();
    let submitted = &result.trajectory.steps[0].action;
    assert!(submitted.is_submit());
    // Not the sub-query a query extractor would find in it.
    assert_eq!(submitted.args, [statement]);
    assert_eq!(result.agent_usage.unreadable_replies, 0);
}

#[test]
fn the_vanilla_baseline_stops_after_one_failed_answer() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9121", true)]);
    let mut env = environment(&set, "alien_9121", simulator(), EnvConfig::default());
    let model = ScriptedModel::replies(
        "vanilla",
        vec!["I would count the observatories.".to_string()],
    );
    let result = ReactAgent::new(model.clone(), vanilla())
        .run(&mut env)
        .unwrap();
    assert_eq!(result.stop, AgentStop::Answered);
    assert_eq!(model.seen().len(), 1);
    assert_eq!(result.agent_usage.unreadable_replies, 1);
    assert!(!result.trajectory.outcome.phase1_passed);
    assert_eq!(result.trajectory.steps.len(), 1);
}

#[test]
fn a_sampled_agent_sends_its_temperature_and_seed_with_every_call() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9122", false)]);
    let mut env = environment(&set, "alien_9122", simulator(), EnvConfig::default());
    let model = ScriptedModel::replies(
        "sampled",
        vec![
            "Action: get_schema()".to_string(),
            "Action: submit('SELECT COUNT(*) FROM observatories WHERE airtempc > 20')".to_string(),
        ],
    );
    let config = AgentConfig {
        temperature: 0.7,
        sample_seed: 3,
        ..AgentConfig::default()
    };
    ReactAgent::new(model.clone(), config)
        .run(&mut env)
        .unwrap();
    let seen = model.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen
        .iter()
        .all(|r| r.decoding.temperature == 0.7 && r.decoding.seed == 3));
    // The default stays greedy.
    let mut env = environment(&set, "alien_9122", simulator(), EnvConfig::default());
    let model = ScriptedModel::replies("greedy", vec!["Action: get_schema()".to_string()]);
    let config = AgentConfig {
        max_turns: 1,
        ..AgentConfig::default()
    };
    ReactAgent::new(model.clone(), config)
        .run(&mut env)
        .unwrap();
    assert_eq!(model.seen()[0].decoding.temperature, 0.0);
}

#[test]
fn the_repeat_guard_asks_again_instead_of_taking_a_repeat() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9111", false)]);
    let solve = "Action: submit(\"SELECT COUNT(*) FROM observatories WHERE airtempc > 20\")";
    let look = "Thought: the tables.\nAction: get_schema()";
    let run = |repeat_guard: bool| {
        let mut env = environment(
            &set,
            "alien_9111",
            ScriptedSimulator::default(),
            EnvConfig::default(),
        );
        // Reads the schema, then again, then (asked again or not) submits the solution.
        let model = ScriptedModel::replies(
            "repeater",
            vec![look.to_string(), look.to_string(), solve.to_string()],
        );
        let agent = ReactAgent::new(
            model.clone(),
            AgentConfig {
                repeat_guard,
                ..AgentConfig::default()
            },
        );
        let result = agent.run(&mut env).unwrap();
        (result, model.seen())
    };

    let (guarded, seen) = run(true);
    assert!(guarded.trajectory.outcome.phase1_passed);
    // The repeat was never taken: two steps, the schema read once, budget charged for two.
    let names: Vec<&str> = guarded
        .trajectory
        .steps
        .iter()
        .map(|s| s.action.name.as_str())
        .collect();
    assert_eq!(names, ["get_schema", "submit"]);
    assert_eq!(guarded.agent_usage.calls, 3, "the re-ask is a model call");
    assert_eq!(guarded.turns.len(), 2, "one turn per step");
    assert_eq!(guarded.turns[1].guarded_repeat.as_deref(), Some(look));
    assert_eq!(guarded.turns[1].reply, solve);
    assert!(guarded.turns[0].guarded_repeat.is_none());
    // The re-ask ends with the repeat and the note naming the turn it repeats.
    let asked_again = &seen[2].messages;
    assert!(asked_again[asked_again.len() - 2]
        .content
        .contains("get_schema()"));
    let note = &asked_again.last().unwrap().content;
    assert!(
        note.starts_with("(Not taken: you already took exactly this action at turn 1"),
        "{note}"
    );
    assert!(note.contains("CREATE TABLE"), "the earlier result: {note}");
    assert!(!note.contains("[Budget"), "{note}");
    // Neither the repeat nor the note stays in the conversation.
    let after = guarded.trajectory.steps.len();
    assert_eq!(after, 2);

    // Without the guard the repeat is taken and charged.
    let (plain, _) = run(false);
    let names: Vec<&str> = plain
        .trajectory
        .steps
        .iter()
        .map(|s| s.action.name.as_str())
        .collect();
    assert_eq!(names, ["get_schema", "get_schema", "submit"]);
    assert!(plain.turns.iter().all(|t| t.guarded_repeat.is_none()));
    let spent = |r: &merit_interact::EpisodeResult| r.trajectory.steps.last().unwrap().budget_left;
    assert!(spent(&plain) < spent(&guarded));
}

#[test]
fn a_second_repeat_is_taken_as_it_comes() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9112", false)]);
    let mut env = environment(
        &set,
        "alien_9112",
        ScriptedSimulator::default(),
        EnvConfig::default(),
    );
    let look = "Action: get_schema()".to_string();
    let model = ScriptedModel::replies("stubborn", vec![look]);
    let agent = ReactAgent::new(
        model.clone(),
        AgentConfig {
            max_turns: 3,
            repeat_guard: true,
            ..AgentConfig::default()
        },
    );
    let result = agent.run(&mut env).unwrap();
    // Turn 1 reads the schema; turns 2 and 3 each repeat, are asked again, repeat again, and
    // are taken: five calls, three steps.
    assert_eq!(result.trajectory.steps.len(), 3);
    assert_eq!(result.agent_usage.calls, 5);
    assert!(result.turns[1].guarded_repeat.is_some());
    // The later turns' prompts hold no note: what was asked again is not kept.
    let seen = model.seen();
    assert!(!request_text(&seen[3]).contains("Not taken"));
}

#[test]
fn the_repeat_guard_can_sample_its_second_call() {
    let (_dir, set) = custom_tasks(&[warm_task("alien_9112", false)]);
    let solve = "Action: submit(\"SELECT COUNT(*) FROM observatories WHERE airtempc > 20\")";
    let look = "Thought: the tables.\nAction: get_schema()";
    let run = |temperature: f32| {
        let mut env = environment(
            &set,
            "alien_9112",
            ScriptedSimulator::default(),
            EnvConfig::default(),
        );
        // Greedy, it reads the schema again and again; sampled, it moves on to the answer.
        let model = ScriptedModel::new("stubborn", move |request, _| {
            Ok(if request.decoding.temperature > 0.0 {
                solve.to_string()
            } else {
                look.to_string()
            })
        });
        let agent = ReactAgent::new(
            model.clone(),
            AgentConfig {
                repeat_guard: true,
                repeat_guard_temperature: temperature,
                sample_seed: 7,
                ..AgentConfig::default()
            },
        );
        (agent.run(&mut env).unwrap(), model.seen())
    };
    let (sampled, seen) = run(0.7);
    assert!(sampled.trajectory.outcome.phase1_passed);
    assert_eq!(sampled.turns[1].guarded_repeat.as_deref(), Some(look));
    // Only the re-ask was sampled, with the run's seed.
    let temperatures: Vec<f32> = seen.iter().map(|r| r.decoding.temperature).collect();
    assert_eq!(temperatures, [0.0, 0.0, 0.7]);
    assert_eq!(seen[2].decoding.seed, 7);
    // Greedy (the default), the re-ask repeats and the repeat is taken.
    let (greedy, seen) = run(0.0);
    assert!(!greedy.trajectory.outcome.phase1_passed);
    assert!(seen.iter().all(|r| r.decoding.temperature == 0.0));
    assert!(greedy.turns.iter().any(|t| t.guarded_repeat.is_some()));
}
