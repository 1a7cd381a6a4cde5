//! A repair run's episode log as a resumed run reads it: any bytes give records or an error
//! naming the bad line, never a panic. A torn last line is reported, not parsed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use merit_core::episode::EpisodeRecord;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("episodes.jsonl");
    std::fs::write(&path, bytes).expect("the log is written");
    if let Ok(loaded) = merit_lab::jsonl::read_records::<EpisodeRecord>(&path) {
        assert!(loaded.torn_bytes <= bytes.len());
    }
});
