//! The PRM annotation file as a resumed annotation or the student's training reads it: any
//! bytes give records or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("annotations.jsonl");
    std::fs::write(&path, bytes).expect("the file is written");
    let _ = merit_interact::prm::read_annotations(&path);
});
