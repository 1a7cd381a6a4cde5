//! `merit`: the command-line tool. The only crate that knows about terminals and arguments.

mod bench;
mod eval;
mod files;

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
    /// Score predictions exactly as the official Spider and BIRD evaluators would.
    Eval(eval::EvalArgs),
    /// Measure merit's speed against a baseline run in the same process.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
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
        Command::Bench { what } => bench::run(what),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
