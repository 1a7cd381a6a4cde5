//! `merit bench models --streams 1,2,4,8`: concurrent conversations through one embedded model
//! (continuous batching), against the same model one call at a time and against llama.cpp's
//! own server and batched benchmark, all measured in the same run.
//!
//! For each N, N different Text-to-SQL prompts on the benchmark database are sent at once, in
//! two passes: a **prompt pass** from empty caches with one generated token (aggregate prompt
//! tokens per second: what N streams starting together cost), then a **generation pass** of
//! the same prompts with `--stream-tokens` tokens each, which finds every prompt already
//! cached in its own sequence and so measures generation (aggregate generated tokens per
//! second, and each call's latency). The baseline is N = 1: the same prompts through the
//! one-at-a-time engine, one after another. The replies of every N are compared with the
//! baseline's: batched arithmetic can round a near-tie the other way, and how often that
//! changes a reply is reported as the divergence rate.

use crate::models::{load_chat_model_with, ChatLoad};
use anyhow::{anyhow, Result};
use merit_core::model::{ChatModel, ChatRequest, Decoding};
use merit_models::llama::{LlamaChat, DEFAULT_CONTEXT_SIZE};
use merit_models::openai::{OpenAiChat, OpenAiConfig, RetryPolicy};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Questions on `real_estate_properties` (the benchmark's default database), one per stream.
pub const STREAM_QUESTIONS: [&str; 8] = [
    "Which properties have more than one feature listed, and how many features does each of \
     them have? Show the property name.",
    "What is the average room count of the properties of each type? Show the type code.",
    "List the names of properties whose agreed selling price is above the average.",
    "How many properties have no feature listed at all?",
    "Which feature type appears most often? Show its name.",
    "For each property type, what is the highest vendor requested price?",
    "Show the addresses of properties that were sold in 2021 or later.",
    "What are the names of the features of the property with the most rooms?",
];

/// What one pass of N concurrent calls measured.
#[derive(Debug, Clone, Default)]
pub struct PassResult {
    pub wall: Duration,
    pub evaluated_tokens: u64,
    pub completion_tokens: u64,
    pub latencies: Vec<Duration>,
    pub replies: Vec<String>,
}

impl PassResult {
    fn prompt_rate(&self) -> f64 {
        self.evaluated_tokens as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn generation_rate(&self) -> f64 {
        self.completion_tokens as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn mean_tokens(&self) -> f64 {
        self.completion_tokens as f64 / self.replies.len().max(1) as f64
    }

    fn median_latency(&self) -> f64 {
        let mut values: Vec<f64> = self.latencies.iter().map(Duration::as_secs_f64).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// Sends `requests` from one thread each, all released together, and measures the whole.
/// `evaluated` reads the prompt tokens a reply evaluated (the server reports none: prompt
/// tokens count then).
fn concurrent_pass<M: ChatModel + ?Sized + 'static>(
    model: &Arc<M>,
    requests: &[ChatRequest],
    evaluated: impl Fn(&M, &ChatRequest) -> Result<(String, u64, u64)> + Sync,
) -> Result<PassResult> {
    let barrier = Barrier::new(requests.len() + 1);
    let (wall, outcomes) = std::thread::scope(|scope| {
        let handles: Vec<_> = requests
            .iter()
            .map(|request| {
                let (barrier, evaluated) = (&barrier, &evaluated);
                scope.spawn(move || {
                    barrier.wait();
                    let started = Instant::now();
                    let outcome = evaluated(model, request);
                    (started.elapsed(), outcome)
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|handle| handle.join().map_err(|_| anyhow!("a caller thread failed")))
            .collect();
        (started.elapsed(), outcomes)
    });
    let mut pass = PassResult {
        wall,
        ..PassResult::default()
    };
    for outcome in outcomes {
        let (latency, answer) = outcome?;
        let (text, prompt, completion) = answer?;
        pass.latencies.push(latency);
        pass.evaluated_tokens += prompt;
        pass.completion_tokens += completion;
        pass.replies.push(text);
    }
    Ok(pass)
}

/// The same requests one after another: the one-stream baseline.
fn sequential_pass(chat: &LlamaChat, requests: &[ChatRequest]) -> Result<PassResult> {
    let mut pass = PassResult::default();
    for request in requests {
        let started = Instant::now();
        let (reply, stats) = chat.chat_with_stats(request)?;
        let latency = started.elapsed();
        pass.wall += latency;
        pass.latencies.push(latency);
        pass.evaluated_tokens += u64::from(stats.evaluated_tokens);
        pass.completion_tokens += u64::from(stats.completion_tokens);
        pass.replies.push(reply.text);
    }
    Ok(pass)
}

fn with_tokens(requests: &[ChatRequest], max_tokens: u32) -> Vec<ChatRequest> {
    requests
        .iter()
        .map(|request| ChatRequest {
            decoding: Decoding {
                max_tokens,
                ..request.decoding.clone()
            },
            ..request.clone()
        })
        .collect()
}

/// Everything `--streams` needs.
pub struct StreamsBench<'a> {
    pub model: &'a str,
    pub model_path: Option<&'a Path>,
    pub gguf: &'a Path,
    pub threads: usize,
    pub streams: &'a [usize],
    pub requests: Vec<ChatRequest>,
    pub tokens: u32,
    pub llama_server: Option<&'a Path>,
    pub llama_bench: Option<&'a Path>,
}

/// Runs the benchmark and prints its table.
pub fn run(bench: &StreamsBench<'_>) -> Result<()> {
    let most = bench.streams.iter().copied().max().unwrap_or(1);
    if most > bench.requests.len() {
        return Err(anyhow!(
            "--streams goes up to {most} but only {} different prompts exist",
            bench.requests.len()
        ));
    }
    let prompt_requests = with_tokens(&bench.requests[..most], 1);
    let generation_requests = with_tokens(&bench.requests[..most], bench.tokens);
    let load = |parallel: usize| {
        load_chat_model_with(
            bench.model,
            bench.model_path,
            ChatLoad {
                threads: Some(bench.threads),
                parallel,
                ..ChatLoad::new(DEFAULT_CONTEXT_SIZE)
            },
        )
    };

    // The baseline: one call at a time (N = 1), every prompt of the largest N.
    let single = load(1)?;
    single.clear_cache()?;
    let _ = sequential_pass(&single, &prompt_requests)?;
    // Warm: each call below reuses its prompt only if it is the last one cached, so the
    // generation baseline is measured call by call after its own prompt pass.
    let mut baseline = PassResult::default();
    for request in &generation_requests {
        single.clear_cache()?;
        let mut warm = with_tokens(std::slice::from_ref(request), 1);
        let _ = sequential_pass(&single, &warm)?;
        warm = vec![request.clone()];
        let pass = sequential_pass(&single, &warm)?;
        baseline.wall += pass.wall;
        baseline.evaluated_tokens += pass.evaluated_tokens;
        baseline.completion_tokens += pass.completion_tokens;
        baseline.latencies.extend(pass.latencies);
        baseline.replies.extend(pass.replies);
    }
    single.clear_cache()?;
    let baseline_prompt = sequential_pass(&single, &prompt_requests)?;
    drop(single);
    let base_generation = baseline.generation_rate();
    let base_prompt = baseline_prompt.prompt_rate();
    println!(
        "streams: {} different prompts ({} tokens evaluated in all), {} generated tokens at \
         most per call, {} threads",
        most, baseline_prompt.evaluated_tokens, bench.tokens, bench.threads
    );
    println!(
        "| streams | engine | prompt tok/s | x one stream | generation tok/s | x one stream | \
         tokens per reply | median latency s | replies differing from one at a time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| 1 | merit, one at a time | {:.1} | 1.00 | {:.1} | 1.00 | {:.1} | {:.2} | - |",
        base_prompt,
        base_generation,
        baseline.mean_tokens(),
        baseline.median_latency()
    );
    let mut examples = Vec::new();
    let mut divergent = (0usize, 0usize);
    for &n in bench.streams.iter().filter(|&&n| n > 1) {
        let chat = Arc::new(load(n)?);
        let call = |chat: &LlamaChat, request: &ChatRequest| -> Result<(String, u64, u64)> {
            let (reply, stats) = chat.chat_with_stats(request)?;
            Ok((
                reply.text,
                u64::from(stats.evaluated_tokens),
                u64::from(stats.completion_tokens),
            ))
        };
        let prompt = concurrent_pass(&chat, &prompt_requests[..n], call)?;
        let generation = concurrent_pass(&chat, &generation_requests[..n], call)?;
        let differing = generation
            .replies
            .iter()
            .zip(&baseline.replies)
            .filter(|(a, b)| a != b)
            .count();
        examples.extend(
            generation
                .replies
                .iter()
                .zip(&baseline.replies)
                .filter(|(a, b)| a != b)
                .map(|(batched, single)| (n, divergence_example(single, batched))),
        );
        divergent.0 += differing;
        divergent.1 += n;
        let bases = (base_prompt, base_generation);
        let merit_row = row(n, "merit, batched", &prompt, &generation, bases);
        println!("{merit_row} {differing} of {n} |");
        drop(chat);
        if let Some(server) = bench.llama_server {
            let server = LlamaServer::start(server, bench.gguf, n, bench.threads)?;
            let client = Arc::new(server.client(bench.model)?);
            let call = |chat: &OpenAiChat, request: &ChatRequest| -> Result<(String, u64, u64)> {
                let reply = chat.chat(request)?;
                Ok((
                    reply.text,
                    u64::from(reply.prompt_tokens),
                    u64::from(reply.completion_tokens),
                ))
            };
            let prompt = concurrent_pass(&client, &prompt_requests[..n], call)?;
            let generation = concurrent_pass(&client, &generation_requests[..n], call)?;
            let server_row = row(
                n,
                &format!("llama-server --parallel {n}*"),
                &prompt,
                &generation,
                (base_prompt, base_generation),
            );
            println!("{server_row} - |");
        }
    }
    if bench.llama_server.is_some() {
        println!(
            "(* llama-server rows: the prompt rate counts the prompt tokens sent, not those it evaluated; its \
             prompt pass starts from a fresh server, so they are the same.)"
        );
    }
    println!(
        "divergence: {} of {} batched replies differ from the one-at-a-time reply",
        divergent.0, divergent.1
    );
    for (n, example) in &examples {
        println!("  at {n} streams: {example}");
    }
    episodes_at_once(bench, &load)?;
    if let Some(tool) = bench.llama_bench {
        let prompt_len = (baseline_prompt.evaluated_tokens / most.max(1) as u64) as usize;
        let rows = llama_batched_bench_rows(
            tool,
            bench.gguf,
            prompt_len,
            bench.tokens as usize,
            bench.threads,
            bench.streams,
        )?;
        let one = rows.first().map_or(f64::NAN, |row| row.2);
        for (n, pp, tg) in rows {
            println!(
                "llama-batched-bench, {n} sequences of {prompt_len} + {} tokens: prompt \
                 {pp:.1} tok/s, generation {tg:.1} tok/s ({:.2}x its one sequence)",
                bench.tokens,
                tg / one.max(1e-9)
            );
        }
    }
    Ok(())
}

/// The 7-step repair-like episode of `merit bench models` (each step re-sends the growing
/// conversation; prefix reuse evaluates only its new part), for N different questions: one
/// after another through the one-at-a-time engine, then N at once through the batched one,
/// replaying the first run's replies so that both send the same prompts.
fn episodes_at_once(
    bench: &StreamsBench<'_>,
    load: &dyn Fn(usize) -> Result<LlamaChat>,
) -> Result<()> {
    let most = bench.streams.iter().copied().max().unwrap_or(1);
    let decoding = Decoding {
        max_tokens: bench.tokens,
        ..Decoding::default()
    };
    let single = load(1)?;
    let mut alone = Vec::new();
    for request in &bench.requests[..most] {
        single.clear_cache()?;
        alone.push(crate::bench::episode::run_episode(
            &single, request, &decoding, None,
        )?);
    }
    drop(single);
    for &n in bench.streams.iter().filter(|&&n| n > 1) {
        let chat = load(n)?;
        let started = Instant::now();
        let indices: Vec<usize> = (0..n).collect();
        let runs = crate::files::all_at_once(&indices, "an episode", |&i| {
            crate::bench::episode::run_episode(
                &chat,
                &bench.requests[i],
                &decoding,
                Some(&alone[i].replies),
            )
        });
        let wall = started.elapsed().as_secs_f64();
        let runs = runs.into_iter().collect::<Result<Vec<_>>>()?;
        let one_by_one: f64 = alone[..n].iter().map(|run| run.total.as_secs_f64()).sum();
        let evaluated = |runs: &[crate::bench::episode::EpisodeRun]| -> u64 {
            runs.iter().map(|run| run.evaluated_tokens).sum()
        };
        println!(
            "{n} episodes of 7 steps: one after another {one_by_one:.1} s, at once {wall:.1} s \
             ({:.2}x); prompt tokens evaluated {} and {}, generated {} and {}",
            one_by_one / wall.max(1e-9),
            evaluated(&alone[..n]),
            evaluated(&runs),
            alone[..n]
                .iter()
                .map(|run| run.completion_tokens)
                .sum::<u64>(),
            runs.iter().map(|run| run.completion_tokens).sum::<u64>(),
        );
    }
    Ok(())
}

/// The start of a table row: aggregate speeds of the two passes, their ratios to the one-stream
/// `bases` (prompt, generation), tokens per reply and median latency.
fn row(
    n: usize,
    engine: &str,
    prompt: &PassResult,
    generation: &PassResult,
    (base_prompt, base_generation): (f64, f64),
) -> String {
    format!(
        "| {n} | {engine} | {:.1} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} |",
        prompt.prompt_rate(),
        prompt.prompt_rate() / base_prompt.max(1e-9),
        generation.generation_rate(),
        generation.generation_rate() / base_generation.max(1e-9),
        generation.mean_tokens(),
        generation.median_latency()
    )
}

/// Where two replies part: the shared beginning's length and what each says next.
fn divergence_example(single: &str, batched: &str) -> String {
    let shared = single
        .char_indices()
        .zip(batched.chars())
        .take_while(|((_, a), b)| a == b)
        .last()
        .map_or(0, |((at, c), _)| at + c.len_utf8());
    let next = |text: &str| -> String { text[shared..].chars().take(24).collect() };
    format!(
        "same first {shared} bytes, then one at a time {:?}, batched {:?}",
        next(single),
        next(batched)
    )
}

/// A `llama-server` with `parallel` slots and continuous batching, stopped on drop.
struct LlamaServer {
    child: Child,
    base: String,
}

impl LlamaServer {
    fn start(binary: &Path, model: &Path, parallel: usize, threads: usize) -> Result<LlamaServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let context = DEFAULT_CONTEXT_SIZE as usize * parallel;
        let child = Command::new(binary)
            .env_remove("OMP_WAIT_POLICY")
            .env_remove("GOMP_SPINCOUNT")
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", &context.to_string(), "-np", &parallel.to_string()])
            .args(["-t", &threads.to_string(), "-b", "512", "-ub", "512"])
            .args(["--cont-batching", "--no-webui"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| anyhow!("cannot start {}: {error}", binary.display()))?;
        Ok(LlamaServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    /// A client once the server answers (it loads the model first).
    fn client(&self, model: &str) -> Result<OpenAiChat> {
        let mut config = OpenAiConfig::new(&self.base, model);
        config.retry = RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        };
        let client = OpenAiChat::new(config)?;
        let probe = ChatRequest {
            messages: vec![merit_core::model::ChatMessage::user("Hi")],
            decoding: Decoding {
                max_tokens: 1,
                ..Decoding::default()
            },
            prompt_version: "bench-probe".to_string(),
            tools: Vec::new(),
        };
        let started = Instant::now();
        loop {
            match client.chat(&probe) {
                Ok(_) => return Ok(client),
                Err(error) if started.elapsed() > Duration::from_secs(180) => {
                    return Err(anyhow!("llama-server did not answer in 180 s: {error}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(250)),
            }
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `llama-batched-bench` at each number of sequences: `(sequences, prompt tok/s, generation
/// tok/s)` per row.
fn llama_batched_bench_rows(
    tool: &Path,
    model: &Path,
    prompt_tokens: usize,
    generated_tokens: usize,
    threads: usize,
    streams: &[usize],
) -> Result<Vec<(usize, f64, f64)>> {
    let most = streams.iter().copied().max().unwrap_or(1);
    let context = ((prompt_tokens + generated_tokens + 64) * most)
        .next_power_of_two()
        .max(512);
    let list: Vec<String> = streams.iter().map(usize::to_string).collect();
    let output = Command::new(tool)
        .env_remove("OMP_WAIT_POLICY")
        .env_remove("GOMP_SPINCOUNT")
        .arg("-m")
        .arg(model)
        .args(["-c", &context.to_string(), "-b", "512", "-ub", "512"])
        .args(["-npp", &prompt_tokens.to_string()])
        .args(["-ntg", &generated_tokens.to_string()])
        .args(["-npl", &list.join(","), "-t", &threads.to_string()])
        .output()
        .map_err(|error| anyhow!("cannot run {}: {error}", tool.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(anyhow!("{} failed ({})", tool.display(), output.status));
    }
    let rows = crate::bench::llama_tool::batched_bench_rows(&stdout);
    if rows.is_empty() {
        return Err(anyhow!(
            "no result rows in llama-batched-bench's output:\n{stdout}"
        ));
    }
    Ok(rows)
}
