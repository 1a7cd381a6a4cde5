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
