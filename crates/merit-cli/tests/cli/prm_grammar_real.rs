//! The rubric judge under its grammar with the embedded chat model: llama.cpp accepts the
//! grammar, the one greedy reply is a rubric [`parse_rubric`] reads (no retry), it stops at
//! the object's closing brace well inside the token limit. (With the 0.5B model, on
//! 2026-12-06, under load: one call, 308 tokens.)
//!
//! [`parse_rubric`]: merit_interact::prm::rubric::parse_rubric

use merit_interact::prm::judge::{JudgeConfig, RubricJudge};
use merit_models::llama::{LlamaChat, LlamaConfig};
use merit_models::registry::{model_for_tests, DEFAULT_CHAT_MODEL};
use std::sync::Arc;

/// A state and a turn memory as `merit interact prm annotate` shows them (from the interact
/// smoke's annotation file: the pair whose unconstrained reply ran on past the object).
const STATE: &str = "INIT: Show me the date of the most popular poll.\n\
    Q: Show me the date of the most popular poll.\n\
    PREV_ACT: GET_ALL_COLUMN_MEANINGS\nPREV_OBS: {}";
const MEMORY: &str = "INIT: Show me all the buildings.\nQ: Show me all the buildings.\n\
    PREV_ACT: EXECUTE SQL: SELECT DISTINCT building FROM Faculty\nPREV_OBS: NEB\nBarton\nKrieger\n\
    ACTION: EXECUTE SQL: SELECT DISTINCT building FROM Faculty\nRESULT: NEB\nBarton\nKrieger\n\
    OUTCOME: POSITIVE";

#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn the_rubric_grammar_gives_one_readable_reply_with_the_embedded_model() {
    let Some(files) = model_for_tests(DEFAULT_CHAT_MODEL, "the rubric grammar test") else {
        return;
    };
    let config = LlamaConfig::new(files.main_file().to_path_buf()).with_name(DEFAULT_CHAT_MODEL);
    let model = Arc::new(LlamaChat::load(config).expect("load the chat model"));
    let judge = RubricJudge::new(
        model,
        JudgeConfig {
            grammar: true,
            ..JudgeConfig::default()
        },
    );
    let first = judge.judge_texts(STATE, MEMORY).expect("the model answers");
    let rubric = first.rubric.clone().expect("a readable rubric");
    assert_eq!(first.calls, 1, "no retry was needed: {first:?}");
    assert!(
        first.completion_tokens < u64::from(judge.config().max_tokens),
        "the reply ended at the object ({} tokens)",
        first.completion_tokens
    );
    assert!(!rubric.feedback.how_to_use.is_empty());
    // Greedy decoding under a grammar repeating itself is tested in merit-models
    // (llama_chat.rs); one call keeps this test short.
}
