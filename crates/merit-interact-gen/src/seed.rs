//! Seed SQL: the gold queries the perturbations start from.

use super::GenError;
use std::path::Path;

/// One seed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// Where it came from, stable across runs: `{split}-{index}` for a question file (the
    /// position in the file, as `merit_data` numbers questions) and `{split}-L{line}` for a
    /// gold file (the physical line).
    pub seed_id: String,
    /// The database id.
    pub db_id: String,
    /// The gold SQL as written in the file.
    pub sql: String,
}

/// Loads seeds from `path`: a `.json` file is read as Spider's `train.json`/`dev.json` (the
/// `query` fields), anything ending in `.sql` or `.txt` as a gold file with one
/// `SQL<TAB>db_id` per line. `split` prefixes the seed ids (e.g. `train`, `dev`).
pub fn load_seeds(path: &Path, split: &str) -> Result<Vec<Seed>, GenError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match extension.as_str() {
        "json" => Ok(merit_data::load_spider_questions(path, split)?
            .into_iter()
            .map(|q| Seed {
                seed_id: q.id,
                db_id: q.db_id,
                sql: q.gold_sql,
            })
            .collect()),
        "sql" | "txt" => Ok(merit_data::load_gold_sql(path)?
            .into_iter()
            .map(|g| Seed {
                seed_id: format!("{split}-L{}", g.line),
                db_id: g.db_id,
                sql: g.sql,
            })
            .collect()),
        _ => Err(GenError::UnknownSeedFile {
            path: path.to_path_buf(),
        }),
    }
}

/// At most `count` seeds spread over the databases: one seed of each database in turn
/// (databases in name order, each database's seeds in file order), until `count` are taken or
/// all are. Question files list one database's questions together, so taking the first seeds
/// of a file would draw a split's tasks from a handful of databases; this order makes the
/// first records of a generation run (and any prefix of it) come from as many as possible.
pub fn spread_over_databases(seeds: Vec<Seed>, count: usize) -> Vec<Seed> {
    let mut by_database: std::collections::BTreeMap<String, std::collections::VecDeque<Seed>> =
        std::collections::BTreeMap::new();
    for seed in seeds {
        by_database
            .entry(seed.db_id.clone())
            .or_default()
            .push_back(seed);
    }
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut took = false;
        for queue in by_database.values_mut() {
            if out.len() == count {
                break;
            }
            if let Some(seed) = queue.pop_front() {
                out.push(seed);
                took = true;
            }
        }
        if !took {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(id: &str, db: &str) -> Seed {
        Seed {
            seed_id: id.into(),
            db_id: db.into(),
            sql: "SELECT 1".into(),
        }
    }

    #[test]
    fn seeds_are_taken_round_robin_over_databases() {
        let seeds = vec![
            seed("t-0", "b"),
            seed("t-1", "b"),
            seed("t-2", "b"),
            seed("t-3", "a"),
            seed("t-4", "c"),
        ];
        let ids = |v: Vec<Seed>| v.into_iter().map(|s| s.seed_id).collect::<Vec<_>>();
        assert_eq!(
            ids(spread_over_databases(seeds.clone(), 4)),
            ["t-3", "t-0", "t-4", "t-1"]
        );
        assert_eq!(ids(spread_over_databases(seeds.clone(), 99)).len(), 5);
        assert!(spread_over_databases(seeds, 0).is_empty());
    }

    /// scripts/interact-experiments.sh widens a generation's sample when its targets run
    /// out; the targets done so far stay valid only because a smaller sample is a prefix of a
    /// larger one.
    #[test]
    fn a_smaller_sample_is_a_prefix_of_a_larger_one() {
        let seeds: Vec<Seed> = (0..40)
            .map(|i| seed(&format!("t-{i}"), ["d", "a", "c", "b"][i % 7 % 4]))
            .collect();
        for (small, large) in [(3, 6), (5, 10), (9, 40), (13, 99)] {
            let small = spread_over_databases(seeds.clone(), small);
            let large = spread_over_databases(seeds.clone(), large);
            assert_eq!(small[..], large[..small.len()]);
        }
    }
}
