//! `process_sql.tokenize`, including the part of NLTK's word tokenizer it relies on.
//!
//! `process_sql` turns every `'` into `"`, replaces each quoted span by a key
//! `__val_<start>_<end>__`, runs `nltk.word_tokenize` over the result, lower-cases the
//! tokens, puts the quoted spans back, and finally glues `!`/`>`/`<` to a following `=`.
//! Because the text reaching NLTK never contains `'` or `"`, only the quote-free rules of
//! NLTK's `NLTKWordTokenizer` (nltk 3.8 - 3.10) can fire; those are reproduced here.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::error::SpiderParseError;

/// The query after `process_sql`'s literal handling: quotes unified, every quoted span
/// replaced by its key. This is the exact string handed to `nltk.word_tokenize`.
pub(crate) struct LiteralsReplaced {
    /// Text with `__val_i_j__` keys instead of quoted spans.
    pub(crate) text: String,
    /// Key -> original quoted span (quotes included, `'` already turned into `"`).
    pub(crate) values: HashMap<String, String>,
}

/// Mirrors the first half of `process_sql.tokenize`.
///
/// Quote positions are counted in characters (Python string indices), and because Python
/// replaces the pairs from the last one backwards, every key carries the pair's position in
/// the original string.
pub(crate) fn replace_literals(sql: &str) -> Result<LiteralsReplaced, SpiderParseError> {
    let chars: Vec<char> = sql
        .chars()
        .map(|c| if c == '\'' { '"' } else { c })
        .collect();
    let quotes: Vec<usize> = chars
        .iter()
        .enumerate()
        .filter(|(_, &c)| c == '"')
        .map(|(i, _)| i)
        .collect();
    if quotes.len() % 2 == 1 {
        // `assert len(quote_idxs) % 2 == 0, "Unexpected quote"`
        return Err(SpiderParseError::general(format!(
            "Unexpected quote: {} quote characters (after ' -> \"), which cannot be paired",
            quotes.len()
        )));
    }
    let mut text = String::with_capacity(sql.len());
    let mut values = HashMap::new();
    let mut pos = 0;
    for pair in quotes.chunks_exact(2) {
        let (q1, q2) = (pair[0], pair[1]);
        text.extend(&chars[pos..q1]);
        let key = format!("__val_{q1}_{q2}__");
        text.push_str(&key);
        values.insert(key, chars[q1..=q2].iter().collect());
        pos = q2 + 1;
    }
    text.extend(&chars[pos..]);
    Ok(LiteralsReplaced { text, values })
}

/// `process_sql.tokenize(sql)` with `word_tokenize(s, preserve_line=True)` (no punkt split).
///
/// Errors only on an odd number of quote characters, like the Python `assert`.
pub fn spider_tokenize(sql: &str) -> Result<Vec<String>, SpiderParseError> {
    let replaced = replace_literals(sql)?;
    let mut toks: Vec<String> = word_tokenize_quote_free(&replaced.text)
        .into_iter()
        .map(|w| {
            let w = w.to_lowercase();
            match replaced.values.get(&w) {
                Some(v) => v.clone(),
                None => w,
            }
        })
        .collect();
    merge_comparison_ops(&mut toks);
    Ok(toks)
}

/// Mirrors the `!=`, `>=`, `<=` merge at the end of `process_sql.tokenize`: every `=` whose
/// previous token is `!`, `>` or `<` is fused with it, scanning from the right.
///
/// An `=` at position 0 looks at `toks[-1]` in Python (the last token); that wrap-around is
/// reproduced, including the odd list it builds (`toks[:-1] + [op] + toks[1:]`).
fn merge_comparison_ops(toks: &mut Vec<String>) {
    let eq_positions: Vec<usize> = toks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.as_str() == "=")
        .map(|(i, _)| i)
        .rev()
        .collect();
    for eq in eq_positions {
        let prev = if eq == 0 { toks.len() - 1 } else { eq - 1 };
        let pre = toks[prev].clone();
        if pre == "!" || pre == ">" || pre == "<" {
            let merged = format!("{pre}=");
            if eq == 0 {
                let mut out: Vec<String> = toks[..toks.len() - 1].to_vec();
                out.push(merged);
                out.extend_from_slice(&toks[1..]);
                *toks = out;
            } else {
                toks.splice(eq - 1..=eq, [merged]);
            }
        }
    }
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("static tokenizer regex is valid")
}

// NLTKWordTokenizer.STARTING_QUOTES (the rules that need `"` or `'` cannot fire).
static START_QUOTES: LazyLock<Regex> = LazyLock::new(|| re("([«“‘„]|`+)"));
static DOUBLE_BACKTICK: LazyLock<Regex> = LazyLock::new(|| re("(``)"));
// NLTKWordTokenizer.PUNCTUATION, in order. Python's `*+` (possessive) in the first
// final-period rule cannot change the match here: only whitespace could be handed back,
// and `\s*$` needs the same end either way.
static FINAL_PERIOD_1: LazyLock<Regex> =
    LazyLock::new(|| re(r#"([^\.])(\.)([\]\)}>"'»”’ ]*)\s*$"#));
static COLON_COMMA: LazyLock<Regex> = LazyLock::new(|| re(r"([:,])([^\d])"));
static ELLIPSIS: LazyLock<Regex> = LazyLock::new(|| re(r"\.{2,}"));
static SYMBOLS: LazyLock<Regex> = LazyLock::new(|| re(r"[;@#$%&]"));
static DASHES: LazyLock<Regex> = LazyLock::new(|| re(r"[\x{2012}-\x{2015}]"));
static FINAL_PERIOD_2: LazyLock<Regex> = LazyLock::new(|| re(r#"([^\.])(\.)([\]\)}>"']*)\s*$"#));
static QUESTION_BANG: LazyLock<Regex> = LazyLock::new(|| re(r"[?!]"));
static STAR: LazyLock<Regex> = LazyLock::new(|| re(r"[*]"));
// PARENS_BRACKETS and DOUBLE_DASHES.
static PARENS: LazyLock<Regex> = LazyLock::new(|| re(r"[\]\[\(\)\{\}<>]"));
static DOUBLE_DASH: LazyLock<Regex> = LazyLock::new(|| re(r"--"));
// ENDING_QUOTES (quote-free part) and the whitespace collapse that sits in that list.
static END_QUOTES: LazyLock<Regex> = LazyLock::new(|| re("([»”’])"));
static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| re(r"\s+"));
// MacIntyre CONTRACTIONS2 and CONTRACTIONS3. `wanna` needs a following whitespace
// (`(?=\s)` in Python); the regex crate has no look-ahead, so the space is captured and
// written back, which gives the same text.
static CONTRACTIONS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let two = " ${1} ${2} ";
    vec![
        (re(r"(?i)\b(can)(not)\b"), two),
        (re(r"(?i)\b(d)('ye)\b"), two),
        (re(r"(?i)\b(gim)(me)\b"), two),
        (re(r"(?i)\b(gon)(na)\b"), two),
        (re(r"(?i)\b(got)(ta)\b"), two),
        (re(r"(?i)\b(lem)(me)\b"), two),
        (re(r"(?i)\b(more)('n)\b"), two),
        (re(r"(?i)\b(wan)(na)(\s)"), " ${1} ${2} ${3}"),
        (re(r"(?i) ('t)(is)\b"), two),
        (re(r"(?i) ('t)(was)\b"), two),
    ]
});

/// Python's `str.isspace()`, which `str.split()` uses: Unicode White_Space plus the
/// information separators U+001C..U+001F.
pub(crate) fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `NLTKWordTokenizer().tokenize(text)` for text without `'` and `"` (what process_sql
/// hands it), i.e. `nltk.word_tokenize(text, preserve_line=True)`.
pub(crate) fn word_tokenize_quote_free(text: &str) -> Vec<String> {
    let mut t = START_QUOTES.replace_all(text, " ${1} ").into_owned();
    t = DOUBLE_BACKTICK.replace_all(&t, " ${1} ").into_owned();

    t = FINAL_PERIOD_1
        .replace_all(&t, "${1} ${2} ${3} ")
        .into_owned();
    t = COLON_COMMA.replace_all(&t, " ${1} ${2}").into_owned();
    t = pad_final_colon_comma(t);
    t = ELLIPSIS.replace_all(&t, " ${0} ").into_owned();
    t = SYMBOLS.replace_all(&t, " ${0} ").into_owned();
    t = DASHES.replace_all(&t, " ${0} ").into_owned();
    t = FINAL_PERIOD_2
        .replace_all(&t, "${1} ${2}${3} ")
        .into_owned();
    t = QUESTION_BANG.replace_all(&t, " ${0} ").into_owned();
    t = STAR.replace_all(&t, " ${0} ").into_owned();

    t = PARENS.replace_all(&t, " ${0} ").into_owned();
    t = DOUBLE_DASH.replace_all(&t, " -- ").into_owned();

    t = format!(" {t} ");
    t = END_QUOTES.replace_all(&t, " ${1} ").into_owned();
    t = WHITESPACE.replace_all(&t, " ").into_owned();
    for (rx, rep) in CONTRACTIONS.iter() {
        t = rx.replace_all(&t, *rep).into_owned();
    }

    t.split(py_isspace)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// NLTK's `([:,])$` -> ` \1 `. Python's `$` also matches just before a final `\n`, which the
/// regex crate's `$` does not, so both places are checked by hand (at most one can match).
fn pad_final_colon_comma(mut t: String) -> String {
    let is_cc = |c: char| c == ':' || c == ',';
    if let Some(last) = t.chars().last() {
        if is_cc(last) {
            t.pop();
            t.push(' ');
            t.push(last);
            t.push(' ');
        } else if last == '\n' {
            let mut it = t.char_indices().rev();
            it.next();
            if let Some((i, c)) = it.next() {
                if is_cc(c) {
                    t.replace_range(i..i + 1, &format!(" {c} "));
                }
            }
        }
    }
    t
}

/// Python's `float(s)`: `None` where it raises `ValueError`.
///
/// Grammar: optional surrounding whitespace, optional sign, then `inf`/`infinity`/`nan`
/// (any case) or a decimal number whose digit groups may be joined by single underscores,
/// with an optional exponent. Only ASCII digits are recognised (Python also accepts other
/// Unicode decimal digits; SQL text does not use them).
pub(crate) fn py_float(s: &str) -> Option<f64> {
    let s = s.trim_matches(py_isspace);
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let value = match lower.as_str() {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => {
            if !valid_py_decimal(body.as_bytes()) {
                return None;
            }
            body.replace('_', "").parse::<f64>().ok()?
        }
    };
    Some(if neg { -value } else { value })
}

/// `digitpart ::= digit (["_"] digit)*`; returns the index after the digit part.
fn digit_part(b: &[u8], mut i: usize) -> Option<usize> {
    if i >= b.len() || !b[i].is_ascii_digit() {
        return None;
    }
    i += 1;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            i += 1;
        } else if b[i] == b'_' && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
            i += 2;
        } else {
            break;
        }
    }
    Some(i)
}

/// `floatnumber ::= ([digitpart] "." digitpart | digitpart ["."]) [exponent]`.
fn valid_py_decimal(b: &[u8]) -> bool {
    let mut i = 0;
    let int_end = digit_part(b, 0);
    if let Some(e) = int_end {
        i = e;
    }
    if i < b.len() && b[i] == b'.' {
        match digit_part(b, i + 1) {
            Some(e) => i = e,
            None if int_end.is_some() => i += 1,
            None => return false,
        }
    } else if int_end.is_none() {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        match digit_part(b, j) {
            Some(e) => i = e,
            None => return false,
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        spider_tokenize(s).unwrap()
    }

    #[test]
    fn merges_comparison_operators() {
        assert_eq!(
            toks("SELECT a FROM t WHERE a != 1 AND b >= 2 AND c <= 3"),
            [
                "select", "a", "from", "t", "where", "a", "!=", "1", "and", "b", ">=", "2", "and",
                "c", "<=", "3"
            ]
        );
        // Spaced operators are merged too (word_tokenize splits `!` anyway).
        assert_eq!(toks("a > = 1"), ["a", ">=", "1"]);
        assert_eq!(toks("a ! = 1"), ["a", "!=", "1"]);
        // `=` at position 0 looks at the last token, like Python's toks[-1].
        assert_eq!(toks("= b <"), ["=", "b", "<=", "b", "<"]);
    }

    #[test]
    fn string_literals_become_single_tokens() {
        assert_eq!(
            toks("SELECT name FROM singer WHERE country = 'New Zealand' OR x = \"A b\""),
            [
                "select",
                "name",
                "from",
                "singer",
                "where",
                "country",
                "=",
                "\"New Zealand\"",
                "or",
                "x",
                "=",
                "\"A b\""
            ]
        );
        // A literal glued to other text keeps its key (lower-cased) instead of the value.
        assert_eq!(toks("x = 'a'b"), ["x", "=", "__val_4_6__b"]);
        assert!(spider_tokenize("x = 'a").is_err());
        assert!(spider_tokenize("x = \"it's\"").is_err());
    }

    #[test]
    fn qualified_columns_and_punctuation() {
        assert_eq!(
            toks("SELECT T1.Name, count(*) FROM a AS T1 JOIN b;"),
            [
                "select", "t1.name", ",", "count", "(", "*", ")", "from", "a", "as", "t1", "join",
                "b", ";"
            ]
        );
        assert_eq!(toks("x IN (1,2)"), ["x", "in", "(", "1,2", ")"]);
        assert_eq!(toks("a.b."), ["a.b", "."]);
        assert_eq!(toks("1.5 - -3"), ["1.5", "-", "-3"]);
        assert_eq!(toks("x--y"), ["x", "--", "y"]);
        assert_eq!(
            toks("cannot wanna x,"),
            ["can", "not", "wan", "na", "x", ","]
        );
        assert_eq!(toks("a,\n"), ["a", ","]);
    }

    #[test]
    fn python_float() {
        for (s, v) in [
            ("1", 1.0),
            ("-2.5", -2.5),
            ("1_000", 1000.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
            ("inf", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
        ] {
            assert_eq!(py_float(s), Some(v), "{s}");
        }
        assert!(py_float("nan").unwrap().is_nan());
        for s in [
            "", ".", "1__0", "_1", "1_", "e5", "1e", "0x10", "1,2", "t1.a", "infinit", "1.2.3",
        ] {
            assert_eq!(py_float(s), None, "{s}");
        }
    }
}
