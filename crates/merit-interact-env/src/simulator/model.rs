//! The model-driven user simulator (protocol §8): two model calls per `ask`, both through
//! [`ChatModel`], both greedy (pass a cached model and every reply repeats for free).
//!
//! 1. **Choose** (`prompts/simulator_choose.txt`): given the agent's question, the ambiguity map
//!    (ids `A1…`) and the gold SQL cut into clause segments (ids `S1…`), the model names one
//!    verdict: *labeled* (which ambiguity), *unlabeled* (which gold segment settles a detail the
//!    map misses) or *unanswerable*. [`parse_decision`] reads it strictly; anything it cannot
//!    read, or an id that does not exist, counts as *malformed* and is handled as unanswerable:
//!    the safe side is the refusal.
//! 2. **Answer** (`prompts/simulator_answer.txt`): only for labeled and unlabeled verdicts. The
//!    model sees the chosen ambiguity or segment, the clear question, the gold SQL and the
//!    schema, and writes a short reply between `<answer>` tags. An unanswerable verdict gets
//!    [`OUT_OF_SCOPE_REPLY`] without a second call.
//!
//! Whatever step 2 writes then passes a post-filter, [`leaks_gold`]: a reply that contains any
//! run of [`LEAK_THRESHOLD`] or more normalised characters of the current phase's gold SQL is
//! replaced by [`OUT_OF_SCOPE_REPLY`], and so is a reply that copies a long run of the hidden
//! clear question ([`quotes_hidden_question`], [`CLEAR_QUESTION_THRESHOLD`]). The prompt asks
//! the model not to quote SQL; the filter makes sure of it even when a small model ignores the
//! prompt. Like the upstream simulator,
//! this one is stateless: no dialogue history, no view of the agent's database work.

use super::{SimulatorContext, SimulatorError, SimulatorUsage, UserSimulator, OUT_OF_SCOPE_REPLY};
use crate::prompts;
use crate::task::Ambiguity;
use merit_core::model::{ChatMessage, ChatModel, ChatReply, ChatRequest, Decoding};
use std::sync::Arc;

/// The shortest run of gold-SQL characters (after [`normalise_for_leaks`]: lower-cased, with
/// whitespace, double quotes and backticks removed) whose presence in a reply makes the
/// post-filter refuse it. 20 characters is about four SQL tokens (`wherestatus='closed'` is 20):
/// long enough that plain English phrases do not collide with SQL text stripped of spaces, short
/// enough to catch any condition, join or expression copied from the gold query. Runs that lie
/// wholly inside one string literal of the gold SQL (quotes included) are exempt: a literal is a
/// data value the user may legitimately name ("I mean the 'Premium' tier").
pub const LEAK_THRESHOLD: usize = 20;

/// The shortest run of normalised characters of the *clear* question (the hidden, fully
/// specified one) that a reply may not copy, unless the run also occurs in the ambiguous
/// question the agent already has. 60 characters is roughly ten words: a reply may restate a
/// phrase, but not paste the hidden question (protocol §8: never quote it).
pub const CLEAR_QUESTION_THRESHOLD: usize = 60;

/// The reply used when step 2 returns nothing usable.
pub const FALLBACK_REPLY: &str =
    "I don't have more detail to add on that; please go with the most natural reading.";

/// Settings of the model-driven simulator.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSimulatorConfig {
    /// Token limit of the step-1 reply (one line is expected).
    pub choose_max_tokens: u32,
    /// Token limit of the step-2 reply.
    pub answer_max_tokens: u32,
    /// See [`LEAK_THRESHOLD`].
    pub leak_threshold: usize,
    /// See [`CLEAR_QUESTION_THRESHOLD`].
    pub clear_question_threshold: usize,
}

impl Default for ModelSimulatorConfig {
    fn default() -> ModelSimulatorConfig {
        ModelSimulatorConfig {
            choose_max_tokens: 64,
            answer_max_tokens: 256,
            leak_threshold: LEAK_THRESHOLD,
            clear_question_threshold: CLEAR_QUESTION_THRESHOLD,
        }
    }
}

/// What step 1 decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The question is about ambiguity `k` (0-based over critical, non-critical, knowledge).
    Labeled(usize),
    /// The question is about a detail missing from the map, settled by gold segment `k`
    /// (0-based).
    Unlabeled(usize),
    /// Out of scope: refuse.
    Unanswerable,
}

/// One clause segment of the gold SQL (protocol §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// 0-based index of the statement in the gold list.
    pub statement: usize,
    /// The clause keyword that opens it (`SELECT`, `FROM`, `WHERE`, `GROUP BY`, `HAVING`,
    /// `ORDER BY`, `LIMIT`, `OFFSET`, `JOIN`), or the upper-cased first word of a statement
    /// that starts with something else (`WITH`, `UPDATE`…).
    pub clause: String,
    /// The segment's text, trimmed.
    pub text: String,
}

/// The model-driven simulator. See the module docs.
pub struct ModelSimulator {
    model: Arc<dyn ChatModel>,
    config: ModelSimulatorConfig,
    usage: SimulatorUsage,
}

impl std::fmt::Debug for ModelSimulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSimulator")
            .field("model", &self.model.id())
            .field("config", &self.config)
            .field("usage", &self.usage)
            .finish()
    }
}

impl ModelSimulator {
    /// A simulator answering through `model` (pass the cached model).
    pub fn new(model: Arc<dyn ChatModel>, config: ModelSimulatorConfig) -> ModelSimulator {
        ModelSimulator {
            model,
            config,
            usage: SimulatorUsage::default(),
        }
    }

    fn call(
        &mut self,
        template: &str,
        prompt: String,
        max_tokens: u32,
    ) -> Result<ChatReply, SimulatorError> {
        let request = ChatRequest {
            messages: vec![ChatMessage::user(prompt)],
            decoding: Decoding {
                max_tokens,
                ..Decoding::default()
            },
            prompt_version: prompts::version(template),
            tools: Vec::new(),
        };
        let reply = self
            .model
            .chat(&request)
            .map_err(|e| SimulatorError(format!("model {}: {e}", self.model.id())))?;
        self.usage.calls += 1;
        self.usage.prompt_tokens += u64::from(reply.prompt_tokens);
        self.usage.completion_tokens += u64::from(reply.completion_tokens);
        self.usage.cached_calls += u64::from(reply.cached);
        Ok(reply)
    }
}

impl UserSimulator for ModelSimulator {
    fn reply(
        &mut self,
        question: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        self.usage.asks += 1;
        let ambiguities = ambiguity_list(context);
        let segments = segments(context.gold_sql());
        let ambiguous_question = match context.phase() {
            super::Phase::One => context.public().amb_user_query.as_str(),
            // In phase 2 the question on the table is the follow-up, which the agent has seen.
            super::Phase::Two => context.clear_query(),
        };
        let choose = prompts::fill(
            prompts::SIMULATOR_CHOOSE,
            &[
                ("ambiguous_question", ambiguous_question),
                ("ambiguities", &render_ambiguities(&ambiguities)),
                ("segments", &render_segments(&segments)),
                ("question", question),
            ],
        );
        let reply = self.call("simulator-choose", choose, self.config.choose_max_tokens)?;
        let focus = match parse_decision(&reply.text, ambiguities.len(), segments.len()) {
            Some(Decision::Labeled(k)) => {
                self.usage.labeled += 1;
                describe_ambiguity(&ambiguities[k])
            }
            Some(Decision::Unlabeled(k)) => {
                self.usage.unlabeled += 1;
                format!(
                    "A detail not in the list of known unclear points. The part of the query that settles it ({} clause): {}",
                    segments[k].clause, segments[k].text
                )
            }
            Some(Decision::Unanswerable) => {
                self.usage.unanswerable += 1;
                return Ok(OUT_OF_SCOPE_REPLY.to_string());
            }
            None => {
                self.usage.malformed += 1;
                return Ok(OUT_OF_SCOPE_REPLY.to_string());
            }
        };
        let gold = context.gold_sql().join("\n\n");
        let answer = prompts::fill(
            prompts::SIMULATOR_ANSWER,
            &[
                ("ambiguous_question", ambiguous_question),
                ("clear_question", context.clear_query()),
                ("focus", &focus),
                (
                    "gold_sql",
                    if gold.is_empty() { "(unknown)" } else { &gold },
                ),
                ("schema", context.schema()),
                ("question", question),
            ],
        );
        let reply = self.call("simulator-answer", answer, self.config.answer_max_tokens)?;
        let text = extract_answer(&reply.text);
        if leaks_gold(&text, context.gold_sql(), self.config.leak_threshold)
            || quotes_hidden_question(
                &text,
                context.clear_query(),
                ambiguous_question,
                self.config.clear_question_threshold,
            )
        {
            self.usage.filtered += 1;
            return Ok(OUT_OF_SCOPE_REPLY.to_string());
        }
        Ok(text)
    }

    fn usage(&self) -> SimulatorUsage {
        self.usage.clone()
    }
}

/// Where an ambiguity comes from, for the prompt.
#[derive(Debug, Clone, Copy)]
struct Labelled<'a> {
    list: &'static str,
    ambiguity: &'a Ambiguity,
}

fn ambiguity_list<'a>(context: &SimulatorContext<'a>) -> Vec<Labelled<'a>> {
    let map = context.ambiguity();
    let tag = |list: &'static str| move |ambiguity| Labelled { list, ambiguity };
    map.critical()
        .iter()
        .map(tag("critical"))
        .chain(map.non_critical().iter().map(tag("minor")))
        .chain(map.knowledge().iter().map(tag("knowledge")))
        .collect()
}

fn describe_ambiguity(entry: &Labelled<'_>) -> String {
    let kind = if entry.ambiguity.kind().is_empty() {
        "unspecified"
    } else {
        entry.ambiguity.kind()
    };
    format!(
        "The wording \"{}\" ({} point, type {}). What you meant, as a query fragment: {}",
        entry.ambiguity.term(),
        entry.list,
        kind,
        entry.ambiguity.sql_snippet()
    )
}

fn render_ambiguities(list: &[Labelled<'_>]) -> String {
    if list.is_empty() {
        return "(none)".to_string();
    }
    list.iter()
        .enumerate()
        .map(|(i, entry)| format!("A{}: {}", i + 1, describe_ambiguity(entry)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn render_segments(segments: &[Segment]) -> String {
    if segments.is_empty() {
        return "(none)".to_string();
    }
    segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "S{} (statement {}, {}): {}",
                i + 1,
                s.statement + 1,
                s.clause,
                s.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Removes a leading reasoning block (`<think>…</think>`) that reasoning models emit before
/// their answer; an unclosed block means the model never got to the answer, so nothing is left.
pub fn strip_reasoning(text: &str) -> &str {
    match (text.find("<think>"), text.rfind("</think>")) {
        (_, Some(end)) => &text[end + "</think>".len()..],
        (Some(start), None) => &text[..start],
        (None, None) => text,
    }
}

/// Reads the step-1 verdict: the first line that starts with `VERDICT:` (case-insensitive,
/// markdown emphasis and backticks ignored) must say `labeled A<k>`, `unlabeled S<k>` or
/// `unanswerable` (British spellings and a missing id letter are accepted). Returns `None` when
/// there is no such line, the verdict is unknown, or the id is outside `1..=n`.
pub fn parse_decision(text: &str, ambiguities: usize, segments: usize) -> Option<Decision> {
    let text = strip_reasoning(text);
    let line = text.lines().find_map(|line| {
        let cleaned: String = line
            .chars()
            .filter(|c| !matches!(c, '*' | '`' | '_' | '#'))
            .collect();
        let trimmed = cleaned.trim().to_lowercase();
        trimmed
            .strip_prefix("verdict")
            .map(|rest| rest.trim_start().trim_start_matches(':').trim().to_string())
    })?;
    let mut words = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == ':' || c == '.')
        .filter(|w| !w.is_empty());
    let verdict = words.next()?;
    let id = |prefix: char, count: usize, word: Option<&str>| -> Option<usize> {
        let word = word?;
        let digits = word.strip_prefix(prefix).unwrap_or(word);
        let number: usize = digits.parse().ok()?;
        (1..=count).contains(&number).then(|| number - 1)
    };
    match verdict {
        "labeled" | "labelled" => id('a', ambiguities, words.next()).map(Decision::Labeled),
        "unlabeled" | "unlabelled" => id('s', segments, words.next()).map(Decision::Unlabeled),
        "unanswerable" => Some(Decision::Unanswerable),
        _ => None,
    }
}

/// The step-2 reply: the text between `<answer>` and `</answer>` (the closing tag may be
/// missing when the model ran out of tokens); without an opening tag the whole text after any
/// reasoning block. Empty → [`FALLBACK_REPLY`].
pub fn extract_answer(text: &str) -> String {
    let text = strip_reasoning(text);
    let lower = text.to_lowercase();
    let body = match lower.find("<answer>") {
        Some(start) => {
            let from = start + "<answer>".len();
            let end = lower[from..]
                .find("</answer>")
                .map_or(text.len(), |e| from + e);
            &text[from..end]
        }
        None => text,
    };
    let body = body.trim();
    if body.is_empty() {
        FALLBACK_REPLY.to_string()
    } else {
        body.to_string()
    }
}

/// Lower-cases and drops whitespace, double quotes and backticks, so that re-spacing or
/// re-quoting a copied fragment does not hide it from [`leaks_gold`].
pub fn normalise_for_leaks(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '"' | '`'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The normalised characters of one gold statement, each flagged `true` when it lies inside a
/// single-quoted string literal (the quotes included).
fn normalised_with_literals(sql: &str) -> Vec<(char, bool)> {
    let mut out = Vec::with_capacity(sql.len());
    let mut in_literal = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if in_literal && chars.peek() == Some(&'\'') {
                // A doubled quote is an escaped quote inside the literal.
                chars.next();
                out.push(('\'', true));
                out.push(('\'', true));
                continue;
            }
            in_literal = !in_literal;
            out.push(('\'', true));
            continue;
        }
        if c.is_whitespace() || matches!(c, '"' | '`') {
            continue;
        }
        for lower in c.to_lowercase() {
            out.push((lower, in_literal));
        }
    }
    out
}

/// `true` when `answer` contains a run of at least `threshold` normalised characters of any
/// gold statement, other than a run wholly inside one string literal (see [`LEAK_THRESHOLD`]).
pub fn leaks_gold(answer: &str, gold: &[String], threshold: usize) -> bool {
    let answer = normalise_for_leaks(answer);
    let threshold = threshold.max(1);
    if answer.chars().count() < threshold {
        return false;
    }
    gold.iter().any(|sql| {
        let chars = normalised_with_literals(sql);
        chars.windows(threshold).any(|window| {
            if window.iter().all(|(_, literal)| *literal) {
                return false;
            }
            let needle: String = window.iter().map(|(c, _)| *c).collect();
            answer.contains(&needle)
        })
    })
}

/// `true` when `answer` copies a run of at least `threshold` normalised characters of the
/// clear question that the ambiguous question does not contain as well (see
/// [`CLEAR_QUESTION_THRESHOLD`]). Never true when both questions are the same text (mini's
/// fallback) since everything is then already public.
pub fn quotes_hidden_question(
    answer: &str,
    clear: &str,
    ambiguous: &str,
    threshold: usize,
) -> bool {
    let threshold = threshold.max(1);
    let answer = normalise_for_leaks(answer);
    let ambiguous = normalise_for_leaks(ambiguous);
    let clear: Vec<char> = normalise_for_leaks(clear).chars().collect();
    clear.windows(threshold).any(|window| {
        let needle: String = window.iter().collect();
        answer.contains(&needle) && !ambiguous.contains(&needle)
    })
}

/// Clause keywords that open a segment. `GROUP` and `ORDER` only with a following `BY`.
const CLAUSES: [&str; 9] = [
    "select", "from", "where", "group", "having", "order", "limit", "offset", "join",
];
/// Words that belong to a following `JOIN` (`LEFT OUTER JOIN` starts one segment).
const JOIN_PREFIXES: [&str; 7] = [
    "left", "right", "inner", "outer", "full", "cross", "natural",
];

/// A word of SQL text outside literals, quoted identifiers and comments, with where it starts.
struct Word {
    start: usize,
    lower: String,
}

fn words(sql: &str) -> Vec<Word> {
    merit_sql::lex::pieces(sql)
        .filter(|piece| piece.kind == merit_sql::lex::PieceKind::Word)
        .map(|piece| Word {
            start: piece.start,
            lower: piece.text(sql).to_ascii_lowercase(),
        })
        .collect()
}

/// Cuts gold statements into clause segments: a new segment starts at every `SELECT`, `FROM`,
/// `WHERE`, `GROUP BY`, `HAVING`, `ORDER BY`, `LIMIT`, `OFFSET` and `JOIN` (with its
/// `LEFT`/`INNER`/… words) outside literals and comments, sub-queries included (protocol §8).
/// Text before the first keyword is a segment of its own, labelled by its first word; a
/// statement with no clause keyword is one segment. Keywords used inside functions
/// (`EXTRACT(YEAR FROM d)`) also cut, as a token-level cutter upstream does.
pub fn segments(statements: &[String]) -> Vec<Segment> {
    let mut out = Vec::new();
    for (statement, sql) in statements.iter().enumerate() {
        let words = words(sql);
        let mut cuts: Vec<(usize, String)> = Vec::new();
        for (k, word) in words.iter().enumerate() {
            if !CLAUSES.contains(&word.lower.as_str()) {
                continue;
            }
            let label = match word.lower.as_str() {
                "group" | "order" => {
                    if words.get(k + 1).map(|w| w.lower.as_str()) != Some("by") {
                        continue;
                    }
                    format!("{} BY", word.lower.to_uppercase())
                }
                other => other.to_uppercase(),
            };
            let mut start = word.start;
            if label == "JOIN" {
                let mut j = k;
                while j > 0 && JOIN_PREFIXES.contains(&words[j - 1].lower.as_str()) {
                    j -= 1;
                    start = words[j].start;
                }
            }
            cuts.push((start, label));
        }
        let mut pieces: Vec<(usize, String)> = Vec::new();
        match cuts.first() {
            Some((first, _)) if sql[..*first].trim().is_empty() => {}
            _ => {
                let label = words
                    .first()
                    .map_or_else(|| "STATEMENT".to_string(), |w| w.lower.to_uppercase());
                pieces.push((0, label));
            }
        }
        pieces.extend(cuts);
        for (index, (start, label)) in pieces.iter().enumerate() {
            let end = pieces.get(index + 1).map_or(sql.len(), |(next, _)| *next);
            let text = sql[*start..end].trim();
            if !text.is_empty() {
                out.push(Segment {
                    statement,
                    clause: label.clone(),
                    text: text.to_string(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_parse_strictly() {
        assert_eq!(
            parse_decision("VERDICT: labeled A2", 3, 0),
            Some(Decision::Labeled(1))
        );
        assert_eq!(
            parse_decision("Some thoughts\n**Verdict:** `unlabelled s3`.", 0, 3),
            Some(Decision::Unlabeled(2))
        );
        assert_eq!(
            parse_decision("<think>A1?</think>\nverdict: UNANSWERABLE", 1, 1),
            Some(Decision::Unanswerable)
        );
        assert_eq!(
            parse_decision("VERDICT: labeled 1", 1, 0),
            Some(Decision::Labeled(0))
        );
        // Ids out of range, unknown verdicts, missing lines: malformed.
        assert_eq!(parse_decision("VERDICT: labeled A4", 3, 0), None);
        assert_eq!(parse_decision("VERDICT: labeled A0", 3, 0), None);
        assert_eq!(parse_decision("VERDICT: labeled", 3, 0), None);
        assert_eq!(parse_decision("VERDICT: unlabeled S1", 3, 0), None);
        assert_eq!(parse_decision("VERDICT: maybe", 3, 3), None);
        assert_eq!(parse_decision("labeled A1", 3, 3), None);
        assert_eq!(parse_decision("", 3, 3), None);
        assert_eq!(parse_decision("<think>VERDICT: labeled A1", 3, 3), None);
    }

    #[test]
    fn answers_are_taken_from_their_tags() {
        assert_eq!(
            extract_answer("x <ANSWER> I mean all of them. </answer> y"),
            "I mean all of them."
        );
        assert_eq!(extract_answer("<answer>cut off"), "cut off");
        assert_eq!(extract_answer("plain reply"), "plain reply");
        assert_eq!(extract_answer("<think>hmm</think>  "), FALLBACK_REPLY);
        assert_eq!(extract_answer("<answer></answer>"), FALLBACK_REPLY);
    }

    #[test]
    fn gold_fragments_are_caught_and_literals_are_not() {
        let gold = vec![
            "SELECT name FROM customers WHERE status = 'Premium Gold Tier Member' AND age > 30"
                .to_string(),
        ];
        let leaks = |answer: &str| leaks_gold(answer, &gold, LEAK_THRESHOLD);
        assert!(leaks("Use SELECT name FROM customers, thanks."));
        // Re-spacing, re-casing and quoting do not hide it.
        assert!(leaks("where   STATUS='premium gold tier member'"));
        assert!(leaks(
            "`customers` where \"status\" = 'x'... no: customerswherestatus"
        ));
        // A literal on its own is a data value: allowed.
        assert!(!leaks(
            "I mean members of the 'Premium Gold Tier Member' group."
        ));
        assert!(!leaks(
            "I mean customers older than thirty with premium status."
        ));
        assert!(!leaks("short"));
        // A run shorter than the threshold is allowed.
        assert!(!leaks("age > 30"));
        assert!(leaks_gold("age > 30", &gold, 5));
    }

    #[test]
    fn copying_the_hidden_question_is_caught() {
        let clear = "List every observatory whose air temperature was above twenty degrees in 2023, by name";
        let ambiguous = "List every observatory with warm weather, by name";
        let t = CLEAR_QUESTION_THRESHOLD;
        assert!(quotes_hidden_question(
            &format!("Sure: {clear}"),
            clear,
            ambiguous,
            t
        ));
        assert!(!quotes_hidden_question(
            "Warm means above twenty degrees, measured in 2023.",
            clear,
            ambiguous,
            t
        ));
        // Nothing is hidden when the clear question is the ambiguous one.
        assert!(!quotes_hidden_question(clear, clear, clear, t));
    }

    #[test]
    fn gold_sql_is_cut_at_clause_keywords() {
        let gold = vec![
            "SELECT a, COUNT(*) FROM t LEFT OUTER JOIN u ON t.id = u.id WHERE b = 'from where' \
             GROUP BY a HAVING COUNT(*) > 1 ORDER BY a DESC LIMIT 5"
                .to_string(),
            "WITH x AS (SELECT 1) SELECT * FROM x -- order by nothing".to_string(),
            "UPDATE t SET a = 1".to_string(),
        ];
        let cut = segments(&gold);
        let labels: Vec<(usize, &str)> = cut
            .iter()
            .map(|s| (s.statement, s.clause.as_str()))
            .collect();
        assert_eq!(
            labels,
            vec![
                (0, "SELECT"),
                (0, "FROM"),
                (0, "JOIN"),
                (0, "WHERE"),
                (0, "GROUP BY"),
                (0, "HAVING"),
                (0, "ORDER BY"),
                (0, "LIMIT"),
                (1, "WITH"),
                (1, "SELECT"),
                (1, "SELECT"),
                (1, "FROM"),
                (2, "UPDATE"),
            ]
        );
        assert_eq!(cut[2].text, "LEFT OUTER JOIN u ON t.id = u.id");
        assert_eq!(cut[3].text, "WHERE b = 'from where'");
        assert_eq!(cut[11].text, "FROM x -- order by nothing");
        assert!(segments(&[]).is_empty());
    }
}
