//! The embedder part of `merit bench models`: sentences per second at batch 32 against the
//! latency of one.

use super::models::{median, ModelsBenchArgs};
use crate::models::load_embedder;
use anyhow::Result;
use merit_core::model::Embedder;
use std::time::Instant;

/// Loads the embedder of `args` and prints its throughput.
pub(super) fn bench_embedder(args: &ModelsBenchArgs) -> Result<()> {
    let started = Instant::now();
    let embedder = load_embedder(&args.embedder, args.embedder_path.as_deref())?;
    println!(
        "embedder: {} (loaded in {:.1} s, {} dimensions)",
        embedder.id(),
        started.elapsed().as_secs_f64(),
        embedder.dimension()
    );
    let texts = memory_like_sentences(args.sentences.max(1));
    // Warm up (first-touch of the weights' pages, allocator growth) before timing.
    embedder.embed(&texts[..texts.len().min(32)])?;
    let started = Instant::now();
    let vectors = embedder.embed(&texts)?;
    let batch_time = started.elapsed();
    let one = vec![texts[0].clone()];
    let mut single = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        embedder.embed(&one)?;
        single.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let single_ms = median(&mut single);
    let per_second = vectors.len() as f64 / batch_time.as_secs_f64().max(1e-9);
    println!(
        "embedder: {per_second:.1} sentences/s at batch 32 ({} sentences in {:.2} s); one \
         sentence {single_ms:.1} ms",
        vectors.len(),
        batch_time.as_secs_f64()
    );
    println!(
        "ratio batched/single throughput: {:.1}x",
        per_second / (1000.0 / single_ms.max(1e-9))
    );
    Ok(())
}

/// Sentences shaped like the repair memories the embedder ranks (10 to 60 words).
fn memory_like_sentences(count: usize) -> Vec<String> {
    let subjects = [
        "the singer table",
        "a join between concert and stadium",
        "the count of distinct car makers",
        "an aggregate compared in the WHERE clause",
        "the average horsepower per country",
        "a subquery that returns several rows",
    ];
    let fixes = [
        "moved the condition into HAVING",
        "joined on the declared foreign key instead of the similarly named column",
        "counted distinct values instead of rows",
        "ordered by the measured quantity in descending order and kept one row",
        "qualified every column with its table alias to remove the ambiguity",
    ];
    (0..count)
        .map(|i| {
            let subject = subjects[i % subjects.len()];
            let fix = fixes[(i / subjects.len()) % fixes.len()];
            let detail = " and checked the result against the question".repeat(i % 4);
            format!(
                "failure type result mismatch on {subject}; the repair {fix}{detail} (case {i})"
            )
        })
        .collect()
}
