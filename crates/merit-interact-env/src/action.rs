//! Actions as the environment receives them (protocol §2–§3).
//!
//! An action is an interaction object, a name and its arguments, already parsed by the agent
//! side (text protocol or native tool call). Keeping the raw name, not an enum, lets the
//! environment charge and answer unknown or misdirected actions exactly as the protocol says.

use serde::{Deserialize, Serialize};

/// Whom an action is addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Target {
    /// The database environment (execute and the metadata tools).
    Environment,
    /// The user (ask and submit).
    User,
}

/// The environment's action names.
pub const ENVIRONMENT_ACTIONS: [&str; 7] = [
    "execute",
    "get_schema",
    "get_all_column_meanings",
    "get_column_meaning",
    "get_all_external_knowledge_names",
    "get_knowledge_definition",
    "get_all_knowledge_definitions",
];

/// The user's action names.
pub const USER_ACTIONS: [&str; 2] = ["ask", "submit"];

/// One action of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionCall {
    /// The interaction object.
    pub target: Target,
    /// The action name (costs are keyed on it).
    pub name: String,
    /// Positional arguments, already unquoted.
    pub args: Vec<String>,
}

impl ActionCall {
    /// Any action, as given.
    pub fn new(target: Target, name: impl Into<String>, args: Vec<String>) -> ActionCall {
        ActionCall {
            target,
            name: name.into(),
            args,
        }
    }
    /// `execute(sql)` on the environment.
    pub fn execute(sql: impl Into<String>) -> ActionCall {
        ActionCall::new(Target::Environment, "execute", vec![sql.into()])
    }
    /// `get_schema()`.
    pub fn get_schema() -> ActionCall {
        ActionCall::new(Target::Environment, "get_schema", Vec::new())
    }
    /// `get_all_column_meanings()`.
    pub fn get_all_column_meanings() -> ActionCall {
        ActionCall::new(Target::Environment, "get_all_column_meanings", Vec::new())
    }
    /// `get_column_meaning(table, column)`.
    pub fn get_column_meaning(table: impl Into<String>, column: impl Into<String>) -> ActionCall {
        ActionCall::new(
            Target::Environment,
            "get_column_meaning",
            vec![table.into(), column.into()],
        )
    }
    /// `get_all_external_knowledge_names()`.
    pub fn get_all_external_knowledge_names() -> ActionCall {
        ActionCall::new(
            Target::Environment,
            "get_all_external_knowledge_names",
            Vec::new(),
        )
    }
    /// `get_knowledge_definition(name)`.
    pub fn get_knowledge_definition(name: impl Into<String>) -> ActionCall {
        ActionCall::new(
            Target::Environment,
            "get_knowledge_definition",
            vec![name.into()],
        )
    }
    /// `get_all_knowledge_definitions()`.
    pub fn get_all_knowledge_definitions() -> ActionCall {
        ActionCall::new(
            Target::Environment,
            "get_all_knowledge_definitions",
            Vec::new(),
        )
    }
    /// `ask(question)` to the user.
    pub fn ask(question: impl Into<String>) -> ActionCall {
        ActionCall::new(Target::User, "ask", vec![question.into()])
    }
    /// `submit(sql)` to the user.
    pub fn submit(sql: impl Into<String>) -> ActionCall {
        ActionCall::new(Target::User, "submit", vec![sql.into()])
    }

    /// `true` for a submit addressed to the user, the only action accepted under the
    /// force-submit flag.
    pub fn is_submit(&self) -> bool {
        self.target == Target::User && self.name == "submit"
    }
}
