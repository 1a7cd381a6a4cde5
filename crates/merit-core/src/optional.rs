//! Optional resources of the test suites: a PostgreSQL server, `python3`, model files, a
//! browser driver, a real llama.cpp server, the MCP Python SDK, a tmpfs mount (root).
//!
//! A test that needs one and does not find it skips with a loud `SKIPPED` line, so a plain
//! `cargo test` on a bare machine passes and says what it did not test. Each resource has a
//! `MERIT_REQUIRE_*` variable; set to `1` (CI sets all of them, the mount one only where a
//! probe mount works) a missing resource fails the test instead, so a broken setup can never
//! pass as skipped.

/// Whether the environment variable `require_var` is `1`: the resource must be there.
pub fn is_required(require_var: &str) -> bool {
    std::env::var(require_var).as_deref() == Ok("1")
}

/// Reports a missing resource: panics naming it when `require_var` is `1`, otherwise prints a
/// loud skip line. `what` says what is missing and what does not run ("PostgreSQL tests:
/// MERIT_TEST_POSTGRES_URL is unset"); `how` says how to provide it.
pub fn missing(require_var: &str, what: &str, how: &str) {
    assert!(
        !is_required(require_var),
        "{require_var}=1 but {what} ({how})"
    );
    eprintln!("\n=== SKIPPED: {what}\n=== {how}; {require_var}=1 makes this a failure.\n");
}

/// The trimmed value of the environment variable `var` when set and not blank; otherwise
/// [`missing`] with `what` and `how`, then `None`.
pub fn from_env(var: &str, require_var: &str, what: &str, how: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Some(value.trim().to_string()),
        _ => {
            missing(require_var, &format!("{what} ({var} is unset)"), how);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unrequired_missing_resource_skips_and_a_required_one_fails() {
        // Variables no other test reads, so setting them here races nothing.
        let (var, require) = ("MERIT_OPTIONAL_TEST_VALUE", "MERIT_OPTIONAL_TEST_REQUIRE");
        std::env::remove_var(var);
        std::env::remove_var(require);
        assert_eq!(from_env(var, require, "the thing", "make one"), None);
        std::env::set_var(var, "  here \n");
        assert_eq!(
            from_env(var, require, "the thing", "make one").as_deref(),
            Some("here")
        );
        std::env::set_var(var, " ");
        std::env::set_var(require, "1");
        let failed = std::panic::catch_unwind(|| from_env(var, require, "the thing", "make one"));
        let message = *failed.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("MERIT_OPTIONAL_TEST_REQUIRE=1 but the thing"),
            "{message}"
        );
        std::env::remove_var(var);
        std::env::remove_var(require);
    }
}
