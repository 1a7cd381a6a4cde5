//! Task generation's output file as a resumed `merit interact gen` reads it back: any bytes
//! give records or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("tasks.jsonl");
    std::fs::write(&path, bytes).expect("the file is written");
    let _ = merit_interact::gen::read_generated(&path);
});
