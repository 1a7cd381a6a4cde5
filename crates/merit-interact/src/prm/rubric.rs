//! The structured utility rubric of one (state, memory) pair and its strict reader.
//!
//! # Wire format
//! One JSON object with exactly three keys, each an object with exactly the keys listed:
//!
//! ```json
//! {"principles": {"state_match": {"score": 4, "reason": "…"}, …seven principles…},
//!  "flags": {"recommend_injection": true, "use_as_warning_only": false},
//!  "feedback": {"one_sentence_summary": "…", "how_to_use": "…"}}
//! ```
//!
//! The same shape is what [`Rubric`] serializes to, so a stored annotation and a model reply
//! read alike.
//!
//! # Decisions
//! - **Scores are whole numbers 0..=5.** The scale has six labelled anchors, the student PRM
//!   predicts a categorical distribution over them and accuracy is exact agreement, so a
//!   fractional score has no meaning here. A JSON number with no fractional part is accepted
//!   whatever its spelling (`4`, `4.0`); `3.5` is rejected ([`RubricError::NotWhole`]), as are
//!   `-1` and `6` ([`RubricError::OutOfRange`]) and a string `"4"`.
//! - **Reasons and texts** must be non-empty strings of at most [`MAX_TEXT_CHARS`]
//!   characters. "One sentence" is asked for but not counted: sentence splitting trips over
//!   `e.g.` and table names with dots, and a wrong rejection costs a teacher call; the length
//!   cap catches the real failure (a paragraph).
//! - **Wrapping.** A leading `<think>` block (reasoning models emit one before answering),
//!   surrounding whitespace, and one Markdown code fence around the whole object (three
//!   backticks, optionally tagged `json`) are forgiven; any other text before or after the object is an error
//!   ([`RubricError::Unreadable`]), because "the JSON object and nothing else" is the format
//!   whose validity the agreement table measures. A fence is forgiven because it changes
//!   nothing about what is read and models add it whatever the prompt says.
//! - **Keys**: every key must be present, no other key is allowed, flags are JSON booleans.

use crate::json::{reply_object, Wrapping};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The highest score of every principle (the lowest is 0).
pub const MAX_SCORE: u8 = 5;

/// Characters allowed at most in a reason, the summary and the usage note.
pub const MAX_TEXT_CHARS: usize = 400;

/// One of the seven rubric principles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Principle {
    /// How close the current state is to the state the memory's step was taken in.
    StateMatch,
    /// How concretely the memory says what to do, or what not to do, next.
    ActionabilityValue,
    /// Whether the lesson transfers to many similar situations.
    PatternGeneralizability,
    /// Whether the step's result clearly supports its outcome label.
    OutcomeReliability,
    /// How easily the lesson becomes a short tip the agent understands.
    ClarityForAgent,
    /// The judge's confidence in its own grades.
    ConfidenceInAssessment,
    /// How worthwhile it is to show the memory now.
    OverallUtility,
}

impl Principle {
    /// The seven principles in rubric order (the order of the student's heads).
    pub const ALL: [Principle; 7] = [
        Principle::StateMatch,
        Principle::ActionabilityValue,
        Principle::PatternGeneralizability,
        Principle::OutcomeReliability,
        Principle::ClarityForAgent,
        Principle::ConfidenceInAssessment,
        Principle::OverallUtility,
    ];

    /// The JSON key, e.g. `state_match`.
    pub fn key(self) -> &'static str {
        match self {
            Principle::StateMatch => "state_match",
            Principle::ActionabilityValue => "actionability_value",
            Principle::PatternGeneralizability => "pattern_generalizability",
            Principle::OutcomeReliability => "outcome_reliability",
            Principle::ClarityForAgent => "clarity_for_agent",
            Principle::ConfidenceInAssessment => "confidence_in_assessment",
            Principle::OverallUtility => "overall_utility",
        }
    }

    /// Position in [`Principle::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// What the principle measures, as a noun phrase (for generated reasons).
    pub fn measures(self) -> &'static str {
        match self {
            Principle::StateMatch => "how closely the current state matches the memory's state",
            Principle::ActionabilityValue => "how concretely the memory guides the next action",
            Principle::PatternGeneralizability => "how well the memory's lesson transfers",
            Principle::OutcomeReliability => "how reliable the memory's outcome is as evidence",
            Principle::ClarityForAgent => "how clearly the lesson can be stated to the agent",
            Principle::ConfidenceInAssessment => "confidence in this assessment",
            Principle::OverallUtility => "the overall value of showing this memory now",
        }
    }
}

/// One principle's grade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Judgement {
    /// 0..=[`MAX_SCORE`].
    pub score: u8,
    /// One sentence explaining the score.
    pub reason: String,
}

/// The seven principles' grades.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principles {
    /// [`Principle::StateMatch`].
    pub state_match: Judgement,
    /// [`Principle::ActionabilityValue`].
    pub actionability_value: Judgement,
    /// [`Principle::PatternGeneralizability`].
    pub pattern_generalizability: Judgement,
    /// [`Principle::OutcomeReliability`].
    pub outcome_reliability: Judgement,
    /// [`Principle::ClarityForAgent`].
    pub clarity_for_agent: Judgement,
    /// [`Principle::ConfidenceInAssessment`].
    pub confidence_in_assessment: Judgement,
    /// [`Principle::OverallUtility`].
    pub overall_utility: Judgement,
}

impl Principles {
    /// The grade of `principle`.
    pub fn get(&self, principle: Principle) -> &Judgement {
        match principle {
            Principle::StateMatch => &self.state_match,
            Principle::ActionabilityValue => &self.actionability_value,
            Principle::PatternGeneralizability => &self.pattern_generalizability,
            Principle::OutcomeReliability => &self.outcome_reliability,
            Principle::ClarityForAgent => &self.clarity_for_agent,
            Principle::ConfidenceInAssessment => &self.confidence_in_assessment,
            Principle::OverallUtility => &self.overall_utility,
        }
    }

    /// Builds the grades from one judgement per principle, in [`Principle::ALL`] order.
    pub fn from_array(judgements: [Judgement; 7]) -> Principles {
        let [state_match, actionability_value, pattern_generalizability, outcome_reliability, clarity_for_agent, confidence_in_assessment, overall_utility] =
            judgements;
        Principles {
            state_match,
            actionability_value,
            pattern_generalizability,
            outcome_reliability,
            clarity_for_agent,
            confidence_in_assessment,
            overall_utility,
        }
    }
}

/// The two yes/no decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flags {
    /// Show the memory to the agent in this state.
    pub recommend_injection: bool,
    /// Its value is mainly as a mistake not to repeat.
    pub use_as_warning_only: bool,
}

/// The two free texts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Feedback {
    /// Why the memory helps here or does not, in one sentence.
    pub one_sentence_summary: String,
    /// How whoever selects memories should use it.
    pub how_to_use: String,
}

/// The full rubric of one (state, memory) pair. Build one with [`parse_rubric`] (from a model
/// reply) or field by field and check it with [`Rubric::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rubric {
    /// The seven graded principles.
    pub principles: Principles,
    /// The two flags.
    pub flags: Flags,
    /// The two texts.
    pub feedback: Feedback,
}

impl Rubric {
    /// The score of `principle`.
    pub fn score(&self, principle: Principle) -> u8 {
        self.principles.get(principle).score
    }

    /// All seven scores in [`Principle::ALL`] order.
    pub fn scores(&self) -> [u8; 7] {
        Principle::ALL.map(|p| self.score(p))
    }

    /// Checks what the types do not: every score in 0..=[`MAX_SCORE`], every text non-empty
    /// and at most [`MAX_TEXT_CHARS`] characters (a rubric read back from a file, or built by
    /// hand, passes through this).
    pub fn validate(&self) -> Result<(), RubricError> {
        for principle in Principle::ALL {
            let judgement = self.principles.get(principle);
            let at = format!("principles.{}", principle.key());
            if judgement.score > MAX_SCORE {
                return Err(RubricError::OutOfRange {
                    key: format!("{at}.score"),
                    value: judgement.score.to_string(),
                });
            }
            check_text(&judgement.reason, &format!("{at}.reason"))?;
        }
        check_text(
            &self.feedback.one_sentence_summary,
            "feedback.one_sentence_summary",
        )?;
        check_text(&self.feedback.how_to_use, "feedback.how_to_use")?;
        Ok(())
    }
}

/// Why a reply or a stored rubric is not a valid [`Rubric`]. The messages are written for the
/// model: the judge sends one back with its retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RubricError {
    /// No JSON object could be read (none, invalid JSON, or text around it).
    #[error("{0}")]
    Unreadable(String),
    /// A required key is absent.
    #[error("the key \"{key}\" is missing")]
    Missing {
        /// Dotted path of the key.
        key: String,
    },
    /// A key that the format does not have.
    #[error("\"{key}\" is not an allowed key (use only {allowed})")]
    Extra {
        /// Dotted path of the key.
        key: String,
        /// The allowed keys at that level.
        allowed: String,
    },
    /// A value of the wrong JSON type.
    #[error("\"{key}\" must be {expected}")]
    WrongType {
        /// Dotted path of the key.
        key: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A whole-number score outside 0..=5.
    #[error("\"{key}\" is {value}, outside the scale; scores run from 0 to 5")]
    OutOfRange {
        /// Dotted path of the score.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A score with a fractional part.
    #[error("\"{key}\" is {value}; scores are whole numbers from 0 to 5")]
    NotWhole {
        /// Dotted path of the score.
        key: String,
        /// The value as written.
        value: String,
    },
    /// An empty reason or text.
    #[error("\"{key}\" is empty")]
    Empty {
        /// Dotted path of the text.
        key: String,
    },
    /// A reason or text over [`MAX_TEXT_CHARS`] characters.
    #[error("\"{key}\" has {chars} characters; keep it to one sentence of at most {max} characters", max = MAX_TEXT_CHARS)]
    TooLong {
        /// Dotted path of the text.
        key: String,
        /// Its length in characters.
        chars: usize,
    },
}

fn check_text(text: &str, key: &str) -> Result<(), RubricError> {
    if text.trim().is_empty() {
        return Err(RubricError::Empty {
            key: key.to_string(),
        });
    }
    let chars = text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(RubricError::TooLong {
            key: key.to_string(),
            chars,
        });
    }
    Ok(())
}

/// A GBNF grammar (llama.cpp's format, start rule `root`) of the wire format: the object
/// alone, keys in the prompt's order, whole scores 0 to 5, JSON booleans and non-empty JSON
/// strings of at most [`MAX_TEXT_CHARS`] characters, with at most [`GRAMMAR_MAX_GAP`]
/// whitespace characters between tokens.
///
/// Why a grammar: the embedded 1.5B teacher answered 8 of the interact smoke's 30 pairs with
/// a rubric followed by more text, running to the 1,536-token limit twice (reply and retry),
/// which was 76% of the tokens it generated and ended as unusable annotations
/// (docs/results/interact/prm-grammar); under the grammar the reply ends at the object's
/// closing brace. The gap between tokens is bounded
/// because a grammar that allows any whitespace lets a greedy model emit newlines until the
/// limit. A reply decoded under it can still fail [`parse_rubric`] when the token limit cuts
/// it.
pub fn rubric_grammar() -> String {
    let judgement = |key: &str| format!("\"\\\"{key}\\\":\" gap judgement");
    let principles: Vec<String> = Principle::ALL.iter().map(|p| judgement(p.key())).collect();
    let field = |key: &str, value: &str| format!("\"\\\"{key}\\\":\" gap {value}");
    let mut grammar = String::new();
    grammar.push_str(&format!(
        "root ::= \"{{\" gap {} gap \",\" gap {} gap \",\" gap {} gap \"}}\"\n",
        field("principles", "principles"),
        field("flags", "flags"),
        field("feedback", "feedback"),
    ));
    grammar.push_str(&format!(
        "principles ::= \"{{\" gap {} gap \"}}\"\n",
        principles.join(" gap \",\" gap ")
    ));
    grammar.push_str(&format!(
        "judgement ::= \"{{\" gap {} gap \",\" gap {} gap \"}}\"\n",
        field("score", "score"),
        field("reason", "text")
    ));
    grammar.push_str(&format!(
        "flags ::= \"{{\" gap {} gap \",\" gap {} gap \"}}\"\n",
        field("recommend_injection", "boolean"),
        field("use_as_warning_only", "boolean")
    ));
    grammar.push_str(&format!(
        "feedback ::= \"{{\" gap {} gap \",\" gap {} gap \"}}\"\n",
        field("one_sentence_summary", "text"),
        field("how_to_use", "text")
    ));
    grammar.push_str("score ::= [0-5]\n");
    grammar.push_str("boolean ::= \"true\" | \"false\"\n");
    // Bounded: inside a string the grammar allows no end of text, so a small model that
    // would stop there otherwise writes on to the token limit; at the bound it must close.
    grammar.push_str(&format!(
        "text ::= \"\\\"\" char{{1,{MAX_TEXT_CHARS}}} \"\\\"\"\n"
    ));
    // Any character but a quote, a backslash or a control character, or a JSON escape.
    grammar.push_str(
        "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" hex hex hex hex)\n",
    );
    grammar.push_str("hex ::= [0-9a-fA-F]\n");
    // Nested options, not `{0,n}`: one way to read every run of spaces (see `GRAMMAR_MAX_GAP`).
    let mut gap = String::new();
    for _ in 0..GRAMMAR_MAX_GAP {
        gap = format!("([ \\t\\n] {gap})?");
    }
    grammar.push_str(&format!("gap ::= {}\n", gap.replace(" )", ")")));
    grammar
}

/// Whitespace characters [`rubric_grammar`] allows at most between two tokens: enough for a
/// newline and the indentation of the third nesting level.
pub const GRAMMAR_MAX_GAP: usize = 12;

/// Reads a model reply into a [`Rubric`] (see the module docs for what is accepted).
pub fn parse_rubric(reply: &str) -> Result<Rubric, RubricError> {
    let object = reply_object(reply, Wrapping::Fenced).map_err(RubricError::Unreadable)?;
    only_keys(&object, &["principles", "flags", "feedback"], "")?;
    let principles = section(&object, "principles")?;
    let keys = Principle::ALL.map(Principle::key);
    only_keys(principles, &keys, "principles.")?;
    let mut judgements = Vec::with_capacity(7);
    for principle in Principle::ALL {
        let at = format!("principles.{}", principle.key());
        let entry = match principles.get(principle.key()) {
            Some(Value::Object(entry)) => entry,
            Some(_) => {
                return Err(RubricError::WrongType {
                    key: at,
                    expected: "an object with \"score\" and \"reason\"",
                })
            }
            None => return Err(RubricError::Missing { key: at }),
        };
        only_keys(entry, &["score", "reason"], &format!("{at}."))?;
        judgements.push(Judgement {
            score: score(entry, &at)?,
            reason: text(entry, "reason", &at)?,
        });
    }
    let judgements: [Judgement; 7] = judgements
        .try_into()
        .map_err(|_| RubricError::Unreadable("internal: seven principles expected".into()))?;
    let flags_object = section(&object, "flags")?;
    only_keys(
        flags_object,
        &["recommend_injection", "use_as_warning_only"],
        "flags.",
    )?;
    let flags = Flags {
        recommend_injection: flag(flags_object, "recommend_injection")?,
        use_as_warning_only: flag(flags_object, "use_as_warning_only")?,
    };
    let feedback_object = section(&object, "feedback")?;
    only_keys(
        feedback_object,
        &["one_sentence_summary", "how_to_use"],
        "feedback.",
    )?;
    let feedback = Feedback {
        one_sentence_summary: text(feedback_object, "one_sentence_summary", "feedback")?,
        how_to_use: text(feedback_object, "how_to_use", "feedback")?,
    };
    Ok(Rubric {
        principles: Principles::from_array(judgements),
        flags,
        feedback,
    })
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), RubricError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(extra) => Err(RubricError::Extra {
            key: format!("{at}{extra}"),
            allowed: allowed.join(", "),
        }),
        None => Ok(()),
    }
}

fn section<'v>(
    object: &'v Map<String, Value>,
    key: &str,
) -> Result<&'v Map<String, Value>, RubricError> {
    match object.get(key) {
        Some(Value::Object(inner)) => Ok(inner),
        Some(_) => Err(RubricError::WrongType {
            key: key.to_string(),
            expected: "an object",
        }),
        None => Err(RubricError::Missing {
            key: key.to_string(),
        }),
    }
}

fn score(entry: &Map<String, Value>, at: &str) -> Result<u8, RubricError> {
    let key = format!("{at}.score");
    let number = match entry.get("score") {
        Some(Value::Number(number)) => number,
        Some(_) => {
            return Err(RubricError::WrongType {
                key,
                expected: "a whole number from 0 to 5",
            })
        }
        None => return Err(RubricError::Missing { key }),
    };
    let written = number.to_string();
    let Some(value) = number.as_f64().filter(|v| v.is_finite()) else {
        return Err(RubricError::OutOfRange {
            key,
            value: written,
        });
    };
    if value.fract() != 0.0 {
        return Err(RubricError::NotWhole {
            key,
            value: written,
        });
    }
    if !(0.0..=f64::from(MAX_SCORE)).contains(&value) {
        return Err(RubricError::OutOfRange {
            key,
            value: written,
        });
    }
    // Exact: a whole number in 0..=5.
    Ok(value as u8)
}

fn text(object: &Map<String, Value>, key: &str, at: &str) -> Result<String, RubricError> {
    let path = format!("{at}.{key}");
    match object.get(key) {
        Some(Value::String(s)) => {
            let trimmed = s.trim();
            check_text(trimmed, &path)?;
            Ok(trimmed.to_string())
        }
        Some(_) => Err(RubricError::WrongType {
            key: path,
            expected: "a string",
        }),
        None => Err(RubricError::Missing { key: path }),
    }
}

fn flag(object: &Map<String, Value>, key: &str) -> Result<bool, RubricError> {
    let path = format!("flags.{key}");
    match object.get(key) {
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RubricError::WrongType {
            key: path,
            expected: "true or false",
        }),
        None => Err(RubricError::Missing { key: path }),
    }
}

/// The scalar reward f_PRM(σ_t, m) of a rubric, in [-0.5, 1]:
///
/// - recommended for injection: `overall_utility / 5`, in [0, 1];
/// - not recommended: `(overall_utility / 5 - 1) / 2`, in [-0.5, 0].
///
/// Why this shape: the turn-level selector may also inject nothing, which earns 0. A memory
/// the judge would not show must then never pay more than abstaining, so its reward is at
/// most 0, and it is most negative when the judge also finds it useless (overall 0 → -0.5).
/// A recommended memory earns in proportion to its overall utility, so every recommended
/// memory scores at least as high as every unrecommended one and the order within each group
/// follows `overall_utility`. The penalty is half the size of the gain because an
/// unrecommended hint usually costs the agent a little attention, not the episode; a full
/// -1 would teach the selector to abstain whenever it is unsure.
pub fn scalar_utility(rubric: &Rubric) -> f32 {
    let overall = f32::from(rubric.score(Principle::OverallUtility).min(MAX_SCORE)) / 5.0;
    if rubric.flags.recommend_injection {
        overall
    } else {
        (overall - 1.0) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(overall: &str) -> String {
        let mut principles = Vec::new();
        for principle in Principle::ALL {
            let score = if principle == Principle::OverallUtility {
                overall
            } else {
                "3"
            };
            principles.push(format!(
                "\"{}\": {{\"score\": {score}, \"reason\": \"Because.\"}}",
                principle.key()
            ));
        }
        format!(
            "{{\"principles\": {{{}}}, \"flags\": {{\"recommend_injection\": true, \"use_as_warning_only\": false}}, \"feedback\": {{\"one_sentence_summary\": \"Useful.\", \"how_to_use\": \"Copy it.\"}}}}",
            principles.join(", ")
        )
    }

    #[test]
    fn scores_are_whole_numbers_in_range() {
        assert_eq!(parse_rubric(&reply("4")).unwrap().scores()[6], 4);
        assert_eq!(parse_rubric(&reply("4.0")).unwrap().scores()[6], 4);
        assert!(matches!(
            parse_rubric(&reply("3.5")),
            Err(RubricError::NotWhole { .. })
        ));
        for bad in ["6", "-1", "1e9"] {
            assert!(
                matches!(
                    parse_rubric(&reply(bad)),
                    Err(RubricError::OutOfRange { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_rubric(&reply("\"4\"")),
            Err(RubricError::WrongType { .. })
        ));
    }

    #[test]
    fn the_grammar_takes_rubrics_and_nothing_around_them() {
        let grammar = merit_repair::grammar::language_regex(&rubric_grammar()).unwrap();
        let rubric = parse_rubric(&reply("4")).unwrap();
        let mut escaped = rubric.clone();
        escaped.feedback.how_to_use = "Copy: filter on \"T1\".name \\ then \u{e9}.".into();
        for text in [
            reply("4"),
            serde_json::to_string(&rubric).unwrap(),
            serde_json::to_string_pretty(&rubric).unwrap(),
            serde_json::to_string_pretty(&escaped).unwrap(),
        ] {
            assert!(grammar.is_match(&text), "{text}");
            assert!(parse_rubric(&text).is_ok());
        }
        let compact = serde_json::to_string(&rubric).unwrap();
        for bad in [
            format!("{compact}\nThat is my grade."),
            format!("Here it is: {compact}"),
            format!("```json\n{compact}\n```"),
            reply("6"),
            reply("3.5"),
            compact.replace("\"Because.\"", "\"\""),
            compact.replace("Because.", &"a".repeat(MAX_TEXT_CHARS + 1)),
            compact.replace(",\"use_as_warning_only\":false", ""),
            compact.replace(
                "{\"principles\"",
                &format!("{{{}\"principles\"", " ".repeat(13)),
            ),
        ] {
            assert!(!grammar.is_match(&bad), "{bad}");
        }
    }

    #[test]
    fn utility_orders_recommended_above_skipped() {
        let mut rubric = parse_rubric(&reply("5")).unwrap();
        assert_eq!(scalar_utility(&rubric), 1.0);
        rubric.principles.overall_utility.score = 0;
        assert_eq!(scalar_utility(&rubric), 0.0);
        rubric.flags.recommend_injection = false;
        assert_eq!(scalar_utility(&rubric), -0.5);
        rubric.principles.overall_utility.score = 5;
        assert_eq!(scalar_utility(&rubric), 0.0);
    }
}
