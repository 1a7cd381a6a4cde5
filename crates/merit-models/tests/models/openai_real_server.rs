//! The OpenAI-compatible client against a real server: llama.cpp's `llama-server`, started by
//! the test on 127.0.0.1 with the default chat model (Qwen2.5-Coder-0.5B-Instruct GGUF).
//!
//! Needs the server: `scripts/setup-xllamacpp-server.sh` installs llama.cpp's server prebuilt
//! (PyPI's xllamacpp wheel behind a launcher that takes llama-server's flags; CI uses it),
//! `scripts/setup-test-server.sh` builds `llama-server` from source, and `MERIT_LLAMA_SERVER`
//! may name either or another; and the model (from the reply of `merit models pull`, or pulled here). Without
//! them the test prints a loud SKIP and passes — unless `MERIT_REQUIRE_REAL_SERVER=1` (CI sets
//! it), where their absence fails the test.

use merit_core::model::{ChatMessage, ChatModel, ChatRequest, Decoding, Embedder, ToolSpec};
use merit_models::openai::{OpenAiChat, OpenAiConfig, OpenAiEmbedder, RetryPolicy};
use merit_models::registry::{ensure_model, PullOptions, DEFAULT_CHAT_MODEL};
use serde_json::json;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The version `scripts/setup-test-server.sh` builds by default.
const SERVER_VERSION: &str = "0.3.36";

/// The xllamacpp version `scripts/setup-xllamacpp-server.sh` installs by default.
const XLLAMACPP_VERSION: &str = "2026.10.11549";

/// Skips loudly, or fails when the real server is required (`MERIT_REQUIRE_REAL_SERVER=1`).
fn skip(why: &str) {
    merit_core::optional::missing(
        "MERIT_REQUIRE_REAL_SERVER",
        &format!("the OpenAI client test against a real llama-server: {why}"),
        "run scripts/setup-xllamacpp-server.sh (or setup-test-server.sh) and `merit models pull`",
    );
}

/// Where the server is: `MERIT_LLAMA_SERVER`, the setup scripts' caches (the source build
/// first), or `PATH`.
fn server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MERIT_LLAMA_SERVER").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = non_empty("MERIT_HOME")
        .or_else(|| non_empty("HOME").map(|home| home.join(".cache").join("merit")));
    let built = non_empty("MERIT_TEST_SERVER_DIR")
        .or_else(|| home.as_ref().map(|base| base.join("test-server")))
        .map(|root| {
            root.join(format!("llama-cpp-python-{SERVER_VERSION}-native-noamx"))
                .join("bin")
                .join("llama-server")
        });
    let prebuilt = non_empty("MERIT_XLLAMACPP_DIR")
        .or_else(|| {
            home.as_ref()
                .map(|base| base.join(format!("xllamacpp-{XLLAMACPP_VERSION}")))
        })
        .map(|root| root.join("bin").join("llama-server"));
    if let Some(found) = [built, prebuilt]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
    {
        return Some(found);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("llama-server"))
            .find(|candidate| candidate.is_file())
    })
}

/// A running server, killed when dropped.
struct Server {
    child: Child,
    base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(binary: &Path, model: &Path, extra: &[&str]) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--alias", DEFAULT_CHAT_MODEL])
            .args(["-c", "2048", "-t", "2", "-np", "1", "--no-webui"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", binary.display()));
        let mut server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        server.wait_until_healthy(Duration::from_secs(180));
        server
    }

    fn wait_until_healthy(&mut self, limit: Duration) {
        let started = Instant::now();
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("llama-server exited early ({status}):\n{}", self.log_tail());
            }
            let healthy = client
                .get(format!("{}/health", self.base))
                .send()
                .is_ok_and(|response| response.status().is_success());
            if healthy {
                eprintln!(
                    "llama-server ready after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            if started.elapsed() > limit {
                panic!(
                    "llama-server not healthy after {limit:?}:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

fn config(base: &str) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(base, DEFAULT_CHAT_MODEL);
    config.retry = RetryPolicy {
        max_attempts: 2,
        ..RetryPolicy::default()
    };
    // Recomputing the prompt each time keeps the arithmetic, hence greedy output, identical
    // between calls (a reused KV cache is computed in other batch shapes).
    config
        .extra_body
        .insert("cache_prompt".to_string(), json!(false));
    config
}

#[test]
#[ignore = "needs llama.cpp's server (MERIT_LLAMA_SERVER, bash scripts/setup-xllamacpp-server.sh) and the model; run with --include-ignored, as CI does"]
fn real_llama_server_chat_and_embeddings() {
    let Some(binary) = server_binary() else {
        skip("no llama-server (MERIT_LLAMA_SERVER, the setup scripts' caches, PATH)");
        return;
    };
    // Pull the model only when the test is required; otherwise use it if it is already there.
    let options = PullOptions {
        offline: !merit_core::optional::is_required("MERIT_REQUIRE_REAL_SERVER"),
        ..PullOptions::default()
    };
    let model = match ensure_model(DEFAULT_CHAT_MODEL, &options, &mut |_| {}) {
        Ok(files) => files,
        Err(error) => {
            skip(&format!("the model is not available: {error}"));
            return;
        }
    };
    eprintln!(
        "server {} with {}",
        binary.display(),
        model.main_file().display()
    );

    let server = Server::start(&binary, model.main_file(), &[]);
    let chat = OpenAiChat::new(config(&server.base)).unwrap();
    let request = ChatRequest {
        messages: vec![
            ChatMessage::system("You are a SQLite expert. Answer with one SQL query only."),
            ChatMessage::user(
                "Table singer(singer_id, name, country, age). How many singers do we have?",
            ),
        ],
        decoding: Decoding {
            temperature: 0.0,
            max_tokens: 40,
            stop: vec![],
            seed: 0,
            grammar: None,
        },
        prompt_version: "real-server-test".to_string(),
        tools: Vec::new(),
    };
    let first = chat.chat(&request).unwrap();
    eprintln!(
        "reply ({} prompt, {} completion tokens, {:?}): {:?}",
        first.prompt_tokens, first.completion_tokens, first.latency, first.text
    );
    assert!(!first.text.trim().is_empty(), "greedy reply is empty");
    assert!(first.prompt_tokens > 10, "usage.prompt_tokens not counted");
    assert!(
        first.completion_tokens > 0,
        "usage.completion_tokens not counted"
    );
    assert!(!first.cached);
    let second = chat.chat(&request).unwrap();
    assert_eq!(
        first.text, second.text,
        "greedy decoding must repeat exactly"
    );
    assert_eq!(first.completion_tokens, second.completion_tokens);

    // Stop sequences and max_tokens reach the server.
    let mut short = request.clone();
    short.decoding.max_tokens = 3;
    let reply = chat.chat(&short).unwrap();
    assert!(
        reply.completion_tokens <= 3,
        "max_tokens ignored: {reply:?}"
    );

    // Native tool calls: the server renders the tools with the model's own chat template and
    // parses the model's tool-call markup back into `tool_calls`.
    let tool_request = ChatRequest {
        messages: vec![
            ChatMessage::system("You answer questions about the singer table by calling the execute tool with one SQL query."),
            ChatMessage::user("How many singers do we have?"),
        ],
        decoding: Decoding {
            max_tokens: 80,
            ..request.decoding.clone()
        },
        prompt_version: "real-server-tools-test".to_string(),
        tools: vec![ToolSpec {
            name: "execute".to_string(),
            description: "Run one SQL query on table singer(singer_id, name, country, age) and see its rows.".to_string(),
            parameters: json!({
                "type": "object",
                "properties": {"sql": {"type": "string", "description": "the SQL query"}},
                "required": ["sql"]
            }),
        }],
    };
    let reply = chat.chat(&tool_request).unwrap();
    eprintln!("tool reply: {:?} calls {:?}", reply.text, reply.tool_calls);
    assert!(
        !reply.tool_calls.is_empty() || !reply.text.trim().is_empty(),
        "neither a tool call nor text: {reply:?}"
    );
    for call in &reply.tool_calls {
        assert_eq!(call.name, "execute");
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {}", call.arguments));
        assert!(
            arguments.get("sql").is_some_and(|sql| sql.is_string()),
            "{arguments}"
        );
    }
    drop(server);

    // llama-server serves embeddings only in its embedding mode: a second instance, same GGUF.
    let server = Server::start(
        &binary,
        model.main_file(),
        &["--embeddings", "--pooling", "mean"],
    );
    let embedder = OpenAiEmbedder::new(config(&server.base), None).unwrap();
    assert!(
        embedder.dimension() > 100,
        "dimension {}",
        embedder.dimension()
    );
    let texts = vec![
        "How many singers do we have?".to_string(),
        "SELECT count(*) FROM singer".to_string(),
        "How many singers do we have?".to_string(),
    ];
    let vectors = embedder.embed(&texts).unwrap();
    assert_eq!(vectors.len(), 3);
    for vector in &vectors {
        assert_eq!(vector.len(), embedder.dimension());
        let norm = vector
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "not normalised: {norm}");
    }
    let cosine: f32 = vectors[0].iter().zip(&vectors[2]).map(|(a, b)| a * b).sum();
    assert!(
        cosine > 0.999,
        "same text, different vectors: cosine {cosine}"
    );
}
