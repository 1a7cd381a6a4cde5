//! A database's interact metafiles (`{db}_schema.txt`, `{db}_column_meaning_base.json`,
//! `{db}_kb.jsonl`) as `merit interact run` loads them, then the lookups the agent's tools make:
//! any bytes give metadata or an error naming the file, never a panic. The input is cut in
//! three with [`merit_fuzz::split_by_length`]: the schema, then (from the rest) the column
//! meanings, then the knowledge base.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

fuzz_target!(|bytes: &[u8]| {
    let Some((schema, rest)) = merit_fuzz::split_by_length(bytes) else {
        return;
    };
    let Some((meanings, knowledge)) = merit_fuzz::split_by_length(rest) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (file, part) in [
        ("db_schema.txt", schema),
        ("db_column_meaning_base.json", meanings),
        ("db_kb.jsonl", knowledge),
    ] {
        std::fs::write(dir.path().join(file), part).expect("the metafile is written");
    }
    let Ok(meta) = merit_interact_env::meta::DatabaseMeta::load(dir.path(), "db") else {
        return;
    };
    let _ = meta.schema();
    for key in meta.column_meanings().keys() {
        let mut parts = key.splitn(3, '|').skip(1);
        if let (Some(table), Some(column)) = (parts.next(), parts.next()) {
            let _ = meta.column_meaning(table, column);
        }
    }
    // Every knowledge tool, with nothing deleted and with the first entry deleted.
    let mut deleted = BTreeSet::new();
    for _ in 0..2 {
        let view = meta.knowledge_view(&deleted);
        for name in view.names() {
            assert!(!view.lookup(name).is_empty());
        }
        let _ = view.all();
        if let Some(first) = meta.knowledge().first() {
            deleted.insert(first.id());
        }
    }
});
