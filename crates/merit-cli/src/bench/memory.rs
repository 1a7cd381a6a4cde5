//! `merit bench memory`: MERIT memory retrieval latency (p50/p99, query embedding excluded)
//! and bytes per entry at several sizes; the measurement itself is `merit_memory::bench`.

use anyhow::{bail, Result};
use clap::Args;
use merit_memory::bench::{header, render_row, run as run_bench, BenchConfig};
use merit_memory::Variant;

/// Arguments of `merit bench memory`.
#[derive(Debug, Args)]
pub struct MemoryBenchArgs {
    /// Memory sizes (entries), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    sizes: Vec<usize>,
    /// Vector dimension.
    #[arg(long, default_value_t = 384)]
    dimension: usize,
    /// Distinct retrieval queries per size and policy.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Repetitions of each query (the "best" columns keep each query's fastest).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Retrieval policies to time, comma-separated (see `merit memory explain --help`).
    #[arg(long, value_delimiter = ',', default_value = "merit,dynamic-rag")]
    variants: Vec<String>,
}

pub fn run(args: MemoryBenchArgs) -> Result<()> {
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; run with --release for meaningful numbers");
    }
    let mut variants = Vec::new();
    for name in &args.variants {
        match Variant::parse(name) {
            Some(variant) => variants.push(variant),
            None => bail!("unknown variant {name:?}"),
        }
    }
    let config = BenchConfig {
        sizes: args.sizes,
        dimension: args.dimension,
        queries: args.queries,
        repeats: args.repeats,
        seed: args.seed,
        variants,
    };
    say!(
        "dimension {}, {} queries x {} repetitions per row (query embedding excluded), one \
         thread; synthetic episodes, 85 % Result Mismatch, 70 % positive",
        config.dimension,
        config.queries,
        config.repeats
    );
    say!("{}", header());
    run_bench(&config, |row| say!("{}", render_row(row)))?;
    Ok(())
}
