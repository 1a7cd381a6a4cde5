//! The interact agent's action parser on any model reply: it never fails and never panics (an
//! unreadable reply becomes an action the environment answers as the protocol says).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|reply: &str| {
    let _ = merit_interact::agent::parse::parse_reply(reply);
});
