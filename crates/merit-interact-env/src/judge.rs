//! Judging a submission (protocol §6).
//!
//! Three layers, each testable alone:
//! * the text transforms applied to prediction and gold alike ([`strip_comments`],
//!   [`strip_distinct`], [`strip_round`]), reproducing the reference quirks on purpose
//!   (protocol §11.8) because scores must stay comparable with the leaderboard;
//! * the cell normalization and row comparison of the default test ([`normalize_cell`],
//!   [`results_match`]) with Python's value semantics;
//! * `judge_submission`, which resets the database, runs the submission once, and picks the
//!   default test (Query) or the Python test cases (Management).
//!
//! What a verdict tells the agent is decided in `env.rs` and is deliberately coarse: a failed
//! custom test is reported by index only, since assertion messages often quote expected values.

use crate::backend::{InteractBackend, Rows, StatementFailure};
use crate::error::InteractError;
use crate::harness::{PythonHarness, TestRun, TestSpec};
use crate::task::{Category, PhaseTruth};
use merit_eval::python::float_repr;
use merit_sql::{ExecError, ExecLimits};
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

// ---------------------------------------------------------------------------------------------
// Text transforms
// ---------------------------------------------------------------------------------------------

/// Removes comments the way the reference does, which is not how SQL lexes them:
/// `/* … */` blocks are deleted (first `*/` after the opener, across lines); a `--` comment is
/// deleted together with its text up to the first line break, the break itself kept; a `--`
/// with no line break after it (a final comment) survives. Literals are not lexed, so `--`
/// inside a string is cut too. Then every run of blank lines collapses into one line break and
/// the result is trimmed.
pub fn strip_comments(sql: &str) -> String {
    // 1. Block comments.
    let mut text = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(open) = rest.find("/*") {
        match rest[open + 2..].find("*/") {
            Some(close) => {
                text.push_str(&rest[..open]);
                rest = &rest[open + 2 + close + 2..];
            }
            // No closer after this opener means none after any later opener either.
            None => break,
        }
    }
    text.push_str(rest);

    // 2. Line comments that are followed by a line break.
    let mut no_line = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("--") {
        match rest[start + 2..].find(['\r', '\n']) {
            Some(offset) => {
                no_line.push_str(&rest[..start]);
                // Keep the break (a CRLF pair counts as one break and is kept whole).
                rest = &rest[start + 2 + offset..];
            }
            None => break,
        }
    }
    no_line.push_str(rest);

    // 3. A line break, any whitespace, and further line breaks become one line break: the
    //    match runs from a `\n` to the last `\n` of the whitespace run that follows it.
    let chars: Vec<char> = no_line.chars().collect();
    let mut collapsed = String::with_capacity(no_line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\n' {
            let mut j = i + 1;
            let mut last_break = None;
            while j < chars.len() && chars[j].is_whitespace() {
                if chars[j] == '\n' {
                    last_break = Some(j);
                }
                j += 1;
            }
            collapsed.push('\n');
            i = last_break.map_or(i + 1, |b| b + 1);
        } else {
            collapsed.push(chars[i]);
            i += 1;
        }
    }
    collapsed.trim().to_string()
}

/// Drops every token equal to `distinct` (any case) after splitting on single spaces, then
/// re-joins with single spaces. `(DISTINCT`, `DISTINCT` followed by a newline, and
/// `COUNT(DISTINCT x)` survive; PostgreSQL's `DISTINCT ON` loses its keyword (reference quirk).
pub fn strip_distinct(sql: &str) -> String {
    sql.split(' ')
        .filter(|token| token.to_lowercase() != "distinct")
        .collect::<Vec<_>>()
        .join(" ")
}

/// Replaces every `ROUND(` (case-insensitive substring, so `AROUND(` too) by its first
/// argument, tracking parenthesis depth; stops at the first `ROUND(` whose parenthesis never
/// closes. Always restarts from the beginning, so nested calls unwrap from the outside in.
pub fn strip_round(sql: &str) -> String {
    let mut text = sql.to_string();
    while let Some(start) = find_ascii_case_insensitive(&text, "round(") {
        let open = start + "round(".len() - 1;
        let bytes = text.as_bytes();
        // End of the first argument: a top-level comma or the closing parenthesis.
        let mut first_end = bytes.len();
        let mut depth = 0i64;
        for (i, &b) in bytes.iter().enumerate().skip(open + 1) {
            match b {
                b'(' => depth += 1,
                b')' if depth == 0 => {
                    first_end = i;
                    break;
                }
                b')' => depth -= 1,
                b',' if depth == 0 => {
                    first_end = i;
                    break;
                }
                _ => {}
            }
        }
        // The matching closing parenthesis of the call.
        let mut close = None;
        let mut depth = 0i64;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            break;
        };
        let first_arg = text[open + 1..first_end].trim().to_string();
        text = format!("{}{}{}", &text[..start], first_arg, &text[close + 1..]);
    }
    text
}

fn find_ascii_case_insensitive(haystack: &str, needle: &str) -> Option<usize> {
    let hay = haystack.as_bytes();
    let needle = needle.as_bytes();
    (0..hay.len().saturating_sub(needle.len() - 1))
        .find(|&i| hay[i..i + needle.len()].eq_ignore_ascii_case(needle))
}

/// The reference judge's three rewrites of a query before it runs, in its order: comments,
/// DISTINCT, ROUND.
pub fn reference_rewrites(sql: &str) -> String {
    strip_round(&strip_distinct(&strip_comments(sql)))
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// One result cell as a backend returns it. SQLite produces the first five kinds only; the
/// others exist for a PostgreSQL backend (decimals, dates, JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A double.
    Float(f64),
    /// Text (valid UTF-8; the backend fails the query otherwise, as Python's driver does).
    Text(String),
    /// A blob.
    Bytes(Vec<u8>),
    /// An exact decimal, as its canonical text (e.g. `-12.3450`).
    Decimal(String),
    /// A date, or a timestamp with its time dropped.
    Date {
        /// Year.
        year: i32,
        /// Month 1–12.
        month: u32,
        /// Day 1–31.
        day: u32,
    },
    /// A JSON value (list or object columns).
    Json(serde_json::Value),
    /// A boolean (Python `bool`, so `True == 1` in comparisons).
    Bool(bool),
    /// A timestamp (Python `datetime`): judged by its date only, as the reference truncates
    /// every date/datetime, but shown in full.
    DateTime {
        /// Year.
        year: i32,
        /// Month 1–12.
        month: u32,
        /// Day 1–31.
        day: u32,
        /// Python's `str()` of the value, e.g. `2024-03-09 12:30:00+00:00`.
        text: String,
    },
}

impl From<merit_sql::Value> for Cell {
    fn from(value: merit_sql::Value) -> Cell {
        match value {
            merit_sql::Value::Null => Cell::Null,
            merit_sql::Value::Integer(i) => Cell::Int(i),
            merit_sql::Value::Real(f) => Cell::Float(f),
            merit_sql::Value::Text(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Cell::Text(text),
                Err(error) => Cell::Bytes(error.into_bytes()),
            },
            merit_sql::Value::Blob(bytes) => Cell::Bytes(bytes),
        }
    }
}

impl Cell {
    /// Python's `str()` of the value, for observations.
    pub fn display(&self) -> String {
        match self {
            Cell::Null => "None".to_string(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(f) => float_repr(*f),
            Cell::Text(s) => s.clone(),
            Cell::Bytes(b) => merit_eval::python::bytes_repr(b),
            Cell::Decimal(d) => d.clone(),
            Cell::Date { year, month, day } => format!("{year:04}-{month:02}-{day:02}"),
            Cell::Json(v) => python_json(v),
            Cell::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            Cell::DateTime { text, .. } => text.clone(),
        }
    }
}

/// A cell after the default test's preprocessing, with Python's equality and hashing:
/// `1 == 1.0`, `Decimal('0.50') == 0.5`, `Decimal('0.10') != 0.1`.
#[derive(Debug, Clone)]
pub enum Normalized {
    /// `None`.
    None,
    /// `int`.
    Int(i64),
    /// `float`, already rounded to two places.
    Float(f64),
    /// `Decimal`, quantized to two places, held as hundredths.
    Hundredths(i128),
    /// `str` (text, dates, JSON dumps).
    Str(String),
    /// `bytes`.
    Bytes(Vec<u8>),
}

#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    None,
    Int(i128),
    FloatBits(u64),
    Hundredths(i128),
    Str(&'a str),
    Bytes(&'a [u8]),
}

impl Normalized {
    /// A key equal for two values exactly when Python's `==` says they are equal.
    fn key(&self) -> Key<'_> {
        match self {
            Normalized::None => Key::None,
            Normalized::Int(i) => Key::Int(i128::from(*i)),
            Normalized::Float(f) => float_key(*f),
            Normalized::Hundredths(h) => {
                if h % 100 == 0 {
                    Key::Int(h / 100)
                } else if h % 25 == 0 && h.unsigned_abs() < (1u128 << 53) {
                    // A multiple of 0.25 is a dyadic rational, exactly representable as a
                    // double when small enough: it equals that float.
                    float_key(*h as f64 / 100.0)
                } else {
                    // Not dyadic: no double equals it, only the same decimal does.
                    Key::Hundredths(*h)
                }
            }
            Normalized::Str(s) => Key::Str(s),
            Normalized::Bytes(b) => Key::Bytes(b),
        }
    }
}

fn float_key(f: f64) -> Key<'static> {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) {
        Key::Int(i128::from(f as i64))
    } else {
        Key::FloatBits(f.to_bits())
    }
}

impl PartialEq for Normalized {
    fn eq(&self, other: &Normalized) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Normalized {}
impl Hash for Normalized {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

/// Python's `round(x, 2)` on a float: round half to even on the exact binary value, then the
/// nearest double. Rust's fixed-precision formatting rounds the exact value the same way.
pub fn python_round2(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.2}").parse().unwrap_or(x)
}

/// `Decimal.quantize(Decimal("0.01"), ROUND_HALF_UP)` on decimal text, as hundredths; `None`
/// when the text is not a plain decimal or does not fit.
pub fn decimal_hundredths_half_up(text: &str) -> Option<i128> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut value: i128 = 0;
    for b in whole.bytes() {
        value = value.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let mut frac = fraction.bytes().map(|b| i128::from(b - b'0'));
    for _ in 0..2 {
        value = value
            .checked_mul(10)?
            .checked_add(frac.next().unwrap_or(0))?;
    }
    // Half-up (away from zero): the third fractional digit decides.
    if frac.next().unwrap_or(0) >= 5 {
        value = value.checked_add(1)?;
    }
    Some(if negative { -value } else { value })
}

/// The default test's per-cell preprocessing: dates to `YYYY-MM-DD`, decimals to two places
/// half-up, floats through Python's `round(x, 2)`, JSON rounded recursively then dumped with
/// sorted keys; everything else unchanged.
pub fn normalize_cell(cell: &Cell) -> Normalized {
    match cell {
        Cell::Null => Normalized::None,
        Cell::Int(i) => Normalized::Int(*i),
        Cell::Float(f) => Normalized::Float(python_round2(*f)),
        Cell::Text(s) => Normalized::Str(s.clone()),
        Cell::Bytes(b) => Normalized::Bytes(b.clone()),
        Cell::Decimal(d) => match decimal_hundredths_half_up(d) {
            Some(h) => Normalized::Hundredths(h),
            None => Normalized::Str(d.clone()),
        },
        Cell::Date { .. } => Normalized::Str(cell.display()),
        Cell::Json(v) => Normalized::Str(python_json(&round_json(v))),
        // `bool` is an `int` subclass in Python: True == 1, with the same hash.
        Cell::Bool(b) => Normalized::Int(i64::from(*b)),
        Cell::DateTime {
            year, month, day, ..
        } => Normalized::Str(format!("{year:04}-{month:02}-{day:02}")),
    }
}

fn round_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .and_then(|f| serde_json::Number::from_f64(python_round2(f)))
            .map_or_else(|| value.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(round_json).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), round_json(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `json.dumps(value, sort_keys=True)` with Python's defaults (`", "` and `": "` separators,
/// ASCII-only output, float repr).
pub fn python_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => if *b { "true" } else { "false" }.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => float_repr(f),
            _ => n.to_string(),
        },
        Value::String(s) => python_json_string(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let body: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}: {}", python_json_string(k), python_json(v)))
                .collect();
            format!("{{{}}}", body.join(", "))
        }
    }
}

fn python_json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// The default test's comparison: either side empty fails; `ordered` compares the row lists,
/// otherwise the row **sets** (duplicates and multiplicities ignored). Column names are
/// ignored, column order matters.
pub fn results_match(prediction: &[Vec<Cell>], gold: &[Vec<Cell>], ordered: bool) -> bool {
    let normalize = |rows: &[Vec<Cell>]| -> Vec<Vec<Normalized>> {
        rows.iter()
            .map(|row| row.iter().map(normalize_cell).collect())
            .collect()
    };
    let prediction = normalize(prediction);
    let gold = normalize(gold);
    if prediction.is_empty() || gold.is_empty() {
        return false;
    }
    if ordered {
        prediction == gold
    } else {
        let p: HashSet<&Vec<Normalized>> = prediction.iter().collect();
        let g: HashSet<&Vec<Normalized>> = gold.iter().collect();
        p == g
    }
}

/// Whether `rows` holds two rows that [`results_match`] tells apart only by count when it
/// compares unordered: such a result passes against any answer with the same distinct rows,
/// whatever their multiplicities, so a question about its size has no single answer.
pub fn has_repeated_rows(rows: &[Vec<Cell>]) -> bool {
    let mut seen = HashSet::new();
    !rows
        .iter()
        .all(|row| seen.insert(row.iter().map(normalize_cell).collect::<Vec<_>>()))
}

// ---------------------------------------------------------------------------------------------
// Judging
// ---------------------------------------------------------------------------------------------

/// Why a submission failed. Only [`FailReason::PredictionError`] carries text, and that text is
/// the engine's message about the agent's own SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// The submission raised an error when run once.
    PredictionError(String),
    /// The submission ran past the statement timeout.
    PredictionTimeout,
    /// The default test: the prediction's rows differ from the gold's, or either is empty.
    ResultMismatch,
    /// A custom test case (0-based index) failed.
    TestFailed(usize),
    /// The Python harness ran past its timeout.
    TestTimeout,
    /// The gold SQL or the setup SQL failed: a data problem, not the agent's, but the
    /// submission cannot pass.
    ReferenceFailed,
    /// A task without ground truth: the person at the terminal rejected the answer, with
    /// what they said (possibly empty).
    UserRejected(String),
}

/// The outcome of judging one submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The submission passed.
    Pass,
    /// The submission failed.
    Fail(FailReason),
}

/// What [`judge_submission`] needs besides the database.
pub(crate) struct JudgeInput<'a> {
    pub(crate) instance_id: &'a str,
    pub(crate) database: &'a str,
    pub(crate) prediction: &'a str,
    pub(crate) truth: &'a PhaseTruth,
    pub(crate) category: Category,
    /// Statements that rebuild the phase-1 state before a phase-2 Management judgement.
    pub(crate) setup: Vec<String>,
    pub(crate) limits: ExecLimits,
}

/// Judges one submission (protocol §6, steps 1–5).
pub(crate) fn judge_submission(
    backend: &mut dyn InteractBackend,
    harness: &PythonHarness,
    input: &JudgeInput<'_>,
) -> Result<Verdict, InteractError> {
    backend.reset()?;
    if !input.setup.is_empty() && backend.run_writable(&input.setup, &input.limits).is_err() {
        return Ok(Verdict::Fail(FailReason::ReferenceFailed));
    }
    let prediction = vec![input.prediction.to_string()];
    match input.category {
        Category::Query => {
            // Run once (errors fail), then the default test.
            if let Err(error) = backend.query_read_only(input.prediction, &input.limits) {
                return Ok(Verdict::Fail(prediction_failure(error)));
            }
            default_test(backend, &prediction, &input.truth.sol_sql, input)
        }
        Category::Management => {
            if let Err(StatementFailure { error, .. }) =
                backend.run_writable(&prediction, &input.limits)
            {
                return Ok(Verdict::Fail(prediction_failure(error)));
            }
            if input.truth.test_cases.is_empty() {
                // Deviation (protocol §11.11): a Management task without tests falls back to
                // the default test instead of passing vacuously.
                return default_test(backend, &prediction, &input.truth.sol_sql, input);
            }
            let target = backend.python_target();
            let spec = TestSpec {
                instance_id: input.instance_id,
                database: input.database,
                target: &target,
                prediction: &prediction,
                gold: &input.truth.sol_sql,
                tests: &input.truth.test_cases,
                order: input.truth.conditions.order,
                statement_timeout: input.limits.timeout,
            };
            Ok(match harness.run(&spec)? {
                TestRun::Passed => Verdict::Pass,
                TestRun::Failed(index) => Verdict::Fail(FailReason::TestFailed(index)),
                TestRun::TimedOut => Verdict::Fail(FailReason::TestTimeout),
            })
        }
    }
}

fn prediction_failure(error: ExecError) -> FailReason {
    if error.is_timeout() {
        FailReason::PredictionTimeout
    } else {
        FailReason::PredictionError(error.to_string())
    }
}

/// `test_case_default`: transform both sides, run the prediction's statements then the gold's,
/// keep each side's last result, compare.
fn default_test(
    backend: &mut dyn InteractBackend,
    prediction: &[String],
    gold: &[String],
    input: &JudgeInput<'_>,
) -> Result<Verdict, InteractError> {
    if gold.is_empty() {
        return Err(InteractError::NoGroundTruth {
            instance_id: input.instance_id.to_string(),
        });
    }
    let unlimited = ExecLimits {
        max_rows: None,
        ..input.limits
    };
    let mut run_all = |statements: &[String]| -> Result<Rows, ExecError> {
        let mut last = Rows::default();
        for statement in statements {
            last = backend.query_read_only(&reference_rewrites(statement), &unlimited)?;
        }
        Ok(last)
    };
    let predicted = match run_all(prediction) {
        Ok(rows) => rows,
        Err(_) => return Ok(Verdict::Fail(FailReason::ResultMismatch)),
    };
    let expected = match run_all(gold) {
        Ok(rows) => rows,
        Err(_) => return Ok(Verdict::Fail(FailReason::ReferenceFailed)),
    };
    Ok(
        if results_match(
            &predicted.rows,
            &expected.rows,
            input.truth.conditions.order,
        ) {
            Verdict::Pass
        } else {
            Verdict::Fail(FailReason::ResultMismatch)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_follow_the_reference_rules() {
        assert_eq!(strip_comments("SELECT 1 /* x */ + 2"), "SELECT 1  + 2");
        assert_eq!(
            strip_comments("SELECT a -- note\nFROM t"),
            "SELECT a \nFROM t"
        );
        // A final line comment with no break after it survives.
        assert_eq!(strip_comments("SELECT a -- tail"), "SELECT a -- tail");
        // No lexing: `--` inside a literal is cut as well.
        assert_eq!(strip_comments("SELECT '--x'\nFROM t"), "SELECT '\nFROM t");
        assert_eq!(
            strip_comments("\n\nSELECT 1\n\n  \n\nFROM t\n"),
            "SELECT 1\nFROM t"
        );
        assert_eq!(strip_comments("a\r\n-- c\r\nb"), "a\r\nb");
        assert_eq!(strip_comments("/* open"), "/* open");
        assert_eq!(strip_comments("/*/ x */y"), "y");
    }

    #[test]
    fn distinct_is_dropped_only_as_a_space_separated_token() {
        assert_eq!(
            strip_distinct("SELECT DISTINCT a FROM t"),
            "SELECT a FROM t"
        );
        assert_eq!(strip_distinct("SELECT distinct a"), "SELECT a");
        assert_eq!(
            strip_distinct("SELECT COUNT(DISTINCT a) FROM t"),
            "SELECT COUNT(DISTINCT a) FROM t"
        );
        assert_eq!(strip_distinct("SELECT DISTINCT\na"), "SELECT DISTINCT\na");
        assert_eq!(
            strip_distinct("SELECT DISTINCT ON (a) a"),
            "SELECT ON (a) a"
        );
    }

    #[test]
    fn round_is_replaced_by_its_first_argument() {
        assert_eq!(strip_round("SELECT ROUND(a, 2) FROM t"), "SELECT a FROM t");
        assert_eq!(strip_round("SELECT round(AVG(x), 1)"), "SELECT AVG(x)");
        assert_eq!(strip_round("SELECT ROUND(ROUND(x, 1), 2)"), "SELECT x");
        assert_eq!(strip_round("SELECT ROUND( f(a,b) )"), "SELECT f(a,b)");
        // Substring match: AROUND( is rewritten too (reference quirk).
        assert_eq!(strip_round("SELECT AROUND(x, 3)"), "SELECT Ax");
        // An unclosed call stops the rewriting.
        assert_eq!(strip_round("SELECT ROUND(x"), "SELECT ROUND(x");
    }

    #[test]
    fn python_rounding_is_half_even_on_the_binary_value() {
        // Values checked against CPython 3.11's round(x, 2).
        for (x, want) in [
            (0.125, 0.12),
            (0.375, 0.38),
            (2.675, 2.67),
            (1.005, 1.0),
            (-0.125, -0.12),
            (0.285, 0.28),
            (0.005, 0.01),
            (0.015, 0.01),
            (1e300, 1e300),
        ] {
            assert_eq!(python_round2(x), want, "round({x}, 2)");
        }
        assert!(python_round2(f64::INFINITY).is_infinite());
    }

    #[test]
    fn decimals_round_half_up() {
        assert_eq!(decimal_hundredths_half_up("1.005"), Some(101));
        assert_eq!(decimal_hundredths_half_up("-1.005"), Some(-101));
        assert_eq!(decimal_hundredths_half_up("2.5"), Some(250));
        assert_eq!(decimal_hundredths_half_up("7"), Some(700));
        assert_eq!(decimal_hundredths_half_up("0.994"), Some(99));
        assert_eq!(decimal_hundredths_half_up("abc"), None);
        assert_eq!(decimal_hundredths_half_up("."), None);
    }

    #[test]
    fn normalized_values_compare_like_python() {
        let n = |c: Cell| normalize_cell(&c);
        assert_eq!(n(Cell::Int(1)), n(Cell::Float(1.0)));
        assert_eq!(n(Cell::Float(1.004)), n(Cell::Float(1.0)));
        assert_eq!(n(Cell::Decimal("0.50".into())), n(Cell::Float(0.5)));
        assert_eq!(n(Cell::Decimal("2.00".into())), n(Cell::Int(2)));
        // 0.10 as a decimal is not the double 0.1.
        assert_ne!(n(Cell::Decimal("0.10".into())), n(Cell::Float(0.1)));
        assert_eq!(
            n(Cell::Decimal("0.10".into())),
            n(Cell::Decimal("0.1".into()))
        );
        assert_eq!(
            n(Cell::Date {
                year: 2024,
                month: 3,
                day: 9
            }),
            n(Cell::Text("2024-03-09".into()))
        );
        assert_ne!(n(Cell::Text("1".into())), n(Cell::Int(1)));
        assert_eq!(n(Cell::Null), n(Cell::Null));
    }

    #[test]
    fn json_cells_are_rounded_and_dumped_with_sorted_keys() {
        let value = serde_json::json!({"b": [1.234, 2, null, true, "x\u{e9}"], "a": {"c": 1e20}});
        assert_eq!(
            normalize_cell(&Cell::Json(value)),
            Normalized::Str(r#"{"a": {"c": 1e+20}, "b": [1.23, 2, null, true, "x\u00e9"]}"#.into())
        );
    }

    #[test]
    fn comparison_is_set_or_ordered_and_empty_fails() {
        let rows = |v: &[i64]| v.iter().map(|&i| vec![Cell::Int(i)]).collect::<Vec<_>>();
        assert!(results_match(&rows(&[1, 2, 2]), &rows(&[2, 1]), false));
        assert!(!results_match(&rows(&[1, 2]), &rows(&[2, 1]), true));
        assert!(results_match(&rows(&[1, 2]), &rows(&[1, 2]), true));
        assert!(!results_match(&rows(&[]), &rows(&[]), false));
        assert!(!results_match(&rows(&[1]), &rows(&[]), false));
        // Column order matters.
        let a = vec![vec![Cell::Int(1), Cell::Int(2)]];
        let b = vec![vec![Cell::Int(2), Cell::Int(1)]];
        assert!(!results_match(&a, &b, false));
    }

    #[test]
    fn repeated_rows_are_those_the_set_comparison_merges() {
        assert!(!has_repeated_rows(&[
            vec![Cell::Int(1)],
            vec![Cell::Int(2)]
        ]));
        // 1 and 1.0 are one value to the judge, as to Python.
        assert!(has_repeated_rows(&[
            vec![Cell::Int(1)],
            vec![Cell::Float(1.0)]
        ]));
        let row = |a: i64, b: &str| vec![Cell::Int(a), Cell::Text(b.into())];
        assert!(!has_repeated_rows(&[row(1, "x"), row(1, "y")]));
        assert!(has_repeated_rows(&[row(1, "x"), row(2, "y"), row(1, "x")]));
        assert!(!has_repeated_rows(&[]));
    }
}
