//! `merit interact run`: the agent on a task file, with or without memory, resumable.

use crate::models::reexec_with_bounded_openmp_spin;
use crate::models::{build_embedder, open_store};
use anyhow::{anyhow, bail, Context, Result};
use merit_interact::agent::{AgentConfig, AgentStyle, ReactAgent, ToolCallMode};
use merit_interact::memory::{
    AdvisorConfig, Bm25Selector, CosineSelector, InsightConfig, InsightExtractor, Level,
    MemRlSelector, MementoSelector, MemoryConfig, ModelSelector, OnlineSelector, RetrievalConfig,
    Selector, StaticDemos, TopicKSelector,
};
use merit_interact::runlog::{
    read_log, run_tasks, run_tasks_with_demos, run_tasks_with_memory, EpisodeRecord, MemoryRun,
    RunSpec,
};
use merit_interact::simulator::model::{ModelSimulator, ModelSimulatorConfig};
use merit_interact::{sqlite_backend, EnvConfig, HumanSimulator, TaskSet, UserSimulator};
use merit_lab::interact::{render, summarise, LOG_FILE};
use merit_learn::selector::LearnedSelector;
use std::sync::Arc;

mod args;

pub use args::InteractRunArgs;
use args::{AgentArg, SelectorKind, SimulatorArg, ToolCallsArg};

pub(super) fn run_agent(args: InteractRunArgs) -> Result<()> {
    if !args.chat.is_server() {
        reexec_with_bounded_openmp_spin();
    }
    let mut set = TaskSet::load(&args.tasks, &args.db_root)
        .with_context(|| format!("cannot load the tasks of {}", args.tasks.display()))?;
    if let Some(truth) = &args.ground_truth {
        let merged = set
            .merge_ground_truth(truth)
            .with_context(|| format!("cannot merge ground truth from {}", truth.display()))?;
        eprintln!("ground truth: {merged:?}");
    }
    if let Some(dir) = &args.sqlite_dir {
        let attached = set.use_sqlite_dir(dir);
        eprintln!("{attached} databases taken from {}", dir.display());
    }
    let mut ids: Vec<String> = set
        .tasks()
        .iter()
        .step_by(usize::from(args.every))
        .map(|task| task.instance_id().to_string())
        .collect();
    if let Some(limit) = args.limit {
        ids.truncate(limit);
    }
    if ids.is_empty() {
        bail!("{} holds no tasks", args.tasks.display());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // One process per run directory (its log is append-only).
    let _lock = crate::files::lock_run_dir(&args.out)?;

    check_run_options(&args)?;
    let parallel = usize::from(args.parallel);
    let store = open_store(args.cache.as_ref())?;
    let model = crate::models::chat_with_parallel(&args.chat, &store, parallel)?;
    let agent = ReactAgent::new(
        Arc::clone(&model),
        AgentConfig {
            tool_calls: match args.tool_calls {
                ToolCallsArg::Auto => ToolCallMode::Auto,
                ToolCallsArg::Text => ToolCallMode::Text,
                ToolCallsArg::Native => ToolCallMode::Native,
            },
            temperature: args.temperature,
            sample_seed: args.sample_seed,
            style: match args.agent {
                AgentArg::React => AgentStyle::React,
                AgentArg::Vanilla => AgentStyle::Vanilla,
            },
            ..args.budget.agent_config()
        },
    );
    let log = args.out.join(LOG_FILE);
    let simulator_model = match &args.simulator_model {
        None => Arc::clone(&model),
        Some(name) => crate::models::chat_with_parallel(
            &args.chat.for_model(name, args.simulator_model_path.clone()),
            &store,
            parallel,
        )?,
    };
    check_run_settings(&args, &model.id(), &simulator_model.id())?;
    let spec = RunSpec {
        set: &set,
        instance_ids: &ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: Some(simulator_model.id()),
        episodes_at_once: parallel,
    };
    let bar = crate::files::progress_bar(ids.len(), "interact");
    if args.simulator == SimulatorArg::Human {
        // The bar would redraw over the questions the person is answering.
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut passed = 0usize;
    // The online baselines learn from every finished episode; a resumed run first replays
    // what its log holds, so their state is the one an uninterrupted run would have.
    let online: Option<Arc<dyn OnlineSelector>> = match args.memory.memory {
        Some(SelectorKind::Memrl) => Some(Arc::new(MemRlSelector::default())),
        Some(SelectorKind::Memento) => Some(Arc::new(MementoSelector::default())),
        _ => None,
    };
    if let Some(online) = &online {
        for record in read_log(&log)?.records {
            online.learn(&record.injections, record.trajectory.outcome.reward);
        }
    }
    let on_episode = |record: &EpisodeRecord| {
        if let Some(online) = &online {
            online.learn(&record.injections, record.trajectory.outcome.reward);
        }
        passed += usize::from(record.trajectory.outcome.phase1_passed);
        bar.inc(1);
        bar.set_message(format!("interact: phase 1 passed {passed}"));
        crate::files::log_progress_when_not_a_terminal(&bar, 5);
    };
    let make_simulator = |_: &merit_interact::Task| -> Box<dyn UserSimulator + Send> {
        match args.simulator {
            SimulatorArg::Model => Box::new(ModelSimulator::new(
                Arc::clone(&simulator_model),
                ModelSimulatorConfig::default(),
            )),
            // Prompts go to stderr: stdout carries the report.
            SimulatorArg::Human => Box::new(HumanSimulator::new(
                std::io::BufReader::new(std::io::stdin()),
                std::io::stderr(),
            )),
        }
    };
    // The engine is chosen at run time; boxing gives the run one backend type.
    let server = match &args.pg_url {
        Some(url) => Some(
            merit_interact::pg::PostgresServer::new(url)
                .with_context(|| "cannot use the PostgreSQL server of --pg-url".to_string())?,
        ),
        None => None,
    };
    let open_backend = |meta: &merit_interact::DatabaseMeta| -> Result<
        Box<dyn merit_interact::InteractBackend + Send>,
        merit_interact::InteractError,
    > {
        Ok(match &server {
            Some(server) => Box::new(merit_interact::pg::postgres_backend(server, meta)?),
            None => Box::new(sqlite_backend(meta)?),
        })
    };
    let demos = match &args.demos {
        Some(path) => {
            let records = read_log(path)
                .with_context(|| format!("cannot read the demonstrations {}", path.display()))?
                .records;
            Some(
                StaticDemos::from_records(&records, usize::from(args.demo_count))
                    .with_context(|| format!("no demonstrations in {}", path.display()))?,
            )
        }
        None => None,
    };
    let summary = match (args.memory.memory, &demos) {
        (None, Some(demos)) => run_tasks_with_demos(
            &spec,
            &agent,
            demos,
            open_backend,
            make_simulator,
            on_episode,
        ),
        (None, None) => run_tasks(&spec, &agent, open_backend, make_simulator, on_episode),
        (Some(kind), _) => {
            let memory_args = &args.memory;
            let embedder = build_embedder(
                &memory_args.embedder,
                memory_args.embed_url.as_ref(),
                memory_args.embed_model.as_ref(),
                &store,
            )?;
            let selector_for = |level: Level| -> Result<Arc<dyn Selector>> {
                Ok(match kind {
                    SelectorKind::Bm25 => Arc::new(Bm25Selector),
                    SelectorKind::Topick => Arc::new(TopicKSelector),
                    SelectorKind::Cosine => Arc::new(CosineSelector::default()),
                    SelectorKind::Model => Arc::new(ModelSelector::new(Arc::clone(&model), 64)),
                    SelectorKind::Memrl | SelectorKind::Memento => match &online {
                        Some(online) => Arc::clone(online) as Arc<dyn Selector>,
                        None => bail!("an online selector was not built"),
                    },
                    SelectorKind::Learned => {
                        let (path, option, disabled) = match level {
                            Level::Episode => (
                                &memory_args.episode_selector,
                                "--episode-selector",
                                memory_args.no_episode_memory,
                            ),
                            Level::Turn => (
                                &memory_args.turn_selector,
                                "--turn-selector",
                                memory_args.no_turn_memory,
                            ),
                        };
                        match path {
                            // An unused level needs no selector.
                            None if disabled => Arc::new(CosineSelector::default()),
                            None => bail!(
                                "--memory learned needs {option} CHECKPOINT (from `merit \
                                 interact train-selector`), or `{option} cosine` to select by \
                                 cosine at that level"
                            ),
                            Some(path) if path.as_os_str() == "cosine" => {
                                Arc::new(CosineSelector::default())
                            }
                            Some(path) => Arc::new(
                                LearnedSelector::load(path, level, embedder.dimension())
                                    .with_context(|| {
                                        format!("cannot load the selector {}", path.display())
                                    })?,
                            ),
                        }
                    }
                })
            };
            let episode_selector = selector_for(Level::Episode)?;
            let turn_selector = selector_for(Level::Turn)?;
            let extractor = InsightExtractor::new(Arc::clone(&model), InsightConfig::default());
            let retrieval = RetrievalConfig {
                candidates: memory_args.candidates,
                inject: memory_args.inject,
                ..RetrievalConfig::default()
            };
            retrieval.validate()?;
            let memory = MemoryRun {
                dir: args.out.join("memory"),
                base: memory_args.memory_from.clone(),
                config: MemoryConfig {
                    retention: memory_args.retention.into(),
                    ..MemoryConfig::default()
                },
                advisor: AdvisorConfig {
                    episode_level: !memory_args.no_episode_memory,
                    turn_level: !memory_args.no_turn_memory,
                    episode_retrieval: retrieval,
                    turn_retrieval: retrieval,
                    turn_memories_once: memory_args.turn_memories_once,
                },
                embedder: embedder.as_ref(),
                episode_selector: episode_selector.as_ref(),
                turn_selector: turn_selector.as_ref(),
                insight: Some(&extractor),
                write: !memory_args.frozen_memory,
            };
            run_tasks_with_memory(
                &spec,
                &agent,
                &memory,
                open_backend,
                make_simulator,
                on_episode,
            )
        }
    }
    .map_err(|error| {
        anyhow!("{error}\nfinished episodes are logged; run the same command again to continue")
    })?;
    bar.finish_and_clear();
    for warning in &summary.warnings {
        eprintln!("warning: {warning}");
    }
    for skipped in &summary.skipped {
        eprintln!("skipped {}: {}", skipped.instance_id, skipped.reason);
    }
    eprintln!(
        "{} episodes run now, {} already logged, {} skipped; log: {}",
        summary.ran,
        summary.already_logged,
        summary.skipped.len(),
        log.display()
    );
    print!(
        "{}",
        render(&summarise(
            std::slice::from_ref(&args.out),
            &merit_lab::interact::ExcludedTasks::new(),
        )?)
    );
    Ok(())
}

/// Refuses `--parallel` above 1 where episodes depend on the ones before them: a memory that
/// is written, or an online selector (MemRL, Memento) that learns from every episode.
fn check_run_options(args: &InteractRunArgs) -> Result<()> {
    if args.simulator == SimulatorArg::Human && args.parallel > 1 {
        bail!("--simulator human answers one episode at a time: drop --parallel");
    }
    if args.agent == AgentArg::Vanilla && (args.memory.memory.is_some() || args.demos.is_some()) {
        bail!("--agent vanilla takes no --memory or --demos: the baseline sees only the schema and the request");
    }
    if args.parallel <= 1 {
        return Ok(());
    }
    match args.memory.memory {
        None => Ok(()),
        Some(kind @ (SelectorKind::Memrl | SelectorKind::Memento)) => bail!(
            "--parallel {} cannot be used with --memory {}: it learns from every finished \
             episode, so each must finish before the next starts",
            args.parallel,
            format!("{kind:?}").to_lowercase()
        ),
        Some(_) if !args.memory.frozen_memory => bail!(
            "--parallel {} needs --frozen-memory (or no --memory): an online memory must see \
             each episode before the next starts",
            args.parallel
        ),
        Some(_) => Ok(()),
    }
}

const SETTINGS_FILE: &str = "settings.json";

/// What must not change between the invocations of one run directory: the task file, the
/// model, and the memory options. Written on the first invocation; a later one with other
/// settings is refused, since its episodes would not belong to the same experiment.
fn check_run_settings(args: &InteractRunArgs, model_id: &str, simulator_id: &str) -> Result<()> {
    let mut settings = serde_json::json!({
        "tasks": args.tasks,
        "ground_truth": args.ground_truth,
        "model": model_id,
        "tool_calls": format!("{:?}", args.tool_calls).to_lowercase(),
        "max_turns": args.budget.max_turns,
        "observation_chars": args.budget.observation_chars,
        "max_tokens": args.budget.max_tokens,
        "memory": &args.memory,
    });
    // Recorded only when on, so run directories made before these options still continue.
    for (name, on) in [
        ("fold_repeats", args.budget.fold_repeats),
        ("repeat_guard", args.budget.repeat_guard),
        ("forced_submit_fallback", args.budget.forced_submit_fallback),
        ("schema_in_opening", args.budget.schema_in_opening),
    ] {
        if on {
            settings[name] = serde_json::Value::Bool(true);
        }
    }
    // Recorded only when on, for the same reason.
    if args.budget.repeat_guard_temperature > 0.0 {
        settings["repeat_guard_temperature"] =
            serde_json::json!(args.budget.repeat_guard_temperature);
    }
    if args.temperature > 0.0 {
        settings["sampling"] =
            serde_json::json!({"temperature": args.temperature, "seed": args.sample_seed});
    }
    if args.agent == AgentArg::Vanilla {
        settings["agent"] = serde_json::Value::String("vanilla".to_string());
    }
    if let Some(demos) = &args.demos {
        settings["demos"] = serde_json::json!({"log": demos, "count": args.demo_count});
    }
    // Recorded only when PostgreSQL is used, for the same reason (the URL is not recorded: it
    // may hold a password, and a run may continue on another server with the same data).
    if args.pg_url.is_some() {
        settings["backend"] = serde_json::Value::String("postgres".to_string());
    }
    // Recorded only when it differs from the agent's, for the same reason.
    if simulator_id != model_id {
        settings["simulator_model"] = serde_json::Value::String(simulator_id.to_string());
    }
    match merit_journal::settings::ensure_settings(&args.out.join(SETTINGS_FILE), &settings) {
        Ok(_) => Ok(()),
        Err(error @ merit_journal::settings::SettingsError::Differs { .. }) => bail!(
            "{error}\n{} was started with other settings: use another --out, or the recorded \
             settings to continue",
            args.out.display()
        ),
        Err(error) => Err(error.into()),
    }
}
