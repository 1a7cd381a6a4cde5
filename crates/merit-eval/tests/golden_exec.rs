//! Agreement with the official evaluators on every pair of the shared golden file.

use merit_eval::{EvalConfig, Evaluator, Verdict};
use rayon::prelude::*;
use serde_json::Value as Json;
use std::path::PathBuf;

fn shared(path: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(path)
}

struct Pair {
    id: String,
    db_id: String,
    gold: String,
    pred: String,
    spider_exec: Json,
    bird_ex: Json,
}

fn golden_pairs() -> Vec<Pair> {
    let text = std::fs::read_to_string(shared("golden/eval_vectors_dev.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let record: Json = serde_json::from_str(line).unwrap();
            let field = |name: &str| record[name].as_str().unwrap().to_string();
            Pair {
                id: field("id"),
                db_id: field("db_id"),
                gold: field("gold"),
                pred: field("pred"),
                spider_exec: record["spider_exec"].clone(),
                bird_ex: record["bird_ex"].clone(),
            }
        })
        .collect()
}

fn db_path(db_id: &str) -> PathBuf {
    shared("spider/database")
        .join(db_id)
        .join(format!("{db_id}.sqlite"))
}

#[test]
fn every_golden_pair_gets_the_official_verdicts() {
    let pairs = golden_pairs();
    assert_eq!(pairs.len(), 3044);
    let evaluator = Evaluator::new(EvalConfig::default());
    let failures: Vec<String> = pairs
        .par_iter()
        .filter_map(|pair| {
            let path = db_path(&pair.db_id);
            let spider = evaluator.spider_exec(&path, &pair.gold, &pair.pred);
            let bird = evaluator.bird_ex(&path, &pair.gold, &pair.pred);
            let mut problems = Vec::new();
            match &pair.spider_exec {
                Json::String(s) if s == "timeout" => {
                    // The reference never finished this pair; merit must decide it exactly.
                    if !matches!(spider, Verdict::Match | Verdict::Mismatch) {
                        problems.push(format!("spider undecided on the timeout pair: {spider:?}"));
                    }
                }
                expected => {
                    if expected.as_u64() != Some(spider.score() as u64) {
                        problems.push(format!("spider {expected} vs {spider:?}"));
                    }
                }
            }
            match &pair.bird_ex {
                Json::Null => {
                    if !matches!(bird, Verdict::GoldError(_)) {
                        problems.push(format!("bird null (gold fails) vs {bird:?}"));
                    }
                }
                expected => {
                    if expected.as_u64() != Some(bird.score() as u64) {
                        problems.push(format!("bird {expected} vs {bird:?}"));
                    }
                }
            }
            (!problems.is_empty()).then(|| {
                format!(
                    "{}: {}\n  gold: {}\n  pred: {}",
                    pair.id,
                    problems.join("; "),
                    pair.gold,
                    pair.pred
                )
            })
        })
        .collect();
    for failure in &failures {
        eprintln!("{failure}");
    }
    assert!(
        failures.is_empty(),
        "{} golden pairs disagree",
        failures.len()
    );
}

#[test]
fn the_pair_the_reference_never_finished_is_a_match() {
    // dev-h108-wide_permute: SELECT * over a 26-column table against a column permutation of
    // it. The permutation exists by construction, so the exact answer is 1.
    let pair = golden_pairs()
        .into_iter()
        .find(|pair| pair.spider_exec == Json::String("timeout".into()))
        .unwrap();
    let evaluator = Evaluator::new(EvalConfig::default());
    let verdict = evaluator.spider_exec(&db_path(&pair.db_id), &pair.gold, &pair.pred);
    assert_eq!(verdict, Verdict::Match, "{}", pair.id);
}
