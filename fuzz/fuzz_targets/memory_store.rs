//! A repair memory directory (`positive.jsonl` and `negative.jsonl`) as a resumed `merit run`
//! or `merit memory` opens it: any bytes in either pool give a memory or an error naming the
//! file and line, never a panic. The first two input bytes (little-endian) are the length of
//! the positive pool's part of the rest; the remainder is the negative pool.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((positive, negative)) = merit_fuzz::split_by_length(bytes) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join("positive.jsonl"), positive).expect("the pool is written");
    std::fs::write(dir.path().join("negative.jsonl"), negative).expect("the pool is written");
    let embedder = merit_memory::HashEmbedder::new(16);
    if let Ok((memory, report)) = merit_memory::PersistentMemory::open(dir.path(), &embedder) {
        let memory = memory.memory();
        assert_eq!(memory.len(), report.positive + report.negative);
        // Every view the repair loop takes of a loaded memory.
        let view = memory.view_all();
        for entry in view.entries() {
            assert!(view.get(entry.id).is_some());
        }
        // A MERIT retrieval over what was loaded (hybrid dense + BM25, typed pools).
        let query = merit_memory::RetrievalQuery {
            question: "How many singers are there?".to_string(),
            sql: "SELECT count(*) FROM singer WHERE nme = 'x'".to_string(),
            status: merit_core::Status::ExecutionError,
            error: Some("no such column: nme".to_string()),
            failure_type: merit_memory::FailureType::SchemaLinking,
            db_id: "concert_singer".to_string(),
            step: 1,
        };
        let later = memory.view_at(merit_memory::entry::StreamPos(u64::MAX), "fuzz");
        let config = merit_memory::config::RetrievalConfig::merit();
        let _ = later.retrieve(&query, &config, &embedder);
    }
});
