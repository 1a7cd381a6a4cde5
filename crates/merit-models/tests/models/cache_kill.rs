//! The reply cache survives `kill -9` mid-write: child processes (this test binary, re-run with
//! an environment variable) write entries in a loop and report each one after it returned; the
//! parent SIGKILLs them and checks that every reported entry is there and nothing panics.

use merit_core::model::{ChatMessage, ChatModel, ChatReply, ChatRequest, Decoding, ModelError};
use merit_models::cache::{CachedChat, ReplyStore};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "MERIT_CACHE_KILL_CHILD_DIR";
const CHILD_NAME: &str = "MERIT_CACHE_KILL_CHILD_NAME";

/// Reply size: large enough that a kill often lands inside a write.
const REPLY_BYTES: usize = 1_000_000;

/// Entries each child acknowledges before it is killed.
const KILL_AFTER: usize = 40;

/// A model with large replies.
struct Big;

impl ChatModel for Big {
    fn id(&self) -> String {
        "fake:big".to_string()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let question = &request.messages[0].content;
        Ok(ChatReply {
            text: format!("{question}:{}", "x".repeat(REPLY_BYTES)),
            prompt_tokens: 1,
            completion_tokens: 1,
            latency: Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

fn request(question: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user(question)],
        decoding: Decoding::default(),
        prompt_version: "kill".to_string(),
        tools: Vec::new(),
    }
}

/// The entry number in a child's `stored N` line (the test harness may print its own text
/// before it on the same line).
fn acknowledgement(line: &str) -> Option<usize> {
    let (_, number) = line.rsplit_once("stored ")?;
    number.trim().parse().ok()
}

/// The child's side: only does something when started by the parent below.
#[test]
fn kill_child_writer() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let name = std::env::var(CHILD_NAME).unwrap();
    let chat = CachedChat::new(Big, Arc::new(ReplyStore::open(&dir).unwrap()));
    let stdout = std::io::stdout();
    for i in 0.. {
        chat.chat(&request(&format!("{name}-{i}"))).unwrap();
        // Reported only once chat() returned, i.e. once the entry was written and fsync'd.
        let mut out = stdout.lock();
        writeln!(out, "stored {i}").unwrap();
        out.flush().unwrap();
    }
}

/// Starts one writer per name on `dir` at once; each is SIGKILLed by its own watcher as soon
/// as it has acknowledged [`KILL_AFTER`] entries, i.e. while it is busy writing the next one.
/// Returns how many entries each acknowledged.
fn kill_round(dir: &Path, names: &[String]) -> Vec<usize> {
    let exe = std::env::current_exe().unwrap();
    let watchers: Vec<_> = names
        .iter()
        .map(|name| {
            let mut child = Command::new(&exe)
                .args([
                    "cache_kill::kill_child_writer",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, dir)
                .env(CHILD_NAME, name)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut reader = BufReader::new(child.stdout.take().unwrap());
            std::thread::spawn(move || {
                let mut count = 0usize;
                let started = Instant::now();
                let mut line = String::new();
                while count < KILL_AFTER && started.elapsed() < Duration::from_secs(120) {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if let Some(n) = acknowledgement(&line) {
                        count = n + 1;
                    }
                }
                // A varying pause of up to 3 ms lands the kill at different points of the next
                // entry: serialising it, inside write(), or in fdatasync.
                let jitter = u64::from(started.elapsed().subsec_nanos() % 3_000);
                std::thread::sleep(Duration::from_micros(jitter));
                child.kill().unwrap(); // SIGKILL on Unix
                                       // Acknowledgements printed between our last read and the kill count too.
                for line in reader.lines().map_while(Result::ok) {
                    if let Some(n) = acknowledgement(&line) {
                        count = count.max(n + 1);
                    }
                }
                let status = child.wait().unwrap();
                assert!(!status.success(), "the child should have been killed");
                count
            })
        })
        .collect();
    watchers
        .into_iter()
        .map(|watcher| watcher.join().unwrap())
        .collect()
}

/// Refuses every call: whatever is asked must come from the cache.
struct Refuse;

impl ChatModel for Refuse {
    fn id(&self) -> String {
        "fake:big".to_string()
    }

    fn chat(&self, _: &ChatRequest) -> Result<ChatReply, ModelError> {
        Err(ModelError::Unavailable(
            "must come from the cache".to_string(),
        ))
    }
}

#[test]
fn cache_survives_kill_9_mid_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut written: Vec<(String, usize)> = Vec::new();
    let mut torn = 0;
    // Three rounds on one folder: each reopens what the killed writers of earlier rounds left.
    for round in 0..3 {
        let names = vec![format!("alpha{round}"), format!("beta{round}")];
        let acknowledged = kill_round(dir.path(), &names);
        for (name, count) in names.into_iter().zip(acknowledged) {
            assert!(
                count >= KILL_AFTER,
                "child {name} stored only {count} entries in time"
            );
            written.push((name, count));
        }
        let store = Arc::new(ReplyStore::open(dir.path()).unwrap());
        let stats = store.stats();
        eprintln!(
            "round {round} after kill -9: {} entries, {} segments, {} torn tails, {} unreadable complete lines",
            stats.entries, stats.segments, stats.incomplete_tails, stats.skipped_lines
        );
        torn += stats.incomplete_tails;
        assert_eq!(stats.skipped_lines, 0, "only a torn tail may be unreadable");
        let chat = CachedChat::new(Refuse, Arc::clone(&store));
        for (name, count) in &written {
            for i in 0..*count {
                let reply = chat
                    .chat(&request(&format!("{name}-{i}")))
                    .unwrap_or_else(|error| panic!("{name}-{i} lost after kill -9: {error}"));
                assert!(reply.cached);
                assert!(reply.text.starts_with(&format!("{name}-{i}:")));
                assert_eq!(reply.text.len(), format!("{name}-{i}:").len() + REPLY_BYTES);
            }
        }
        // The folder stays writable after the crash.
        CachedChat::new(Big, Arc::clone(&store))
            .chat(&request(&format!("after-{round}")))
            .unwrap();
        assert!(ReplyStore::open(dir.path()).unwrap().len() > stats.entries);
    }
    eprintln!("segments with a torn last line seen over all rounds: {torn}");
}
