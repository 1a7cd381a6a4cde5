//! A user's Spider- or BIRD-format data as `merit run` and `merit eval` read it: `tables.json`
//! (then every schema rendered as the prompts show it) and the question, gold and prediction
//! files. Any bytes give data or an error naming the file, never a panic. The first two input
//! bytes (little-endian) are the length of the `tables.json` part; the rest is read as each of
//! the other files in turn.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((tables, other)) = merit_fuzz::split_by_length(bytes) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let tables_path = dir.path().join("tables.json");
    let other_path = dir.path().join("dev.json");
    std::fs::write(&tables_path, tables).expect("the file is written");
    std::fs::write(&other_path, other).expect("the file is written");
    if let Ok(schemas) = merit_data::load_tables(&tables_path) {
        for schema in &schemas {
            let _ = merit_data::render_create_tables(schema);
        }
    }
    let _ = merit_data::load_spider_questions(&other_path, "dev");
    let _ = merit_data::load_gold_sql(&other_path);
    let _ = merit_data::load_predictions(&other_path);
    let _ = merit_data::load_bird_entries(&other_path, "dev");
    let _ = merit_data::load_bird_gold_sql(&other_path);
    let _ = merit_data::load_bird_predictions(&other_path);
});
