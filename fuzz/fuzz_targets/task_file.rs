//! A BIRD-Interact task file as `merit interact run` loads it (with a database root that holds
//! nothing): any bytes give a task set or an error naming the problem, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("tasks.jsonl");
    std::fs::write(&path, bytes).expect("the file is written");
    let _ = merit_interact::TaskSet::load(&path, dir.path());
});
