//! A reply-cache segment as another process's store reads it: any bytes give entries, skipped
//! lines or an ignored torn tail, never a panic, and a line that is not a whole entry never
//! serves as a reply or a vector; nor does a vector with an infinity or a NaN (the first
//! finding, 2026-12-06: regression tests in `merit-models`' cache module).
#![no_main]
use libfuzzer_sys::fuzz_target;
use merit_models::cache::ReplyStore;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join("seg-fuzz.jsonl"), bytes).expect("the segment is written");
    let Ok(store) = ReplyStore::open(dir.path()) else {
        return;
    };
    let _ = store.stats();
    // The seeds store their entries under the key "k".
    if let Some(reply) = store.get_chat("k") {
        assert!(reply.cached);
    }
    if let Some(vector) = store.get_embedding("k") {
        assert!(vector.iter().all(|x| x.is_finite()));
    }
});
