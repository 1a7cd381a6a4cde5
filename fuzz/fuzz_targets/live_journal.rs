//! A live-mode journal (`live.jsonl`) as `merit serve` reopens it after a crash or a hand
//! edit: any bytes give a memory or an error naming the problem, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join(merit_live::live::JOURNAL_FILE), bytes)
        .expect("the journal is written");
    let embedder: Arc<dyn merit_core::model::Embedder> =
        Arc::new(merit_memory::HashEmbedder::new(16));
    if let Ok((live, _)) =
        merit_live::LiveMemory::open(dir.path(), "db", embedder, merit_live::LiveConfig::default())
    {
        let _ = live.memories();
        let _ = live.stats();
        let _ = live.finalize_expired(u64::MAX);
    }
});
