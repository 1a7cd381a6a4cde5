//! The prompt family of the interact side and the user simulator's templates
//! (`merit-interact-prompts-v1`; documented in `prompts/README.md`). The agent's templates
//! are in the same family, in the method crate (`merit-interact`).
//!
//! The templates are plain text files compiled into the crate, so a run's prompts are fixed by
//! the binary, and the family name is part of every request's `prompt_version` (and so of the
//! reply-cache key): changing a template and bumping the family never reuses stale replies.

/// The template family; bump it whenever a template of the family changes.
pub const PROMPT_FAMILY: &str = "merit-interact-prompts-v1";

/// Simulator step 1: what is the agent's question about?
pub const SIMULATOR_CHOOSE: &str = include_str!("../prompts/simulator_choose.txt");
/// Simulator step 2: the reply in the user's words.
pub const SIMULATOR_ANSWER: &str = include_str!("../prompts/simulator_answer.txt");

/// The `prompt_version` of a request made from template `name`, e.g.
/// `merit-interact-prompts-v1/simulator-choose`.
pub fn version(name: &str) -> String {
    format!("{PROMPT_FAMILY}/{name}")
}

/// The `{{slot}}` filler shared with the repair prompts: one pass, so a value that contains
/// `{{` is copied as it is and never expanded (text from the database or a model cannot
/// inject another slot); a slot without a value stays visible, and the tests check that no
/// rendered template keeps one.
pub use merit_core::template::{fill, slots};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulator_templates_have_exactly_their_documented_slots() {
        let readme = include_str!("../prompts/README.md");
        for (template, expected) in [
            (
                SIMULATOR_CHOOSE,
                &["ambiguous_question", "ambiguities", "segments", "question"][..],
            ),
            (
                SIMULATOR_ANSWER,
                &[
                    "ambiguous_question",
                    "clear_question",
                    "focus",
                    "gold_sql",
                    "schema",
                    "question",
                ][..],
            ),
        ] {
            assert_eq!(slots(template), expected);
            for slot in expected {
                assert!(readme.contains(&format!("`{slot}`")), "{slot} undocumented");
            }
            let values: Vec<(&str, &str)> = expected.iter().map(|s| (*s, "v")).collect();
            assert!(!fill(template, &values).contains("{{"));
        }
    }
}
