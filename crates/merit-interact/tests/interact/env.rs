//! The environment on real mini-interact databases: costs, budget, forced submit, turn cap,
//! reset, phases and rewards.

use crate::common::{custom_tasks, environment, load_mini, silent};
use merit_interact::{
    sqlite_backend, ActionCall, EndReason, EnvConfig, ExecutePolicy, InteractBackend,
    InteractError, Phase, ScriptedSimulator, SimulatorContext, SimulatorError, Target,
    UserSimulator,
};
use serde_json::json;

fn remaining(note_source: &str) -> String {
    let start = note_source.rfind("[Budget: ").expect("budget note");
    let rest = &note_source[start + 9..];
    rest[..rest.find('/').unwrap()].to_string()
}

#[test]
fn every_action_costs_what_the_protocol_says() {
    let set = load_mini();
    let mut env = environment(
        &set,
        "alien_1",
        ScriptedSimulator::new(vec![("quality".into(), "I mean the SNQI.".into())]),
        EnvConfig::default(),
    );
    // 2 critical + 1 knowledge ambiguity at patience 6.
    assert_eq!(env.budget().total().display(), "18.0");
    assert!(env.opening().contains("alien_1"));
    assert!(env.opening().ends_with("[Budget: 18.0/18.0 left.]"));
    let steps: Vec<(ActionCall, &str)> = vec![
        (ActionCall::get_schema(), "17.0"),
        (ActionCall::get_all_column_meanings(), "16.0"),
        (
            ActionCall::get_column_meaning("Observatories", "AirTempC"),
            "15.5",
        ),
        (ActionCall::get_all_external_knowledge_names(), "15.0"),
        (
            ActionCall::get_knowledge_definition("Atmospheric Observability Index (AOI)"),
            "14.5",
        ),
        (ActionCall::get_all_knowledge_definitions(), "13.5"),
        (
            ActionCall::execute("SELECT COUNT(*) FROM observatories"),
            "12.5",
        ),
        (ActionCall::ask("What is signal quality?"), "10.5"),
        (
            ActionCall::new(Target::Environment, "frobnicate", vec![]),
            "10.3",
        ),
        (ActionCall::new(Target::Environment, "", vec![]), "10.1"),
        // Cost is keyed on the name: an ask sent to the environment costs 2.
        (
            ActionCall::new(Target::Environment, "ask", vec!["x".into()]),
            "8.1",
        ),
        (
            ActionCall::new(Target::User, "execute", vec!["SELECT 1".into()]),
            "7.1",
        ),
        (
            ActionCall::new(
                Target::Environment,
                "get_column_meaning",
                vec!["observatories".into()],
            ),
            "6.6",
        ),
    ];
    let mut observations = Vec::new();
    for (call, left) in steps {
        let result = env.step(call.clone()).unwrap();
        assert_eq!(remaining(&result.observation), left, "{call:?}");
        assert!(!result.done);
        observations.push(result.observation);
    }
    assert!(observations[0].starts_with("CREATE TABLE"));
    assert!(observations[1].contains("\"alien|observatories|airtempc\""));
    assert!(observations[2].contains("Temperature") || observations[2].contains("temperature"));
    assert!(
        !observations[3].contains("Signal-to-Noise Quality Indicator (SNQI)"),
        "deleted KB entry listed"
    );
    assert!(observations[3].contains("Atmospheric Observability Index (AOI)"));
    assert!(observations[4].contains("\"definition\""));
    assert!(
        !observations[4].contains("children_knowledge") && !observations[4].contains("\"type\"")
    );
    assert!(observations[6].starts_with("963\n"), "{}", observations[6]);
    assert!(observations[7].starts_with("I mean the SNQI."));
    assert!(observations[8].contains("Unknown environment action 'frobnicate'"));
    assert!(observations[10].contains("Unknown environment action 'ask'"));
    assert!(observations[11].contains("Unknown user action 'execute'"));
    assert!(observations[12].contains("exactly 2 arguments"));
    let trajectory = env.trajectory();
    assert_eq!(trajectory.steps.len(), 13);
    assert_eq!(trajectory.steps[7].cost, 2.0);
    assert_eq!(trajectory.outcome.turns, 13);
    assert!((trajectory.outcome.budget_spent - 11.4).abs() < 1e-9);
}

fn one_task(record: serde_json::Value) -> (tempfile::TempDir, merit_interact::TaskSet) {
    custom_tasks(&[record])
}

fn query_task(id: &str, gold: &str, follow_up: Option<serde_json::Value>) -> serde_json::Value {
    let mut record = json!({
        "instance_id": id, "selected_database": "alien",
        "amb_user_query": "How many observatories have clear weather?",
        "sol_sql": [gold], "test_cases": [], "category": "Query",
        "conditions": {"decimal": 2, "distinct": false, "order": false},
        "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
        "knowledge_ambiguity": []
    });
    if let Some(follow_up) = follow_up {
        record["follow_up"] = follow_up;
    }
    record
}

/// A phase-2 request for the alien tasks: count the cloudy observatories.
fn cloudy_follow_up() -> serde_json::Value {
    json!({
        "query": "Now count the cloudy ones.",
        "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE weathprofile = 'Cloudy'"],
        "category": "Query", "conditions": {"order": false}
    })
}

const CLEAR_COUNT: &str = "SELECT COUNT(*) FROM observatories WHERE weathprofile = 'Clear'";

/// The forced-submit fallback submits `newest_clean_query`: a query that failed must not
/// replace it, and phase 2 must not inherit phase 1's (it answers another request).
#[test]
fn the_newest_clean_query_skips_failures_and_starts_again_in_phase_2() {
    let (_dir, set) = one_task(query_task(
        "alien_902",
        CLEAR_COUNT,
        Some(cloudy_follow_up()),
    ));
    let mut env = environment(&set, "alien_902", silent(), EnvConfig::default());
    assert_eq!(env.newest_clean_query(), None);
    env.step(ActionCall::execute("SELECT COUNT(*) FROM observatories"))
        .unwrap();
    env.step(ActionCall::execute("SELECT nothing FROM nowhere"))
        .unwrap();
    assert_eq!(
        env.newest_clean_query(),
        Some("SELECT COUNT(*) FROM observatories")
    );
    env.step(ActionCall::submit(CLEAR_COUNT)).unwrap();
    assert_eq!(env.phase(), Phase::Two);
    assert_eq!(env.newest_clean_query(), None);
    env.step(ActionCall::execute("SELECT 2")).unwrap();
    assert_eq!(env.newest_clean_query(), Some("SELECT 2"));
}

#[test]
fn judging_a_query_for_analysis_leaves_the_episode_as_it_was() {
    let (_dir, set) = one_task(query_task("alien_901", CLEAR_COUNT, None));
    let mut env = environment(&set, "alien_901", silent(), EnvConfig::default());
    env.step(ActionCall::execute("SELECT 1")).unwrap();
    let before = (*env.budget(), env.phase(), env.outcome());
    assert!(env.would_pass_phase1(CLEAR_COUNT).unwrap());
    assert!(!env
        .would_pass_phase1("SELECT COUNT(*) FROM observatories")
        .unwrap());
    assert!(!env.would_pass_phase1("SELEC nonsense").unwrap());
    // Nothing charged, no turn, no verdict: the episode goes on as if nothing was judged.
    assert_eq!((*env.budget(), env.phase(), env.outcome()), before);
    assert!(!env.is_done());
    let submitted = env.step(ActionCall::submit(CLEAR_COUNT)).unwrap();
    assert!(submitted.observation.contains("phase 1 is solved"));
}

#[test]
fn a_charge_to_zero_forces_a_submit_and_anything_else_ends_the_task() {
    let (_dir, set) = one_task(query_task("alien_900", CLEAR_COUNT, None));
    let config = EnvConfig {
        patience: 0,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_900", silent(), config);
    assert_eq!(env.budget().total().display(), "6.0");
    env.step(ActionCall::submit("SELECT 1")).unwrap(); // 3.0 left, wrong
    env.step(ActionCall::ask("hm?")).unwrap(); // 1.0 left
    let last = env.step(ActionCall::execute("SELECT 1")).unwrap(); // 0.0: flag set
    assert!(last.observation.contains("next action must be a submit"));
    assert!(env.budget().force_submit());
    let refused = env.step(ActionCall::get_schema()).unwrap();
    assert!(refused.done);
    assert_eq!(refused.cost.0, 0, "no charge for the refused action");
    let outcome = env.outcome();
    assert_eq!(outcome.end, EndReason::SubmitRefused);
    assert_eq!(outcome.reward, 0.0);
    assert!(matches!(
        env.step(ActionCall::submit(CLEAR_COUNT)),
        Err(InteractError::EpisodeOver { .. })
    ));
}

#[test]
fn an_empty_action_that_empties_the_budget_also_forces_a_submit() {
    // Upstream's empty-action path never sets the flag (protocol §11.3); here it does.
    let (_dir, set) = one_task(query_task("alien_900", CLEAR_COUNT, None));
    let mut env = environment(
        &set,
        "alien_900",
        silent(),
        EnvConfig {
            patience: 0,
            ..EnvConfig::default()
        },
    );
    for _ in 0..5 {
        env.step(ActionCall::execute("SELECT 1")).unwrap();
    }
    for _ in 0..4 {
        env.step(ActionCall::new(Target::User, "", vec![])).unwrap();
    }
    let last = env.step(ActionCall::new(Target::User, "", vec![])).unwrap();
    assert_eq!(remaining(&last.observation), "0.0");
    assert!(env.budget().force_submit());
}

#[test]
fn a_submit_under_the_flag_ends_the_task_whatever_the_verdict() {
    // Passing: phase 1 earns 0.7 and the follow-up never starts.
    let follow_up =
        json!({"query": "And cloudy ones?", "sol_sql": ["SELECT 1"], "category": "Query"});
    let (_dir, set) = one_task(query_task("alien_900", CLEAR_COUNT, Some(follow_up)));
    let config = EnvConfig {
        patience: 0,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_900", silent(), config.clone());
    env.step(ActionCall::ask("a")).unwrap(); // 4
    env.step(ActionCall::execute("SELECT 1")).unwrap(); // 3
    let result = env.step(ActionCall::submit(CLEAR_COUNT)).unwrap(); // 0: depleting submit
    assert!(result.done, "{}", result.observation);
    assert!(result.observation.contains("phase 1 is solved"));
    assert!(
        !result.observation.contains("cloudy"),
        "no phase 2 under the flag"
    );
    let outcome = env.outcome();
    assert_eq!(outcome.end, EndReason::BudgetExhausted);
    assert!(outcome.phase1_passed && !outcome.phase2_passed);
    assert_eq!(outcome.reward, 0.7);

    // Failing: also ends.
    let mut env = environment(&set, "alien_900", silent(), config);
    env.step(ActionCall::ask("a")).unwrap();
    env.step(ActionCall::execute("SELECT 1")).unwrap();
    let result = env.step(ActionCall::submit("SELECT 2")).unwrap();
    assert!(result.done);
    assert!(result.observation.contains("not correct"));
    assert_eq!(env.outcome().reward, 0.0);
    assert!(result
        .observation
        .contains("[Task finished. Total reward: 0]"));
}

#[test]
fn the_turn_cap_ends_the_task_unfinished() {
    let (_dir, set) = one_task(query_task("alien_900", CLEAR_COUNT, None));
    let config = EnvConfig {
        max_turns: 3,
        patience: 14,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_900", silent(), config);
    assert!(!env.step(ActionCall::get_schema()).unwrap().done);
    assert!(!env.step(ActionCall::get_schema()).unwrap().done);
    let last = env.step(ActionCall::get_schema()).unwrap();
    assert!(last.done);
    assert_eq!(env.outcome().end, EndReason::TurnLimit);
    assert!(matches!(
        env.step(ActionCall::get_schema()),
        Err(InteractError::EpisodeOver { .. })
    ));
}

/// Records what the simulator was allowed to see.
#[derive(Default)]
struct Recorder {
    seen: Vec<(Phase, bool, String, usize)>,
}

impl UserSimulator for Recorder {
    fn reply(
        &mut self,
        _q: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        self.seen.push((
            context.phase(),
            context.ambiguity().is_empty(),
            context.clear_query().to_string(),
            context.gold_sql().len(),
        ));
        Ok("Fine.".to_string())
    }
}

#[test]
fn passing_phase_1_reveals_the_follow_up_and_phase_2_earns_the_rest() {
    let mut record = query_task("alien_900", CLEAR_COUNT, Some(cloudy_follow_up()));
    record["query"] = json!("How many observatories report Clear weather?");
    record["user_query_ambiguity"]["critical_ambiguity"] = json!([{"term": "clear weather", "sql_snippet": "weathprofile = 'Clear'", "is_mask": false, "type": "schema_linking_ambiguity"}]);
    let (_dir, set) = one_task(record);
    let mut recorder = Recorder::default();
    {
        let mut env = environment(&set, "alien_900", &mut recorder, EnvConfig::default());
        assert_eq!(env.budget().total().display(), "14.0");
        assert!(env.follow_up_query().is_none());
        env.step(ActionCall::ask("which weather?")).unwrap();
        let first = env.step(ActionCall::submit(CLEAR_COUNT)).unwrap();
        assert!(!first.done);
        assert!(
            first.observation.contains("Now count the cloudy ones."),
            "{}",
            first.observation
        );
        assert_eq!(env.phase(), Phase::Two);
        env.step(ActionCall::ask("cloudy?")).unwrap();
        // A failed phase-2 submit keeps the phase-1 credit (protocol §11.1).
        let wrong = env.step(ActionCall::submit(CLEAR_COUNT)).unwrap();
        assert!(wrong
            .observation
            .contains("phase 2 submission is not correct"));
        assert_eq!(env.outcome().reward, 0.7);
        let done = env
            .step(ActionCall::submit(
                "SELECT count(*) FROM observatories WHERE weathprofile = 'Cloudy' -- mine\n",
            ))
            .unwrap();
        assert!(done.done, "{}", done.observation);
        let outcome = env.outcome();
        assert_eq!(outcome.end, EndReason::Solved);
        assert!((outcome.reward - 1.0).abs() < 1e-12);
    }
    assert_eq!(
        recorder.seen,
        vec![
            (
                Phase::One,
                false,
                "How many observatories report Clear weather?".to_string(),
                1
            ),
            (
                Phase::Two,
                true,
                "Now count the cloudy ones.".to_string(),
                1
            ),
        ]
    );
}

#[test]
fn a_query_with_a_placeholder_fails_instead_of_running_with_nulls() {
    // A model copies the `?` of a masked memory snippet into its own query; run with the
    // placeholder NULL it would answer 0 for any count, so the agent must see an error.
    let set = load_mini();
    let mut env = environment(&set, "alien_1", silent(), EnvConfig::default());
    let counted = env
        .step(ActionCall::execute(
            "SELECT COUNT(*) FROM observatories WHERE AirTempC > ?",
        ))
        .unwrap();
    assert!(
        counted
            .observation
            .starts_with("Error: Incorrect number of bindings supplied."),
        "{}",
        counted.observation
    );
}

#[test]
fn the_database_is_reset_before_every_execute() {
    let mut record = query_task("alien_M_900", CLEAR_COUNT, None);
    record["category"] = json!("Management");
    let (_dir, set) = one_task(record);
    // Management tasks execute on a writable fresh copy by default.
    let mut env = environment(&set, "alien_M_900", silent(), EnvConfig::default());
    let deleted = env
        .step(ActionCall::execute("DELETE FROM observatories"))
        .unwrap();
    assert!(
        deleted
            .observation
            .starts_with("The statement ran successfully"),
        "{}",
        deleted.observation
    );
    let count = env
        .step(ActionCall::execute("SELECT COUNT(*) FROM observatories"))
        .unwrap();
    assert!(
        count.observation.starts_with("963\n"),
        "{}",
        count.observation
    );
    // A writing statement that returns rows shows them, then is undone by the next reset.
    let returned = env
        .step(ActionCall::execute(
            "UPDATE observatories SET airtempc = 1 RETURNING airtempc",
        ))
        .unwrap();
    assert!(
        returned.observation.starts_with("1.0 | ") || returned.observation.starts_with("1.0\n1.0"),
        "{}",
        &returned.observation[..40]
    );
    let untouched = env
        .step(ActionCall::execute(
            "SELECT COUNT(*) FROM observatories WHERE airtempc = 1",
        ))
        .unwrap();
    assert!(
        untouched.observation.starts_with("0\n"),
        "{}",
        untouched.observation
    );

    // Query tasks execute read-only by default: writes are refused, and the template stays.
    let (_dir2, set) = one_task(query_task("alien_900", CLEAR_COUNT, None));
    let mut env = environment(&set, "alien_900", silent(), EnvConfig::default());
    let refused = env
        .step(ActionCall::execute("DELETE FROM observatories"))
        .unwrap();
    assert!(
        refused.observation.starts_with("Error: denied"),
        "{}",
        refused.observation
    );
    // ATTACH is refused even on the writable policy.
    let config = EnvConfig {
        execute_policy: ExecutePolicy::Writable,
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_900", silent(), config);
    let attach = env
        .step(ActionCall::execute("ATTACH DATABASE '/tmp/x.db' AS x"))
        .unwrap();
    assert!(
        attach.observation.starts_with("Error"),
        "{}",
        attach.observation
    );
    let vacuum = env
        .step(ActionCall::execute(
            "VACUUM INTO '/tmp/merit-interact-vacuum.db'",
        ))
        .unwrap();
    assert!(
        vacuum.observation.starts_with("Error: denied"),
        "{}",
        vacuum.observation
    );
    assert!(!std::path::Path::new("/tmp/merit-interact-vacuum.db").exists());
}

#[test]
fn the_shared_data_is_never_written() {
    let set = load_mini();
    let meta = set.database("alien").unwrap();
    let source = meta.sqlite_file().unwrap().to_path_buf();
    let before = std::fs::read(&source).unwrap();
    let mut backend = sqlite_backend(meta).unwrap();
    let limits = merit_sql::ExecLimits::with_timeout(std::time::Duration::from_secs(30));
    backend
        .run_writable(
            &[
                "DELETE FROM signals".to_string(),
                "DROP TABLE telescopes".to_string(),
            ],
            &limits,
        )
        .unwrap();
    let gone = backend.query_read_only("SELECT COUNT(*) FROM telescopes", &limits);
    assert!(gone.is_err());
    backend.reset().unwrap();
    let back = backend
        .query_read_only("SELECT COUNT(*) FROM signals", &limits)
        .unwrap();
    assert!(matches!(back.rows[0][0], merit_interact::Cell::Int(n) if n > 0));
    assert_eq!(std::fs::read(&source).unwrap(), before);
    // The failing statement of a list is reported by index.
    let failure = backend
        .run_writable(
            &[
                "SELECT 1".to_string(),
                "SELECT nope FROM nowhere".to_string(),
            ],
            &limits,
        )
        .unwrap_err();
    assert_eq!(failure.index, 1);
}

#[test]
fn missing_databases_are_reported_not_panicked_on() {
    let set = load_mini();
    let meta = set.database("cybermarket").unwrap();
    let error = sqlite_backend(meta).unwrap_err();
    assert!(
        matches!(error, InteractError::DatabaseUnavailable { .. }),
        "{error}"
    );
}

#[test]
fn submitting_without_ground_truth_is_an_error_and_costs_nothing() {
    let set = load_mini();
    let mut env = environment(&set, "alien_1", silent(), EnvConfig::default());
    let error = env.step(ActionCall::submit("SELECT 1")).unwrap_err();
    assert!(matches!(error, InteractError::NoGroundTruth { .. }));
    assert_eq!(env.budget().remaining(), env.budget().total());
}
