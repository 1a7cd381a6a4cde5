//! The persistent reply cache and call accounting.
//!
//! [`CachedChat`] and [`CachedEmbedder`] wrap any backend. Every call is looked up by a
//! content address first — the sha256 of a canonical JSON of (model id, messages, decoding
//! parameters, prompt version) for chat, of (model id, text) for embeddings — so re-running an
//! experiment costs no model calls, and any change to what would be sent misses.
//!
//! # Storage
//! A [`ReplyStore`] is a folder of append-only JSONL *segments*. Each store instance that
//! writes creates its own segment (`seg-<pid>-<nanos>-<n>.jsonl`) on its first write, so no
//! two writers — threads of different stores, or processes — ever append to the same file, and
//! threads sharing one store serialise on a mutex. Every entry is one line written with a single
//! `write_all` and flushed with `fdatasync` before the call returns. A process killed at any
//! moment can therefore leave at most one incomplete last line in its own segment; readers only
//! take lines that end in a newline and parse, so such a torn tail is skipped (with a warning)
//! and every entry completed before the kill is found. A write error retires the segment, so a
//! later entry never lands glued to a torn one.
//!
//! The whole folder is read into an in-memory index when the store is opened; on a miss the
//! store first reads what other writers appended since (cheap: one directory listing), so
//! parallel processes running the same experiment share their replies.

use crate::registry::hex;
use merit_core::model::{
    ChatMessage, ChatModel, ChatReply, ChatRequest, Embedder, ModelError, ToolCall, ToolSpec,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Version of the key layout; bump it to invalidate every cached reply at once.
const KEY_VERSION: u32 = 1;

/// Distinguishes segments created by stores of one process.
static SEGMENT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The content address of a chat call: sha256 (hex) of a canonical JSON of the model id, the
/// full messages, every decoding parameter and the prompt version.
pub fn chat_key(model_id: &str, request: &ChatRequest) -> String {
    #[derive(Serialize)]
    struct Key<'a> {
        v: u32,
        kind: &'static str,
        model: &'a str,
        messages: &'a [ChatMessage],
        temperature: f32,
        max_tokens: u32,
        stop: &'a [String],
        seed: u64,
        prompt_version: &'a str,
        // Absent without tools, so keys of plain requests are those of earlier versions.
        #[serde(skip_serializing_if = "<[ToolSpec]>::is_empty")]
        tools: &'a [ToolSpec],
        // Absent without a grammar, for the same reason.
        #[serde(skip_serializing_if = "Option::is_none")]
        grammar: Option<&'a str>,
    }
    let decoding = &request.decoding;
    // -0.0 and 0.0 both mean greedy; one key for both.
    let temperature = if decoding.temperature == 0.0 {
        0.0
    } else {
        decoding.temperature
    };
    digest(&Key {
        v: KEY_VERSION,
        kind: "chat",
        model: model_id,
        messages: &request.messages,
        temperature,
        max_tokens: decoding.max_tokens,
        stop: &decoding.stop,
        seed: decoding.seed,
        prompt_version: &request.prompt_version,
        tools: &request.tools,
        grammar: decoding.grammar.as_deref(),
    })
}

/// The content address of one embedded text.
pub fn embedding_key(model_id: &str, text: &str) -> String {
    #[derive(Serialize)]
    struct Key<'a> {
        v: u32,
        kind: &'static str,
        model: &'a str,
        text: &'a str,
    }
    digest(&Key {
        v: KEY_VERSION,
        kind: "embedding",
        model: model_id,
        text,
    })
}

fn digest(value: &impl Serialize) -> String {
    // Struct fields serialise in declaration order, so the JSON (and the hash) is canonical.
    let json = serde_json::to_vec(value).expect("key structs always serialise");
    hex(&Sha256::digest(&json))
}

/// One line of a segment.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    key: String,
    #[serde(flatten)]
    value: Stored,
    /// Model id, for people reading the files.
    #[serde(default)]
    model: String,
    /// Unix milliseconds when stored.
    #[serde(default)]
    at: u64,
}

/// A stored value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Stored {
    Chat {
        reply: StoredReply,
    },
    /// The vector as little-endian f32 bytes in hex: exact, unlike decimal floats.
    Embedding {
        vector: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredReply {
    text: String,
    prompt_tokens: u32,
    completion_tokens: u32,
    latency_ms: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
}

fn encode_vector(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    hex(&bytes)
}

fn decode_vector(text: &str) -> Option<Vec<f32>> {
    if !text.len().is_multiple_of(8) {
        return None;
    }
    let nibble = |c: u8| -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    };
    let bytes: Option<Vec<u8>> = text
        .as_bytes()
        .chunks(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect();
    let vector: Vec<f32> = bytes?
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    // No embedder this store caches writes an infinity or a NaN (the caching embedder refuses
    // them before storing), so such an entry is damage, and serving it would turn every
    // similarity computed with it into NaN: it reads as a miss and is computed again.
    vector.iter().all(|x| x.is_finite()).then_some(vector)
}

/// What a store knows about its folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Entries in the index.
    pub entries: usize,
    /// Segment files read.
    pub segments: usize,
    /// Complete lines skipped because they did not parse (damaged).
    pub skipped_lines: usize,
    /// Segments that ended in an incomplete line at the last look (a writer killed
    /// mid-write, or one still writing).
    pub incomplete_tails: usize,
}

/// The segment this store appends to.
struct Segment {
    path: PathBuf,
    file: File,
}

#[derive(Default)]
struct ReadState {
    /// Bytes consumed per segment file name (only complete lines are consumed).
    consumed: HashMap<PathBuf, u64>,
    /// Segments whose unreadable tail was already reported.
    warned: HashSet<PathBuf>,
    /// Segments that ended in an incomplete line at the last look.
    tails: HashSet<PathBuf>,
    skipped_lines: usize,
}

/// A folder of reply-cache segments with an in-memory index (see the [module docs](self)).
pub struct ReplyStore {
    dir: PathBuf,
    durable: bool,
    index: RwLock<HashMap<String, Stored>>,
    reader: Mutex<ReadState>,
    writer: Mutex<Option<Segment>>,
    /// Keys whose reply a thread of this process is computing now ([`ReplyStore::claim`]).
    in_flight: Mutex<HashMap<String, Arc<Flight>>>,
}

/// One computation in flight: waiters sleep until `done`.
#[derive(Default)]
struct Flight {
    done: Mutex<bool>,
    signal: Condvar,
}

/// The answer of [`ReplyStore::claim`].
pub enum Claim<'a> {
    /// This caller computes the key's reply; the claim ends when the guard is dropped (after
    /// the reply is stored, or on failure).
    Mine(ClaimGuard<'a>),
    /// Another thread was computing it and has finished (stored or failed): look again.
    Waited,
}

/// Holds a key's claim; dropping it wakes the callers waiting for that key.
pub struct ClaimGuard<'a> {
    store: &'a ReplyStore,
    key: String,
    flight: Arc<Flight>,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        lock(&self.store.in_flight).remove(&self.key);
        *lock(&self.flight.done) = true;
        self.flight.signal.notify_all();
    }
}

impl std::fmt::Debug for ReplyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyStore")
            .field("dir", &self.dir)
            .field("durable", &self.durable)
            .field("entries", &self.len())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves plain data that is still consistent
    // (every update is a single insert), so poisoning is ignored rather than propagated.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ReplyStore {
    /// Opens (creating if needed) the cache folder `dir` and loads every complete entry.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<ReplyStore> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let store = ReplyStore {
            dir,
            durable: true,
            index: RwLock::new(HashMap::new()),
            reader: Mutex::new(ReadState::default()),
            writer: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
        };
        store.refresh()?;
        Ok(store)
    }

    /// Turns the per-entry `fdatasync` off (faster; entries then survive a process kill but
    /// not a power cut). Tests and throwaway runs only.
    pub fn without_fsync(mut self) -> ReplyStore {
        self.durable = false;
        self
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of entries in the index.
    pub fn len(&self) -> usize {
        self.index.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// `true` when the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts for diagnostics.
    pub fn stats(&self) -> StoreStats {
        let reader = lock(&self.reader);
        StoreStats {
            entries: self.len(),
            segments: reader.consumed.len(),
            skipped_lines: reader.skipped_lines,
            incomplete_tails: reader.tails.len(),
        }
    }

    /// Reads whatever other writers appended since the last look. Returns the number of new
    /// entries.
    pub fn refresh(&self) -> io::Result<usize> {
        let own = lock(&self.writer)
            .as_ref()
            .map(|segment| segment.path.clone());
        let mut reader = lock(&self.reader);
        let mut fresh = Vec::new();
        let mut entries = fs::read_dir(&self.dir)?.collect::<io::Result<Vec<_>>>()?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let path = entry.path();
            let is_segment = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("seg-") && name.ends_with(".jsonl"));
            if !is_segment || own.as_ref() == Some(&path) {
                continue;
            }
            let consumed = reader.consumed.get(&path).copied().unwrap_or(0);
            // One stat per segment; only segments that grew are opened.
            if entry.metadata().is_ok_and(|meta| meta.len() <= consumed) && consumed > 0 {
                continue;
            }
            let (lines, new_consumed, skipped, tail) = match read_segment(&path, consumed) {
                Ok(read) => read,
                Err(error) => {
                    tracing::warn!(path = %path.display(), "cannot read cache segment: {error}");
                    continue;
                }
            };
            reader.consumed.insert(path.clone(), new_consumed);
            reader.skipped_lines += skipped;
            if skipped > 0 {
                tracing::warn!(
                    path = %path.display(),
                    "skipped {skipped} unreadable line(s) in a reply-cache segment"
                );
            }
            if tail {
                reader.tails.insert(path.clone());
            } else {
                reader.tails.remove(&path);
            }
            if tail && reader.warned.insert(path.clone()) {
                // Either a writer is still busy with that line or it was killed mid-write;
                // either way the line is not (yet) an entry.
                tracing::warn!(
                    path = %path.display(),
                    "reply-cache segment ends in an incomplete line (a writer was killed or is still writing); ignoring it"
                );
            }
            fresh.extend(lines);
        }
        drop(reader);
        let count = fresh.len();
        if count > 0 {
            let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
            // The first entry of a key wins (segments are read in name order), so every reader
            // of the same files serves the same reply even when two processes both computed it.
            for line in fresh {
                index.entry(line.key).or_insert(line.value);
            }
        }
        Ok(count)
    }

    fn get(&self, key: &str) -> Option<Stored> {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Looks `key` up, reading other writers' new entries on a miss.
    fn lookup(&self, key: &str) -> Option<Stored> {
        if let Some(found) = self.get(key) {
            return Some(found);
        }
        if let Err(error) = self.refresh() {
            tracing::warn!(dir = %self.dir.display(), "cannot refresh the reply cache: {error}");
        }
        self.get(key)
    }

    /// Claims the computation of `key`'s reply for the calling thread, so that concurrent
    /// callers of one request (two streams reaching the same prompt at once) compute it once
    /// and all get the reply that is stored. When another thread holds the claim, this waits
    /// until it is released and answers [`Claim::Waited`]: the reply is then in the store,
    /// unless that computation failed or was not stored, and the caller tries again.
    pub fn claim(&self, key: &str) -> Claim<'_> {
        let mut flights = lock(&self.in_flight);
        if let Some(flight) = flights.get(key).map(Arc::clone) {
            drop(flights);
            let mut done = lock(&flight.done);
            while !*done {
                done = flight
                    .signal
                    .wait(done)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            return Claim::Waited;
        }
        let flight = Arc::new(Flight::default());
        flights.insert(key.to_string(), Arc::clone(&flight));
        Claim::Mine(ClaimGuard {
            store: self,
            key: key.to_string(),
            flight,
        })
    }

    /// A cached chat reply by key (with `cached: true`).
    pub fn get_chat(&self, key: &str) -> Option<ChatReply> {
        match self.lookup(key)? {
            Stored::Chat { reply } => Some(ChatReply {
                text: reply.text,
                prompt_tokens: reply.prompt_tokens,
                completion_tokens: reply.completion_tokens,
                latency: Duration::from_millis(reply.latency_ms),
                cached: true,
                tool_calls: reply.tool_calls,
            }),
            Stored::Embedding { .. } => None,
        }
    }

    /// A cached embedding by key.
    pub fn get_embedding(&self, key: &str) -> Option<Vec<f32>> {
        match self.lookup(key)? {
            Stored::Embedding { vector } => decode_vector(&vector),
            Stored::Chat { .. } => None,
        }
    }

    /// Stores a chat reply under `key`.
    pub fn put_chat(&self, key: &str, model: &str, reply: &ChatReply) -> io::Result<()> {
        self.append(Line {
            key: key.to_string(),
            value: Stored::Chat {
                reply: StoredReply {
                    text: reply.text.clone(),
                    prompt_tokens: reply.prompt_tokens,
                    completion_tokens: reply.completion_tokens,
                    latency_ms: reply.latency.as_millis().min(u128::from(u64::MAX)) as u64,
                    tool_calls: reply.tool_calls.clone(),
                },
            },
            model: model.to_string(),
            at: unix_millis(),
        })
    }

    /// Stores an embedding under `key`.
    pub fn put_embedding(&self, key: &str, model: &str, vector: &[f32]) -> io::Result<()> {
        self.append(Line {
            key: key.to_string(),
            value: Stored::Embedding {
                vector: encode_vector(vector),
            },
            model: model.to_string(),
            at: unix_millis(),
        })
    }

    fn append(&self, line: Line) -> io::Result<()> {
        let mut text = serde_json::to_string(&line).map_err(io::Error::other)?;
        text.push('\n');
        let mut writer = lock(&self.writer);
        if writer.is_none() {
            *writer = Some(self.new_segment()?);
        }
        let segment = writer.as_mut().expect("segment just created");
        let written = segment.file.write_all(text.as_bytes()).and_then(|()| {
            if self.durable {
                segment.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(error) = written {
            // The segment may now end in a partial line; never append after it.
            tracing::warn!(path = %segment.path.display(), "reply-cache write failed, retiring segment: {error}");
            *writer = None;
            return Err(error);
        }
        drop(writer);
        self.index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(line.key)
            .or_insert(line.value);
        Ok(())
    }

    fn new_segment(&self) -> io::Result<Segment> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = SEGMENT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = self
            .dir
            .join(format!("seg-{}-{nanos}-{n}.jsonl", std::process::id()));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        if self.durable {
            // Make the new name itself durable, not only its content.
            if let Ok(dir) = File::open(&self.dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(Segment { path, file })
    }
}

/// Reads the complete lines of a segment from `offset`: returns the entries, the new offset
/// (just past the last newline), the number of unparsable complete lines, and whether an
/// incomplete tail follows.
fn read_segment(path: &Path, offset: u64) -> io::Result<(Vec<Line>, u64, usize, bool)> {
    let mut file = File::open(path)?;
    let length = file.metadata()?.len();
    if length <= offset {
        return Ok((Vec::new(), offset, 0, false));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity((length - offset) as usize);
    file.take(length - offset).read_to_end(&mut bytes)?;
    let complete = bytes
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |last| last + 1);
    let mut lines = Vec::new();
    let mut skipped = 0;
    for raw in bytes[..complete].split(|byte| *byte == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Line>(raw) {
            Ok(line) => lines.push(line),
            Err(_) => skipped += 1,
        }
    }
    let tail = complete < bytes.len();
    Ok((lines, offset + complete as u64, skipped, tail))
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Counts for one kind of call (live or cached) under one label.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Calls (a chat call, or an `embed` call over a batch of texts).
    pub calls: u64,
    /// Prompt tokens as the backend counted them.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// Texts embedded.
    pub texts: u64,
    /// Summed wall time in milliseconds (for cached replies: of the original live calls).
    pub latency_ms: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.texts += other.texts;
        self.latency_ms += other.latency_ms;
    }
}

/// Live and cached counts of one label, kept apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabelTally {
    /// Calls answered by the model.
    pub live: Tally,
    /// Calls answered by the reply cache.
    pub cached: Tally,
    /// Live calls that failed.
    pub failures: u64,
}

impl LabelTally {
    fn add(&mut self, other: &LabelTally) {
        self.live.add(&other.live);
        self.cached.add(&other.cached);
        self.failures += other.failures;
    }
}

/// A copy of all counters, serialisable for experiment reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountingSnapshot {
    /// Per label (method, stream, ...), sorted.
    pub labels: BTreeMap<String, LabelTally>,
    /// Sum over labels.
    pub total: LabelTally,
}

/// Thread-safe call counters per label, live and cached apart.
#[derive(Debug, Default)]
pub struct Accounting {
    labels: Mutex<BTreeMap<String, LabelTally>>,
}

impl Accounting {
    /// Empty counters.
    pub fn new() -> Accounting {
        Accounting::default()
    }

    fn update(&self, label: &str, change: impl FnOnce(&mut LabelTally)) {
        let mut labels = lock(&self.labels);
        change(labels.entry(label.to_string()).or_default());
    }

    /// Counts one chat reply (live or cached, as `reply.cached` says).
    pub fn record_chat(&self, label: &str, reply: &ChatReply) {
        self.update(label, |tally| {
            let side = if reply.cached {
                &mut tally.cached
            } else {
                &mut tally.live
            };
            side.calls += 1;
            side.prompt_tokens += u64::from(reply.prompt_tokens);
            side.completion_tokens += u64::from(reply.completion_tokens);
            side.latency_ms += reply.latency.as_millis() as u64;
        });
    }

    /// Counts one `embed` call: `live` texts computed in `latency`, `cached` texts found.
    pub fn record_embedding(&self, label: &str, live: usize, cached: usize, latency: Duration) {
        self.update(label, |tally| {
            if live > 0 {
                tally.live.calls += 1;
                tally.live.texts += live as u64;
                tally.live.latency_ms += latency.as_millis() as u64;
            } else {
                tally.cached.calls += 1;
            }
            tally.cached.texts += cached as u64;
        });
    }

    /// Counts a failed live call.
    pub fn record_failure(&self, label: &str) {
        self.update(label, |tally| tally.failures += 1);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> AccountingSnapshot {
        let labels = lock(&self.labels).clone();
        let mut total = LabelTally::default();
        for tally in labels.values() {
            total.add(tally);
        }
        AccountingSnapshot { labels, total }
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        lock(&self.labels).clear();
    }
}

/// How a cached backend treats the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Look up, call the model on a miss, store the reply.
    #[default]
    ReadWrite,
    /// Look up, call the model on a miss, store nothing (e.g. a throwaway probe).
    ReadOnly,
    /// Look up only; a miss is an error. Proves a re-run costs no model calls.
    Replay,
}

/// The label used until [`CachedChat::with_label`] sets one.
pub const DEFAULT_LABEL: &str = "default";

/// A chat model behind the reply cache, counting its calls.
pub struct CachedChat<M: ChatModel + ?Sized> {
    inner: Arc<M>,
    store: Arc<ReplyStore>,
    accounting: Arc<Accounting>,
    label: String,
    mode: CacheMode,
}

impl<M: ChatModel + ?Sized> Clone for CachedChat<M> {
    fn clone(&self) -> Self {
        CachedChat {
            inner: Arc::clone(&self.inner),
            store: Arc::clone(&self.store),
            accounting: Arc::clone(&self.accounting),
            label: self.label.clone(),
            mode: self.mode,
        }
    }
}

impl<M: ChatModel> CachedChat<M> {
    /// Wraps `inner`, with fresh counters and the label [`DEFAULT_LABEL`].
    pub fn new(inner: M, store: Arc<ReplyStore>) -> CachedChat<M> {
        CachedChat::from_arc(Arc::new(inner), store)
    }
}

impl<M: ChatModel + ?Sized> CachedChat<M> {
    /// Wraps a shared (possibly `dyn`) model.
    pub fn from_arc(inner: Arc<M>, store: Arc<ReplyStore>) -> CachedChat<M> {
        CachedChat {
            inner,
            store,
            accounting: Arc::new(Accounting::new()),
            label: DEFAULT_LABEL.to_string(),
            mode: CacheMode::default(),
        }
    }

    /// Counts into `accounting` (shared with other wrappers) from now on.
    pub fn with_accounting(mut self, accounting: Arc<Accounting>) -> CachedChat<M> {
        self.accounting = accounting;
        self
    }

    /// A handle on the same model, cache and counters that counts under `label`.
    pub fn with_label(&self, label: impl Into<String>) -> CachedChat<M> {
        let mut handle = self.clone();
        handle.label = label.into();
        handle
    }

    /// Sets the cache mode.
    pub fn with_mode(mut self, mode: CacheMode) -> CachedChat<M> {
        self.mode = mode;
        self
    }

    /// The counters.
    pub fn accounting(&self) -> &Arc<Accounting> {
        &self.accounting
    }

    /// The label calls are counted under.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The store.
    pub fn store(&self) -> &Arc<ReplyStore> {
        &self.store
    }
}

impl<M: ChatModel + ?Sized> ChatModel for CachedChat<M> {
    fn id(&self) -> String {
        self.inner.id()
    }

    fn supports_tools(&self) -> bool {
        self.inner.supports_tools()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let model = self.inner.id();
        let key = chat_key(&model, request);
        // A reply already stored, or being computed by another thread (then its reply, once
        // stored): one request is answered once, whatever the concurrency, so a replay from
        // the cache gives every caller what it got live.
        let _claim = loop {
            if let Some(reply) = self.store.get_chat(&key) {
                self.accounting.record_chat(&self.label, &reply);
                return Ok(reply);
            }
            if self.mode == CacheMode::Replay {
                break None;
            }
            match self.store.claim(&key) {
                Claim::Waited => continue,
                Claim::Mine(guard) => match self.store.get(&key) {
                    // Stored between the lookup and the claim.
                    Some(_) => continue,
                    None => break Some(guard),
                },
            }
        };
        if self.mode == CacheMode::Replay {
            self.accounting.record_failure(&self.label);
            return Err(ModelError::Unavailable(format!(
                "reply not in the cache {} (replay mode, model {model}, key {key})",
                self.store.dir().display()
            )));
        }
        let mut reply = match self.inner.chat(request) {
            Ok(reply) => reply,
            Err(error) => {
                self.accounting.record_failure(&self.label);
                return Err(error);
            }
        };
        reply.cached = false;
        if self.mode == CacheMode::ReadWrite {
            // Losing a cache entry costs a repeated call later; failing the caller's call over
            // it would cost the experiment. Warn and go on.
            if let Err(error) = self.store.put_chat(&key, &model, &reply) {
                tracing::warn!(dir = %self.store.dir().display(), "cannot store a reply in the cache: {error}");
            }
        }
        self.accounting.record_chat(&self.label, &reply);
        Ok(reply)
    }
}

/// An embedder behind the reply cache (one entry per text), counting its calls.
pub struct CachedEmbedder<E: Embedder + ?Sized> {
    inner: Arc<E>,
    store: Arc<ReplyStore>,
    accounting: Arc<Accounting>,
    label: String,
    mode: CacheMode,
}

impl<E: Embedder + ?Sized> Clone for CachedEmbedder<E> {
    fn clone(&self) -> Self {
        CachedEmbedder {
            inner: Arc::clone(&self.inner),
            store: Arc::clone(&self.store),
            accounting: Arc::clone(&self.accounting),
            label: self.label.clone(),
            mode: self.mode,
        }
    }
}

impl<E: Embedder> CachedEmbedder<E> {
    /// Wraps `inner`, with fresh counters and the label [`DEFAULT_LABEL`].
    pub fn new(inner: E, store: Arc<ReplyStore>) -> CachedEmbedder<E> {
        CachedEmbedder::from_arc(Arc::new(inner), store)
    }
}

impl<E: Embedder + ?Sized> CachedEmbedder<E> {
    /// Wraps a shared (possibly `dyn`) embedder.
    pub fn from_arc(inner: Arc<E>, store: Arc<ReplyStore>) -> CachedEmbedder<E> {
        CachedEmbedder {
            inner,
            store,
            accounting: Arc::new(Accounting::new()),
            label: DEFAULT_LABEL.to_string(),
            mode: CacheMode::default(),
        }
    }

    /// Counts into `accounting` from now on.
    pub fn with_accounting(mut self, accounting: Arc<Accounting>) -> CachedEmbedder<E> {
        self.accounting = accounting;
        self
    }

    /// A handle on the same embedder, cache and counters that counts under `label`.
    pub fn with_label(&self, label: impl Into<String>) -> CachedEmbedder<E> {
        let mut handle = self.clone();
        handle.label = label.into();
        handle
    }

    /// Sets the cache mode.
    pub fn with_mode(mut self, mode: CacheMode) -> CachedEmbedder<E> {
        self.mode = mode;
        self
    }

    /// The counters.
    pub fn accounting(&self) -> &Arc<Accounting> {
        &self.accounting
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: Embedder + ?Sized> Embedder for CachedEmbedder<E> {
    fn id(&self) -> String {
        self.inner.id()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let model = self.inner.id();
        let dimension = self.inner.dimension();
        let keys: Vec<String> = texts
            .iter()
            .map(|text| embedding_key(&model, text))
            .collect();
        let mut vectors: Vec<Option<Vec<f32>>> = keys
            .iter()
            .map(|key| {
                self.store
                    .get_embedding(key)
                    .filter(|vector| vector.len() == dimension)
            })
            .collect();
        // Each distinct missing text is embedded once, however often it repeats in the batch.
        let mut missing: Vec<usize> = Vec::new();
        let mut seen = HashSet::new();
        for (position, vector) in vectors.iter().enumerate() {
            if vector.is_none() && seen.insert(keys[position].as_str()) {
                missing.push(position);
            }
        }
        let hits = vectors.iter().filter(|vector| vector.is_some()).count();
        if missing.is_empty() {
            self.accounting
                .record_embedding(&self.label, 0, hits, Duration::ZERO);
            return Ok(vectors.into_iter().map(|v| v.expect("all hits")).collect());
        }
        if self.mode == CacheMode::Replay {
            self.accounting.record_failure(&self.label);
            return Err(ModelError::Unavailable(format!(
                "{} embedding(s) not in the cache {} (replay mode, model {model})",
                missing.len(),
                self.store.dir().display()
            )));
        }
        let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
        let started = Instant::now();
        let computed = match self.inner.embed(&batch) {
            Ok(computed) => computed,
            Err(error) => {
                self.accounting.record_failure(&self.label);
                return Err(error);
            }
        };
        let latency = started.elapsed();
        if computed.len() != batch.len() {
            self.accounting.record_failure(&self.label);
            return Err(ModelError::Malformed(format!(
                "embedder returned {} vectors for {} texts",
                computed.len(),
                batch.len()
            )));
        }
        if let Some((index, _)) = computed
            .iter()
            .enumerate()
            .find(|(_, vector)| vector.iter().any(|x| !x.is_finite()))
        {
            // Neither cached nor returned: a non-finite component makes every cosine score
            // computed with the vector NaN, which would silently scramble retrieval.
            self.accounting.record_failure(&self.label);
            return Err(ModelError::Malformed(format!(
                "embedder returned a vector with a non-finite component (text {} of {}, model {model})",
                missing[index] + 1,
                texts.len()
            )));
        }
        let mut by_key: HashMap<&str, Vec<f32>> = HashMap::new();
        for (&position, vector) in missing.iter().zip(computed) {
            if self.mode == CacheMode::ReadWrite {
                if let Err(error) = self.store.put_embedding(&keys[position], &model, &vector) {
                    tracing::warn!(dir = %self.store.dir().display(), "cannot store an embedding in the cache: {error}");
                }
            }
            by_key.insert(keys[position].as_str(), vector);
        }
        for (position, slot) in vectors.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = by_key.get(keys[position].as_str()).cloned();
            }
        }
        self.accounting
            .record_embedding(&self.label, texts.len() - hits, hits, latency);
        Ok(vectors
            .into_iter()
            .map(|v| v.expect("every miss was computed"))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_exactly() {
        let vector = vec![0.1f32, -1.0e-30, f32::MAX, 0.333_333_34, -0.0];
        let decoded = decode_vector(&encode_vector(&vector)).unwrap();
        assert_eq!(
            vector.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            decoded.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert!(decode_vector("zz").is_none());
        assert!(decode_vector("abc").is_none());
    }

    #[test]
    fn a_stored_vector_with_an_infinity_or_a_nan_reads_as_a_miss() {
        let infinity_then_two = "0000807f00000040";
        assert!(decode_vector(infinity_then_two).is_none());
        assert!(decode_vector(&encode_vector(&[1.0, f32::NAN])).is_none());
        assert!(decode_vector(&encode_vector(&[f32::NEG_INFINITY])).is_none());
        assert_eq!(decode_vector(&encode_vector(&[2.0])), Some(vec![2.0]));
    }

    /// The fuzzer's first finding (`reply_cache`, 2026-12-06): a segment whose only readable
    /// entry for "k" is an embedding holding +inf served that infinity as a cached vector.
    #[test]
    fn the_fuzzers_segment_with_an_infinite_embedding_serves_no_vector() {
        let dir = tempfile::tempdir().unwrap();
        // The input exactly as the fuzzer saved it.
        let segment: &[u8] = b"{\"key\":\"k\",\"kind\":\"embedding\",\"vector\":\"0000807f00000040\",\"model\":\"m\",\"at\":1}\n{\"key\":\"k\",\"kind\":\"chat\",\"reply\":{\"text\":\"x\",\"prompt_tokens\":1,\"com\"id\":\"c1\",\"name\":\"execute\",\"arguments\":\"{\\\"sql\\\":\\\"SELECT 1\\\"}\"}]},\"mode\x97\xdd\xc5\xddm\",\"at\":2}\n{\"key\":\"k\",\"kind\":\"chat\",\"reply\":{\"text\":\"torn\n";
        std::fs::write(dir.path().join("seg-fuzz.jsonl"), segment).unwrap();
        let store = ReplyStore::open(dir.path()).unwrap();
        assert_eq!(store.get_embedding("k"), None);
        assert!(store.get_chat("k").is_none());
    }

    #[test]
    fn torn_tail_is_not_consumed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg-1-1-0.jsonl");
        fs::write(
            &path,
            b"{\"key\":\"a\",\"kind\":\"embedding\",\"vector\":\"\"}\n{\"key\":\"b\",\"ki",
        )
        .unwrap();
        let (lines, consumed, skipped, tail) = read_segment(&path, 0).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(skipped, 0);
        assert!(tail);
        let first_len = fs::read(&path)
            .unwrap()
            .iter()
            .position(|b| *b == b'\n')
            .unwrap()
            + 1;
        assert_eq!(consumed, first_len as u64);
    }
}
