//! Reading files the way the official Python scripts do: UTF-8 text, universal newlines,
//! `str.strip()` whitespace. Kept in one place so every loader agrees on line numbers.

use crate::error::DataError;
use serde_json::Value;
use std::path::Path;

/// Reads `path` as UTF-8 text.
///
/// Invalid UTF-8 is reported with the line it sits on (Python would raise `UnicodeDecodeError`
/// on the same file, but with a byte offset that nobody can use). A leading UTF-8 byte-order
/// mark is dropped: editors on Windows add one, and keeping it would glue an invisible
/// character to the first SQL or make the JSON unreadable; this is the one place where we are
/// deliberately more lenient than the official scripts.
pub(crate) fn read_text(path: &Path) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(err) => {
            let at = err.valid_up_to();
            let before = &bytes[..at];
            // 1 + the number of line ends before the bad byte, with `\r\n` counted once, so
            // the number agrees with `lines()` below.
            let line = 1 + before
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
                .count();
            let line_start = before
                .iter()
                .rposition(|&b| b == b'\n' || b == b'\r')
                .map_or(0, |p| p + 1);
            Err(DataError::line(
                path,
                line,
                format!(
                    "invalid UTF-8 (byte 0x{:02X} at column {}); the file must be UTF-8 text",
                    bytes[at],
                    at - line_start + 1
                ),
            ))
        }
    }
}

/// Splits text into `(1-based line number, line)` pairs with Python's universal newlines:
/// `\r\n`, `\r` and `\n` all end a line, and a final terminator does not start an extra line.
/// This is what `open(f).readlines()` sees, so our line numbers and the official script's
/// line order match even for files written on old Macs.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text;
    let mut number = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        number += 1;
        match rest.find(['\n', '\r']) {
            Some(end) => {
                let line = &rest[..end];
                let skip = if rest[end..].starts_with("\r\n") {
                    2
                } else {
                    1
                };
                rest = &rest[end + skip..];
                Some((number, line))
            }
            None => {
                let line = rest;
                rest = "";
                Some((number, line))
            }
        }
    })
}

/// Python's `str.isspace()`: Unicode White_Space plus the four ASCII separators U+001C..U+001F,
/// which Python counts as whitespace and Rust's `char::is_whitespace` does not.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()` with no argument.
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Parses a JSON file, turning every failure into a [`DataError`] that points at a line.
pub(crate) fn read_json(path: &Path, expected: &str) -> Result<Value, DataError> {
    let text = read_text(path)?;
    if text.trim().is_empty() {
        return Err(DataError::line(
            path,
            1,
            format!("the file is empty; expected {expected}"),
        ));
    }
    serde_json::from_str(&text).map_err(|err| {
        // serde_json appends " at line L column C" to its Display; we report those separately.
        let full = err.to_string();
        let message = match full.rfind(" at line ") {
            Some(cut) => full[..cut].to_owned(),
            None => full,
        };
        DataError::JsonSyntax {
            file: path.to_path_buf(),
            line: err.line().max(1),
            column: err.column().max(1),
            message,
        }
    })
}

/// A short description of a JSON value's type, for "expected X, found Y" messages.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let mut shown: String = s.chars().take(40).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            format!("string {shown:?}")
        }
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Typed access to one JSON object, remembering its path for error messages.
pub(crate) struct Obj<'a> {
    pub(crate) file: &'a Path,
    pub(crate) path: String,
    pub(crate) map: &'a serde_json::Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// Wraps `value`, failing unless it is an object.
    pub(crate) fn new(file: &'a Path, path: String, value: &'a Value) -> Result<Self, DataError> {
        match value {
            Value::Object(map) => Ok(Obj { file, path, map }),
            other => Err(DataError::record(
                file,
                path,
                format!("expected an object, found {}", describe(other)),
            )),
        }
    }

    pub(crate) fn field_path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// A required field of any type.
    pub(crate) fn get(&self, key: &str) -> Result<&'a Value, DataError> {
        self.map.get(key).ok_or_else(|| {
            DataError::record(
                self.file,
                self.path.clone(),
                format!("missing field `{key}`"),
            )
        })
    }

    /// A required string field.
    pub(crate) fn string(&self, key: &str) -> Result<&'a str, DataError> {
        match self.get(key)? {
            Value::String(s) => Ok(s),
            other => Err(DataError::record(
                self.file,
                self.field_path(key),
                format!("expected a string, found {}", describe(other)),
            )),
        }
    }

    /// A required array field.
    pub(crate) fn array(&self, key: &str) -> Result<&'a Vec<Value>, DataError> {
        match self.get(key)? {
            Value::Array(a) => Ok(a),
            other => Err(DataError::record(
                self.file,
                self.field_path(key),
                format!("expected an array, found {}", describe(other)),
            )),
        }
    }
}

/// The top-level array of a JSON file.
pub(crate) fn top_array<'a>(path: &Path, value: &'a Value) -> Result<&'a Vec<Value>, DataError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(DataError::record(
            path,
            "$",
            format!(
                "expected a JSON array at the top level, found {}",
                describe(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_newlines_match_python_readlines() {
        let got: Vec<_> = lines("a\r\nb\rc\n\nd").collect();
        assert_eq!(got, vec![(1, "a"), (2, "b"), (3, "c"), (4, ""), (5, "d")]);
        assert_eq!(lines("a\n").count(), 1);
        assert_eq!(lines("").count(), 0);
    }

    #[test]
    fn strip_matches_python_whitespace() {
        assert_eq!(py_strip("\u{1c}\u{a0} x y\t\u{3000}\u{1f}"), "x y");
        // U+200B ZERO WIDTH SPACE is not whitespace for Python either.
        assert_eq!(py_strip("\u{200b}x"), "\u{200b}x");
    }
}
