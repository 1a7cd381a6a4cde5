//! The rubric teacher judge and its annotation file, with a scripted chat model.

use crate::common::{request_text, ScriptedModel};
use merit_core::model::{ModelError, Role};
use merit_interact::memory::{TurnMemory, TurnState};
use merit_interact::prm::{
    annotate, memory_text, parse_rubric, read_annotations, scalar_utility, state_text,
    AnnotateError, AnnotationFile, AnnotationPair, JudgeConfig, Judged, Principle, RubricError,
    RubricJudge, ANNOTATION_FORMAT,
};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn state(request: &str) -> TurnState {
    TurnState {
        initial_request: request.to_string(),
        current_request: format!("{request}\nclarification: which year? -> 2019"),
        previous_action: Some("GET_SCHEMA".to_string()),
        previous_observation: Some("CREATE TABLE singer (name TEXT, age INT)".to_string()),
    }
}

fn memory(id: u64, polarity: &str) -> TurnMemory {
    serde_json::from_value(serde_json::json!({
        "format": "merit-interact-memory-turn-v1",
        "id": id,
        "instance_id": format!("task_{id}"),
        "database": "concert_singer",
        "stream_pos": id,
        "turn": 2,
        "state": {
            "initial_request": "How old are the singers?",
            "current_request": "How old are the singers?",
            "previous_action": "GET_SCHEMA",
            "previous_observation": "CREATE TABLE singer (name TEXT, age INT)"
        },
        "action_skeleton": "EXECUTE SQL: SELECT avg(age) FROM singer WHERE year = ?",
        "result": "Error: no such column: year",
        "polarity": polarity,
        "episode_reward": 0.5
    }))
    .unwrap()
}

/// A valid reply with `overall` as the overall utility and every other score 3.
fn rubric_reply(overall: &str) -> String {
    let mut principles = serde_json::Map::new();
    for principle in Principle::ALL {
        let score: serde_json::Value = if principle == Principle::OverallUtility {
            serde_json::from_str(overall).unwrap()
        } else {
            3.into()
        };
        principles.insert(
            principle.key().to_string(),
            serde_json::json!({"score": score, "reason": format!("Reason for {}.", principle.key())}),
        );
    }
    serde_json::json!({
        "principles": principles,
        "flags": {"recommend_injection": true, "use_as_warning_only": true},
        "feedback": {
            "one_sentence_summary": "The memory warns about a missing column in the same table.",
            "how_to_use": "Warn: check the schema for the year column before filtering on it."
        }
    })
    .to_string()
}

fn judge(model: Arc<ScriptedModel>) -> RubricJudge {
    RubricJudge::new(model, JudgeConfig::default())
}

#[test]
fn a_valid_reply_is_one_greedy_call() {
    let model = ScriptedModel::replies("teacher", vec![rubric_reply("4")]);
    let state = state("Average age of singers per year?");
    let memory = memory(7, "negative");
    let outcome = judge(model.clone()).judge(&state, &memory).unwrap();
    let rubric = outcome.rubric.unwrap();
    assert_eq!(rubric.score(Principle::OverallUtility), 4);
    assert_eq!(rubric.score(Principle::StateMatch), 3);
    assert!(rubric.flags.use_as_warning_only);
    assert_eq!(
        rubric.principles.state_match.reason,
        "Reason for state_match."
    );
    assert_eq!(outcome.calls, 1);
    assert_eq!((outcome.prompt_tokens, outcome.completion_tokens), (10, 5));
    let seen = model.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].prompt_version, "merit-interact-prm-v1/rubric");
    assert_eq!(seen[0].decoding.temperature, 0.0);
    let prompt = request_text(&seen[0]);
    assert!(prompt.contains(&state_text(&state)));
    assert!(prompt.contains(&memory_text(&memory)));
    assert!(prompt.contains("OUTCOME: NEGATIVE"));
    assert!(!prompt.contains("{{"));
    assert!((scalar_utility(&rubric) - 0.8).abs() < 1e-6);
}

#[test]
fn a_malformed_reply_is_corrected_once() {
    let model = ScriptedModel::replies(
        "teacher",
        vec![
            format!("Here is my grading: {}", rubric_reply("4")),
            rubric_reply("2"),
        ],
    );
    let outcome = judge(model.clone())
        .judge(&state("q"), &memory(1, "positive"))
        .unwrap();
    assert_eq!(outcome.rubric.unwrap().score(Principle::OverallUtility), 2);
    assert_eq!(outcome.calls, 2);
    let seen = model.seen();
    assert_eq!(seen[1].prompt_version, "merit-interact-prm-v1/rubric-retry");
    let messages = &seen[1].messages;
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1].role, Role::Assistant);
    assert!(messages[1].content.starts_with("Here is my grading"));
    assert!(
        messages[2]
            .content
            .contains("text before or after the JSON object"),
        "{}",
        messages[2].content
    );
    // Without the option no call carries a grammar; with it, the reply and the retry do.
    assert!(seen
        .iter()
        .all(|request| request.decoding.grammar.is_none()));
    let model = ScriptedModel::replies(
        "teacher",
        vec!["Here is my grading.".to_string(), rubric_reply("2")],
    );
    let config = JudgeConfig {
        grammar: true,
        ..JudgeConfig::default()
    };
    RubricJudge::new(model.clone(), config)
        .judge(&state("q"), &memory(1, "positive"))
        .unwrap();
    let seen = model.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(
            request.decoding.grammar.as_deref(),
            Some(merit_interact::prm::rubric::rubric_grammar().as_str())
        );
    }
}

#[test]
fn two_malformed_replies_are_a_recorded_failure() {
    let model = ScriptedModel::replies("teacher", vec!["I cannot grade this.".to_string()]);
    let outcome = judge(model.clone())
        .judge(&state("q"), &memory(1, "positive"))
        .unwrap();
    assert_eq!(outcome.calls, 2);
    assert!(outcome.rubric.unwrap_err().contains("no JSON object"));
    assert_eq!(model.seen().len(), 2);
}

#[test]
fn an_out_of_range_score_is_rejected_and_sent_back() {
    assert!(matches!(
        parse_rubric(&rubric_reply("7")),
        Err(RubricError::OutOfRange { ref key, .. }) if key == "principles.overall_utility.score"
    ));
    let model = ScriptedModel::replies("teacher", vec![rubric_reply("7"), rubric_reply("-1")]);
    let outcome = judge(model.clone())
        .judge(&state("q"), &memory(1, "positive"))
        .unwrap();
    let failure = outcome.rubric.unwrap_err();
    assert!(failure.contains("outside the scale"), "{failure}");
    assert!(request_text(&model.seen()[1]).contains("\"principles.overall_utility.score\" is 7"));
}

#[test]
fn strictness_covers_keys_types_and_wrapping() {
    let good = rubric_reply("5");
    assert!(parse_rubric(&format!("```json\n{good}\n```")).is_ok());
    assert!(parse_rubric(&format!("<think>hmm {{</think>\n{good}")).is_ok());
    assert!(matches!(
        parse_rubric(&format!("{good}\nThanks!")),
        Err(RubricError::Unreadable(_))
    ));
    assert!(matches!(
        parse_rubric(&good.replace("\"how_to_use\"", "\"usage\"")),
        Err(RubricError::Extra { .. })
    ));
    let mut value: serde_json::Value = serde_json::from_str(&good).unwrap();
    value["principles"]
        .as_object_mut()
        .unwrap()
        .remove("clarity_for_agent");
    assert_eq!(
        parse_rubric(&value.to_string()).unwrap_err().to_string(),
        "the key \"principles.clarity_for_agent\" is missing"
    );
    assert!(matches!(
        parse_rubric(&good.replace(
            "\"recommend_injection\":true",
            "\"recommend_injection\":\"yes\""
        )),
        Err(RubricError::WrongType { .. })
    ));
    assert!(matches!(
        parse_rubric(&rubric_reply("2.5")),
        Err(RubricError::NotWhole { .. })
    ));
    let long = "x".repeat(401);
    assert!(matches!(
        parse_rubric(&good.replace("Reason for state_match.", &long)),
        Err(RubricError::TooLong { chars: 401, .. })
    ));
}

#[test]
fn a_transport_error_is_an_error_and_a_refusal_a_failure() {
    let down = ScriptedModel::new("teacher", |_, _| {
        Err(ModelError::Transport("connection refused".into()))
    });
    assert!(matches!(
        judge(down).judge(&state("q"), &memory(1, "positive")),
        Err(ModelError::Transport(_))
    ));
    let refuses = ScriptedModel::new("teacher", |_, _| {
        Err(ModelError::InvalidRequest("too long".into()))
    });
    let outcome = judge(refuses)
        .judge(&state("q"), &memory(1, "positive"))
        .unwrap();
    assert_eq!(outcome.calls, 0);
    assert!(outcome.rubric.unwrap_err().contains("refused"));
}

#[test]
fn annotations_resume_after_a_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prm/annotations.jsonl");
    let states = [state("first request"), state("second request")];
    let memories = [
        memory(0, "positive"),
        memory(1, "negative"),
        memory(2, "positive"),
    ];
    let pairs: Vec<AnnotationPair<'_>> = states
        .iter()
        .enumerate()
        .flat_map(|(s, st)| {
            let id = ["s0", "s1"][s];
            memories.iter().map(move |m| AnnotationPair {
                state_id: id,
                state: st,
                memory: m,
            })
        })
        .collect();
    assert_eq!(pairs.len(), 6);

    // Memory 1 always gets prose: it is recorded as a failure, not retried on resume.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let model = ScriptedModel::new("teacher", move |request, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        if request_text(request).contains("OUTCOME: NEGATIVE") {
            Ok("no idea".to_string())
        } else {
            Ok(rubric_reply("3"))
        }
    });
    let judge = judge(model);
    let report = annotate(&judge, &pairs[..4], &path).unwrap();
    assert_eq!((report.judged, report.failures, report.skipped), (3, 1, 0));
    assert_eq!(calls.load(Ordering::SeqCst), 5);

    // A kill in the middle of the next write leaves half a line.
    let good = std::fs::read(&path).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(
        b"{\"format\": \"merit-interact-prm-annotation-v1\", \"state_id\": \"s1\", \"mem",
    )
    .unwrap();
    drop(file);
    let torn = read_annotations(&path).unwrap();
    assert_eq!(torn.records.len(), 4);
    assert_eq!(torn.warnings.len(), 1, "{:?}", torn.warnings);

    let report = annotate(&judge, &pairs, &path).unwrap();
    assert_eq!((report.judged, report.failures, report.skipped), (1, 1, 4));
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        8,
        "done pairs are not asked again"
    );

    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.starts_with(&good), "earlier records are untouched");
    let loaded = read_annotations(&path).unwrap();
    assert!(loaded.warnings.is_empty());
    let ids: Vec<(String, u64)> = loaded
        .records
        .iter()
        .map(|r| (r.state_id.clone(), r.memory_id))
        .collect();
    let expected: Vec<(String, u64)> = pairs
        .iter()
        .map(|p| (p.state_id.to_string(), p.memory.id))
        .collect();
    assert_eq!(ids, expected);
    let failure = &loaded.records[1];
    assert_eq!(failure.format, ANNOTATION_FORMAT);
    assert!(matches!(&failure.result, Judged::Failure(reason) if reason.contains("no JSON")));
    assert_eq!(failure.calls, 2);
    let first = &loaded.records[0];
    assert_eq!(first.state_text, state_text(&states[0]));
    assert_eq!(first.memory_text, memory_text(&memories[0]));
    assert_eq!((&first.state, &first.memory), (&states[0], &memories[0]));
    assert_eq!(first.judge_model, "teacher");
    assert_eq!(first.prompt_version, "merit-interact-prm-v1/rubric");
    assert_eq!(
        first
            .result
            .rubric()
            .unwrap()
            .score(Principle::OverallUtility),
        3
    );

    // A third run has nothing to do.
    let report = annotate(&judge, &pairs, &path).unwrap();
    assert_eq!((report.judged, report.failures, report.skipped), (0, 0, 6));
    assert_eq!(calls.load(Ordering::SeqCst), 8);
}

#[test]
fn a_backend_error_stops_without_recording_the_pair() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("annotations.jsonl");
    let st = state("q");
    let memories = [memory(0, "positive"), memory(1, "positive")];
    let pairs: Vec<AnnotationPair<'_>> = memories
        .iter()
        .map(|m| AnnotationPair {
            state_id: "s",
            state: &st,
            memory: m,
        })
        .collect();
    let flaky = ScriptedModel::new("teacher", |_, index| {
        if index == 0 {
            Ok(rubric_reply("5"))
        } else {
            Err(ModelError::Transport("reset".into()))
        }
    });
    assert!(matches!(
        annotate(&judge(flaky), &pairs, &path),
        Err(AnnotateError::Model(ModelError::Transport(_)))
    ));
    assert_eq!(read_annotations(&path).unwrap().records.len(), 1);
    let healthy = ScriptedModel::replies("teacher", vec![rubric_reply("1")]);
    let report = annotate(&judge(healthy.clone()), &pairs, &path).unwrap();
    assert_eq!((report.judged, report.skipped), (1, 1));
    assert_eq!(healthy.seen().len(), 1);
}

#[test]
fn corrupt_records_are_refused_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("annotations.jsonl");
    let st = state("q");
    let mem = memory(0, "positive");
    let model = ScriptedModel::replies("teacher", vec![rubric_reply("5")]);
    annotate(
        &judge(model),
        &[AnnotationPair {
            state_id: "s",
            state: &st,
            memory: &mem,
        }],
        &path,
    )
    .unwrap();
    let line = std::fs::read_to_string(&path).unwrap();
    // The same pair twice.
    std::fs::write(&path, format!("{line}{line}")).unwrap();
    let error = read_annotations(&path).unwrap_err().to_string();
    assert!(
        error.contains("line 2") && error.contains("twice"),
        "{error}"
    );
    // A stored score out of range, on a complete line.
    let bad = line.replace("\"score\":5", "\"score\":9");
    assert_ne!(bad, line);
    std::fs::write(&path, &bad).unwrap();
    let error = read_annotations(&path).unwrap_err().to_string();
    assert!(
        error.contains("line 1") && error.contains("invalid rubric"),
        "{error}"
    );
    // Appending a recorded pair is refused.
    std::fs::write(&path, &line).unwrap();
    let (mut file, loaded) = AnnotationFile::open(&path).unwrap();
    assert!(file.contains("s", 0));
    assert!(matches!(
        file.append(&loaded.records[0]),
        Err(AnnotateError::Duplicate { memory_id: 0, .. })
    ));
}
