//! merit-data: reading the Spider and BIRD benchmark files.
//!
//! Loaders for the official question, gold and prediction files, schema loading and rendering
//! for prompts, and discovery of the SQLite database files. Everything follows what the
//! official evaluation scripts do with the same files (line stripping, tab handling, the BIRD
//! separator), because an evaluator that reads the files differently cannot reproduce their
//! numbers. Every failure is a [`DataError`] naming the file and the place in it; nothing here
//! panics on bad input.
//!
//! Data attribution: Spider (Yu et al. 2018) and BIRD (Li et al. 2023), CC BY-SA 4.0.

#![warn(missing_docs)]

mod bird;
mod dbdir;
mod error;
mod schema;
mod spider;
mod text;

pub use bird::{
    load_bird_entries, load_bird_gold_sql, load_bird_predictions, load_bird_questions, BirdEntry,
    BirdPrediction, BIRD_SEPARATOR,
};
pub use dbdir::{Availability, DatabaseDir, MissingDatabase};
pub use error::DataError;
pub use schema::{
    load_tables, quote_identifier, render_create_tables, ColumnSchema, DatabaseSchema, ForeignKey,
    TableSchema,
};
pub use spider::{load_gold_sql, load_predictions, load_spider_questions, GoldLine, PredLine};

#[cfg(test)]
mod test_util {
    use std::path::PathBuf;

    /// Writes `bytes` to `name` inside `dir` and returns the path.
    pub(crate) fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write test file");
        path
    }
}
