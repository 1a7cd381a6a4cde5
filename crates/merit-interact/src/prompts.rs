//! The prompt templates of the agent and of the model-driven user simulator
//! (family `merit-interact-prompts-v1`; every field is documented in `prompts/README.md`).
//!
//! The templates are plain text files compiled into the crate, so a run's prompts are fixed by
//! the binary, and the family name is part of every request's `prompt_version` (and so of the
//! reply-cache key): changing a template and bumping the family never reuses stale replies.

/// The template family; bump it whenever a template changes.
pub const PROMPT_FAMILY: &str = "merit-interact-prompts-v1";

/// Simulator step 1: what is the agent's question about?
pub const SIMULATOR_CHOOSE: &str = include_str!("../prompts/simulator_choose.txt");
/// Simulator step 2: the reply in the user's words.
pub const SIMULATOR_ANSWER: &str = include_str!("../prompts/simulator_answer.txt");
/// The agent's system message.
pub const AGENT_SYSTEM: &str = include_str!("../prompts/agent_system.txt");
/// The agent's system message when the backend takes native tool calls.
pub const AGENT_SYSTEM_TOOLS: &str = include_str!("../prompts/agent_system_tools.txt");
/// The agent's first user message.
pub const AGENT_TASK: &str = include_str!("../prompts/agent_task.txt");
/// The schema block added to the opening with [`crate::agent::AgentConfig::schema_in_opening`].
pub const AGENT_SCHEMA: &str = include_str!("../prompts/agent_schema.txt");
/// Every later user message of the agent (one observation).
pub const AGENT_OBSERVATION: &str = include_str!("../prompts/agent_observation.txt");

/// The non-agentic baseline's system message.
pub const VANILLA_SYSTEM: &str = include_str!("../prompts/vanilla_system.txt");
/// The non-agentic baseline's request message.
pub const VANILLA_TASK: &str = include_str!("../prompts/vanilla_task.txt");
/// The non-agentic baseline's follow-up message (phase 2).
pub const VANILLA_FOLLOW_UP: &str = include_str!("../prompts/vanilla_follow_up.txt");

/// The `prompt_version` of a request made from template `name`, e.g.
/// `merit-interact-prompts-v1/agent`.
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
    fn every_template_has_exactly_its_documented_slots() {
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
            (AGENT_SYSTEM, &["dialect"][..]),
            (AGENT_SYSTEM_TOOLS, &["dialect"][..]),
            (AGENT_TASK, &["opening"][..]),
            (AGENT_SCHEMA, &["schema"][..]),
            (AGENT_OBSERVATION, &["observation", "hint"][..]),
            (VANILLA_SYSTEM, &["dialect"][..]),
            (VANILLA_TASK, &["schema", "request"][..]),
            (VANILLA_FOLLOW_UP, &["request"][..]),
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
