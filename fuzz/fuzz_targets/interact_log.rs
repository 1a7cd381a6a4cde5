//! An interact run's episode log as a resumed run reads it: any bytes give records or an error,
//! never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("episodes.jsonl");
    std::fs::write(&path, bytes).expect("the log is written");
    if let Ok(loaded) = merit_interact::runlog::read_log(&path) {
        assert!(loaded.torn_bytes <= bytes.len());
    }
});
