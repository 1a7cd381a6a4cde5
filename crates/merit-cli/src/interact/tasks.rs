//! `merit interact gen`, `stats` and `init-db`: task sets and the databases they run on.

use crate::models::reexec_with_bounded_openmp_spin;
use crate::models::{chat, open_store, ChatArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `merit interact gen`.
#[derive(Debug, Args)]
pub struct InteractGenArgs {
    /// Seed SQL: a Spider question file (`train.json`, `dev.json`) or a `SQL<TAB>db_id` file.
    #[arg(long)]
    seeds: PathBuf,
    /// Split name used in seed ids (`train`, `dev`).
    #[arg(long)]
    split: String,
    /// Spider `tables.json` of the seeds' databases.
    #[arg(long)]
    tables: PathBuf,
    /// Folder with `<db_id>/<db_id>.sqlite`.
    #[arg(long)]
    db_dir: PathBuf,
    /// Output folder: `tasks.jsonl` (with ground truth), rejections, per-database metafiles.
    #[arg(long)]
    out: PathBuf,
    /// Write at most N new records in this invocation (a later one continues).
    #[arg(long)]
    limit: Option<usize>,
    /// Use at most N seeds, taken one database at a time in turn (so the records come from
    /// as many databases as possible); default: every seed in file order.
    #[arg(long)]
    seed_sample: Option<usize>,
    /// Also copy each database's SQLite file beside its metafiles.
    #[arg(long)]
    copy_databases: bool,
    /// Give query tasks a phase-2 follow-up where one applies (a count, the first three, or
    /// the number of different values of the first answer; its SQL is the ground truth).
    #[arg(long)]
    follow_ups: bool,
    /// Also make Management (write) tasks: a DELETE or UPDATE from each query target that
    /// filters one table, judged by state checks (Python test cases) the reference change
    /// passes.
    #[arg(long)]
    writes: bool,
    /// After generating, give records whose ambiguity map blurs a `column OP value`
    /// condition a knowledge-base entry (`{db}_kb.jsonl`), visible for about half of them and
    /// deleted for the others (a knowledge ambiguity); no model call, and records of earlier
    /// passes keep theirs.
    #[arg(long)]
    knowledge: bool,
    /// The writing model (the 1.5B embedded model writes usable drafts; the 0.5B rarely).
    #[command(flatten)]
    chat: ChatArgs,
    /// Reply cache folder (default: `$MERIT_HOME/replies`).
    #[arg(long)]
    cache: Option<PathBuf>,
}

/// Arguments of `merit interact stats`.
#[derive(Debug, Args)]
pub struct InteractStatsArgs {
    /// Generated task file(s) (`tasks.jsonl` from `merit interact gen`); one row each.
    #[arg(required = true)]
    tasks: Vec<PathBuf>,
    /// Folder with `<db_id>/<db_id>.sqlite` to execute each gold SQL on.
    #[arg(long)]
    db_dir: PathBuf,
    /// Seed SQL files (a Spider question file) to report the same structure figures for.
    #[arg(long)]
    seeds: Vec<PathBuf>,
    /// Embedder for the mean pairwise cosine distance.
    #[command(flatten)]
    embed: crate::models::EmbedArgs,
    /// Print JSON instead of Markdown.
    #[arg(long)]
    json: bool,
}

/// Arguments of `merit interact init-db`.
#[derive(Debug, Args)]
pub struct InteractInitDbArgs {
    /// The SQLite database file.
    #[arg(long)]
    sqlite: PathBuf,
    /// The database's name in task files (`selected_database`); default: the file's stem.
    #[arg(long)]
    name: Option<String>,
    /// Database root to write into (`OUT/NAME/NAME_schema.txt`, ..., `OUT/NAME/NAME.sqlite`).
    #[arg(long)]
    out: PathBuf,
}

pub(super) fn init_db(args: InteractInitDbArgs) -> Result<()> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .sqlite
            .file_stem()
            .and_then(|stem| stem.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow!(
                    "give --name: {} has no usable file name",
                    args.sqlite.display()
                )
            })?,
    };
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        bail!("--name {name:?} cannot be a folder name");
    }
    let schema = merit_interact::gen::schema_of_sqlite(&args.sqlite, &name)?;
    let dir = merit_interact::gen::write_spider_metafiles(&args.out, &schema, &args.sqlite, true)?;
    eprintln!(
        "{name}: {} tables; metafiles and database written to {} (use --db-root {})",
        schema.tables.len(),
        dir.display(),
        args.out.display()
    );
    Ok(())
}

pub(super) fn generate(args: InteractGenArgs) -> Result<()> {
    use merit_interact::gen;
    if !args.chat.is_server() {
        reexec_with_bounded_openmp_spin();
    }
    // Generation appends to the folder's task file and rewrites its metafiles: one process
    // at a time (a second one, e.g. a queued script beside a hand-run resume, is refused).
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let _lock = crate::files::lock_run_dir(&args.out)?;
    let mut seeds = gen::load_seeds(&args.seeds, &args.split)?;
    if let Some(count) = args.seed_sample {
        seeds = gen::spread_over_databases(seeds, count);
    }
    let schemas: std::collections::BTreeMap<String, merit_data::DatabaseSchema> =
        merit_data::load_tables(&args.tables)?
            .into_iter()
            .map(|schema| (schema.db_id.clone(), schema))
            .collect();
    let databases = merit_data::DatabaseDir::new(&args.db_dir);
    let (targets, perturbed) =
        gen::perturb_seeds(&seeds, &schemas, &databases, &gen::PerturbConfig::default())?;
    eprintln!(
        "{} seeds -> {} executable targets with rows ({perturbed:?})",
        seeds.len(),
        targets.len()
    );
    let (targets, extended) = gen::extend_targets(
        targets,
        &schemas,
        &databases,
        gen::Extensions {
            follow_ups: args.follow_ups,
            writes: args.writes,
        },
        gen::PerturbConfig::default().timeout,
    )?;
    if args.follow_ups || args.writes {
        eprintln!("extended: {extended:?}");
    }
    let model = chat(&args.chat, &open_store(args.cache.as_ref())?)?;
    let output = args.out.join("tasks.jsonl");
    let config = gen::GenConfig {
        max_new_records: args.limit,
        ..gen::GenConfig::default()
    };
    // The environment needs each database's metafiles beside the task file. They are written
    // as soon as a database has its first record (and for records of earlier runs now), so a
    // task file cut short by a kill is usable as it stands.
    let mut with_metafiles: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut ensure_metafiles = |db: &str| -> Result<()> {
        if with_metafiles.contains(db) {
            return Ok(());
        }
        let (Some(schema), Ok(file)) = (schemas.get(db), databases.locate(db)) else {
            bail!("database {db} of a generated task is not under --tables/--db-dir");
        };
        gen::write_spider_metafiles(&args.out, schema, &file, args.copy_databases)?;
        with_metafiles.insert(db.to_string());
        Ok(())
    };
    for task in gen::read_generated(&output)? {
        ensure_metafiles(&task.selected_database)?;
    }
    let bar = crate::files::progress_bar(targets.len(), "targets");
    let mut written = 0usize;
    let mut metafile_error: Option<anyhow::Error> = None;
    let report = gen::generate_tasks(
        &targets,
        &schemas,
        model.as_ref(),
        &output,
        &config,
        &mut |target, outcome| {
            if matches!(outcome, gen::TargetOutcome::Written) {
                written += 1;
                if let Err(error) = ensure_metafiles(&target.db_id) {
                    metafile_error.get_or_insert(error);
                }
            }
            bar.inc(1);
            bar.set_message(format!("targets: {written} written"));
            crate::files::log_progress_when_not_a_terminal(&bar, 10);
        },
    )?;
    bar.finish_and_clear();
    if let Some(error) = metafile_error {
        return Err(error);
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    if args.knowledge {
        let mut tasks = gen::read_generated(&output)?;
        let knowledge = gen::add_knowledge(&mut tasks, &schemas);
        if knowledge.new_entries + knowledge.reused_entries > 0 {
            gen::rewrite_generated(&output, &tasks)?;
        }
        // Every database's file is rewritten from the records, which also repairs one left
        // behind by a pass killed between the two writes.
        gen::write_knowledge_files(&args.out, &tasks)?;
        println!("{}", serde_json::to_string_pretty(&knowledge)?);
    }
    Ok(())
}

pub(super) fn stats(args: InteractStatsArgs) -> Result<()> {
    use merit_interact::gen;
    let databases = merit_data::DatabaseDir::new(&args.db_dir);
    let embedder = crate::models::embedder_for(&args.embed)?;
    let mut rows = Vec::new();
    for file in &args.tasks {
        let tasks = gen::read_generated(file)
            .with_context(|| format!("cannot read generated tasks {}", file.display()))?;
        let figures = gen::compute_stats(
            &tasks,
            &databases,
            Some(embedder.as_ref()),
            std::time::Duration::from_secs(30),
        )?;
        rows.push((file.display().to_string(), Some(figures), None));
    }
    for file in &args.seeds {
        let seeds = gen::load_seeds(file, "seed")?;
        let structure = gen::stats::structure_stats(seeds.iter().map(|s| s.sql.as_str()));
        rows.push((file.display().to_string(), None, Some(structure)));
    }
    if args.json {
        let value: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, figures, structure)| {
                serde_json::json!({"file": name, "generated": figures, "seeds": structure})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "| set | records | execution rate % | non-empty | distinct skeletons | JOIN % | window % | Self-BLEU-3 (amb / clear) | mean pairwise cosine distance |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, figures, structure) in &rows {
        match (figures, structure) {
            (Some(f), _) => println!(
                "| {name} | {} | {:.1} | {} | {} | {:.1} | {:.1} | {:.3} / {:.3} | {} |",
                f.tasks,
                f.execution_rate * 100.0,
                f.non_empty,
                f.structure.distinct_skeletons,
                f.structure.join_share * 100.0,
                f.structure.window_share * 100.0,
                f.self_bleu3_amb,
                f.self_bleu3_clear,
                f.mean_pairwise_cosine_distance
                    .map_or("-".to_string(), |d| format!("{d:.3}"))
            ),
            (None, Some(s)) => println!(
                "| {name} (seeds) | {} | - | - | {} | {:.1} | {:.1} | - | - |",
                s.queries,
                s.distinct_skeletons,
                s.join_share * 100.0,
                s.window_share * 100.0
            ),
            (None, None) => {}
        }
    }
    Ok(())
}
