//! The prompt templates of the agent (family `merit-interact-prompts-v1`, shared with the
//! user simulator in `merit-interact-env`; every field is documented in `prompts/README.md`).
//!
//! The templates are plain text files compiled into the crate, so a run's prompts are fixed by
//! the binary, and the family name is part of every request's `prompt_version` (and so of the
//! reply-cache key): changing a template and bumping the family never reuses stale replies.

pub use merit_interact_env::prompts::{
    fill, slots, version, PROMPT_FAMILY, SIMULATOR_ANSWER, SIMULATOR_CHOOSE,
};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_has_exactly_its_documented_slots() {
        let readme = include_str!("../prompts/README.md");
        for (template, expected) in [
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
