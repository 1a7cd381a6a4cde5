//! The reply cache: hits and misses, key sensitivity, accounting, concurrent writers, torn
//! segments.

use merit_core::model::{
    ChatMessage, ChatModel, ChatReply, ChatRequest, Decoding, Embedder, ModelError, ToolCall,
    ToolSpec,
};
use merit_models::cache::{
    chat_key, Accounting, CacheMode, CachedChat, CachedEmbedder, ReplyStore,
};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A deterministic model that counts its calls.
struct Echo {
    id: String,
    calls: AtomicUsize,
}

impl Echo {
    fn new(id: &str) -> Echo {
        Echo {
            id: id.to_string(),
            calls: AtomicUsize::new(0),
        }
    }
}

impl ChatModel for Echo {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let last = &request.messages.last().unwrap().content;
        if last == "fail" {
            return Err(ModelError::Server {
                status: 500,
                body: "no".to_string(),
            });
        }
        Ok(ChatReply {
            text: format!("echo: {last}"),
            prompt_tokens: last.len() as u32,
            completion_tokens: 3,
            latency: Duration::from_millis(25),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

struct Letters {
    calls: AtomicUsize,
    texts: AtomicUsize,
}

impl Embedder for Letters {
    fn id(&self) -> String {
        "fake:letters".to_string()
    }

    fn dimension(&self) -> usize {
        3
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts
            .iter()
            .map(|text| {
                let v = [
                    text.len() as f32,
                    1.0,
                    text.bytes().map(f32::from).sum::<f32>() / 1000.0,
                ];
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / norm).collect()
            })
            .collect())
    }
}

fn request(question: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::system("sys"), ChatMessage::user(question)],
        decoding: Decoding::default(),
        prompt_version: "p1".to_string(),
        tools: Vec::new(),
    }
}

/// Answers with one tool call naming the question.
struct ToolCaller;

impl ChatModel for ToolCaller {
    fn id(&self) -> String {
        "fake:tools".into()
    }
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        Ok(ChatReply {
            text: "calling".into(),
            prompt_tokens: 3,
            completion_tokens: 2,
            latency: Duration::from_millis(1),
            cached: false,
            tool_calls: vec![ToolCall {
                id: "call_7".into(),
                name: request.tools[0].name.clone(),
                arguments: r#"{"sql": "SELECT 1"}"#.into(),
            }],
        })
    }
    fn supports_tools(&self) -> bool {
        true
    }
}

#[test]
fn tool_calls_survive_the_cache_and_support_is_passed_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut asked = request("q");
    asked.tools.push(ToolSpec {
        name: "execute".into(),
        description: "run SQL".into(),
        parameters: serde_json::json!({"type": "object"}),
    });
    let live = CachedChat::new(ToolCaller, open(dir.path()));
    assert!(live.supports_tools());
    let first = live.chat(&asked).unwrap();
    let again = CachedChat::new(ToolCaller, open(dir.path()))
        .chat(&asked)
        .unwrap();
    assert!(again.cached);
    assert_eq!(again.tool_calls, first.tool_calls);
    assert_eq!(again.tool_calls[0].arguments, r#"{"sql": "SELECT 1"}"#);
    assert!(!CachedChat::new(Echo::new("fake:a"), open(dir.path())).supports_tools());
}

fn open(dir: &std::path::Path) -> Arc<ReplyStore> {
    Arc::new(ReplyStore::open(dir).unwrap())
}

#[test]
fn second_call_is_a_hit_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let chat = CachedChat::new(Echo::new("fake:echo"), open(dir.path()));
    let live = chat.chat(&request("q1")).unwrap();
    assert!(!live.cached);
    let hit = chat.chat(&request("q1")).unwrap();
    assert!(hit.cached);
    assert_eq!(hit.text, live.text);
    assert_eq!(hit.prompt_tokens, live.prompt_tokens);
    assert_eq!(
        hit.latency,
        Duration::from_millis(25),
        "original latency kept"
    );
    assert_eq!(chat.inner().calls.load(Ordering::SeqCst), 1);

    // A new process (here: a new store and a new model) costs no call.
    let again = CachedChat::new(Echo::new("fake:echo"), open(dir.path()));
    let reply = again.chat(&request("q1")).unwrap();
    assert!(reply.cached);
    assert_eq!(reply.text, "echo: q1");
    assert_eq!(again.inner().calls.load(Ordering::SeqCst), 0);
}

#[test]
fn any_change_to_the_request_or_model_misses() {
    let base = request("q");
    let key = chat_key("m", &base);
    let mut variants = Vec::new();
    let mut r = base.clone();
    r.messages[1].content.push(' ');
    variants.push(("message text", chat_key("m", &r)));
    let mut r = base.clone();
    r.messages[0] = ChatMessage::user("sys");
    variants.push(("message role", chat_key("m", &r)));
    let mut r = base.clone();
    r.messages.push(ChatMessage::assistant("more"));
    variants.push(("message count", chat_key("m", &r)));
    let mut r = base.clone();
    r.decoding.temperature = 0.7;
    variants.push(("temperature", chat_key("m", &r)));
    let mut r = base.clone();
    r.decoding.max_tokens += 1;
    variants.push(("max_tokens", chat_key("m", &r)));
    let mut r = base.clone();
    r.decoding.stop.push(";".to_string());
    variants.push(("stop", chat_key("m", &r)));
    let mut r = base.clone();
    r.decoding.seed = 7;
    variants.push(("seed", chat_key("m", &r)));
    let mut r = base.clone();
    r.prompt_version = "p2".to_string();
    variants.push(("prompt version", chat_key("m", &r)));
    variants.push(("model id", chat_key("m2", &base)));
    for (what, other) in &variants {
        assert_ne!(&key, other, "changing the {what} must change the key");
    }
    assert_eq!(key, chat_key("m", &base.clone()), "keys are deterministic");
    let mut negative_zero = base.clone();
    negative_zero.decoding.temperature = -0.0;
    assert_eq!(key, chat_key("m", &negative_zero));

    // Tools are part of the key when offered, and absent otherwise: a plain request keeps
    // the key of the layout before tools existed (sha256 of the JSON written out by hand), so
    // caches filled by earlier versions still answer.
    assert_eq!(
        key,
        "22ddf5b70dd4c53b7aa35bc181a6b845f98bc186ca0589bd3dc9e6c514e65b8f"
    );
    let mut r = base.clone();
    r.tools.push(ToolSpec {
        name: "execute".into(),
        description: "run SQL".into(),
        parameters: serde_json::json!({"type": "object"}),
    });
    assert_ne!(
        key,
        chat_key("m", &r),
        "offering a tool must change the key"
    );
    let mut r = base.clone();
    r.messages.push(ChatMessage::assistant_with_tools(
        "",
        vec![ToolCall {
            id: "c1".into(),
            name: "execute".into(),
            arguments: "{}".into(),
        }],
    ));
    let mut plain = base.clone();
    plain.messages.push(ChatMessage::assistant(""));
    assert_ne!(
        chat_key("m", &r),
        chat_key("m", &plain),
        "tool calls are content"
    );

    // And through the wrapper: a different model id behind the same store misses.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let first = CachedChat::new(Echo::new("fake:a"), Arc::clone(&store));
    first.chat(&request("q")).unwrap();
    let second = CachedChat::new(Echo::new("fake:b"), store);
    assert!(!second.chat(&request("q")).unwrap().cached);
}

#[test]
fn accounting_separates_live_cached_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let accounting = Arc::new(Accounting::new());
    let chat = CachedChat::new(Echo::new("fake:echo"), open(dir.path()))
        .with_accounting(Arc::clone(&accounting));
    let repair = chat.with_label("repair");
    let baseline = chat.with_label("baseline");
    repair.chat(&request("abc")).unwrap();
    repair.chat(&request("abc")).unwrap();
    baseline.chat(&request("abc")).unwrap();
    baseline.chat(&request("defg")).unwrap();
    assert!(baseline.chat(&request("fail")).is_err());

    let snapshot = accounting.snapshot();
    let repair = &snapshot.labels["repair"];
    assert_eq!(repair.live.calls, 1);
    assert_eq!(repair.cached.calls, 1);
    assert_eq!(repair.live.prompt_tokens, 3);
    assert_eq!(repair.cached.completion_tokens, 3);
    assert_eq!(repair.live.latency_ms, 25);
    let baseline = &snapshot.labels["baseline"];
    assert_eq!((baseline.live.calls, baseline.cached.calls), (1, 1));
    assert_eq!(baseline.failures, 1);
    assert_eq!(snapshot.total.live.calls, 2);
    assert_eq!(snapshot.total.cached.calls, 2);
    assert_eq!(snapshot.total.live.prompt_tokens, 3 + 4);

    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["labels"]["repair"]["live"]["calls"], 1);
    let back: merit_models::cache::AccountingSnapshot = serde_json::from_value(json).unwrap();
    assert_eq!(back, snapshot);
    accounting.reset();
    assert!(accounting.snapshot().labels.is_empty());
}

#[test]
fn replay_mode_refuses_misses_and_read_only_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let read_only =
        CachedChat::new(Echo::new("fake:echo"), Arc::clone(&store)).with_mode(CacheMode::ReadOnly);
    read_only.chat(&request("q")).unwrap();
    assert!(store.is_empty());
    let replay =
        CachedChat::new(Echo::new("fake:echo"), Arc::clone(&store)).with_mode(CacheMode::Replay);
    let error = replay.chat(&request("q")).unwrap_err();
    assert!(
        matches!(error, ModelError::Unavailable(ref m) if m.contains("replay")),
        "{error:?}"
    );
    assert_eq!(replay.inner().calls.load(Ordering::SeqCst), 0);
    CachedChat::new(Echo::new("fake:echo"), Arc::clone(&store))
        .chat(&request("q"))
        .unwrap();
    assert!(replay.chat(&request("q")).unwrap().cached);
}

#[test]
fn embeddings_are_cached_per_text_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let letters = Letters {
        calls: AtomicUsize::new(0),
        texts: AtomicUsize::new(0),
    };
    let embedder = CachedEmbedder::new(letters, open(dir.path()));
    let texts: Vec<String> = ["a", "bb", "a", "ccc"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let first = embedder.embed(&texts).unwrap();
    assert_eq!(
        embedder.inner().texts.load(Ordering::SeqCst),
        3,
        "duplicates embedded once"
    );
    assert_eq!(first[0], first[2]);
    let more: Vec<String> = ["ccc", "dddd", "bb"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let second = embedder.embed(&more).unwrap();
    assert_eq!(
        embedder.inner().texts.load(Ordering::SeqCst),
        4,
        "only dddd was new"
    );
    assert_eq!(second[0], first[3]);
    assert_eq!(second[2], first[1]);

    let reopened = CachedEmbedder::new(
        Letters {
            calls: AtomicUsize::new(0),
            texts: AtomicUsize::new(0),
        },
        open(dir.path()),
    );
    let again = reopened.embed(&texts).unwrap();
    assert_eq!(reopened.inner().calls.load(Ordering::SeqCst), 0);
    for (a, b) in again.iter().zip(&first) {
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "bit-exact"
        );
    }
    let snapshot = reopened.accounting().snapshot();
    assert_eq!(snapshot.total.cached.texts, 4);
    assert_eq!(snapshot.total.live.calls, 0);
}

/// An embedder that answers an infinity for texts that say so.
struct Overflowing;

impl Embedder for Overflowing {
    fn id(&self) -> String {
        "fake:overflowing".to_string()
    }

    fn dimension(&self) -> usize {
        2
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|text| match text.as_str() {
                "overflow" => vec![f32::INFINITY, 0.0],
                _ => vec![1.0, 0.0],
            })
            .collect())
    }
}

#[test]
fn a_non_finite_embedding_is_an_error_and_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let embedder = CachedEmbedder::new(Overflowing, Arc::clone(&store));
    let texts = vec!["fine".to_string(), "overflow".to_string()];
    let error = embedder.embed(&texts).unwrap_err().to_string();
    assert!(
        error.contains("non-finite") && error.contains("text 2 of 2"),
        "{error}"
    );
    assert_eq!(
        store.stats().entries,
        0,
        "nothing of the failed batch is stored"
    );
    assert_eq!(embedder.accounting().snapshot().total.failures, 1);
    assert_eq!(embedder.embed(&texts[..1]).unwrap(), vec![vec![1.0, 0.0]]);
}

#[test]
fn concurrent_threads_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Two stores on one folder (as two processes would have) plus threads sharing each.
    let stores = [open(dir.path()), open(dir.path())];
    let threads = 8;
    let per_thread = 40;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let store = Arc::clone(&stores[t % 2]);
            scope.spawn(move || {
                let chat = CachedChat::new(Echo::new("fake:echo"), store);
                for i in 0..per_thread {
                    chat.chat(&request(&format!("t{t}-q{i}"))).unwrap();
                    // Every thread also asks a shared question: racing writers of one key.
                    chat.chat(&request("shared")).unwrap();
                }
            });
        }
    });
    let reopened = open(dir.path());
    let stats = reopened.stats();
    assert_eq!(stats.skipped_lines, 0);
    assert_eq!(reopened.len(), threads * per_thread + 1);
    let chat = CachedChat::new(Echo::new("fake:echo"), reopened);
    for t in 0..threads {
        for i in 0..per_thread {
            let reply = chat.chat(&request(&format!("t{t}-q{i}"))).unwrap();
            assert!(reply.cached);
            assert_eq!(reply.text, format!("echo: t{t}-q{i}"));
        }
    }
    assert_eq!(chat.inner().calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_store_sees_what_another_writer_added_since_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let reader = CachedChat::new(Echo::new("fake:echo"), open(dir.path()));
    let writer = CachedChat::new(Echo::new("fake:echo"), open(dir.path()));
    writer.chat(&request("late")).unwrap();
    assert!(reader.chat(&request("late")).unwrap().cached);
    assert_eq!(reader.inner().calls.load(Ordering::SeqCst), 0);
}

#[test]
fn torn_and_damaged_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let chat = CachedChat::new(Echo::new("fake:echo"), open(dir.path()));
        chat.chat(&request("kept")).unwrap();
    }
    // A segment with garbage in the middle and a torn last line, as a crash could leave.
    let mut file = std::fs::File::create(dir.path().join("seg-999-1-0.jsonl")).unwrap();
    file.write_all(
        b"not json at all\n{\"key\":\"abc\",\"kind\":\"chat\",\"reply\":{\"text\":\"half",
    )
    .unwrap();
    drop(file);
    std::fs::write(dir.path().join("notes.txt"), "not a segment").unwrap();
    let store = open(dir.path());
    assert_eq!(store.len(), 1);
    assert_eq!(store.stats().skipped_lines, 1);
    let chat = CachedChat::new(Echo::new("fake:echo"), store);
    assert!(chat.chat(&request("kept")).unwrap().cached);
    // The store still writes fine next to the damaged segment.
    chat.chat(&request("new")).unwrap();
    assert_eq!(open(dir.path()).len(), 2);
}

/// A model whose reply depends on the call, not only the request: batched decoding can
/// round differently from call to call. Slow, so that concurrent callers overlap.
struct Drifting {
    calls: AtomicUsize,
}

impl ChatModel for Drifting {
    fn id(&self) -> String {
        "fake:drifting".to_string()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        if request.messages.last().unwrap().content == "fail" {
            return Err(ModelError::Transport("down".to_string()));
        }
        Ok(ChatReply {
            text: format!("reply of call {call}"),
            prompt_tokens: 1,
            completion_tokens: 1,
            latency: Duration::from_millis(50),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// Concurrent callers of one request (streams reaching the same prompt together) get one
/// computation and one reply, the one stored: a replay from the cache then gives every
/// caller what it got live. A failed computation is not shared: each waiter tries itself.
#[test]
fn concurrent_callers_of_one_request_share_one_computation() {
    let dir = tempfile::tempdir().unwrap();
    let chat = CachedChat::new(
        Drifting {
            calls: AtomicUsize::new(0),
        },
        open(dir.path()),
    );
    let replies: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| chat.chat(&request("same")).unwrap().text))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(chat.inner().calls.load(Ordering::SeqCst), 1);
    assert!(
        replies.iter().all(|r| r == "reply of call 0"),
        "{replies:?}"
    );
    let replayed = CachedChat::new(
        Drifting {
            calls: AtomicUsize::new(0),
        },
        open(dir.path()),
    )
    .with_mode(CacheMode::Replay);
    assert_eq!(
        replayed.chat(&request("same")).unwrap().text,
        "reply of call 0"
    );
    let failures = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| chat.chat(&request("fail")).is_err()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&failed| failed)
            .count()
    });
    assert_eq!(failures, 3);
    assert_eq!(chat.inner().calls.load(Ordering::SeqCst), 1 + 3);
}

/// Two processes that both computed one key, each in its own segment: every later reader
/// serves the same reply, the one in the segment whose name sorts first.
#[test]
fn the_first_stored_reply_of_a_key_wins_for_every_reader() {
    let shared = tempfile::tempdir().unwrap();
    for offset in 0..2 {
        // Each writer alone in its own folder, so neither sees the other's entry.
        let alone = tempfile::tempdir().unwrap();
        let chat = CachedChat::new(
            Drifting {
                calls: AtomicUsize::new(offset),
            },
            open(alone.path()),
        );
        chat.chat(&request("raced")).unwrap();
        for entry in std::fs::read_dir(alone.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), shared.path().join(entry.file_name())).unwrap();
        }
    }
    let mut names: Vec<_> = std::fs::read_dir(shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2);
    names.sort();
    let first = std::fs::read_to_string(shared.path().join(&names[0])).unwrap();
    let expected = if first.contains("reply of call 0") {
        "reply of call 0"
    } else {
        "reply of call 1"
    };
    for _ in 0..3 {
        let reader = CachedChat::new(
            Drifting {
                calls: AtomicUsize::new(7),
            },
            open(shared.path()),
        );
        assert_eq!(reader.chat(&request("raced")).unwrap().text, expected);
        assert_eq!(reader.inner().calls.load(Ordering::SeqCst), 7);
    }
}
