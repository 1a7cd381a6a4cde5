//! `merit interact counterfactual`: logged episodes forked at a frozen turn.

use super::{open_memory, AgentBudgetArgs};
use crate::models::{chat, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{Context, Result};
use clap::Args;
use merit_interact::agent::ReactAgent;
use merit_interact::fork::FIRST_FORK_TURN;
use merit_interact::memory::{Level, RetrievalConfig};
use merit_interact::runlog::read_log;
use merit_interact::simulator::model::{ModelSimulator, ModelSimulatorConfig};
use merit_interact::{sqlite_backend, EnvConfig};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `merit interact counterfactual`.
/// Reads `--turn`: turn-level memory is first consulted before turn 2, so a fork at turn 1
/// would run identical arms.
fn first_fork_turn_or_later(text: &str) -> Result<usize, String> {
    let turn: usize = text
        .parse()
        .map_err(|_| format!("`{text}` is not a turn number"))?;
    if turn < FIRST_FORK_TURN {
        return Err(format!(
            "turn {turn} cannot be forked: turn-level memory is first consulted before turn {FIRST_FORK_TURN}"
        ));
    }
    Ok(turn)
}

#[derive(Debug, Args)]
pub struct CounterfactualArgs {
    /// The run whose logged episodes are forked.
    #[arg(long)]
    run: PathBuf,
    /// The frozen turn t: replies before it are replayed, turn t is the first new one (the
    /// paper's Table 4 freezes turn 7; episodes shorter than t are skipped). At least 2: the
    /// turn level is first consulted before the second turn.
    #[arg(long, default_value_t = 7, value_parser = first_fork_turn_or_later)]
    turn: usize,
    #[command(flatten)]
    task_set: crate::interact::TaskSetArgs,
    /// The frozen memory the selectors choose from.
    #[arg(long)]
    memory_from: PathBuf,
    /// A turn-level checkpoint: adds the learned arm.
    #[arg(long)]
    turn_selector: Option<PathBuf>,
    /// Markdown table written here (and printed); a JSON file of every fork beside it.
    #[arg(long)]
    out: PathBuf,
    /// Fork only the first N logged episodes long enough to reach the frozen turn.
    #[arg(long)]
    limit: Option<usize>,
    /// Every fork is appended here as it finishes, and a later invocation skips the forks
    /// already in it (same task, arm and turn). Default: the `--out` file with the extension
    /// `forks.jsonl`. Delete it to start over after changing the memory or a selector.
    #[arg(long)]
    log: Option<PathBuf>,
    /// The agent's budget in the forks (use the values of the run being forked).
    #[command(flatten)]
    budget: AgentBudgetArgs,
    #[command(flatten)]
    chat: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Runs `counterfactual`.
pub fn counterfactual(args: CounterfactualArgs) -> Result<()> {
    use merit_interact::fork::{fork_episodes, fork_table, summarise_forks, ForkArm, ForkSpec};
    use merit_interact::memory::{Bm25Selector, CosineSelector};
    use merit_interact::runlog::EpisodeRecord;
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let set = args.task_set.load()?;
    let records = read_log(&args.run.join("episodes.jsonl"))?.records;
    let memory = open_memory(&args.memory_from, embedder.as_ref())?;
    let model = chat(&args.chat, &store)?;
    let agent = ReactAgent::new(Arc::clone(&model), args.budget.agent_config());
    let learned = match &args.turn_selector {
        Some(path) => Some(
            merit_learn::selector::LearnedSelector::load(path, Level::Turn, embedder.dimension())
                .with_context(|| format!("cannot load the selector {}", path.display()))?,
        ),
        None => None,
    };
    let (bm25, cosine) = (Bm25Selector, CosineSelector::default());
    let mut arms = vec![
        ForkArm {
            name: "none".into(),
            selector: None,
        },
        ForkArm {
            name: "bm25".into(),
            selector: Some(&bm25),
        },
        ForkArm {
            name: "cosine".into(),
            selector: Some(&cosine),
        },
    ];
    if let Some(learned) = &learned {
        arms.push(ForkArm {
            name: "learned".into(),
            selector: Some(learned),
        });
    }
    let forked: Vec<EpisodeRecord> = records
        .into_iter()
        .filter(|r| r.turns.len() >= args.turn)
        .take(args.limit.unwrap_or(usize::MAX))
        .collect();
    let spec = ForkSpec {
        set: &set,
        records: &forked,
        turn: args.turn,
        memory: &memory,
        embedder: embedder.as_ref(),
        retrieval: RetrievalConfig::default(),
        env: EnvConfig::default(),
    };
    // Forks are minutes each with a local model: each is kept as it finishes, and a rerun
    // after a kill continues with the ones still missing.
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| args.out.with_extension("forks.jsonl"));
    // The forks log is appended to: one process at a time per folder holding it.
    let _lock = crate::files::lock_folder_of(&log)?;
    let bar = crate::files::progress_bar(forked.len() * arms.len(), "fork");
    let run = fork_episodes(
        &spec,
        &agent,
        &arms,
        &log,
        sqlite_backend,
        |_| ModelSimulator::new(Arc::clone(&model), ModelSimulatorConfig::default()),
        |_, _| {
            bar.inc(1);
            crate::files::log_progress_when_not_a_terminal(&bar, 1);
        },
    )?;
    bar.finish_and_clear();
    eprintln!(
        "{} episodes reach turn {}: {} forks run now, {} found in {}",
        forked.len(),
        args.turn,
        run.ran,
        run.already_logged,
        log.display()
    );
    let names: Vec<String> = arms.iter().map(|a| a.name.clone()).collect();
    let summary = summarise_forks(&run.outcomes, &names);
    let table = fork_table(
        &summary,
        args.turn,
        forked.len(),
        &args.run.display().to_string(),
    );
    crate::files::write_result_file(&args.out, table.as_bytes())?;
    crate::files::write_result_file(
        &args.out.with_extension("json"),
        serde_json::to_string_pretty(
            &serde_json::json!({"summary": summary, "forks": run.outcomes}),
        )?
        .as_bytes(),
    )?;
    print!("{table}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turn 1 has no turn-level retrieval, so a fork there could not tell the arms apart:
    /// the option refuses it by name instead of running identical arms.
    #[test]
    fn a_fork_at_the_first_turn_is_refused() {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: CounterfactualArgs,
        }
        let parse = |turn: &str| {
            <Wrapper as clap::Parser>::try_parse_from([
                "counterfactual",
                "--run",
                "r",
                "--tasks",
                "t",
                "--db-root",
                "d",
                "--memory-from",
                "m",
                "--out",
                "o",
                "--turn",
                turn,
            ])
        };
        let refused = parse("1").err().expect("turn 1 is refused").to_string();
        assert!(refused.contains("--turn"), "{refused}");
        assert_eq!(parse("2").expect("turn 2 is accepted").args.turn, 2);
    }
}
