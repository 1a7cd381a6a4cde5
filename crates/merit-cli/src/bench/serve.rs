//! `merit bench serve`: what `merit serve` costs per request under concurrent load.
//!
//! A scratch service on one Spider database, with a scripted model (instant, deterministic:
//! every failing query is repaired on the first step) and the hashed embedder, so that what is
//! timed is the service itself: HTTP, authentication, SQLite execution, retrieval, the memory
//! commit and the fsync'd journal. `--clients` threads each send ask → feedback pairs over
//! real sockets until `--requests` pairs are done. The baseline, measured in the same run, is
//! the same pairs called on the library (`merit_serve::Service`) from one thread, without
//! HTTP. Afterwards every acknowledged feedback is looked up in the memory: the benchmark
//! fails if one is lost or an entry is duplicated.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use merit_core::model::{ChatModel, ChatReply, ChatRequest, Embedder, ModelError};
use merit_live::UserFeedback;
use merit_memory::HashEmbedder;
use merit_serve::{hash_key, ServeConfig, Service, ServiceModels};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `merit bench serve`.
#[derive(Debug, Args)]
pub struct ServeBenchArgs {
    /// Folder with one folder per database (Spider's `database/`).
    #[arg(long)]
    db_dir: PathBuf,
    /// The database the questions ask about.
    #[arg(long, default_value = "concert_singer")]
    db: String,
    /// Concurrent HTTP clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Ask → feedback pairs in all.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Also time the library with its memory's journal on this PostgreSQL server (the shared
    /// memory of replicas), and how long a new replica takes to open that memory.
    #[arg(long)]
    memory_postgres: Option<String>,
}

const KEY: &str = "bench-serve-key";

/// Repairs every query to the same one, at once.
struct InstantRepair;

impl ChatModel for InstantRepair {
    fn id(&self) -> String {
        "bench:instant-repair".into()
    }

    fn chat(&self, _request: &ChatRequest) -> Result<ChatReply, ModelError> {
        Ok(ChatReply {
            text: "```sql\nSELECT 1\n```".into(),
            prompt_tokens: 0,
            completion_tokens: 0,
            latency: Duration::ZERO,
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

fn service(
    args: &ServeBenchArgs,
    state: &std::path::Path,
    memory_postgres: Option<&str>,
    tenant: &str,
) -> Result<Arc<Service>> {
    let path = merit_data::DatabaseDir::new(&args.db_dir)
        .locate(&args.db)
        .map_err(|missing| anyhow!("{missing}"))?;
    let shared = memory_postgres
        .map(|url| format!("memory_postgres = {url:?}\n"))
        .unwrap_or_default();
    let text = format!(
        "state_dir = {state:?}\n{shared}[[databases]]\nname = {db:?}\npath = {path:?}\n\
         [[keys]]\ntenant = {tenant:?}\nsha256 = \"{hash}\"\ndatabases = [{db:?}]\n",
        state = state.display().to_string(),
        db = args.db,
        path = path.display().to_string(),
        hash = hash_key(KEY),
    );
    let config = ServeConfig::parse(&text).map_err(|e| anyhow!(e))?;
    config.check().map_err(|e| anyhow!(e))?;
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(64));
    let models = ServiceModels {
        repair: Arc::new(InstantRepair),
        initial: None,
        embedder,
    };
    Ok(Arc::new(Service::start(config, models)?))
}

/// The question and failing SQL of pair `index` (every one differs, so the memory grows).
fn pair(index: usize) -> (String, String) {
    (
        format!("How many singers are there (request {index})?"),
        format!("SELECT count(*) FROM singers_{index}"),
    )
}

fn feedback_of(index: usize) -> UserFeedback {
    if index.is_multiple_of(4) {
        UserFeedback::Reject
    } else {
        UserFeedback::Confirm
    }
}

fn http(address: &str, path: &str, body: &Value) -> Result<Value> {
    let mut stream = TcpStream::connect(address)?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, payload) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed response"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{path}: {head} {payload}");
    }
    Ok(serde_json::from_str(payload)?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

struct Timings {
    ask_ms: Vec<f64>,
    feedback_ms: Vec<f64>,
    wall: Duration,
}

impl Timings {
    fn print(&mut self, label: &str, pairs: usize) {
        self.ask_ms.sort_by(f64::total_cmp);
        self.feedback_ms.sort_by(f64::total_cmp);
        println!(
            "{label}: {pairs} pairs in {:.2} s = {:.1} pairs/s; ask p50 {:.2} ms, p99 {:.2} ms; \
             feedback p50 {:.2} ms, p99 {:.2} ms",
            self.wall.as_secs_f64(),
            pairs as f64 / self.wall.as_secs_f64().max(1e-9),
            percentile(&self.ask_ms, 50.0),
            percentile(&self.ask_ms, 99.0),
            percentile(&self.feedback_ms, 50.0),
            percentile(&self.feedback_ms, 99.0),
        );
    }
}

/// The pairs on the library from one thread (the memory's journal a file, or a PostgreSQL
/// table under `tenant`).
fn library_baseline(
    args: &ServeBenchArgs,
    memory_postgres: Option<&str>,
    tenant: &str,
) -> Result<Timings> {
    let scratch = tempfile::tempdir()?;
    let service = service(args, scratch.path(), memory_postgres, tenant)?;
    let caller = service.authenticate(Some(&format!("Bearer {KEY}")))?;
    let mut timings = Timings {
        ask_ms: Vec::new(),
        feedback_ms: Vec::new(),
        wall: Duration::ZERO,
    };
    let started = Instant::now();
    for index in 0..args.requests {
        let (question, sql) = pair(index);
        let at = Instant::now();
        let answer = service.ask(&caller, &args.db, &question, "", Some(&sql))?;
        timings.ask_ms.push(at.elapsed().as_secs_f64() * 1000.0);
        let at = Instant::now();
        service.feedback(&caller, &args.db, answer.episode, feedback_of(index))?;
        timings
            .feedback_ms
            .push(at.elapsed().as_secs_f64() * 1000.0);
    }
    timings.wall = started.elapsed();
    Ok(timings)
}

/// The library with the memory's journal on PostgreSQL, against the file-journal baseline,
/// and the time a second replica takes to open the memory the run left (replaying every
/// event into its own index).
fn shared_memory(args: &ServeBenchArgs, url: &str, baseline: &Timings) -> Result<()> {
    // A tenant of its own: the table keeps earlier runs' memories.
    let tenant = format!(
        "bench{}x{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let mut shared = library_baseline(args, Some(url), &tenant)
        .context("the library on a PostgreSQL journal failed")?;
    shared.print("library, one thread, journal on PostgreSQL", args.requests);
    println!(
        "ratio PostgreSQL/file journal: throughput {:.2}x; ask p50 {:.2}x; feedback p50 {:.2}x",
        baseline.wall.as_secs_f64() / shared.wall.as_secs_f64().max(1e-9),
        percentile(&shared.ask_ms, 50.0) / percentile(&baseline.ask_ms, 50.0).max(1e-9),
        percentile(&shared.feedback_ms, 50.0) / percentile(&baseline.feedback_ms, 50.0).max(1e-9),
    );
    let scratch = tempfile::tempdir()?;
    let started = Instant::now();
    let replica = service(args, scratch.path(), Some(url), &tenant)?;
    let opened = started.elapsed();
    let caller = replica.authenticate(Some(&format!("Bearer {KEY}")))?;
    let memories = replica.memories(&caller, &args.db, None)?.len();
    println!(
        "a new replica opened the shared memory ({memories} memories, {} answers) in {:.2} s",
        args.requests,
        opened.as_secs_f64()
    );
    if memories != args.requests {
        bail!(
            "the new replica sees {memories} memories, not {}",
            args.requests
        );
    }
    // The replica's PostgreSQL connection closes here, outside any async runtime.
    drop(replica);
    Ok(())
}

/// What the clients collect: ask and feedback latencies (ms), and each acknowledged
/// feedback's episode with the finalization the service reported.
type Collected = (Vec<f64>, Vec<f64>, Vec<(u64, Value)>);

/// Runs `merit bench serve`.
pub fn run(args: ServeBenchArgs) -> Result<()> {
    if args.clients == 0 || args.requests == 0 {
        bail!("--clients and --requests must be at least 1");
    }
    println!(
        "machine: {} cores; {} clients, {} ask → feedback pairs, database {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        args.clients,
        args.requests,
        args.db
    );
    let mut baseline =
        library_baseline(&args, None, "bench").context("the library baseline failed")?;
    baseline.print("library, one thread (baseline)", args.requests);
    if let Some(url) = &args.memory_postgres {
        shared_memory(&args, url, &baseline)?;
    }

    let scratch = tempfile::tempdir()?;
    let service = service(&args, scratch.path(), None, "bench")?;
    let runtime = tokio::runtime::Runtime::new()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let address = listener.local_addr()?.to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(merit_serve::serve(
        Arc::clone(&service),
        listener,
        Duration::from_secs(3600),
        async {
            let _ = stopped.await;
        },
    ));
    let next = AtomicUsize::new(0);
    let results: Mutex<Collected> = Mutex::new((Vec::new(), Vec::new(), Vec::new()));
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..args.clients)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        if index >= args.requests {
                            return Ok(());
                        }
                        let (question, sql) = pair(index);
                        let at = Instant::now();
                        let answer = http(
                            &address,
                            "/v1/ask",
                            &json!({"database": args.db, "question": question, "sql": sql}),
                        )?;
                        let ask_ms = at.elapsed().as_secs_f64() * 1000.0;
                        let episode = answer["episode"]
                            .as_u64()
                            .ok_or_else(|| anyhow!("an answer without an episode: {answer}"))?;
                        let at = Instant::now();
                        let done = http(
                            &address,
                            "/v1/feedback",
                            &json!({"database": args.db, "episode": episode,
                                    "feedback": feedback_of(index)}),
                        )?;
                        let feedback_ms = at.elapsed().as_secs_f64() * 1000.0;
                        let mut results = results.lock().unwrap_or_else(|e| e.into_inner());
                        results.0.push(ask_ms);
                        results.1.push(feedback_ms);
                        results.2.push((episode, done));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker
                .join()
                .map_err(|_| anyhow!("a client thread failed"))??;
        }
        Ok(())
    })?;
    let wall = started.elapsed();
    let _ = stop.send(());
    runtime.block_on(server)??;
    let (ask_ms, feedback_ms, acknowledged) =
        results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut served = Timings {
        ask_ms,
        feedback_ms,
        wall,
    };
    served.print(&format!("HTTP, {} clients", args.clients), args.requests);
    println!(
        "ratio HTTP/library: throughput {:.2}x; ask p50 {:.2}x",
        baseline.wall.as_secs_f64() / served.wall.as_secs_f64().max(1e-9),
        percentile(&served.ask_ms, 50.0) / percentile(&baseline.ask_ms, 50.0).max(1e-9),
    );

    // Nothing lost, nothing duplicated.
    let caller = service.authenticate(Some(&format!("Bearer {KEY}")))?;
    let memories = service.memories(&caller, &args.db, None)?;
    let mut ids: Vec<u64> = memories.iter().map(|m| m.id).collect();
    let mut episodes: Vec<u64> = memories.iter().map(|m| m.episode).collect();
    ids.sort_unstable();
    ids.dedup();
    episodes.sort_unstable();
    episodes.dedup();
    let duplicated = memories.len() - ids.len().min(episodes.len());
    let lost = acknowledged
        .iter()
        .filter(|(episode, done)| {
            !memories
                .iter()
                .any(|m| Some(m.id) == done["memory"].as_u64() && m.episode == *episode)
        })
        .count();
    println!(
        "memories: {} for {} acknowledged feedbacks; lost {lost}, duplicated {duplicated}",
        memories.len(),
        acknowledged.len()
    );
    if lost > 0 || duplicated > 0 || acknowledged.len() != args.requests {
        bail!("the service lost or duplicated memories under load");
    }
    Ok(())
}
