//! The episode's logic with a scripted model, a table oracle and a recording memory.

use super::*;
use crate::hints::HintKinds;
use merit_core::model::ChatReply;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const GOLD: &str = "SELECT secret_gold FROM hidden";

/// Replies in order; records every prompt it saw.
struct ScriptedModel {
    replies: Mutex<Vec<String>>,
    prompts: Mutex<Vec<String>>,
    grammars: Mutex<Vec<Option<String>>>,
}

impl ScriptedModel {
    fn new(replies: &[&str]) -> Self {
        ScriptedModel {
            replies: Mutex::new(replies.iter().rev().map(|r| r.to_string()).collect()),
            prompts: Mutex::new(Vec::new()),
            grammars: Mutex::new(Vec::new()),
        }
    }

    fn prompts(&self) -> Vec<String> {
        self.prompts.lock().unwrap().clone()
    }
}

impl ChatModel for ScriptedModel {
    fn id(&self) -> String {
        "scripted".into()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        // One user message and no system prompt; the repeat guard's follow-up adds the
        // model's reply and one more user turn.
        assert!(
            matches!(request.messages.len(), 1 | 3),
            "one user message, no system prompt"
        );
        assert_eq!(request.decoding.temperature, 0.0);
        let prompt = request.messages[request.messages.len() - 1].content.clone();
        self.prompts.lock().unwrap().push(prompt.clone());
        self.grammars
            .lock()
            .unwrap()
            .push(request.decoding.grammar.clone());
        let text = self
            .replies
            .lock()
            .unwrap()
            .pop()
            .ok_or_else(|| ModelError::Unavailable("script exhausted".into()))?;
        if let Some(why) = text.strip_prefix("INVALID:") {
            return Err(ModelError::InvalidRequest(why.to_string()));
        }
        Ok(ChatReply {
            text,
            prompt_tokens: prompt.len() as u32 / 4,
            completion_tokens: 10,
            latency: Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// Judges by exact SQL text; everything else is a mismatch. Holds the "gold" only as a value
/// the prompts must never contain.
struct TableJudge {
    verdicts: HashMap<String, Feedback>,
}

impl TableJudge {
    fn new(entries: &[(&str, Status, Option<&str>)]) -> Self {
        TableJudge {
            verdicts: entries
                .iter()
                .map(|(sql, status, error)| {
                    (
                        sql.to_string(),
                        Feedback {
                            status: *status,
                            error: error.map(str::to_string),
                        },
                    )
                })
                .collect(),
        }
    }
}

impl Judge for TableJudge {
    fn judge(&self, _question_id: &str, sql: &str) -> Result<Feedback, JudgeError> {
        if sql == GOLD {
            return Ok(Feedback::correct());
        }
        Ok(self.verdicts.get(sql).cloned().unwrap_or(Feedback {
            status: Status::DenotationMismatch,
            error: None,
        }))
    }
}

struct StatusClassifier;

impl FailureClassifier for StatusClassifier {
    fn classify(&self, status: Status, error: Option<&str>) -> Classification {
        let failure_type = match (status, error) {
            (Status::ExecutionError, Some(e)) if e.contains("no such column") => {
                FailureType::SchemaLinking
            }
            (Status::DenotationMismatch, _) => FailureType::ResultMismatch,
            _ => FailureType::Unknown,
        };
        Classification {
            failure_type,
            rule: "test-status",
        }
    }
}

/// Records calls; serves fixed precedents; checks that finalize comes last and only once.
#[derive(Default)]
struct RecordingMemory {
    precedents: Vec<Precedent>,
    retrievals: RefCell<Vec<(usize, String, String)>>,
    finalized: Vec<(usize, usize, bool)>,
}

impl RepairMemory for RecordingMemory {
    fn retrieve(
        &self,
        request: &RetrievalRequest<'_>,
    ) -> Result<Vec<Precedent>, RepairMemoryError> {
        self.retrievals.borrow_mut().push((
            request.position,
            request.current_sql.to_string(),
            request.failure_type.to_string(),
        ));
        Ok(self.precedents.clone())
    }

    fn finalize(
        &mut self,
        episode: &EndedEpisode<'_>,
    ) -> Result<Option<String>, RepairMemoryError> {
        self.finalized
            .push((episode.position, episode.attempts.len(), episode.solved));
        Ok(Some(format!("m{}", episode.position)))
    }
}

fn settings(reflect: bool) -> EpisodeSettings {
    EpisodeSettings {
        benchmark: Benchmark::Spider,
        dialect: "SQLite".into(),
        max_revisions: 7,
        decoding: Decoding::default(),
        reflect,
        method: if reflect { "reflexion" } else { "merit" }.into(),
        seed: 0,
        aids: Default::default(),
    }
}

fn question() -> QuestionView {
    QuestionView {
        id: "dev-7".into(),
        db_id: "concert_singer".into(),
        question: "How many singers are there?".into(),
        evidence: String::new(),
    }
}

const SCHEMA: &str = "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT);";

fn run(
    model: &ScriptedModel,
    judge: &TableJudge,
    memory: &mut RecordingMemory,
    reflect: bool,
    initial: &str,
) -> EpisodeRecord {
    let deps = EpisodeDeps {
        model,
        judge,
        classifier: &StatusClassifier,
        database_aids: None,
    };
    run_episode(
        &settings(reflect),
        &deps,
        memory,
        &question(),
        SCHEMA,
        initial,
        4,
    )
    .unwrap()
}

#[test]
fn an_initially_correct_question_calls_no_model_and_writes_no_memory() {
    let model = ScriptedModel::new(&[]);
    let judge = TableJudge::new(&[]);
    let mut memory = RecordingMemory::default();
    let record = run(&model, &judge, &mut memory, false, GOLD);
    assert!(record.initially_correct());
    assert_eq!(record.attempts.len(), 1);
    assert!(model.prompts().is_empty());
    assert!(memory.finalized.is_empty());
    assert_eq!(record.memory_written, None);
}

#[test]
fn a_repaired_episode_stops_at_the_first_correct_revision_and_finalizes_once() {
    let model = ScriptedModel::new(&[
        "```sql\nSELECT count(*) FROM singers\n```",
        &format!("Here you go:\n```sql\n{GOLD};\n```\nThis counts rows."),
        "never used",
    ]);
    let judge = TableJudge::new(&[(
        "SELECT count(*) FROM singers",
        Status::ExecutionError,
        Some("no such table: singers"),
    )]);
    let mut memory = RecordingMemory::default();
    let record = run(
        &model,
        &judge,
        &mut memory,
        false,
        "SELECT name FROM singer",
    );
    assert_eq!(record.attempts.len(), 3);
    assert!(record.repaired());
    assert_eq!(memory.finalized, vec![(4, 3, true)]);
    assert_eq!(record.memory_written.as_deref(), Some("m4"));
    // Retrieval happened before each revision, at the episode's own position, with the type
    // of the attempt being repaired.
    let retrievals = memory.retrievals.borrow();
    assert_eq!(retrievals.len(), 2);
    assert_eq!(
        retrievals[0],
        (
            4,
            "SELECT name FROM singer".into(),
            "Result Mismatch".into()
        )
    );
    assert_eq!(retrievals[1].2, "Unknown");
    assert_eq!(record.attempts[1].calls, 1);
    assert_eq!(
        record.attempts[0].failure_type,
        Some(FailureType::ResultMismatch)
    );
}

#[test]
fn the_budget_k_is_respected_and_an_unsolved_episode_finalizes_as_failed() {
    let replies: Vec<String> = (0..10).map(|i| format!("SELECT {i} FROM singer")).collect();
    let refs: Vec<&str> = replies.iter().map(String::as_str).collect();
    let model = ScriptedModel::new(&refs);
    let judge = TableJudge::new(&[]);
    let mut memory = RecordingMemory::default();
    let record = run(
        &model,
        &judge,
        &mut memory,
        false,
        "SELECT name FROM singer",
    );
    assert_eq!(record.repair_steps(), 7);
    assert!(!record.finally_correct());
    assert_eq!(memory.finalized, vec![(4, 8, false)]);
    assert_eq!(model.prompts().len(), 7);
    assert_eq!(
        record.attempts.last().unwrap().failure_type,
        Some(FailureType::ResultMismatch)
    );
}

/// A positive and a negative precedent from another database.
fn two_precedents() -> Vec<Precedent> {
    vec![
        Precedent {
            id: "pos-1".into(),
            polarity: PrecedentPolarity::Positive,
            failure_type: FailureType::SchemaLinking,
            db_id: "pets_1".into(),
            question: "How many pets?".into(),
            failing_sql: "SELECT count(*) FROM pet".into(),
            status: "execution_error".into(),
            error: Some("no such table: pet".into()),
            delta: "FROM: removed pet; added pets".into(),
        },
        Precedent {
            id: "neg-1".into(),
            polarity: PrecedentPolarity::Negative,
            failure_type: FailureType::SchemaLinking,
            db_id: "pets_1".into(),
            question: "Oldest pet?".into(),
            failing_sql: "SELECT max(ag) FROM pets".into(),
            status: "execution_error".into(),
            error: Some("no such column: ag".into()),
            delta: "SELECT: removed max(ag); added max(age_years)".into(),
        },
    ]
}

#[test]
fn prompts_show_feedback_history_and_precedents_but_never_the_gold() {
    let model = ScriptedModel::new(&["SELECT count(name) FROM singer", GOLD]);
    let judge = TableJudge::new(&[(
        "SELECT nme FROM singer",
        Status::ExecutionError,
        Some("no such column: nme"),
    )]);
    let mut memory = RecordingMemory {
        precedents: two_precedents(),
        ..RecordingMemory::default()
    };
    run(&model, &judge, &mut memory, false, "SELECT nme FROM singer");
    let prompts = model.prompts();
    let first = &prompts[0];
    assert!(first.contains("How many singers are there?"));
    assert!(first.contains(SCHEMA));
    assert!(first.contains("no such column: nme"));
    assert!(first.contains("predicted failure type: schema_linking"));
    let positive = first.find("[pos-1]").unwrap();
    let negative = first.find("[neg-1]").unwrap();
    let positive_header = first
        .find("CONFIRMED SUCCESSFUL REPAIR DIRECTIONS")
        .unwrap();
    let negative_header = first.find("OBSERVED FAILED DIRECTIONS").unwrap();
    assert!(positive_header < positive && positive < negative_header && negative_header < negative);
    assert!(first.contains("LOCAL REFLECTIONS FROM THIS EPISODE\n(none)"));
    // The second prompt carries the whole local history.
    assert!(prompts[1].contains("attempt 0: SELECT nme FROM singer"));
    assert!(prompts[1].contains("attempt 1: SELECT count(name) FROM singer"));
    for prompt in &prompts {
        assert!(!prompt.contains("secret_gold"), "gold leaked into a prompt");
        assert!(!prompt.contains("{{"), "unfilled template slot:\n{prompt}");
        assert!(
            !prompt.contains("EVIDENCE"),
            "Spider prompts have no evidence block"
        );
    }
}

#[test]
fn reflexion_adds_one_reflection_call_per_revision_and_carries_reflections_forward() {
    let model = ScriptedModel::new(&[
        "The query selects names instead of counting.",
        "SELECT count(name) FROM singer",
        "Counting names still disagrees; maybe NULL names.",
        GOLD,
    ]);
    let judge = TableJudge::new(&[]);
    let mut memory = RecordingMemory::default();
    let record = run(&model, &judge, &mut memory, true, "SELECT name FROM singer");
    assert!(record.repaired());
    assert_eq!(record.attempts[1].calls, 2);
    assert_eq!(record.attempts[2].calls, 2);
    let prompts = model.prompts();
    assert_eq!(prompts.len(), 4);
    assert!(prompts[0].contains("Do not write SQL"));
    assert!(prompts[3].contains("1. The query selects names instead of counting."));
    assert!(prompts[3].contains("2. Counting names still disagrees"));
}

#[test]
fn a_reply_without_sql_is_a_failed_attempt_not_a_crash() {
    let model = ScriptedModel::new(&["I am not sure what you mean.", GOLD]);
    let judge = TableJudge::new(&[]);
    let mut memory = RecordingMemory::default();
    let record = run(
        &model,
        &judge,
        &mut memory,
        false,
        "SELECT name FROM singer",
    );
    assert_eq!(record.attempts[1].status, Status::ExecutionError);
    assert!(record.attempts[1]
        .error
        .as_deref()
        .unwrap()
        .contains("no SQL"));
    assert!(record.repaired());
    assert!(model.prompts()[1].contains("no SQL"));
}

#[test]
fn a_prompt_the_model_refuses_for_good_ends_the_repairs_not_the_run() {
    let model = ScriptedModel::new(&[
        "SELECT 1 FROM singer",
        "INVALID:the prompt is 4113 tokens but the context window holds 4096",
        "never used",
    ]);
    let judge = TableJudge::new(&[]);
    let mut memory = RecordingMemory::default();
    let record = run(
        &model,
        &judge,
        &mut memory,
        false,
        "SELECT name FROM singer",
    );
    // The initial attempt and the one revision that was generated; then the refusal.
    assert_eq!(record.attempts.len(), 2);
    assert!(!record.finally_correct());
    let why = record
        .stopped_early
        .as_deref()
        .expect("the reason is recorded");
    assert!(why.contains("context window"), "{why}");
    assert_eq!(memory.finalized, vec![(4, 2, false)]);
    assert_eq!(model.prompts().len(), 2);
}

#[test]
fn model_failures_stop_the_episode_with_a_clear_error() {
    let model = ScriptedModel::new(&[]);
    let judge = TableJudge::new(&[]);
    let deps = EpisodeDeps {
        model: &model,
        judge: &judge,
        classifier: &StatusClassifier,
        database_aids: None,
    };
    let mut memory = RecordingMemory::default();
    let error = run_episode(
        &settings(false),
        &deps,
        &mut memory,
        &question(),
        SCHEMA,
        "SELECT 1",
        0,
    )
    .unwrap_err();
    assert!(error.to_string().contains("dev-7"), "{error}");
    assert!(
        memory.finalized.is_empty(),
        "a failed episode must not reach memory"
    );
}

#[test]
fn episodes_are_deterministic() {
    let make = || {
        let model = ScriptedModel::new(&["SELECT 1 FROM singer", GOLD]);
        let judge = TableJudge::new(&[]);
        let mut memory = RecordingMemory::default();
        let record = run(
            &model,
            &judge,
            &mut memory,
            false,
            "SELECT name FROM singer",
        );
        (record, model.prompts())
    };
    assert_eq!(make(), make());
}

/// Counts the judge's calls around a [`TableJudge`].
struct CountingJudge {
    inner: TableJudge,
    calls: Mutex<Vec<String>>,
}

impl Judge for CountingJudge {
    fn judge(&self, question_id: &str, sql: &str) -> Result<Feedback, JudgeError> {
        self.calls.lock().unwrap().push(sql.to_string());
        self.inner.judge(question_id, sql)
    }
}

/// Hints that name the database and the error they were asked about.
struct EchoHints;

impl DatabaseAids for EchoHints {
    fn hints(
        &self,
        db_id: &str,
        _sql: &str,
        _status: Status,
        error: Option<&str>,
        kinds: HintKinds,
    ) -> Vec<String> {
        assert!(kinds.schema);
        vec![format!("hint for {db_id}: {}", error.unwrap_or("none"))]
    }

    fn sql_grammar(&self, db_id: &str, aliases: crate::grammar::AliasRule) -> Option<String> {
        Some(format!("root ::= \"{db_id} {aliases:?}\""))
    }
}

fn run_with(
    aids: RepairAids,
    max_revisions: u32,
    model: &ScriptedModel,
    judge: &CountingJudge,
    initial: &str,
) -> EpisodeRecord {
    let deps = EpisodeDeps {
        model,
        judge,
        classifier: &StatusClassifier,
        database_aids: Some(&EchoHints),
    };
    let settings = EpisodeSettings {
        max_revisions,
        aids,
        ..settings(false)
    };
    let mut memory = RecordingMemory::default();
    run_episode(
        &settings,
        &deps,
        &mut memory,
        &question(),
        SCHEMA,
        initial,
        0,
    )
    .unwrap()
}

fn counting(entries: &[(&str, Status, Option<&str>)]) -> CountingJudge {
    CountingJudge {
        inner: TableJudge::new(entries),
        calls: Mutex::new(Vec::new()),
    }
}

const GUARD: RepairAids = RepairAids {
    repeat_guard: true,
    hints: HintKinds {
        schema: false,
        values: false,
    },
    layout: RepairLayout::Paper,
    grammar: false,
    grammar_aliases: crate::grammar::AliasRule::Listed,
    precedents: PrecedentView::Full,
};

#[test]
fn the_repeat_guard_asks_again_in_the_same_step_and_judges_the_new_query() {
    let model = ScriptedModel::new(&["```sql\nselect  BAD from t;\n```", GOLD]);
    let judge = counting(&[]);
    let record = run_with(GUARD, 7, &model, &judge, "SELECT bad FROM t");
    assert!(record.repaired());
    assert_eq!(record.repair_steps(), 1, "the re-ask is part of step 1");
    let step = &record.attempts[1];
    assert_eq!(step.calls, 2);
    assert_eq!(step.aids.repeat_of, Some(0));
    assert!(!step.aids.not_rejudged);
    let prompts = model.prompts();
    assert_eq!(prompts.len(), 2);
    assert!(prompts[1].contains("same as attempt 0"), "{}", prompts[1]);
    // The repeated query was never sent to the oracle a second time.
    assert_eq!(
        *judge.calls.lock().unwrap(),
        vec!["SELECT bad FROM t", GOLD]
    );
}

#[test]
fn a_repeat_after_the_second_ask_keeps_the_earlier_verdict_without_judging() {
    let model = ScriptedModel::new(&["SELECT bad FROM t", "SELECT bad FROM t;"]);
    let judge = counting(&[(
        "SELECT bad FROM t",
        Status::ExecutionError,
        Some("no such column: bad"),
    )]);
    let record = run_with(GUARD, 1, &model, &judge, "SELECT bad FROM t");
    let step = &record.attempts[1];
    assert_eq!(step.aids.repeat_of, Some(0));
    assert!(step.aids.not_rejudged);
    assert_eq!(step.status, Status::ExecutionError);
    assert_eq!(step.error.as_deref(), Some("no such column: bad"));
    assert_eq!(
        judge.calls.lock().unwrap().len(),
        1,
        "only the initial query"
    );
}

#[test]
fn a_model_stuck_after_the_second_ask_ends_the_repairs_before_k() {
    let model = ScriptedModel::new(&["SELECT bad FROM t", "SELECT bad FROM t", "unused"]);
    let judge = counting(&[]);
    let record = run_with(GUARD, 7, &model, &judge, "SELECT bad FROM t");
    assert_eq!(record.repair_steps(), 1);
    assert_eq!(
        model.prompts().len(),
        2,
        "one step, two asks, then no more calls"
    );
    assert_eq!(
        record.stopped_early.as_deref(),
        Some("the repeat guard: the model repeated attempt 0 again after being told")
    );
    assert!(!record.finally_correct());
}

#[test]
fn without_the_guard_a_repeat_is_judged_like_any_attempt() {
    let model = ScriptedModel::new(&["SELECT bad FROM t"]);
    let judge = counting(&[]);
    let record = run_with(
        RepairAids::default(),
        1,
        &model,
        &judge,
        "SELECT bad FROM t",
    );
    assert_eq!(record.attempts[1].calls, 1);
    assert!(record.attempts[1].aids.is_empty());
    assert_eq!(judge.calls.lock().unwrap().len(), 2);
}

#[test]
fn hints_reach_the_prompt_and_the_log_of_the_attempt_they_describe() {
    let aids = RepairAids {
        hints: HintKinds {
            schema: true,
            values: false,
        },
        ..RepairAids::default()
    };
    let model = ScriptedModel::new(&[GOLD]);
    let judge = counting(&[(
        "SELECT nme FROM singer",
        Status::ExecutionError,
        Some("no such column: nme"),
    )]);
    let record = run_with(aids, 7, &model, &judge, "SELECT nme FROM singer");
    assert_eq!(
        record.attempts[0].aids.hints,
        vec!["hint for concert_singer: no such column: nme".to_string()]
    );
    let prompt = &model.prompts()[0];
    assert!(prompt.contains("FROM THE DATABASE\n- hint for concert_singer: no such column: nme\n"));
    assert!(prompt.contains("CURRENT SQL\nSELECT nme FROM singer"));
}

#[test]
fn the_paper_prompt_is_unchanged_when_no_aid_is_on() {
    let model = ScriptedModel::new(&[GOLD]);
    let judge = counting(&[]);
    let record = run_with(RepairAids::default(), 7, &model, &judge, "SELECT 1");
    assert!(record.attempts[0].aids.is_empty());
    let prompt = &model.prompts()[0];
    assert!(!prompt.contains("FROM THE DATABASE"));
    assert!(prompt.contains("predicted failure type: result_mismatch\n\nLOCAL ATTEMPT HISTORY"));
}

#[test]
fn the_fresh_layout_shows_feedback_but_not_the_failing_queries() {
    let aids = RepairAids {
        layout: RepairLayout::Fresh,
        hints: HintKinds {
            schema: true,
            values: false,
        },
        ..RepairAids::default()
    };
    let model = ScriptedModel::new(&["SELECT still_bad FROM singer", GOLD]);
    let judge = counting(&[(
        "SELECT nme FROM singer",
        Status::ExecutionError,
        Some("no such column: nme"),
    )]);
    let record = run_with(aids, 7, &model, &judge, "SELECT nme FROM singer");
    assert!(record.repaired());
    let prompts = model.prompts();
    assert!(!prompts[0].contains("SELECT nme"), "{}", prompts[0]);
    assert!(prompts[0].contains("attempt 0: status: execution_error (no such column: nme)"));
    assert!(prompts[1].contains("attempt 1: status:"), "{}", prompts[1]);
    assert!(!prompts[1].contains("still_bad"));
    assert!(!prompts.iter().any(|p| p.contains("{{")));
}

#[test]
fn the_grammar_aid_constrains_every_repair_call_of_the_episode() {
    let aids = RepairAids {
        grammar: true,
        ..GUARD
    };
    let model = ScriptedModel::new(&["SELECT bad FROM t", "SELECT other FROM t", GOLD]);
    let judge = counting(&[]);
    let record = run_with(aids, 7, &model, &judge, "SELECT bad FROM t");
    assert!(record.repaired());
    let grammars = model.grammars.lock().unwrap().clone();
    assert_eq!(
        grammars.len(),
        3,
        "the repair call, the repeat guard's re-ask, the next repair"
    );
    assert!(grammars
        .iter()
        .all(|g| g.as_deref() == Some("root ::= \"concert_singer Listed\"")));
    let plain = ScriptedModel::new(&[GOLD]);
    run_with(GUARD, 7, &plain, &counting(&[]), "SELECT bad FROM t");
    assert_eq!(*plain.grammars.lock().unwrap(), vec![None]);
    // The alias rule travels to the grammar, and into the label and the manifest.
    let free = RepairAids {
        grammar_aliases: crate::grammar::AliasRule::Free,
        ..aids
    };
    let model = ScriptedModel::new(&[GOLD]);
    run_with(free, 7, &model, &counting(&[]), "SELECT bad FROM t");
    assert_eq!(
        *model.grammars.lock().unwrap(),
        vec![Some("root ::= \"concert_singer Free\"".to_string())]
    );
    assert_eq!(free.label(), "paper+repeat-guard+grammar+free-aliases");
    let json = serde_json::to_value(free).unwrap();
    assert_eq!(json["grammar_aliases"], "free");
    assert!(serde_json::to_value(aids)
        .unwrap()
        .get("grammar_aliases")
        .is_none());
}

#[test]
fn the_change_view_shows_each_precedent_without_its_failing_query() {
    let judge = TableJudge::new(&[(
        "SELECT nme FROM singer",
        Status::ExecutionError,
        Some("no such column: nme"),
    )]);
    let prompt_with = |precedents: PrecedentView| {
        let model = ScriptedModel::new(&[GOLD]);
        let settings = EpisodeSettings {
            aids: RepairAids {
                layout: RepairLayout::Fresh,
                precedents,
                ..RepairAids::default()
            },
            ..settings(false)
        };
        let mut memory = RecordingMemory {
            precedents: two_precedents(),
            ..RecordingMemory::default()
        };
        let deps = EpisodeDeps {
            model: &model,
            judge: &judge,
            classifier: &StatusClassifier,
            database_aids: None,
        };
        let record = run_episode(
            &settings,
            &deps,
            &mut memory,
            &question(),
            SCHEMA,
            "SELECT nme FROM singer",
            0,
        )
        .unwrap();
        assert!(record.repaired());
        model.prompts().remove(0)
    };
    let full = prompt_with(PrecedentView::Full);
    let change = prompt_with(PrecedentView::Change);
    for prompt in [&full, &change] {
        for shown in [
            "[pos-1] failure type schema_linking, database pets_1",
            "earlier question: How many pets?",
            "change that made it correct: FROM: removed pet; added pets",
            "change that was tried and still failed: SELECT: removed max(ag); added max(age_years)",
            "feedback: execution_error (no such column: ag)",
        ] {
            assert!(prompt.contains(shown), "{shown} missing from\n{prompt}");
        }
    }
    assert!(full.contains("failing SQL: SELECT count(*) FROM pet"));
    assert!(full.contains("failing SQL: SELECT max(ag) FROM pets"));
    assert!(!change.contains("failing SQL"), "{change}");
    assert!(!change.contains("SELECT count(*) FROM pet"));
    assert!(!change.contains("{{"));
    let label = RepairAids {
        layout: RepairLayout::Fresh,
        precedents: PrecedentView::Change,
        ..RepairAids::default()
    }
    .label();
    assert_eq!(label, "fresh+change-precedents");
}

#[test]
fn the_paper_precedent_view_stays_out_of_the_manifest() {
    let paper = serde_json::to_value(RepairAids::default()).unwrap();
    assert!(paper.get("precedents").is_none(), "{paper}");
    // A manifest written before the option existed reads back as the paper's view.
    let old: RepairAids = serde_json::from_value(paper).unwrap();
    assert_eq!(old.precedents, PrecedentView::Full);
    let change = RepairAids {
        precedents: PrecedentView::Change,
        ..RepairAids::default()
    };
    let json = serde_json::to_value(change).unwrap();
    assert_eq!(json["precedents"], "change");
    assert_eq!(serde_json::from_value::<RepairAids>(json).unwrap(), change);
}
