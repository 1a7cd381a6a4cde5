//! The retrieval benchmark without the CLI (and without building the model backends):
//!
//! ```text
//! cargo run --release -p merit-memory --example bench_retrieval -- [SIZES] [DIMENSION] [QUERIES] [REPEATS] [VARIANTS]
//! ```
//! e.g. `-- 1000,10000,100000 384 300 5 merit,dynamic-rag`.

use merit_memory::bench::{header, render_row, run, BenchConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes = match args.first() {
        Some(list) => list
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()?,
        None => vec![1_000, 10_000, 100_000],
    };
    let dimension = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(384);
    let queries = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(300);
    let repeats = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let variants = match args.get(4) {
        Some(list) => list
            .split(',')
            .map(|name| {
                merit_memory::Variant::parse(name).ok_or_else(|| format!("unknown variant {name}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => vec![
            merit_memory::Variant::Merit,
            merit_memory::Variant::DynamicRag,
        ],
    };
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; use --release");
    }
    let config = BenchConfig {
        sizes,
        dimension,
        queries,
        repeats,
        seed: 7,
        variants,
    };
    println!("{}", header());
    run(&config, |row| println!("{}", render_row(row)))?;
    Ok(())
}
