//! SQL extraction from a model reply: any text gives a query or a clear "no SQL", never a
//! panic, and an extracted query is a non-empty part of the reply's text. The same for the
//! extraction of write answers (`extract_statements`, the interact Vanilla baseline's).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|reply: &str| {
    if let Ok(sql) = merit_repair::extract::extract_sql(reply) {
        assert!(
            !sql.trim().is_empty(),
            "an empty query was extracted from {reply:?}"
        );
    }
    if let Ok(sql) = merit_repair::extract::extract_statements(reply) {
        assert!(
            !sql.trim().is_empty() && reply.contains(sql.as_str()),
            "{sql:?} is empty or not part of {reply:?}"
        );
    }
});
