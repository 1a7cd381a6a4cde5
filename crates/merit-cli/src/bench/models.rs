//! `merit bench models`: speed of the embedded models, measured in one run.
//!
//! Three measurements, each against its baseline in the same process:
//!
//! 1. **Prompt and generation speed** of the chat model on the initial Text-to-SQL prompt of
//!    a real database (about 600 tokens by default), from an empty KV cache.
//! 2. **A 7-step repair-like episode**: the initial prompt, then six rounds of "the query was
//!    wrong, here is the feedback, write a corrected one", each step re-sending the whole
//!    growing conversation. It runs once with prefix reuse (only the new suffix of each prompt
//!    is evaluated) and once without (every prompt from scratch), each with and without
//!    prompt-lookup decoding (greedy drafts copied from the prompt, checked in one batch):
//!    four runs. The later runs replay the replies of the first as the assistant turns, so all
//!    runs send exactly the same prompts; the benchmark also reports whether every run
//!    produced the same replies (lookup must not change greedy output).
//! 3. **Two conversations taking turns**, as an interact agent and the user simulator it asks
//!    share one model: the same episode, with a simulator call (its own system prompt and
//!    growing conversation) after every agent step, once with one KV cache and once with two
//!    cache slots (each conversation keeps its prefix). The second run replays the first's
//!    replies, so both send the same prompts.
//! 4. **Embedder throughput**: sentences per second at batch 32, and the latency of one.
//! 5. With `--depth N`, **speed deep in a conversation**: a conversation grown to about N
//!    tokens (the shape of a late interact turn: each turn an action and a long observation),
//!    then new turns appended one at a time, each evaluated on top of the reused conversation;
//!    prompt and generation speed there against the initial prompt's in the same run
//!    (attention over the whole context is what a cold short prompt does not pay).

use super::embedder::bench_embedder;
use super::episode::{run_episode, run_two_roles, EpisodeRun};
use super::llama_tool::{llama_batched_bench, ToolSpeed};
use crate::models::{load_chat_model_with, reexec_with_bounded_openmp_spin, ChatLoad};
use anyhow::{anyhow, Result};
use clap::Args;
use merit_core::model::{ChatMessage, ChatRequest, Decoding, Role};
use merit_core::Benchmark;
use merit_data::DatabaseDir;
use merit_models::llama::{CallStats, PromptLookup, DEFAULT_CONTEXT_SIZE};
use merit_repair::prompts::initial::{initial_request, schema_from_database, InitialTask};
use merit_sql::{Dialect, SqliteDatabase};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `merit bench models`.
#[derive(Debug, Args)]
pub struct ModelsBenchArgs {
    /// Folder with one folder per database (Spider's `database/`).
    #[arg(long)]
    db_dir: PathBuf,
    /// Spider database whose schema makes the prompt (`real_estate_properties`, a Spider dev
    /// database, gives an initial prompt of about 600 tokens with the default model).
    #[arg(long, default_value = "real_estate_properties")]
    db: String,
    /// Chat model.
    #[arg(long, default_value = merit_models::registry::DEFAULT_CHAT_MODEL)]
    model: String,
    /// A GGUF file to use instead of the cached or downloaded model.
    #[arg(long)]
    model_path: Option<PathBuf>,
    /// Embedder.
    #[arg(long, default_value = merit_models::registry::DEFAULT_EMBEDDER)]
    pub(super) embedder: String,
    /// A folder with the embedder's files to use instead of the cached or downloaded copy.
    #[arg(long)]
    pub(super) embedder_path: Option<PathBuf>,
    /// Timed repetitions of the prompt/generation measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Most tokens generated per episode step.
    #[arg(long, default_value_t = 96)]
    step_tokens: u32,
    /// Sentences embedded for the throughput figure.
    #[arg(long, default_value_t = 256)]
    pub(super) sentences: usize,
    /// CPU threads of the chat model (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Skip the 7-step episode, the two-conversation measurement and `--lookup-sweep`.
    #[arg(long)]
    no_episode: bool,
    /// Also run the episode (with prefix reuse) under each of these prompt-lookup settings,
    /// written `MAX_NGRAM:MIN_NGRAM:MAX_DRAFT` (e.g. `3:1:10,4:2:16`), to tune them (not with
    /// `--no-episode` or `--streams`).
    #[arg(long, value_delimiter = ',')]
    lookup_sweep: Vec<String>,
    /// llama.cpp's own `llama-batched-bench` (built by `scripts/setup-test-server.sh`): when
    /// given, it runs in the same process tree on the same GGUF file, prompt length, generated
    /// length and threads, as the baseline of the prompt/generation measurement.
    #[arg(long)]
    llama_bench: Option<PathBuf>,
    /// Also time the initial prompt's reply under the repair grammar of `--db`
    /// (`merit run --grammar`), against the same reply unconstrained.
    #[arg(long)]
    grammar: bool,
    /// Concurrent conversations through one embedded model (continuous batching), e.g.
    /// `1,2,4,8`: aggregate prompt and generation speed and latency at each number, against
    /// one call at a time; with `--llama-server`, against llama.cpp's server with as many
    /// slots; with `--llama-bench`, llama.cpp's batched benchmark at the same numbers.
    /// Runs after the initial-prompt measurements and replaces the episode, lookup-sweep and
    /// two-conversation measurements.
    #[arg(long, value_delimiter = ',')]
    streams: Vec<usize>,
    /// Most tokens generated per call in the `--streams` measurement.
    #[arg(long, default_value_t = 64)]
    stream_tokens: u32,
    /// llama.cpp's `llama-server` (built by `scripts/setup-test-server.sh`), the baseline of
    /// `--streams` a user would otherwise run.
    #[arg(long)]
    llama_server: Option<PathBuf>,
    /// Also measure prompt and generation speed on top of a conversation of about this many
    /// tokens (the context grows to hold it), against the initial prompt's speed; with
    /// `--llama-bench`, against llama.cpp's tool at the same depth too.
    #[arg(long)]
    depth: Option<u32>,
    /// Skip the chat model.
    #[arg(long)]
    no_chat: bool,
    /// Skip the embedder.
    #[arg(long)]
    no_embedder: bool,
}

/// Runs `merit bench models`.
pub fn run(args: ModelsBenchArgs) -> Result<()> {
    reexec_with_bounded_openmp_spin();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    println!(
        "machine: {} cores available, load average {load} at start, OMP_WAIT_POLICY={}, \
         GOMP_SPINCOUNT={}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "(unset)".to_string()),
        std::env::var("GOMP_SPINCOUNT").unwrap_or_else(|_| "(unset)".to_string())
    );
    if !args.no_chat {
        bench_chat(&args)?;
    }
    if !args.no_embedder {
        bench_embedder(&args)?;
    }
    Ok(())
}

fn bench_chat(args: &ModelsBenchArgs) -> Result<()> {
    let path = DatabaseDir::new(&args.db_dir)
        .locate(&args.db)
        .map_err(|missing| anyhow!("{missing}"))?;
    let database = SqliteDatabase::open(&path)?;
    let schema = schema_from_database(&database)?;
    let task = InitialTask {
        benchmark: Benchmark::Spider,
        dialect: Dialect::Sqlite,
        schema: &schema,
        question: "Which properties have more than one feature listed, and how many features \
                   does each of them have? Show the property name.",
        evidence: None,
    };
    let started = Instant::now();
    let chat = load_chat_model_with(
        &args.model,
        args.model_path.as_deref(),
        ChatLoad {
            threads: args.threads,
            ..ChatLoad::new(context_for_depth(args.depth))
        },
    )?;
    println!(
        "chat model: {} (loaded in {:.1} s, {} parameters, context {})",
        merit_core::model::ChatModel::id(&chat),
        started.elapsed().as_secs_f64(),
        chat.info().parameters,
        chat.info().context_size
    );

    // 1. Prompt and generation speed from a cold cache.
    let request = initial_request(
        &task,
        Decoding {
            max_tokens: 128,
            ..Decoding::default()
        },
    );
    let mut prompt_rates = Vec::new();
    let mut generation_rates = Vec::new();
    let mut last = CallStats::default();
    for _ in 0..args.repeat.max(1) {
        chat.clear_cache()?;
        let (_, stats) = chat.chat_with_stats(&request)?;
        prompt_rates.push(rate(stats.evaluated_tokens, stats.prompt_time));
        generation_rates.push(rate(stats.completion_tokens, stats.generation_time));
        last = stats;
    }
    let prompt_rate = median(&mut prompt_rates);
    let generation_rate = median(&mut generation_rates);
    println!(
        "initial prompt ({} tokens, database {}): prompt {:.1} tok/s, generation {:.1} tok/s \
         ({} tokens generated; median of {})",
        last.prompt_tokens,
        args.db,
        prompt_rate,
        generation_rate,
        last.completion_tokens,
        prompt_rates.len()
    );
    println!(
        "ratio prompt/generation speed: {:.1}x",
        prompt_rate / generation_rate.max(f64::MIN_POSITIVE)
    );
    if let Some(depth) = args.depth {
        let deep = bench_depth(&chat, &request, depth, args.repeat.max(1))?;
        println!(
            "at depth {} tokens ({} turns; {} new prompt tokens a call): prompt {:.1} tok/s, \
             generation {:.1} tok/s ({} tokens generated; median of {}); against the initial \
             prompt: prompt {:.2}x, generation {:.2}x",
            deep.depth,
            deep.turns,
            deep.fresh_tokens,
            deep.prompt_rate,
            deep.generation_rate,
            deep.generated,
            args.repeat.max(1),
            deep.prompt_rate / prompt_rate.max(f64::MIN_POSITIVE),
            deep.generation_rate / generation_rate.max(f64::MIN_POSITIVE)
        );
        println!(
            "the same {} tokens from an empty cache: prompt {:.1} tok/s",
            deep.cold_tokens, deep.cold_prompt_rate
        );
        if let Some(tool) = &args.llama_bench {
            // The tool's one sequence: a prompt as long as the last timed call's, then as many
            // generated tokens as it gave, so its generation runs at the same context depth.
            let (baseline, _) = tool_baseline(args, tool, deep.cold_tokens, deep.generated)?;
            println!(
                "llama.cpp's llama-batched-bench at that depth ({} prompt and {} generated \
                 tokens): prompt {:.1} tok/s, generation {:.1} tok/s (median of {}); merit / \
                 llama.cpp: cold prompt {:.2}, generation at depth {:.2}",
                deep.cold_tokens,
                deep.generated.max(1),
                baseline.prompt,
                baseline.generation,
                args.repeat.max(1),
                deep.cold_prompt_rate / baseline.prompt.max(f64::MIN_POSITIVE),
                deep.generation_rate / baseline.generation.max(f64::MIN_POSITIVE)
            );
        }
    }
    if args.grammar {
        let catalog = merit_repair::hints::SchemaCatalog::read(&database)?;
        let mut constrained = request.clone();
        constrained.decoding.grammar = Some(merit_repair::grammar::sql_grammar(
            &catalog,
            merit_repair::grammar::AliasRule::Listed,
        ));
        let mut rates = Vec::new();
        let mut stats = CallStats::default();
        let mut text = String::new();
        for _ in 0..args.repeat.max(1) {
            chat.clear_cache()?;
            let (reply, call) = chat.chat_with_stats(&constrained)?;
            rates.push(rate(call.completion_tokens, call.generation_time));
            (stats, text) = (call, reply.text);
        }
        println!(
            "under the repair grammar of {}: generation {:.1} tok/s ({} tokens; median of {}), \
             {:.2}x the unconstrained speed; reply: {:?}",
            args.db,
            median(&mut rates),
            stats.completion_tokens,
            args.repeat.max(1),
            median(&mut rates.clone()) / generation_rate.max(f64::MIN_POSITIVE),
            text
        );
    }
    if let Some(tool) = &args.llama_bench {
        let (baseline, threads) =
            tool_baseline(args, tool, last.prompt_tokens, last.completion_tokens)?;
        println!(
            "llama.cpp's llama-batched-bench, same model, {} prompt and {} generated tokens, {threads} \
             threads, its own OpenMP defaults: prompt {:.1} tok/s, generation {:.1} tok/s \
             (median of {})",
            last.prompt_tokens,
            last.completion_tokens.max(1),
            baseline.prompt,
            baseline.generation,
            args.repeat.max(1)
        );
        println!(
            "merit / llama.cpp: prompt {:.2}, generation {:.2}",
            prompt_rate / baseline.prompt.max(f64::MIN_POSITIVE),
            generation_rate / baseline.generation.max(f64::MIN_POSITIVE)
        );
    }

    if !args.streams.is_empty() {
        let files = crate::models::pull(&args.model, args.model_path.as_deref())?;
        let requests = crate::bench::streams::STREAM_QUESTIONS
            .iter()
            .map(|question| {
                initial_request(
                    &InitialTask { question, ..task },
                    Decoding {
                        max_tokens: args.stream_tokens,
                        ..Decoding::default()
                    },
                )
            })
            .collect();
        drop(chat);
        return crate::bench::streams::run(&crate::bench::streams::StreamsBench {
            model: &args.model,
            model_path: args.model_path.as_deref(),
            gguf: files.main_file(),
            threads: args
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            streams: &args.streams,
            requests,
            tokens: args.stream_tokens,
            llama_server: args.llama_server.as_deref(),
            llama_bench: args.llama_bench.as_deref(),
        });
    }
    if args.no_episode {
        return Ok(());
    }

    // 2. The repair-like episode, with and without prefix reuse and prompt lookup.
    let step_decoding = Decoding {
        max_tokens: args.step_tokens,
        ..Decoding::default()
    };
    let variants = [
        ("reuse + lookup", true, true),
        ("reuse only", true, false),
        ("lookup only", false, true),
        ("neither", false, false),
    ];
    let mut runs: Vec<(&str, EpisodeRun)> = Vec::new();
    for (label, reuse, lookup) in variants {
        chat.set_prefix_reuse(reuse);
        chat.set_prompt_lookup(lookup);
        chat.clear_cache()?;
        let replay = runs.first().map(|(_, first)| first.replies.as_slice());
        let run = run_episode(&chat, &request, &step_decoding, replay)?;
        runs.push((label, run));
    }
    chat.set_prefix_reuse(true);
    chat.set_prompt_lookup(false);
    for (label, run) in &runs {
        println!(
            "7-step episode, {label}: {:.1} s (prompt {:.1} s, generation {:.1} s); prompt \
             tokens sent {}, evaluated {}, generated {} in {} model steps ({:.1} tok/s), \
             drafted {}, accepted {}",
            run.total.as_secs_f64(),
            run.prompt_time.as_secs_f64(),
            run.generation_time.as_secs_f64(),
            run.prompt_tokens,
            run.evaluated_tokens,
            run.completion_tokens,
            run.generation_steps,
            run.completion_tokens as f64 / run.generation_time.as_secs_f64().max(1e-9),
            run.drafted_tokens,
            run.accepted_tokens
        );
    }
    for setting in &args.lookup_sweep {
        let params = parse_lookup(setting)?;
        chat.set_prompt_lookup_params(Some(params));
        chat.clear_cache()?;
        let run = run_episode(&chat, &request, &step_decoding, Some(&runs[0].1.replies))?;
        println!(
            "7-step episode, reuse + lookup {setting}: {:.1} s (generation {:.1} s, {} steps \
             for {} tokens, drafted {}, accepted {}); same replies: {}",
            run.total.as_secs_f64(),
            run.generation_time.as_secs_f64(),
            run.generation_steps,
            run.completion_tokens,
            run.drafted_tokens,
            run.accepted_tokens,
            if run.replies == runs[0].1.replies {
                "yes"
            } else {
                "NO"
            }
        );
    }
    chat.set_prompt_lookup(false);
    let identical = runs.iter().all(|(_, run)| run.replies == runs[0].1.replies);
    println!(
        "replies identical in all four runs: {}",
        if identical { "yes" } else { "NO" }
    );
    let time = |label: &str| {
        runs.iter()
            .find(|(name, _)| *name == label)
            .map_or(f64::NAN, |(_, run)| run.total.as_secs_f64().max(1e-9))
    };
    println!(
        "ratio episode time without/with prefix reuse (no lookup): {:.2}x",
        time("neither") / time("reuse only")
    );
    println!(
        "ratio episode time without/with prompt lookup (with reuse): {:.2}x",
        time("reuse only") / time("reuse + lookup")
    );
    println!(
        "ratio episode time neither/reuse + lookup: {:.2}x (target >= 3x)",
        time("neither") / time("reuse + lookup")
    );

    // 3. Two conversations taking turns: one KV cache, then two slots.
    let one_cache = run_two_roles(&chat, &request, &step_decoding, &runs[0].1.replies, None)?;
    drop(chat);
    let two_slots = load_chat_model_with(
        &args.model,
        args.model_path.as_deref(),
        ChatLoad {
            threads: args.threads,
            cache_slots: 2,
            ..ChatLoad::new(DEFAULT_CONTEXT_SIZE)
        },
    )?;
    let with_slots = run_two_roles(
        &two_slots,
        &request,
        &step_decoding,
        &runs[0].1.replies,
        Some(&one_cache.replies),
    )?;
    for (label, run) in [
        ("one KV cache", &one_cache),
        ("two cache slots", &with_slots),
    ] {
        println!(
            "7-step episode with a simulator call after each step, {label}: {:.1} s (prompt \
             {:.1} s); prompt tokens sent {}, evaluated {}",
            run.total.as_secs_f64(),
            run.prompt_time.as_secs_f64(),
            run.prompt_tokens,
            run.evaluated_tokens
        );
    }
    println!(
        "simulator replies identical: {}",
        if with_slots.replies == one_cache.replies {
            "yes"
        } else {
            "NO"
        }
    );
    println!(
        "ratio two-role episode time one cache/two slots: {:.2}x; prompt tokens evaluated: \
         {:.2}x",
        one_cache.total.as_secs_f64() / with_slots.total.as_secs_f64().max(1e-9),
        one_cache.evaluated_tokens as f64 / with_slots.evaluated_tokens.max(1) as f64
    );
    Ok(())
}

/// Reads a `--lookup-sweep` setting, `MAX_NGRAM:MIN_NGRAM:MAX_DRAFT`.
fn parse_lookup(setting: &str) -> Result<PromptLookup> {
    let numbers: Vec<usize> = setting
        .split(':')
        .map(|part| part.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            anyhow!("--lookup-sweep {setting:?}: expected MAX_NGRAM:MIN_NGRAM:MAX_DRAFT")
        })?;
    match numbers[..] {
        [max_ngram, min_ngram, max_draft] if min_ngram >= 1 && min_ngram <= max_ngram => {
            Ok(PromptLookup {
                max_ngram,
                min_ngram,
                max_draft,
            })
        }
        _ => Err(anyhow!(
            "--lookup-sweep {setting:?}: expected MAX_NGRAM:MIN_NGRAM:MAX_DRAFT with \
             1 <= MIN_NGRAM <= MAX_NGRAM"
        )),
    }
}

/// llama.cpp's `llama-batched-bench` on the benchmark's model file, one sequence of `prompt`
/// prompt and `generated` generated tokens (at least one), with the benchmark's threads; the
/// speeds and that thread count.
fn tool_baseline(
    args: &ModelsBenchArgs,
    tool: &std::path::Path,
    prompt: u32,
    generated: u32,
) -> Result<(ToolSpeed, usize)> {
    let files = crate::models::pull(&args.model, args.model_path.as_deref())?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let speed = llama_batched_bench(
        tool,
        files.main_file(),
        prompt as usize,
        (generated as usize).max(1),
        threads,
        args.repeat.max(1),
    )?;
    Ok((speed, threads))
}

/// The context a `--depth` measurement needs: the conversation, one more turn and its reply.
fn context_for_depth(depth: Option<u32>) -> u32 {
    depth.map_or(DEFAULT_CONTEXT_SIZE, |depth| {
        DEFAULT_CONTEXT_SIZE.max(depth.saturating_add(2048))
    })
}

/// What [`bench_depth`] measured.
struct DepthRun {
    /// Prompt tokens of the grown conversation.
    depth: u32,
    /// Action/observation turns it took to grow it.
    turns: usize,
    /// Prompt tokens evaluated per timed call (the last one's).
    fresh_tokens: u32,
    prompt_rate: f64,
    generation_rate: f64,
    /// The last timed call's whole prompt, evaluated again from an empty cache: its tokens
    /// and prompt speed (what llama.cpp's batched benchmark measures for a prompt that long).
    cold_tokens: u32,
    cold_prompt_rate: f64,
    /// Tokens generated by the last timed call.
    generated: u32,
}

/// One action/observation turn of the filler conversation: an `execute` step and, as its
/// observation, the initial prompt's text (schema and question: long, real, and numbered so
/// that no two turns are the same tokens).
fn filler_turn(turn: usize, observation: &str) -> [ChatMessage; 2] {
    [
        ChatMessage::assistant(format!(
            "Thought: look at the data once more (step {turn}).\nAction: execute(\"SELECT * \
             FROM Properties LIMIT {turn}\")"
        )),
        ChatMessage::user(format!("Observation {turn}:\n{observation}")),
    ]
}

/// Grows a conversation from `request` to at least `depth` prompt tokens (each call evaluates
/// only its new turn, by prefix reuse), then times `repeat` calls that each add one new turn
/// to that conversation: a different turn every time, so each evaluates its own turn on top
/// of the reused conversation. Last, the last call's whole prompt once more from an empty
/// cache.
fn bench_depth(
    chat: &merit_models::llama::LlamaChat,
    request: &ChatRequest,
    depth: u32,
    repeat: usize,
) -> Result<DepthRun> {
    let observation = request
        .messages
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
        .map(|message| message.content.clone())
        .ok_or_else(|| anyhow!("the initial request has no user message"))?;
    chat.clear_cache()?;
    let mut grown = request.clone();
    grown.decoding.max_tokens = 1;
    let mut turns = 0;
    let reached = loop {
        let (_, stats) = chat.chat_with_stats(&grown)?;
        if stats.prompt_tokens >= depth {
            break stats.prompt_tokens;
        }
        turns += 1;
        grown.messages.extend(filler_turn(turns, &observation));
    };
    let mut prompt_rates = Vec::new();
    let mut generation_rates = Vec::new();
    let mut last = CallStats::default();
    let mut last_call = grown.clone();
    for extra in 1..=repeat {
        let mut call = grown.clone();
        call.decoding = request.decoding.clone();
        call.messages
            .extend(filler_turn(turns + extra, &observation));
        let (_, stats) = chat.chat_with_stats(&call)?;
        prompt_rates.push(rate(stats.evaluated_tokens, stats.prompt_time));
        generation_rates.push(rate(stats.completion_tokens, stats.generation_time));
        last = stats;
        last_call = call;
    }
    chat.clear_cache()?;
    last_call.decoding.max_tokens = 1;
    let (_, cold) = chat.chat_with_stats(&last_call)?;
    Ok(DepthRun {
        depth: reached,
        turns,
        fresh_tokens: last.evaluated_tokens,
        prompt_rate: median(&mut prompt_rates),
        generation_rate: median(&mut generation_rates),
        cold_tokens: cold.evaluated_tokens,
        cold_prompt_rate: rate(cold.evaluated_tokens, cold.prompt_time),
        generated: last.completion_tokens,
    })
}

fn rate(tokens: u32, time: Duration) -> f64 {
    f64::from(tokens) / time.as_secs_f64().max(1e-9)
}

/// The median (upper middle for an even count; 0 for none).
pub(super) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
