//! Continuous batching in the embedded llama.cpp backend (`LlamaConfig::parallel` above 1):
//! concurrent callers decoded together, each conversation keeping its own KV prefix, stop
//! conditions and grammars per conversation, and a bad call refused without disturbing the
//! others. Needs the default chat model, like `llama_chat` (skipped loudly without it).

use crate::llama_chat::model_file;
use merit_core::model::{ChatMessage, ChatModel, ChatRequest, Decoding, ModelError};
use merit_models::llama::{CallStats, LlamaChat, LlamaConfig};
use std::sync::{Arc, Barrier, OnceLock};

/// One batched model (four conversations) shared by the tests of this module.
fn batched() -> Option<Arc<LlamaChat>> {
    static MODEL: OnceLock<Option<Arc<LlamaChat>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let config = LlamaConfig::new(model_file()?).with_parallel(4);
            Some(Arc::new(LlamaChat::load(config).expect("load batched")))
        })
        .clone()
}

fn request(text: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user(text)],
        decoding: Decoding {
            max_tokens,
            ..Decoding::default()
        },
        prompt_version: "test".to_string(),
        tools: Vec::new(),
    }
}

const SCHEMA: &str = "DATABASE SCHEMA (SQLite)\nCREATE TABLE singer (\n  Singer_ID int,\n  \
    Name text,\n  Country text,\n  Age int,\n  PRIMARY KEY (Singer_ID)\n);\n\nQUESTION\n";

const QUESTIONS: [&str; 4] = [
    "How many singers do we have?",
    "What is the average age of singers from France?",
    "List the names of singers older than 40, oldest first.",
    "Which country has the most singers?",
];

fn ask(question: &str) -> ChatRequest {
    request(
        &format!("{SCHEMA}{question}\n\nAnswer with exactly one SQL query in a ```sql code block."),
        40,
    )
}

/// Sends `requests` at once from one thread each and returns their answers in order.
fn concurrently(
    chat: &Arc<LlamaChat>,
    requests: Vec<ChatRequest>,
) -> Vec<Result<(String, CallStats), ModelError>> {
    let barrier = Arc::new(Barrier::new(requests.len()));
    let handles: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let (chat, barrier) = (Arc::clone(chat), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                chat.chat_with_stats(&request)
                    .map(|(reply, stats)| (reply.text, stats))
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|handle| handle.join().expect("caller thread"))
        .collect()
}

/// Four conversations decoded together are all answered, each with its own reply. Batched
/// matrix products may round a near-tie the other way, and which calls share a batch depends
/// on thread timing, so the replies are not asserted equal to one-at-a-time decoding (the
/// README reports the divergence measured by `merit bench models --streams`); one
/// conversation alone in the batched engine is, since it is decoded in the same shapes.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn four_concurrent_conversations_are_answered_and_one_alone_matches_one_at_a_time() {
    let Some(file) = model_file() else { return };
    // Its own instance: the shared one may be batching another test's calls, and the last
    // check needs this conversation alone.
    let chat = Arc::new(
        LlamaChat::load(LlamaConfig::new(file.clone()).with_parallel(4)).expect("load batched"),
    );
    let single = LlamaChat::load(LlamaConfig::new(file)).expect("load single");
    let expected: Vec<String> = QUESTIONS
        .iter()
        .map(|q| single.chat(&ask(q)).expect("single").text)
        .collect();
    drop(single);
    let answers = concurrently(&chat, QUESTIONS.iter().map(|q| ask(q)).collect());
    let mut differing = 0;
    for (answer, expected) in answers.iter().zip(&expected) {
        let (text, stats) = answer.as_ref().expect("batched reply");
        assert!(stats.completion_tokens > 0 && stats.completion_tokens <= 40);
        assert!(text.to_lowercase().contains("select"), "{text:?}");
        differing += usize::from(text != expected);
    }
    eprintln!("{differing} of 4 batched replies differ from one-at-a-time decoding");
    // One conversation at a time through the batched engine, from an empty cache: the same
    // arithmetic as the one-at-a-time engine, so the same reply.
    chat.clear_cache().expect("clear");
    let alone = chat.chat(&ask(QUESTIONS[1])).expect("alone").text;
    assert_eq!(alone, expected[1]);
}

/// Each conversation keeps its prefix in its own sequence: an unrelated call between two
/// turns of a conversation takes another sequence, and the follow-up reuses its own.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn each_conversation_keeps_its_prefix_in_its_own_sequence() {
    let Some(file) = model_file() else { return };
    let chat = LlamaChat::load(LlamaConfig::new(file).with_parallel(2)).expect("load");
    let opening = ask(QUESTIONS[1]);
    let (first, first_stats) = chat.chat_with_stats(&opening).expect("first");
    let (_, other_stats) = chat
        .chat_with_stats(&request(
            "You play a user. Answer the assistant's question in one short sentence: \
             should retired singers count?",
            16,
        ))
        .expect("other");
    let mut follow_up = opening.clone();
    follow_up
        .messages
        .push(ChatMessage::assistant(first.text.clone()));
    follow_up
        .messages
        .push(ChatMessage::user("Now only singers younger than 30."));
    let (_, stats) = chat.chat_with_stats(&follow_up).expect("follow-up");
    assert_eq!(
        [first_stats.slot, other_stats.slot, stats.slot],
        [0, 1, 0],
        "{first_stats:?} {other_stats:?} {stats:?}"
    );
    assert!(
        stats.reused_tokens as f64 > 0.6 * stats.prompt_tokens as f64,
        "{stats:?}"
    );
    assert_eq!(
        stats.evaluated_tokens,
        stats.prompt_tokens - stats.reused_tokens
    );
}

/// Each caller gets its own cache slots: with two callers that each alternate between two
/// conversations (an agent and its user simulator), all four keep their prefixes, so both
/// agents' follow-ups reuse their openings after both simulators spoke.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn every_caller_keeps_a_prefix_per_cache_slot() {
    let Some(file) = model_file() else { return };
    let chat =
        LlamaChat::load(LlamaConfig::new(file).with_parallel(2).with_cache_slots(2)).expect("load");
    let openings = [ask(QUESTIONS[1]), ask(QUESTIONS[2])];
    let mut follow_ups = Vec::new();
    for opening in &openings {
        let (reply, stats) = chat.chat_with_stats(opening).expect("opening");
        let mut follow_up = opening.clone();
        follow_up.messages.push(ChatMessage::assistant(reply.text));
        follow_up
            .messages
            .push(ChatMessage::user("Now only the ones younger than 30."));
        follow_ups.push((follow_up, stats.prompt_tokens));
    }
    for topic in ["retired singers", "stadiums without concerts"] {
        let simulator = request(
            &format!(
                "You play a user. Answer the assistant's question in one short sentence: \
                 should {topic} count?"
            ),
            16,
        );
        chat.chat_with_stats(&simulator).expect("simulator");
    }
    // The whole opening prompt is still cached (an evicted one would leave at most the chat
    // template's first tokens, which every conversation shares).
    for (follow_up, opening_tokens) in &follow_ups {
        let (_, stats) = chat.chat_with_stats(follow_up).expect("follow-up");
        assert!(
            stats.reused_tokens >= *opening_tokens,
            "{opening_tokens} {stats:?}"
        );
    }
}

/// Stop strings, token limits and grammars hold per conversation, and a call that cannot be
/// served (a prompt beyond the window, a broken grammar) is refused while the calls beside it
/// are answered.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn limits_grammars_and_refusals_are_per_conversation() {
    let Some(chat) = batched() else { return };
    let mut stopped = ask(QUESTIONS[0]);
    stopped.decoding.stop = vec!["FROM".to_string(), "from".to_string()];
    let short = request("Count from 1 to 100.", 5);
    let none = request("Say hello.", 0);
    let mut constrained = ask(QUESTIONS[0]);
    constrained.decoding.grammar = Some(
        "root ::= \"```sql\\nSELECT count(*) FROM \" table \"\\n```\"\n\
         table ::= \"singers\" | \"people\"\n"
            .to_string(),
    );
    let mut broken = ask(QUESTIONS[2]);
    broken.decoding.grammar = Some("root ::= (unclosed".to_string());
    let too_long = request(&"SELECT name FROM singer; ".repeat(1200), 8);
    let answers = concurrently(
        &chat,
        vec![stopped, short, none, constrained, broken, too_long],
    );
    let text = |i: usize| answers[i].as_ref().expect("answered").0.clone();
    assert!(!text(0).to_lowercase().contains("from"), "{:?}", text(0));
    assert_eq!(answers[1].as_ref().expect("short").1.completion_tokens, 5);
    assert_eq!(text(2), "");
    assert!(
        text(3) == "```sql\nSELECT count(*) FROM singers\n```"
            || text(3) == "```sql\nSELECT count(*) FROM people\n```",
        "{:?}",
        text(3)
    );
    assert!(
        matches!(&answers[4], Err(ModelError::InvalidRequest(why)) if why.contains("grammar")),
        "{:?}",
        answers[4]
    );
    assert!(
        matches!(&answers[5], Err(ModelError::InvalidRequest(why)) if why.contains("context window")),
        "{:?}",
        answers[5]
    );
}

#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn the_number_of_conversations_is_checked() {
    let Some(file) = model_file() else { return };
    for wrong in [0, 17] {
        let error = LlamaChat::load(LlamaConfig::new(file.clone()).with_parallel(wrong))
            .unwrap_err()
            .to_string();
        assert!(error.contains("parallel conversations"), "{error}");
    }
}

/// Two conversations that open alike, sent at once: one evaluates the common opening, the
/// other copies it from the first one's sequence (waiting for it when both arrive in the same
/// step) instead of evaluating it beside it. The copy is checked by what it carries: the
/// opening holds a code word that each conversation's reply has to repeat, which garbage or
/// missing entries would lose, and positions out of order would make llama.cpp refuse the
/// decode.
#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn conversations_that_open_alike_share_the_opening() {
    let Some(file) = model_file() else { return };
    let chat = Arc::new(LlamaChat::load(LlamaConfig::new(file).with_parallel(2)).expect("load"));
    let opening = format!(
        "{}The code word for today is MARMALADE. Remember it.\n\n",
        "Here is a record of the shop's opening hours, kept for the staff. ".repeat(12)
    );
    let asks = [
        "What is the code word? Answer with the code word only.",
        "Repeat the code word you were given, and nothing else.",
    ];
    let answers = concurrently(
        &chat,
        asks.iter()
            .map(|ask| request(&format!("{opening}{ask}"), 8))
            .collect(),
    );
    let stats: Vec<CallStats> = answers
        .iter()
        .map(|answer| {
            let (text, stats) = answer.as_ref().expect("answered");
            assert!(text.to_uppercase().contains("MARMALADE"), "{text:?}");
            *stats
        })
        .collect();
    let opening_tokens = stats[0].prompt_tokens.min(stats[1].prompt_tokens) - 30;
    let copier = stats
        .iter()
        .find(|stats| stats.shared_tokens > 0)
        .unwrap_or_else(|| panic!("neither conversation copied the opening: {stats:?}"));
    assert!(copier.shared_tokens >= opening_tokens, "{stats:?}");
    assert_eq!(copier.reused_tokens, copier.shared_tokens, "{stats:?}");
    assert_ne!(stats[0].slot, stats[1].slot, "{stats:?}");
    eprintln!("{stats:?}");
    let evaluated: u32 = stats.iter().map(|stats| stats.evaluated_tokens).sum();
    let prompts: u32 = stats.iter().map(|stats| stats.prompt_tokens).sum();
    assert!(evaluated <= prompts - opening_tokens, "{stats:?}");
}
