//! `merit interact prm annotate|train`: teacher rubrics and the student PRM.

use super::open_memory;
use crate::models::{chat, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use merit_interact::memory::RetrievalConfig;
use merit_interact::prm::{annotate, read_annotations, AnnotationPair, JudgeConfig, RubricJudge};
use merit_interact::runlog::read_log;
use merit_learn::student::{train_student, SplitBy, StudentTraining};
use merit_learn::train::turn_examples;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The process reward model's commands.
#[derive(Debug, Subcommand)]
pub enum PrmCommand {
    /// Teacher rubrics for (state, turn memory) pairs of a memory run (resumable).
    Annotate(AnnotateArgs),
    /// Train the student PRM on annotations (SFT, then GRPO) and write its agreement table.
    Train(PrmTrainArgs),
}

/// Arguments of `merit interact prm annotate`.
#[derive(Debug, Args)]
pub struct AnnotateArgs {
    /// A run directory made with `--memory` (its `episodes.jsonl` gives the states, its
    /// `memory/` the candidate turn memories).
    #[arg(long)]
    run: PathBuf,
    /// Annotation file (appended to; pairs already in it are skipped).
    #[arg(long)]
    out: PathBuf,
    /// Candidates per state (the embedding stage's top k).
    #[arg(long, default_value_t = 10)]
    candidates: usize,
    /// Annotate at most N new pairs in this invocation, taken in a stable pseudo-random order
    /// (spread over states and candidate ranks; a later invocation continues the sample).
    #[arg(long)]
    limit: Option<usize>,
    /// Judge up to K candidates of each state (pairs already in the file count), states taken
    /// in a stable pseudo-random order, instead of drawing pairs independently: the student
    /// then sees memories compared on the same state, which is what a turn selector needs
    /// from it (drawn independently, nearly every state has one judged pair, and a small
    /// student learns to rate the state rather than the memory).
    #[arg(long, value_name = "K")]
    per_state: Option<usize>,
    /// Decode the teacher's replies under a grammar of the rubric's JSON, so that a reply is
    /// the object alone and ends with it (read by the embedded model and llama.cpp's server;
    /// other servers ignore it). Recorded with each annotation; a file holds one setting.
    #[arg(long)]
    grammar: bool,
    #[command(flatten)]
    teacher: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Arguments of `merit interact prm train`.
#[derive(Debug, Args)]
pub struct PrmTrainArgs {
    /// Annotation files (from `merit interact prm annotate`).
    #[arg(long, required = true, num_args = 1..)]
    annotations: Vec<PathBuf>,
    /// Output folder: `student.safetensors` (+ `.json`), `agreement.md`, `agreement.json`.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the student's initial weights and of both training stages.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Percent of the pairs held out for the agreement table (the rest is split evenly
    /// between SFT and GRPO).
    #[arg(long, default_value_t = 20)]
    held_out_percent: u64,
    /// What the split draws: single pairs (the default), whole states, so that no state of
    /// the agreement table was seen in training (use it with `annotate --per-state`), or
    /// whole tasks, so that no episode has states on both sides either.
    #[arg(long, value_enum, default_value_t = SplitByArg::Pair)]
    split_by: SplitByArg,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// The unit `prm train` splits annotations by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitByArg {
    /// Each (state, memory) pair on its own.
    Pair,
    /// All pairs of a state together.
    State,
    /// All pairs of a task's states together (no episode on both sides).
    Task,
}

/// Runs a `prm` subcommand.
pub fn prm(command: PrmCommand) -> Result<()> {
    match command {
        PrmCommand::Annotate(args) => prm_annotate(args),
        PrmCommand::Train(args) => prm_train(args),
    }
}

fn prm_annotate(args: AnnotateArgs) -> Result<()> {
    // Annotation appends to its file: one process at a time per folder holding it.
    let _lock = crate::files::lock_folder_of(&args.out)?;
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let records = read_log(&args.run.join("episodes.jsonl"))
        .with_context(|| format!("cannot read the episode log of {}", args.run.display()))?
        .records;
    let memory = open_memory(&args.run.join("memory"), embedder.as_ref())?;
    let retrieval = RetrievalConfig {
        candidates: args.candidates,
        ..RetrievalConfig::default()
    };
    let examples = turn_examples(&records, &memory, embedder.as_ref(), &retrieval)?;
    let state_ids: Vec<String> = examples
        .iter()
        .map(|e| format!("{}#{}", e.instance_id, e.turn))
        .collect();
    let earlier = read_annotations(&args.out)?.records;
    if let Some(other) = earlier.iter().find(|r| r.grammar != args.grammar) {
        bail!(
            "{} holds annotations judged {} the rubric grammar (pair {} / memory {}); \
             continue it {} --grammar, or write to another file",
            args.out.display(),
            if other.grammar { "under" } else { "without" },
            other.state_id,
            other.memory_id,
            if other.grammar { "with" } else { "without" },
        );
    }
    let done: std::collections::BTreeSet<(String, u64)> = earlier
        .into_iter()
        .map(|r| (r.state_id, r.memory_id))
        .collect();
    if args.per_state == Some(0) {
        bail!("--per-state must be at least 1");
    }
    let mut pairs: Vec<AnnotationPair<'_>> = Vec::new();
    for (example, state_id) in examples.iter().zip(&state_ids) {
        for memory in &example.memories {
            if !done.contains(&(state_id.clone(), memory.id)) {
                pairs.push(AnnotationPair {
                    state_id,
                    state: &example.state,
                    memory,
                });
            }
        }
    }
    let total = pairs.len();
    // A stable pseudo-random order (a hash of the pair's ids, ties by position): a limited
    // invocation annotates pairs spread over many states and ranks instead of every candidate
    // of the first few states, and a later invocation continues the same sample.
    pairs.sort_by_cached_key(|pair| {
        merit_core::hash::fnv1a(format!("{}/{}", pair.state_id, pair.memory.id).as_bytes())
    });
    if let Some(per_state) = args.per_state {
        // Grouped by state (a stable order of states), each state filled up to K judged pairs.
        pairs.sort_by_cached_key(|pair| merit_core::hash::fnv1a(pair.state_id.as_bytes()));
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        for (state_id, _) in &done {
            *taken.entry(state_id.as_str()).or_default() += 1;
        }
        pairs.retain(|pair| {
            let count = taken.entry(pair.state_id).or_default();
            *count += 1;
            *count <= per_state
        });
    }
    if let Some(limit) = args.limit {
        pairs.truncate(limit);
    }
    eprintln!(
        "{} states, {} pairs not yet annotated, annotating {} now into {}",
        examples.len(),
        total,
        pairs.len(),
        args.out.display()
    );
    let teacher = chat(&args.teacher, &store)?;
    let judge = RubricJudge::new(
        teacher,
        JudgeConfig {
            grammar: args.grammar,
            ..JudgeConfig::default()
        },
    );
    let bar = crate::files::progress_bar(pairs.len(), "annotate");
    let mut report = merit_interact::prm::AnnotateReport::default();
    // Small chunks: the progress bar moves, and every judgement is synced as it is made.
    for chunk in pairs.chunks(16) {
        let one = annotate(&judge, chunk, &args.out)?;
        report.judged += one.judged;
        report.failures += one.failures;
        report.skipped += one.skipped;
        report.calls += one.calls;
        bar.inc(chunk.len() as u64);
        crate::files::log_progress_when_not_a_terminal(&bar, 10);
    }
    bar.finish_and_clear();
    println!(
        "judged {} pairs ({} unusable replies recorded as failures), {} model calls",
        report.judged, report.failures, report.calls
    );
    Ok(())
}

/// A stable split of a pair: 0..100 from its ids (FNV-1a), independent of file order; from
/// the state's id alone when splitting by state.
fn prm_train(args: PrmTrainArgs) -> Result<()> {
    let mut records = Vec::new();
    for file in &args.annotations {
        let loaded = read_annotations(file)
            .with_context(|| format!("cannot read annotations {}", file.display()))?;
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
        records.extend(loaded.records);
    }
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let trained = train_student(
        records,
        embedder.as_ref(),
        StudentTraining {
            held_out_percent: args.held_out_percent,
            split_by: match args.split_by {
                SplitByArg::Pair => SplitBy::Pair,
                SplitByArg::State => SplitBy::State,
                SplitByArg::Task => SplitBy::Task,
            },
            seed: args.seed,
        },
    )?;
    let (sft, grpo, held_out) = trained.sizes;
    eprintln!("pairs with a rubric: {sft} SFT, {grpo} GRPO, {held_out} held out");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    trained
        .student
        .save(&args.out.join("student.safetensors"))?;
    crate::files::write_result_file(
        &args.out.join("agreement.json"),
        serde_json::to_string_pretty(&trained.agreement)?.as_bytes(),
    )?;
    let markdown = trained.agreement.to_markdown();
    crate::files::write_result_file(&args.out.join("agreement.md"), markdown.as_bytes())?;
    print!("{markdown}");
    Ok(())
}
