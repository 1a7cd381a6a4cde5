//! `merit serve`'s configuration file: any text gives a checked configuration or an error
//! naming the problem, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(config) = merit_serve::ServeConfig::parse(text) {
            if config.check().is_ok() {
                let _ = config.key_table();
            }
        }
    }
});
