//! Action costs and the budget (protocol §2).
//!
//! Amounts are kept in tenths of a coin as integers: every cost is a multiple of 0.1, and
//! integer arithmetic makes "a charge leaving ≤ 0" exact, where repeated float subtraction of
//! 0.2 and 0.5 would drift.

use serde::{Deserialize, Serialize};

/// The patience used by the paper's runs.
pub const DEFAULT_PATIENCE: u32 = 6;

/// The patience values the benchmark defines.
pub const PATIENCE_LEVELS: [u32; 4] = [0, 6, 10, 14];

/// An amount of budget, in tenths of a coin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Coins(pub i64);

impl Coins {
    /// The amount as a number of coins.
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 10.0
    }

    /// With one decimal, as the budget note prints it (e.g. `17.5`, `-0.5`).
    pub fn display(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        format!("{sign}{}.{}", abs / 10, abs % 10)
    }
}

/// What an action costs, keyed on its **name** only (protocol §2: an `ask` sent to the
/// Environment still costs 2). Empty and unknown names cost 0.2.
pub fn action_cost(name: &str) -> Coins {
    Coins(match name {
        "execute" | "get_schema" | "get_all_column_meanings" | "get_all_knowledge_definitions" => {
            10
        }
        "get_column_meaning" | "get_all_external_knowledge_names" | "get_knowledge_definition" => 5,
        "ask" => 20,
        "submit" => 30,
        _ => 2,
    })
}

/// The total budget: `3 + 3 + 2·m + patience`, where `m` counts critical and knowledge
/// ambiguities (non-critical ones do not count).
pub fn total_budget(ambiguities: usize, patience: u32) -> Coins {
    let m = i64::try_from(ambiguities).unwrap_or(i64::MAX / 100);
    Coins((6 + 2 * m + i64::from(patience)) * 10)
}

/// One task's budget: a single pool for both phases, never refilled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    total: Coins,
    remaining: Coins,
    force_submit: bool,
}

impl Budget {
    /// A full budget of `total`.
    pub fn new(total: Coins) -> Budget {
        Budget {
            total,
            remaining: total,
            force_submit: total.0 <= 0,
        }
    }

    /// The starting amount.
    pub fn total(&self) -> Coins {
        self.total
    }

    /// What is left (may go negative: the charge is made before the action, in full).
    pub fn remaining(&self) -> Coins {
        self.remaining
    }

    /// `true` once a charge has left the budget at or below zero: the next action must be a
    /// submit.
    pub fn force_submit(&self) -> bool {
        self.force_submit
    }

    /// Charges `cost`; returns `true` when this charge set the force-submit flag.
    pub fn charge(&mut self, cost: Coins) -> bool {
        self.remaining = Coins(self.remaining.0 - cost.0);
        let newly = !self.force_submit && self.remaining.0 <= 0;
        if self.remaining.0 <= 0 {
            self.force_submit = true;
        }
        newly
    }

    /// The bracketed note that ends every observation.
    pub fn note(&self) -> String {
        if self.force_submit {
            format!(
                "[Budget: {}/{} left. The budget is used up: the next action must be a submit.]",
                self.remaining.display(),
                self.total.display()
            )
        } else {
            format!(
                "[Budget: {}/{} left.]",
                self.remaining.display(),
                self.total.display()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_formula_matches_the_protocol_example() {
        // 2 critical + 1 knowledge ambiguity at patience 6 → 18.
        assert_eq!(total_budget(3, 6), Coins(180));
        assert_eq!(total_budget(0, 0), Coins(60));
        assert_eq!(total_budget(1, 14), Coins(220));
    }

    #[test]
    fn costs_are_keyed_on_the_name() {
        assert_eq!(action_cost("execute"), Coins(10));
        assert_eq!(action_cost("get_schema"), Coins(10));
        assert_eq!(action_cost("get_all_column_meanings"), Coins(10));
        assert_eq!(action_cost("get_all_knowledge_definitions"), Coins(10));
        assert_eq!(action_cost("get_column_meaning"), Coins(5));
        assert_eq!(action_cost("get_all_external_knowledge_names"), Coins(5));
        assert_eq!(action_cost("get_knowledge_definition"), Coins(5));
        assert_eq!(action_cost("ask"), Coins(20));
        assert_eq!(action_cost("submit"), Coins(30));
        assert_eq!(action_cost(""), Coins(2));
        assert_eq!(action_cost("Execute"), Coins(2));
        assert_eq!(action_cost("drop_everything"), Coins(2));
    }

    #[test]
    fn charging_to_zero_sets_force_submit_exactly_once() {
        let mut budget = Budget::new(Coins(7));
        assert!(!budget.charge(Coins(5)));
        assert!(!budget.force_submit());
        assert!(budget.charge(Coins(2)));
        assert!(budget.force_submit());
        assert_eq!(budget.remaining(), Coins(0));
        assert!(!budget.charge(Coins(30)));
        assert_eq!(budget.remaining().display(), "-3.0");
        assert!(budget.note().contains("-3.0/0.7"));
    }

    #[test]
    fn display_has_one_decimal() {
        assert_eq!(Coins(175).display(), "17.5");
        assert_eq!(Coins(0).display(), "0.0");
        assert_eq!(Coins(-5).display(), "-0.5");
    }
}
