//! The OpenAI-compatible client against a scripted HTTP server on 127.0.0.1: request bodies,
//! usage, retries and backoff, and every kind of failure.

use merit_core::model::{
    ChatMessage, ChatModel, ChatRequest, Decoding, Embedder, ModelError, ToolCall, ToolSpec,
};
use merit_models::openai::{OpenAiChat, OpenAiConfig, OpenAiEmbedder, RetryPolicy};
use serde_json::{json, Value as Json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the scripted server does with one connection.
#[derive(Clone)]
enum Canned {
    /// Answer with this status, body and extra headers.
    Reply(u16, String, Vec<(String, String)>),
    /// Sleep this long before answering 200 with the body (to trip the client's timeout).
    Slow(Duration, String),
    /// Read the request and close the connection without a word.
    Hangup,
    /// Answer 200 with these raw bytes (not necessarily UTF-8).
    Bytes(Vec<u8>),
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body: Json,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

struct Script {
    replies: Mutex<VecDeque<Canned>>,
    seen: Mutex<Vec<Seen>>,
}

impl Script {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts a server that answers connections with `replies`, in order (then 500s).
fn serve(replies: Vec<Canned>) -> (String, Arc<Script>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let script = Arc::new(Script {
        replies: Mutex::new(replies.into()),
        seen: Mutex::new(Vec::new()),
    });
    let shared = Arc::clone(&script);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let script = Arc::clone(&shared);
            std::thread::spawn(move || handle(stream, &script));
        }
    });
    (base, script)
}

fn handle(mut stream: TcpStream, script: &Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            if key.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
            headers.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    script.seen.lock().unwrap().push(Seen {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Json::Null),
    });
    let canned = script
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Canned::Reply(500, "script exhausted".to_string(), vec![]));
    let (status, body, extra) = match canned {
        Canned::Reply(status, body, extra) => (status, body.into_bytes(), extra),
        Canned::Slow(wait, body) => {
            std::thread::sleep(wait);
            (200, body.into_bytes(), vec![])
        }
        Canned::Hangup => return,
        Canned::Bytes(bytes) => (200, bytes, vec![]),
    };
    let mut response = format!(
        "HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (key, value) in extra {
        response.push_str(&format!("{key}: {value}\r\n"));
    }
    response.push_str("\r\n");
    let mut response = response.into_bytes();
    response.extend_from_slice(&body);
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

fn ok_chat(text: &str, prompt: u32, completion: u32) -> Canned {
    Canned::Reply(
        200,
        json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        })
        .to_string(),
        vec![],
    )
}

fn status(code: u16, body: &str) -> Canned {
    Canned::Reply(code, body.to_string(), vec![])
}

/// Fast retries so that the tests take milliseconds.
fn config(base: &str, attempts: u32) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(base, "test-model");
    config.api_key_env = "MERIT_TEST_NO_SUCH_KEY".to_string();
    config.retry = RetryPolicy {
        max_attempts: attempts,
        initial_backoff: Duration::from_millis(20),
        multiplier: 2.0,
        max_backoff: Duration::from_millis(200),
    };
    config.request_timeout = Duration::from_secs(10);
    config
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::system("You write SQL."),
            ChatMessage::user("How many singers do we have?"),
        ],
        decoding: Decoding {
            temperature: 0.0,
            max_tokens: 64,
            stop: vec!["```\n".to_string()],
            seed: 42,
            grammar: None,
        },
        prompt_version: "initial-v1".to_string(),
        tools: Vec::new(),
    }
}

#[test]
fn sends_greedy_decoding_and_records_usage() {
    let (base, script) = serve(vec![ok_chat("SELECT count(*) FROM singer", 31, 7)]);
    let chat = OpenAiChat::new(config(&base, 3)).unwrap();
    assert_eq!(chat.id(), "openai:test-model");
    let reply = chat.chat(&request()).unwrap();
    assert_eq!(reply.text, "SELECT count(*) FROM singer");
    assert_eq!((reply.prompt_tokens, reply.completion_tokens), (31, 7));
    assert!(!reply.cached);
    assert!(reply.latency > Duration::ZERO);

    let seen = script.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    let body = &seen[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 42);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["stop"], json!(["```\n"]));
    assert_eq!(body["stream"], false);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You write SQL."})
    );
    assert_eq!(body["messages"][1]["role"], "user");
    assert!(
        seen[0].header("authorization").is_none(),
        "no key, no header"
    );
}

#[test]
fn tools_are_declared_and_tool_calls_read_back() {
    let reply = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "execute", "arguments": "{\"sql\": \"SELECT 1\"}"}},
                {"type": "function", "function": {"name": "get_schema", "arguments": {}}}
            ]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    });
    let (base, script) = serve(vec![Canned::Reply(200, reply.to_string(), vec![])]);
    let chat = OpenAiChat::new(config(&base, 1)).unwrap();
    assert!(chat.supports_tools());
    let mut asked = request();
    asked.tools.push(ToolSpec {
        name: "execute".into(),
        description: "Run one SQL statement.".into(),
        parameters: json!({"type": "object", "properties": {"sql": {"type": "string"}}}),
    });
    // A conversation that already holds a tool call and its result.
    asked.messages.push(ChatMessage::assistant_with_tools(
        "Let me look.",
        vec![ToolCall {
            id: "call_0".into(),
            name: "get_schema".into(),
            arguments: "{}".into(),
        }],
    ));
    asked.messages.push(ChatMessage::tool_result(
        "call_0",
        "CREATE TABLE singer(...)",
    ));
    let answer = chat.chat(&asked).unwrap();
    assert_eq!(answer.text, "", "null content reads as empty text");
    assert_eq!(answer.tool_calls.len(), 2);
    assert_eq!(answer.tool_calls[0].id, "call_a");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"sql": "SELECT 1"}"#);
    assert_eq!(answer.tool_calls[1].id, "call_1", "a missing id is made up");
    assert_eq!(
        answer.tool_calls[1].arguments, "{}",
        "an object is kept as JSON text"
    );

    let body = &script.seen()[0].body;
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "execute");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["properties"]["sql"]["type"],
        "string"
    );
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_0");
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["name"],
        "get_schema"
    );
    assert_eq!(body["messages"][3]["role"], "tool");
    assert_eq!(body["messages"][3]["tool_call_id"], "call_0");
    // A plain request declares no tools at all.
    let (base, script) = serve(vec![ok_chat("x", 1, 1)]);
    OpenAiChat::new(config(&base, 1))
        .unwrap()
        .chat(&request())
        .unwrap();
    assert!(script.seen()[0].body.get("tools").is_none());
}

#[test]
fn api_key_comes_from_the_named_variable() {
    let (base, script) = serve(vec![ok_chat("x", 1, 1)]);
    let mut config = config(&base, 1);
    config.api_key_env = "MERIT_TEST_OPENAI_KEY_FOR_AUTH_TEST".to_string();
    std::env::set_var("MERIT_TEST_OPENAI_KEY_FOR_AUTH_TEST", "sk-test-123");
    let chat = OpenAiChat::new(config).unwrap();
    chat.chat(&request()).unwrap();
    assert_eq!(
        script.seen()[0].header("authorization"),
        Some("Bearer sk-test-123")
    );
    assert!(
        !format!("{chat:?}").contains("sk-test-123"),
        "Debug must not show the key"
    );
}

#[test]
fn empty_stop_list_is_not_sent_and_extra_fields_are() {
    let (base, script) = serve(vec![ok_chat("x", 1, 1)]);
    let mut config = config(&base, 1);
    config.extra_body.insert("top_k".to_string(), json!(1));
    config
        .extra_body
        .insert("temperature".to_string(), json!(0.9));
    let chat = OpenAiChat::new(config).unwrap();
    let mut req = request();
    req.decoding.stop.clear();
    chat.chat(&req).unwrap();
    let body = &script.seen()[0].body;
    assert!(body.get("stop").is_none());
    assert_eq!(body["top_k"], 1);
    assert_eq!(
        body["temperature"], 0.0,
        "extra fields never override the client's"
    );
}

#[test]
fn rate_limit_then_success_is_retried() {
    let (base, script) = serve(vec![
        Canned::Reply(
            429,
            r#"{"error":{"message":"slow down"}}"#.to_string(),
            vec![("Retry-After".into(), "0".into())],
        ),
        status(503, "overloaded"),
        ok_chat("SELECT 1", 5, 2),
    ]);
    let chat = OpenAiChat::new(config(&base, 5)).unwrap();
    let reply = chat.chat(&request()).unwrap();
    assert_eq!(reply.text, "SELECT 1");
    assert_eq!(script.seen().len(), 3);
}

#[test]
fn server_errors_give_up_after_max_attempts_with_a_clear_error() {
    let (base, script) = serve(vec![
        status(500, r#"{"error":{"message":"boom"}}"#),
        status(500, r#"{"error":{"message":"boom"}}"#),
        status(500, r#"{"error":{"message":"boom"}}"#),
        ok_chat("never reached", 1, 1),
    ]);
    let started = Instant::now();
    let error = OpenAiChat::new(config(&base, 3))
        .unwrap()
        .chat(&request())
        .unwrap_err();
    match &error {
        ModelError::Server { status, body } => {
            assert_eq!(*status, 500);
            assert!(body.contains("boom"), "{body}");
            assert!(body.contains("gave up after 3 attempts"), "{body}");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    assert_eq!(script.seen().len(), 3);
    // Waits of 20 ms then 40 ms were made between the three attempts.
    assert!(started.elapsed() >= Duration::from_millis(60));
}

#[test]
fn malformed_json_is_not_retried() {
    let (base, script) = serve(vec![
        status(200, "{\"choices\": [ oops"),
        ok_chat("x", 1, 1),
    ]);
    let error = OpenAiChat::new(config(&base, 4))
        .unwrap()
        .chat(&request())
        .unwrap_err();
    assert!(matches!(error, ModelError::Malformed(_)), "{error:?}");
    assert_eq!(script.seen().len(), 1);
}

#[test]
fn json_without_choices_is_malformed() {
    let (base, _script) = serve(vec![status(200, r#"{"object":"chat.completion"}"#)]);
    let error = OpenAiChat::new(config(&base, 1))
        .unwrap()
        .chat(&request())
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Malformed(ref m) if m.contains("no choices")),
        "{error:?}"
    );
}

#[test]
fn client_errors_are_not_retried() {
    let (base, script) = serve(vec![
        status(
            400,
            r#"{"error":{"message":"the request exceeds the context size"}}"#,
        ),
        status(401, r#"{"error":{"message":"bad key"}}"#),
    ]);
    let chat = OpenAiChat::new(config(&base, 5)).unwrap();
    let first = chat.chat(&request()).unwrap_err();
    assert!(
        matches!(first, ModelError::InvalidRequest(ref m) if m.contains("context size")),
        "{first:?}"
    );
    let second = chat.chat(&request()).unwrap_err();
    assert!(
        matches!(second, ModelError::Server { status: 401, .. }),
        "{second:?}"
    );
    assert_eq!(script.seen().len(), 2);
}

#[test]
fn timeouts_and_hangups_are_retried() {
    let (base, script) = serve(vec![
        Canned::Slow(Duration::from_secs(3), "late".to_string()),
        Canned::Hangup,
        ok_chat("SELECT 2", 3, 1),
    ]);
    let mut config = config(&base, 3);
    config.request_timeout = Duration::from_millis(400);
    let reply = OpenAiChat::new(config).unwrap().chat(&request()).unwrap();
    assert_eq!(reply.text, "SELECT 2");
    assert_eq!(script.seen().len(), 3);
}

#[test]
fn unreachable_server_is_a_transport_error_after_all_attempts() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = OpenAiChat::new(config(&format!("http://127.0.0.1:{port}"), 2))
        .unwrap()
        .chat(&request())
        .unwrap_err();
    match error {
        ModelError::Transport(message) => {
            assert!(message.contains("gave up after 2 attempts"), "{message}");
            assert!(message.contains(&port.to_string()), "{message}");
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[test]
fn empty_conversation_is_refused_without_a_call() {
    let (base, script) = serve(vec![]);
    let mut req = request();
    req.messages.clear();
    let error = OpenAiChat::new(config(&base, 1))
        .unwrap()
        .chat(&req)
        .unwrap_err();
    assert!(matches!(error, ModelError::InvalidRequest(_)));
    assert!(script.seen().is_empty());
}

fn embeddings(vectors: &[(usize, Vec<f32>)]) -> Canned {
    let data: Vec<Json> = vectors
        .iter()
        .map(|(index, vector)| json!({"object": "embedding", "index": index, "embedding": vector}))
        .collect();
    Canned::Reply(
        200,
        json!({"object": "list", "data": data, "model": "e", "usage": {"prompt_tokens": 3, "total_tokens": 3}}).to_string(),
        vec![],
    )
}

#[test]
fn embeddings_are_ordered_by_index_and_normalised() {
    let (base, script) = serve(vec![embeddings(&[
        (1, vec![0.0, 2.0]),
        (0, vec![3.0, 4.0]),
    ])]);
    let embedder = OpenAiEmbedder::new(config(&base, 1), Some(2)).unwrap();
    let vectors = embedder
        .embed(&["first".to_string(), "second".to_string()])
        .unwrap();
    assert_eq!(vectors[0], vec![0.6, 0.8]);
    assert_eq!(vectors[1], vec![0.0, 1.0]);
    let seen = script.seen();
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(seen[0].body["input"], json!(["first", "second"]));
    assert_eq!(seen[0].body["model"], "test-model");
}

#[test]
fn embedder_learns_its_dimension_and_batches() {
    let (base, script) = serve(vec![
        embeddings(&[(0, vec![1.0, 0.0, 0.0])]),
        embeddings(&[(0, vec![1.0, 1.0, 0.0]), (1, vec![0.0, 0.0, 5.0])]),
        embeddings(&[(0, vec![0.0, 1.0, 0.0])]),
    ]);
    let embedder = OpenAiEmbedder::new(config(&base, 1), None)
        .unwrap()
        .with_batch_size(2);
    assert_eq!(embedder.dimension(), 3);
    let texts: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let vectors = embedder.embed(&texts).unwrap();
    assert_eq!(vectors.len(), 3);
    assert_eq!(vectors[2], vec![0.0, 1.0, 0.0]);
    assert_eq!(script.seen().len(), 3, "probe + two batches");
    for vector in &vectors {
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
    }
}

#[test]
fn embedding_shape_errors_are_malformed() {
    let (base, _script) = serve(vec![
        embeddings(&[(0, vec![1.0, 0.0, 0.0])]),
        embeddings(&[(0, vec![1.0, 0.0])]),
        embeddings(&[(0, vec![0.0, 0.0])]),
    ]);
    let embedder = OpenAiEmbedder::new(config(&base, 1), Some(2)).unwrap();
    let one = vec!["x".to_string()];
    let two = vec!["x".to_string(), "y".to_string()];
    let wrong_dimension = embedder.embed(&one).unwrap_err();
    assert!(
        matches!(wrong_dimension, ModelError::Malformed(ref m) if m.contains("dimensions")),
        "{wrong_dimension:?}"
    );
    let wrong_count = embedder.embed(&two).unwrap_err();
    assert!(
        matches!(wrong_count, ModelError::Malformed(ref m) if m.contains("asked for 2")),
        "{wrong_count:?}"
    );
    let zero = embedder.embed(&one).unwrap_err();
    assert!(
        matches!(zero, ModelError::Malformed(ref m) if m.contains("normalised")),
        "{zero:?}"
    );
    assert!(embedder.embed(&[]).unwrap().is_empty());
}

#[test]
fn a_reply_that_is_not_utf8_is_malformed_and_not_retried() {
    let mut body =
        br#"{"choices": [{"message": {"role": "assistant", "content": "SELECT "#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice(br#""}}]}"#);
    let (base, script) = serve(vec![Canned::Bytes(body), ok_chat("never", 1, 1)]);
    let chat = OpenAiChat::new(config(&base, 3)).unwrap();
    let error = chat.chat(&request()).unwrap_err();
    assert!(
        matches!(&error, ModelError::Malformed(m) if m.contains("not UTF-8")),
        "{error:?}"
    );
    assert_eq!(
        script.seen().len(),
        1,
        "a malformed reply is not asked again"
    );
}

#[test]
fn a_50_mb_reply_is_refused_with_a_clear_error() {
    let text = "x".repeat(50 * 1024 * 1024);
    let (base, script) = serve(vec![ok_chat(&text, 1, 1)]);
    let chat = OpenAiChat::new(config(&base, 3)).unwrap();
    let error = chat.chat(&request()).unwrap_err();
    assert!(
        matches!(&error, ModelError::Malformed(m) if m.contains("larger than 16777216 bytes")),
        "{error:?}"
    );
    assert_eq!(script.seen().len(), 1);
    // A smaller limit is an option of the client; a body within it is read as usual.
    let (base, _) = serve(vec![ok_chat("SELECT 1", 1, 1)]);
    let mut small = config(&base, 1);
    small.max_body_bytes = 4096;
    let reply = OpenAiChat::new(small).unwrap().chat(&request()).unwrap();
    assert_eq!(reply.text, "SELECT 1");
}
