//! A chat-completions reply from an OpenAI-compatible server (text, usage, native tool calls):
//! any JSON gives a reply or a `Malformed` error naming the part, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use merit_models::openai::parse_chat_reply;
use std::time::Duration;

fuzz_target!(|bytes: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    if let Ok(reply) = parse_chat_reply(&json, Duration::ZERO) {
        for call in &reply.tool_calls {
            // Arguments are kept as the server sent them (JSON text), names as given.
            let _ = (&call.name, &call.arguments);
        }
    }
});
