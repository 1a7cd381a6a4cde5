//! The learned selector behind merit-interact's [`Selector`] trait.

use super::{level_name, LearnError, SelectionExample, SelectorPolicy};
use merit_core::model::ModelError;
use merit_interact::memory::{Level, SelectError, Selection, SelectionInput, Selector};
use std::path::Path;

/// A trained [`SelectorPolicy`] used greedily as the second stage of retrieval: it injects
/// the candidates the policy finds more probable than "none", most probable first, at most
/// [`SelectionInput::limit`]; when "none" is the most probable option it injects nothing.
///
/// The policy is immutable and `Send + Sync`, so a `LearnedSelector` can be shared across
/// threads as the trait requires.
#[derive(Debug, Clone)]
pub struct LearnedSelector {
    policy: SelectorPolicy,
    name: String,
}

impl LearnedSelector {
    /// A selector over `policy`; its name (`learned:<level>:<fingerprint>`) identifies the
    /// exact weights.
    pub fn new(policy: SelectorPolicy) -> Result<LearnedSelector, LearnError> {
        let name = format!(
            "learned:{}:{:016x}",
            level_name(policy.config().level),
            policy.fingerprint()?
        );
        Ok(LearnedSelector { policy, name })
    }

    /// Loads the checkpoint at `weights` for `level` and embeddings of `embedding_dim`
    /// dimensions (see [`SelectorPolicy::load_for`]).
    pub fn load(
        weights: &Path,
        level: Level,
        embedding_dim: usize,
    ) -> Result<LearnedSelector, LearnError> {
        LearnedSelector::new(SelectorPolicy::load_for(weights, level, embedding_dim)?)
    }

    /// The policy.
    pub fn policy(&self) -> &SelectorPolicy {
        &self.policy
    }
}

impl Selector for LearnedSelector {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        if input.candidates.is_empty() || input.limit == 0 {
            return Ok(Selection::default());
        }
        // A wrong level or embedding size means the wrong checkpoint was configured: an
        // error the run should stop on, not a silent "none".
        let example = SelectionExample::from_input(input);
        let chosen = self.policy.choose(&example, input.limit).map_err(|e| {
            SelectError::Model(ModelError::InvalidRequest(format!("{}: {e}", self.name)))
        })?;
        Ok(Selection { chosen, note: None })
    }
}
