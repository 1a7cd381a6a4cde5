//! The repair and reflection prompts of the `merit-prompts-v3` family.
//!
//! The paper's listings are not in our copy, so the texts under `prompts/` are our own design
//! from its §3.2 and appendix B: one user message, no system prompt; the repair prompt holds
//! the question, schema, evidence (BIRD), current SQL, status, DBMS error, predicted failure
//! type, the whole local history, positive precedents as confirmed successful directions and
//! negative ones as observed failed directions, and (Reflexion-style only) local reflections.
//! Gold SQL, gold rows and the corrected query of the current question never appear.

use super::{AttemptView, Precedent, PrecedentPolarity, QuestionView};
use merit_core::Benchmark;

const REPAIR: &str = include_str!("../../prompts/repair.txt");
const REFLECTION: &str = include_str!("../../prompts/reflection.txt");
const MEMORY_POSITIVE: &str = include_str!("../../prompts/memory_positive.txt");
const MEMORY_NEGATIVE: &str = include_str!("../../prompts/memory_negative.txt");
const MEMORY_POSITIVE_CHANGE: &str = include_str!("../../prompts/memory_positive_change.txt");
const MEMORY_NEGATIVE_CHANGE: &str = include_str!("../../prompts/memory_negative_change.txt");
const HISTORY_ENTRY: &str = include_str!("../../prompts/history_entry.txt");
const EVIDENCE_BLOCK: &str = include_str!("../../prompts/evidence_block.txt");
const REPAIR_FRESH: &str = include_str!("../../prompts/repair_fresh.txt");
const HINTS_BLOCK: &str = include_str!("../../prompts/hints_block.txt");
const REPEAT_NOTE: &str = include_str!("../../prompts/repeat_note.txt");

/// How the repair request is laid out. Either layout carries the same memories, history
/// feedback and hints; they differ in whether the failing queries are shown as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairLayout {
    /// The paper's layout (`merit-prompts-v3`): the current SQL as a block to correct, its
    /// feedback, and the whole history with every earlier query. Byte-identical to the
    /// prompts before aids existed when no hint is given.
    #[default]
    Paper,
    /// Ask afresh: the question and schema, the feedback every earlier attempt got (status and
    /// DBMS text) but not the failing queries themselves, the hints, the memories. A small
    /// model shown its failing query as a block tends to copy it back unchanged (issue 16);
    /// the repeat guard still names a repeated query when the model writes it again.
    Fresh,
}

impl RepairLayout {
    /// The kebab-case name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            RepairLayout::Paper => "paper",
            RepairLayout::Fresh => "fresh",
        }
    }
}

/// How much of each retrieved precedent the repair request shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrecedentView {
    /// The paper's precedent: the earlier question, its failing SQL, the feedback it got and
    /// the clause-level change Δ.
    #[default]
    Full,
    /// The same without the earlier failing SQL: the question, the feedback and Δ. In the dev
    /// run's logs the 1.5B repairer copied whole precedent queries (their tables, joins, even
    /// an odd alias of a negative entry) into its answer to a different question; Δ alone
    /// carries the direction of the fix as fragments rather than as a query to copy.
    Change,
}

impl PrecedentView {
    /// The kebab-case name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            PrecedentView::Full => "full",
            PrecedentView::Change => "change",
        }
    }

    /// `true` for the paper's view (kept out of manifests, so older run folders still match).
    pub fn is_full(&self) -> bool {
        *self == PrecedentView::Full
    }
}

/// Placeholder for an empty section, as the paper's prompts show it.
const NONE: &str = "(none)";

/// Prompt-version identifier of the repair prompt for a benchmark and layout.
pub fn repair_version(benchmark: Benchmark, layout: RepairLayout) -> String {
    match layout {
        RepairLayout::Paper => format!("{benchmark}-repair-v3"),
        RepairLayout::Fresh => format!("{benchmark}-repair-fresh-v1"),
    }
}

/// Prompt-version identifier of the reflection prompt for a benchmark.
pub fn reflection_version(benchmark: Benchmark) -> String {
    format!("{benchmark}-reflection-v3")
}

/// Fills `{{slot}}` placeholders in one pass (shared with the interact prompts). A slot
/// without a value is left as it is, and the tests check that no rendered prompt contains
/// `{{`, so a template and its caller cannot drift apart unnoticed.
pub use merit_core::template::fill;

fn error_suffix(error: Option<&str>) -> String {
    match error {
        Some(text) if !text.is_empty() => format!(" ({})", one_line(text)),
        _ => String::new(),
    }
}

/// Model-facing text must not let a multi-line DBMS message break the prompt's layout.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn evidence_block(benchmark: Benchmark, question: &QuestionView) -> String {
    match benchmark {
        Benchmark::Bird if !question.evidence.trim().is_empty() => {
            fill(EVIDENCE_BLOCK, &[("evidence", question.evidence.trim())])
        }
        _ => String::new(),
    }
}

/// `; failure type T` for a classified attempt, else nothing.
fn failure_type_suffix(attempt: &AttemptView) -> String {
    attempt
        .failure
        .map(|c| format!("; failure type {}", c.failure_type.as_str()))
        .unwrap_or_default()
}

/// The local history: every attempt so far, oldest first.
pub fn render_history(attempts: &[AttemptView]) -> String {
    if attempts.is_empty() {
        return NONE.to_string();
    }
    attempts
        .iter()
        .map(|attempt| {
            let failure_type = failure_type_suffix(attempt);
            fill(
                HISTORY_ENTRY,
                &[
                    ("step", &attempt.step.to_string()),
                    ("sql", &one_line(&attempt.sql)),
                    ("status", attempt.status.as_str()),
                    ("error_suffix", &error_suffix(attempt.error.as_deref())),
                    ("failure_type_suffix", &failure_type),
                ],
            )
        })
        .collect::<Vec<_>>()
        .join("")
        .trim_end()
        .to_string()
}

/// Retrieved precedents of one polarity, in retrieval order.
pub fn render_precedents(
    precedents: &[Precedent],
    polarity: PrecedentPolarity,
    view: PrecedentView,
) -> String {
    let template = match (polarity, view) {
        (PrecedentPolarity::Positive, PrecedentView::Full) => MEMORY_POSITIVE,
        (PrecedentPolarity::Negative, PrecedentView::Full) => MEMORY_NEGATIVE,
        (PrecedentPolarity::Positive, PrecedentView::Change) => MEMORY_POSITIVE_CHANGE,
        (PrecedentPolarity::Negative, PrecedentView::Change) => MEMORY_NEGATIVE_CHANGE,
    };
    let rendered: Vec<String> = precedents
        .iter()
        .filter(|p| p.polarity == polarity)
        .map(|p| {
            fill(
                template,
                &[
                    ("memory_id", &p.id),
                    ("failure_type", p.failure_type.as_str()),
                    ("db_id", &p.db_id),
                    ("question", &one_line(&p.question)),
                    ("failing_sql", &one_line(&p.failing_sql)),
                    ("status", &p.status),
                    ("error_suffix", &error_suffix(p.error.as_deref())),
                    ("delta", &one_line(&p.delta)),
                ],
            )
        })
        .collect();
    if rendered.is_empty() {
        NONE.to_string()
    } else {
        rendered.join("").trim_end().to_string()
    }
}

/// Everything the repair prompt needs besides the question.
pub struct RepairPromptInput<'a> {
    /// Which benchmark's variant (BIRD adds the evidence block).
    pub benchmark: Benchmark,
    /// SQL dialect name shown next to the schema.
    pub dialect: &'a str,
    /// The schema as CREATE TABLE statements.
    pub schema: &'a str,
    /// The episode's attempts so far; the last one is the current SQL.
    pub attempts: &'a [AttemptView],
    /// Retrieved precedents (both polarities).
    pub precedents: &'a [Precedent],
    /// How much of each precedent to show.
    pub precedent_view: PrecedentView,
    /// Reflections generated so far in this episode (Reflexion-style only).
    pub reflections: &'a [String],
    /// Hints from the database about the current attempt's failure (empty: no section).
    pub hints: &'a [String],
    /// The layout.
    pub layout: RepairLayout,
}

fn render_hints(hints: &[String]) -> String {
    hints
        .iter()
        .map(|hint| format!("- {}", one_line(hint)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The feedback of every attempt so far without its SQL, for the fresh layout.
fn render_feedback(attempts: &[AttemptView]) -> String {
    attempts
        .iter()
        .map(|attempt| {
            let failure_type = failure_type_suffix(attempt);
            format!(
                "attempt {}: status: {}{}{failure_type}",
                attempt.step,
                attempt.status.as_str(),
                error_suffix(attempt.error.as_deref())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The follow-up turn the repeat guard sends when a reply repeats attempt `earlier`.
pub fn repeat_note(earlier: &AttemptView) -> String {
    fill(
        REPEAT_NOTE,
        &[
            ("step", &earlier.step.to_string()),
            ("status", earlier.status.as_str()),
            ("error_suffix", &error_suffix(earlier.error.as_deref())),
        ],
    )
    .trim_end()
    .to_string()
}

/// The repair prompt for the next revision.
pub fn repair_prompt(question: &QuestionView, input: &RepairPromptInput<'_>) -> String {
    let current = input
        .attempts
        .last()
        .expect("a repair prompt is only built after a failed attempt");
    let reflections = if input.reflections.is_empty() {
        NONE.to_string()
    } else {
        input
            .reflections
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{}. {}", i + 1, one_line(r)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let positive = render_precedents(
        input.precedents,
        PrecedentPolarity::Positive,
        input.precedent_view,
    );
    let negative = render_precedents(
        input.precedents,
        PrecedentPolarity::Negative,
        input.precedent_view,
    );
    if input.layout == RepairLayout::Fresh {
        let hints = if input.hints.is_empty() {
            NONE.to_string()
        } else {
            render_hints(input.hints)
        };
        return fill(
            REPAIR_FRESH,
            &[
                ("question", question.question.trim()),
                ("dialect", input.dialect),
                ("schema", input.schema.trim_end()),
                ("evidence_block", &evidence_block(input.benchmark, question)),
                ("feedback", &render_feedback(input.attempts)),
                ("hints", &hints),
                ("positive_memories", &positive),
                ("negative_memories", &negative),
                ("reflections", &reflections),
            ],
        );
    }
    let hints_block = if input.hints.is_empty() {
        String::new()
    } else {
        fill(HINTS_BLOCK, &[("hints", &render_hints(input.hints))])
    };
    fill(
        REPAIR,
        &[
            ("question", question.question.trim()),
            ("dialect", input.dialect),
            ("schema", input.schema.trim_end()),
            ("evidence_block", &evidence_block(input.benchmark, question)),
            ("current_sql", current.sql.trim()),
            ("status", current.status.as_str()),
            (
                "error",
                &current
                    .error
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_else(|| NONE.to_string()),
            ),
            (
                "failure_type",
                current
                    .failure
                    .map_or("Unknown", |c| c.failure_type.as_str()),
            ),
            ("hints_block", &hints_block),
            ("history", &render_history(input.attempts)),
            ("positive_memories", &positive),
            ("negative_memories", &negative),
            ("reflections", &reflections),
        ],
    )
}

/// The Reflexion-style baseline's reflection prompt over the failed trajectory.
pub fn reflection_prompt(
    question: &QuestionView,
    benchmark: Benchmark,
    dialect: &str,
    schema: &str,
    attempts: &[AttemptView],
) -> String {
    fill(
        REFLECTION,
        &[
            ("question", question.question.trim()),
            ("dialect", dialect),
            ("schema", schema.trim_end()),
            ("evidence_block", &evidence_block(benchmark, question)),
            ("history", &render_history(attempts)),
        ],
    )
}
