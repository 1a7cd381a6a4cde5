//! `merit`: the command-line tool. The only crate that knows about terminals and arguments.

// The printing macros (`say!`, `say_raw!`) live in `files`; `macro_use` makes them visible in
// every module declared after it.
#[macro_use]
mod files;

mod args;
mod ask_cmd;
mod bench;
mod classify_cmd;
mod eval;
mod experiment;
mod interact;
mod live_cmd;
mod memory_cmd;
mod models;
mod models_cmd;
mod report_cmd;
mod run_cmd;
mod serve_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Text-to-SQL agents that learn from their own repairs.
#[derive(Debug, Parser)]
#[command(name = "merit", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one question with SQL from the embedded chat model (initial generation).
    Ask(ask_cmd::AskArgs),
    /// Score predictions exactly as the official Spider and BIRD evaluators would.
    Eval(eval::EvalArgs),
    /// Measure merit's speed against a baseline run in the same process.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// Classify failures (status + DBMS text), print the rules, or validate against reference labels.
    Classify(classify_cmd::ClassifyArgs),
    /// Inspect a MERIT memory directory and explain retrievals.
    Memory {
        #[command(subcommand)]
        what: memory_cmd::MemoryCommand,
    },
    /// The main job: Iterative vs MERIT on a fixed Spider slice with the embedded models.
    Demo(run_cmd::DemoArgs),
    /// Run MERIT repair experiments (methods × seeds) into a resumable run directory.
    Run(Box<experiment::RunArgs>),
    /// Live mode on a benchmark stream: the oracle hidden from the agent, a simulated user
    /// giving (sometimes wrong) feedback; accuracy per arm against no memory. Takes `merit
    /// run`'s options (the stream order is `--seeds`' first seed); `--methods`, `--pg-url` and
    /// `--parallel` have no effect (the arms run one after another on SQLite), and `--out`
    /// (or `--resume`) names one folder, created or continued.
    LiveExperiment(Box<live_cmd::LiveExperimentArgs>),
    /// Print the paper's tables and write figures for one or more run directories.
    Report(report_cmd::ReportArgs),
    /// MERIT interact: the interactive agent on BIRD-Interact-format tasks.
    Interact {
        #[command(subcommand)]
        what: interact::InteractCommand,
    },
    /// Serve live-mode repair memory over HTTP (API keys, tenants, feedback; see the README).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Serve the same operations as MCP tools on standard input and output (the key in
    /// $MERIT_API_KEY); `merit serve` also answers MCP over HTTP at `/mcp`.
    Mcp(Box<serve_cmd::McpArgs>),
    /// List known models and fetch their weights into the local cache.
    Models {
        #[command(subcommand)]
        what: models_cmd::ModelsCommand,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MERIT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Eval(args) => eval::run(args),
        Command::Ask(args) => ask_cmd::run(args),
        Command::Bench { what } => bench::run(what),
        Command::Classify(args) => classify_cmd::run(args),
        Command::Memory { what } => memory_cmd::run(what),
        Command::Models { what } => models_cmd::run(what),
        Command::Interact { what } => interact::run(what),
        Command::Report(args) => report_cmd::run(args),
        Command::Run(args) => run_cmd::run(*args).map(|_| ()),
        Command::Demo(args) => run_cmd::demo(args),
        Command::Serve(args) => serve_cmd::run(*args),
        Command::Mcp(args) => serve_cmd::mcp(*args),
        Command::LiveExperiment(args) => live_cmd::run(*args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, as `{:#}` prints them, but without a cause whose text
/// the message before it already holds: most of our error types quote their source in their
/// message (`cannot read FILE: REASON`) and return it from `source()` too, so the reason would
/// otherwise be printed twice.
fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut previous = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !previous.is_empty() && previous.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
        previous = text;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    /// Quotes its source in its message and returns it from `source()`, as thiserror's
    /// `#[error("...: {source}")]` does.
    #[derive(Debug)]
    struct Unreadable(std::io::Error);

    impl std::fmt::Display for Unreadable {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read tasks.jsonl: {}", self.0)
        }
    }

    impl std::error::Error for Unreadable {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_printed_once() {
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error =
            anyhow::Error::new(Unreadable(missing)).context("cannot load the tasks of tasks.jsonl");
        assert_eq!(
            error_line(&error),
            "cannot load the tasks of tasks.jsonl: cannot read tasks.jsonl: no such file"
        );
        let plain = anyhow::anyhow!("disk full").context("cannot write report.md");
        assert_eq!(error_line(&plain), "cannot write report.md: disk full");
    }
}
