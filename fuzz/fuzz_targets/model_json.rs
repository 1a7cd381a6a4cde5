//! A model's reply read as one JSON object (task drafts, insights, PRM rubrics): any text
//! gives an object or a reason, never a panic, under both wrapping rules.
#![no_main]
use libfuzzer_sys::fuzz_target;
use merit_interact::json::{reply_object, Wrapping};

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for wrapping in [Wrapping::Lenient, Wrapping::Fenced] {
        let _ = reply_object(text, wrapping);
    }
});
