//! `merit run` and `merit demo`: MERIT repair experiments over a benchmark (the wiring is in
//! [`crate::experiment`], the experiment itself in `merit_lab::experiment`).

use crate::experiment::{
    run_experiment, DatasetArg, HintArg, LayoutArg, PrecedentArg, RunArgs, SplitArg,
};
use crate::models::RUN_CONTEXT_SIZE;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

/// Runs (or resumes) an experiment and writes its report; returns the run directory.
pub fn run(args: RunArgs) -> Result<PathBuf> {
    run_experiment(args, None)
}

/// Arguments of `merit demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run directory (resumed when it already holds a run).
    #[arg(long, default_value = "merit-demo")]
    out: PathBuf,
    /// Questions in the slice.
    #[arg(long, default_value_t = 12)]
    limit: usize,
    /// Repair budget K.
    #[arg(long, default_value_t = 7)]
    k: u32,
    /// Path of the chat model's GGUF file (skips pulling).
    #[arg(long)]
    model_path: Option<PathBuf>,
    /// Path of the repair model's GGUF file (skips pulling; not with `--paper-setting`).
    #[arg(long, conflicts_with = "paper_setting")]
    repair_model_path: Option<PathBuf>,
    /// The papers' setting: the default model writes the repairs too, in the paper's layout,
    /// with no repair aid (it repairs almost nothing with the 0.5B model; see
    /// docs/results/repair/calibration).
    #[arg(long)]
    paper_setting: bool,
}

/// The repair model of `merit demo`, chosen on the Spider *train* calibration slice
/// (docs/results/repair/calibration/README.md): the 0.5B model writes the initial predictions
/// and this one the repairs.
pub const DEMO_REPAIR_MODEL: &str = "qwen2.5-coder-1.5b-instruct";

/// Where the demo's Spider-format data is: the shared benchmark copy next to the checkout,
/// else the sample shipped in `demo/spider-sample`.
fn demo_data() -> Result<(PathBuf, PathBuf)> {
    let shared = PathBuf::from("../shared/data/spider");
    if shared.join("dev.json").is_file() && shared.join("database").is_dir() {
        return Ok((shared.clone(), shared.join("database")));
    }
    for root in [
        PathBuf::from("demo/spider-sample"),
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../demo/spider-sample"
        )),
    ] {
        if root.join("dev.json").is_file() {
            return Ok((root.clone(), root.join("database")));
        }
    }
    bail!("no demo data: neither ../shared/data/spider nor demo/spider-sample exists here")
}

/// `merit demo`: Iterative vs MERIT on a fixed Spider slice with the embedded models, in the
/// repair configuration chosen on the calibration slice (or the papers' with
/// `--paper-setting`).
pub fn demo(args: DemoArgs) -> Result<()> {
    let (data, db_dir) = demo_data()?;
    eprintln!("demo data: {}", data.display());
    run(demo_run_args(args, data, db_dir)).map(|_| ())
}

/// The `merit run` a demo is: Iterative and MERIT, seed 0, on `data`, in the chosen repair
/// configuration unless `--paper-setting`; resumed when its folder already holds a run.
fn demo_run_args(args: DemoArgs, data: PathBuf, db_dir: PathBuf) -> RunArgs {
    let resume = args.out.join("manifest.json").is_file();
    RunArgs {
        dataset: DatasetArg::Spider,
        split: SplitArg::Dev,
        data,
        db_dir,
        pg_url: None,
        methods: vec!["iterative".into(), "merit".into()],
        seeds: vec![0],
        k: args.k,
        limit: Some(args.limit),
        databases: Vec::new(),
        out: (!resume).then(|| args.out.clone()),
        resume: resume.then(|| args.out.clone()),
        llm_url: None,
        llm_model: None,
        embed_url: None,
        embed_model: None,
        model: merit_models::registry::DEFAULT_CHAT_MODEL.to_string(),
        model_path: args.model_path,
        embedder: "all-minilm-l6-v2".into(),
        cache: None,
        parallel: None,
        max_tokens: 256,
        // The configuration chosen on the calibration slice, unless the paper's is asked for.
        repeat_guard: !args.paper_setting,
        hints: if args.paper_setting {
            Vec::new()
        } else {
            vec![HintArg::Schema, HintArg::Values]
        },
        layout: if args.paper_setting {
            LayoutArg::Paper
        } else {
            LayoutArg::Fresh
        },
        grammar: !args.paper_setting,
        // The grammar as calibrated until the train calibration of the free alias rule is in.
        free_aliases: false,
        // The paper's precedent view until the train calibration of `--precedents` is in
        // (docs/results/repair/calibration/memory-150).
        precedents: PrecedentArg::Full,
        repair_model: (!args.paper_setting).then(|| DEMO_REPAIR_MODEL.to_string()),
        repair_model_path: args.repair_model_path,
        context_size: RUN_CONTEXT_SIZE,
        prompt_lookup: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo runs the configuration chosen on the calibration slice (the 1.5B repair model
    /// with every aid), and `--paper-setting` the papers' (one model, no aid).
    #[test]
    fn the_demo_runs_the_chosen_configuration_unless_the_papers_is_asked_for() {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            demo: DemoArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["demo", "--out", "/nonexistent/merit-demo-test"];
            argv.extend(extra);
            <Wrapper as clap::Parser>::try_parse_from(argv)
                .unwrap()
                .demo
        };
        let folder = PathBuf::from("data");
        let chosen = demo_run_args(parse(&[]), folder.clone(), folder.clone());
        let aids = chosen.aids();
        assert!(aids.repeat_guard && aids.grammar && aids.hints.schema && aids.hints.values);
        assert_eq!(aids.layout, merit_repair::repair::RepairLayout::Fresh);
        assert_eq!(chosen.repair_model.as_deref(), Some(DEMO_REPAIR_MODEL));
        assert_eq!(chosen.methods, ["iterative", "merit"]);
        assert!(chosen.out.is_some() && chosen.resume.is_none());
        let paper = demo_run_args(parse(&["--paper-setting"]), folder.clone(), folder);
        assert!(paper.aids().is_paper() && paper.repair_model.is_none());
    }
}
