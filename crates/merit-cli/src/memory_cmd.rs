//! `merit memory ls | show | explain`: look inside a MERIT memory directory and see why a
//! retrieval would pick what it picks.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use merit_memory::classify::classify;
use merit_memory::text::{entry_bm25_text, entry_dense_text};
use merit_memory::{
    load_entries, FailureType, HashEmbedder, MemoryEntry, MemoryId, PersistentMemory, Polarity,
    RetrievalQuery, StreamPos, Variant,
};
use std::path::PathBuf;

/// What to do with a memory directory.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List entries, one line each.
    Ls(LsArgs),
    /// Print one entry in full, with its retrieval documents.
    Show(ShowArgs),
    /// Rank the memory for a retrieval query and print every candidate's scores.
    Explain(ExplainArgs),
}

/// A polarity on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolarityArg {
    /// Confirmed corrections.
    Positive,
    /// Observed unsuccessful directions.
    Negative,
}

/// Arguments of `merit memory ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Memory directory (holding positive.jsonl and negative.jsonl).
    dir: PathBuf,
    /// Only this polarity.
    #[arg(long, value_enum)]
    polarity: Option<PolarityArg>,
    /// Only this failure type (e.g. schema_linking).
    #[arg(long = "type")]
    failure_type: Option<String>,
    /// Only entries from this database.
    #[arg(long)]
    db: Option<String>,
    /// Print JSON lines (the stored entries) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `merit memory show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Memory directory.
    dir: PathBuf,
    /// Entry id (`17` or `m17`).
    id: String,
    /// Print the stored JSON line only.
    #[arg(long)]
    json: bool,
}

/// Arguments of `merit memory explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Memory directory.
    dir: PathBuf,
    /// The current question.
    #[arg(long)]
    question: String,
    /// The current (failing) SQL.
    #[arg(long)]
    sql: String,
    /// The DBMS error of the current SQL, if any.
    #[arg(long)]
    error: Option<String>,
    /// The oracle status (default: execution-error with --error, else denotation-mismatch).
    #[arg(long, value_enum)]
    status: Option<crate::args::StatusArg>,
    /// The predicted failure type (default: what the classifier says).
    #[arg(long = "type")]
    failure_type: Option<String>,
    /// Database of the current question (for the database-scope variants).
    #[arg(long, default_value = "")]
    db_id: String,
    /// The current query id; its own memories are excluded.
    #[arg(long, default_value = "")]
    query_id: String,
    /// Stream position t; only entries from earlier positions are visible (default: after
    /// the last entry).
    #[arg(long)]
    position: Option<u64>,
    /// Retrieval policy: merit, type-reliability, dynamic-rag, positive-only, no-type-filter,
    /// no-dense, no-bm25, random-same-type, cross-database-only, same-database-only.
    #[arg(long, default_value = "merit")]
    variant: String,
    /// Seed of the random-order variant.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Repair step k of the query.
    #[arg(long, default_value_t = 1)]
    step: u32,
    /// Dimension of the hashing embedder used for the dense channel.
    #[arg(long, default_value_t = 384)]
    dimension: usize,
    /// Print the explanation as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(command: MemoryCommand) -> Result<()> {
    match command {
        MemoryCommand::Ls(args) => ls(args),
        MemoryCommand::Show(args) => show(args),
        MemoryCommand::Explain(args) => explain(args),
    }
}

fn load(dir: &std::path::Path) -> Result<Vec<MemoryEntry>> {
    let (entries, report) = load_entries(dir)
        .with_context(|| format!("cannot read the memory in {}", dir.display()))?;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(entries)
}

fn parse_type(text: &str) -> Result<FailureType> {
    FailureType::parse(text).with_context(|| {
        let names: Vec<&str> = FailureType::ALL.iter().map(|k| k.as_str()).collect();
        format!("unknown failure type {text:?}; one of {}", names.join(", "))
    })
}

/// Shortens `text` to one line of at most `width` characters.
fn clip(text: &str, width: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= width {
        return line;
    }
    let cut: String = line.chars().take(width.saturating_sub(1)).collect();
    format!("{cut}…")
}

fn ls(args: LsArgs) -> Result<()> {
    let wanted_type = args.failure_type.as_deref().map(parse_type).transpose()?;
    let wanted_polarity = args.polarity.map(|p| match p {
        PolarityArg::Positive => Polarity::Positive,
        PolarityArg::Negative => Polarity::Negative,
    });
    let entries = load(&args.dir)?;
    let shown: Vec<&MemoryEntry> = entries
        .iter()
        .filter(|e| wanted_polarity.is_none_or(|p| e.polarity == p))
        .filter(|e| wanted_type.is_none_or(|t| e.failure_type == t))
        .filter(|e| args.db.as_ref().is_none_or(|db| &e.provenance.db_id == db))
        .collect();
    if args.json {
        for entry in shown {
            say!("{}", merit_memory::store::serialize_entry(entry));
        }
        return Ok(());
    }
    say!(
        "{:<7} {:<8} {:<16} {:>6} {:>4} {:<18} {:<40} change",
        "id",
        "polarity",
        "type",
        "pos",
        "step",
        "db",
        "question"
    );
    for entry in &shown {
        say!(
            "{:<7} {:<8} {:<16} {:>6} {:>4} {:<18} {:<40} {}",
            entry.id.to_string(),
            entry.polarity.as_str(),
            entry.failure_type.as_str(),
            entry.provenance.stream_pos,
            entry.provenance.step,
            clip(&entry.provenance.db_id, 18),
            clip(&entry.context.question, 40),
            clip(&entry.transition.delta.render().replace('\n', " | "), 60),
        );
    }
    say!("{} of {} entries", shown.len(), entries.len());
    Ok(())
}

fn show(args: ShowArgs) -> Result<()> {
    let id =
        MemoryId::parse(&args.id).with_context(|| format!("{:?} is not a memory id", args.id))?;
    let entries = load(&args.dir)?;
    let Some(entry) = entries.iter().find(|e| e.id == id) else {
        bail!("no entry {id} in {}", args.dir.display());
    };
    if args.json {
        say!("{}", merit_memory::store::serialize_entry(entry));
        return Ok(());
    }
    let c = &entry.context;
    let t = &entry.transition;
    let p = &entry.provenance;
    say!(
        "entry {} ({}), format version {}",
        entry.id,
        entry.polarity,
        entry.format_version
    );
    say!(
        "failure type: {} (rule {})",
        entry.failure_type,
        entry.failure_rule
    );
    say!(
        "provenance: db {}, query {}, stream position {}, step {}, method {}, time {}",
        p.db_id,
        p.query_id,
        p.stream_pos,
        p.step,
        p.method,
        p.time
    );
    say!("\nquestion: {}", c.question);
    if !c.evidence.is_empty() {
        say!("evidence: {}", c.evidence);
    }
    say!("failing SQL: {}", c.failing_sql);
    say!("status: {}", c.status);
    say!("error: {}", c.error.as_deref().unwrap_or("(none)"));
    say!("\nrevision: {}", t.revised_sql);
    say!(
        "revision status: {}{}",
        t.revised_status,
        t.revised_error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    );
    say!("\nchange (Δ):\n{}", t.delta.render());
    say!("\n--- dense document ---\n{}", entry_dense_text(entry));
    say!("\n--- BM25 document ---\n{}", entry_bm25_text(entry));
    Ok(())
}

fn explain(args: ExplainArgs) -> Result<()> {
    let Some(variant) = Variant::parse(&args.variant) else {
        let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
        bail!(
            "unknown variant {:?}; one of {}",
            args.variant,
            names.join(", ")
        );
    };
    if args.dimension == 0 {
        bail!("--dimension must be at least 1");
    }
    let status = crate::args::failure_status(args.status, args.error.as_deref());
    let failure_type = match &args.failure_type {
        Some(text) => parse_type(text)?,
        None => match classify(status, args.error.as_deref()) {
            Some(label) => label.failure_type,
            None => bail!("--status says the query is correct; there is nothing to repair"),
        },
    };
    if !args.dir.is_dir() {
        bail!("{} is not a memory directory", args.dir.display());
    }
    // Until a neural embedder is wired in here, the dense channel uses the deterministic
    // hashing embedder; its scores show word overlap, not meaning.
    let embedder = HashEmbedder::new(args.dimension);
    let (memory, report) = PersistentMemory::open(&args.dir, &embedder)
        .with_context(|| format!("cannot open the memory in {}", args.dir.display()))?;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    let memory = memory.memory();
    let position = args.position.map(StreamPos).unwrap_or(StreamPos::END);
    let view = memory.view_at(position, &args.query_id);
    let query = RetrievalQuery {
        question: args.question,
        sql: args.sql,
        status,
        error: args.error,
        failure_type,
        db_id: args.db_id,
        step: args.step,
    };
    let config = variant.config(args.seed);
    let explanation = view.explain(&query, &config, &embedder)?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&explanation)?);
        return Ok(());
    }
    say!("embedder: {}", merit_core::model::Embedder::id(&embedder));
    say_raw!("{}", explanation.render());
    let selected: Vec<String> = explanation
        .pools
        .iter()
        .flat_map(|pool| pool.candidates.iter().filter(|c| c.selected))
        .map(|c| c.id.to_string())
        .collect();
    say!(
        "\nretrieved: {}",
        if selected.is_empty() {
            "(nothing)".to_string()
        } else {
            selected.join(", ")
        }
    );
    Ok(())
}
