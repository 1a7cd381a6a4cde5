//! Python's value semantics, as far as the official evaluators depend on them.
//!
//! Both reference scripts compare rows as Python tuples. That brings three behaviours merit
//! must reproduce: `1 == 1.0` (and they hash alike), the text `str(v) + str(type(v))` that
//! Spider sorts each row's values by, and how text is decoded (Spider drops undecodable bytes,
//! BIRD's default connection raises an error).

use merit_sql::Value;
use std::hash::{Hash, Hasher};

/// A value as Python's `sqlite3` module hands it to the evaluator.
#[derive(Debug, Clone)]
pub enum PyValue {
    /// `None`.
    None,
    /// `int`.
    Int(i64),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(String),
    /// `bytes`.
    Bytes(Vec<u8>),
}

/// Text that cannot be decoded as UTF-8 under BIRD's strict default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Could not decode to UTF-8 column value")]
pub struct UndecodableText;

impl PyValue {
    /// Spider's conversion: text is decoded with `errors="ignore"` (invalid bytes vanish).
    pub fn from_value_lenient(value: Value) -> PyValue {
        match value {
            Value::Text(bytes) => PyValue::Str(decode_ignoring_errors(bytes)),
            other => PyValue::from_non_text(other),
        }
    }

    /// BIRD's conversion: text must be valid UTF-8, otherwise the query fails.
    pub fn from_value_strict(value: Value) -> Result<PyValue, UndecodableText> {
        match value {
            Value::Text(bytes) => String::from_utf8(bytes)
                .map(PyValue::Str)
                .map_err(|_| UndecodableText),
            other => Ok(PyValue::from_non_text(other)),
        }
    }

    fn from_non_text(value: Value) -> PyValue {
        match value {
            Value::Null => PyValue::None,
            Value::Integer(i) => PyValue::Int(i),
            Value::Real(f) => PyValue::Float(f),
            Value::Blob(bytes) => PyValue::Bytes(bytes),
            Value::Text(_) => unreachable!("text is converted by the callers"),
        }
    }

    /// `str(self) + str(type(self))`, the key Spider's `unorder_row` sorts by.
    pub fn sort_key(&self) -> String {
        match self {
            PyValue::None => "None<class 'NoneType'>".to_string(),
            PyValue::Int(i) => format!("{i}<class 'int'>"),
            PyValue::Float(f) => format!("{}<class 'float'>", float_repr(*f)),
            PyValue::Str(s) => format!("{s}<class 'str'>"),
            PyValue::Bytes(b) => format!("{}<class 'bytes'>", bytes_repr(b)),
        }
    }

    /// A key with Python's equality: equal keys exactly when the Python values compare equal.
    fn canonical(&self) -> Canonical<'_> {
        match self {
            PyValue::None => Canonical::None,
            PyValue::Int(i) => Canonical::Int(*i),
            PyValue::Float(f) => match float_as_exact_int(*f) {
                Some(i) => Canonical::Int(i),
                None => Canonical::Float(f.to_bits()),
            },
            PyValue::Str(s) => Canonical::Str(s),
            PyValue::Bytes(b) => Canonical::Bytes(b),
        }
    }
}

#[derive(PartialEq, Eq, Hash)]
enum Canonical<'a> {
    None,
    Int(i64),
    Float(u64),
    Str(&'a str),
    Bytes(&'a [u8]),
}

/// The integer a float equals exactly, if any (`-0.0` equals `0`, as in Python).
fn float_as_exact_int(f: f64) -> Option<i64> {
    // 2^63 is exactly representable; every integral float in [-2^63, 2^63) fits in i64.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    (f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f)).then_some(f as i64)
}

impl PartialEq for PyValue {
    fn eq(&self, other: &PyValue) -> bool {
        // SQLite never returns NaN (it turns NaN into NULL), so bit equality of the remaining
        // floats is numeric equality except for ±0.0, which `canonical` folds into Int(0).
        self.canonical() == other.canonical()
    }
}

impl Eq for PyValue {}

impl Hash for PyValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.canonical().hash(state)
    }
}

/// `bytes.decode("utf-8", errors="ignore")`: keep every valid sequence, drop the rest.
pub fn decode_ignoring_errors(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let bytes = error.into_bytes();
            bytes.utf8_chunks().map(|chunk| chunk.valid()).collect()
        }
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in [-4, 16), otherwise in scientific notation with a two-digit exponent.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` prints the shortest round-trip digits, e.g. "-1.25e-7".
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("LowerExp output always has an exponent");
    let exponent: i32 = exponent.parse().expect("LowerExp exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Python's `decpt`: the value is 0.DIGITS × 10^decpt.
    let decpt = exponent + 1;
    let body = if decpt <= -4 || decpt > 16 {
        let (head, tail) = digits.split_at(1);
        let fraction = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let exp = decpt - 1;
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{head}{fraction}e{exp_sign}{:02}", exp.abs())
    } else if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt as usize >= digits.len() {
        format!("{digits}{}.0", "0".repeat(decpt as usize - digits.len()))
    } else {
        let (whole, fraction) = digits.split_at(decpt as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{body}")
}

/// Python's `repr(bytes)`: `b'…'`, switching to double quotes when the data holds `'` but no `"`.
pub fn bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut out = String::from("b");
    out.push(quote as char);
    for &byte in bytes {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            _ if byte == quote => {
                out.push('\\');
                out.push(byte as char);
            }
            0x20..=0x7e => out.push(byte as char),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push(quote as char);
    out
}

/// Spider's `unorder_row`: the row's values stably sorted by [`PyValue::sort_key`].
pub fn unorder_row(row: &[PyValue]) -> Vec<PyValue> {
    if row.len() < 2 {
        return row.to_vec();
    }
    let mut keyed: Vec<(String, &PyValue)> =
        row.iter().map(|value| (value.sort_key(), value)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, value)| value.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123.456, "123.456"),
            (1e22, "1e+22"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (33.333333333333336, "33.333333333333336"),
            (1e15, "1000000000000000.0"),
        ];
        for (value, expected) in cases {
            assert_eq!(float_repr(value), expected, "{value:e}");
        }
    }

    #[test]
    fn bytes_repr_matches_python() {
        assert_eq!(bytes_repr(b"a'b\x00\"\\"), r#"b'a\'b\x00"\\'"#);
        assert_eq!(bytes_repr(b"a'b"), "b\"a'b\"");
        assert_eq!(bytes_repr(b"\t\n\x7f\xff"), r"b'\t\n\x7f\xff'");
    }

    #[test]
    fn int_and_float_are_equal_and_hash_alike() {
        use std::collections::HashSet;
        assert_eq!(PyValue::Int(1), PyValue::Float(1.0));
        assert_eq!(PyValue::Int(0), PyValue::Float(-0.0));
        assert_ne!(PyValue::Int(1), PyValue::Float(1.5));
        assert_ne!(PyValue::Str("1".into()), PyValue::Int(1));
        assert_ne!(PyValue::Str("a".into()), PyValue::Bytes(b"a".to_vec()));
        let set: HashSet<PyValue> = [PyValue::Int(3), PyValue::Float(3.0)].into();
        assert_eq!(set.len(), 1);
        // 2^53 + 1 is not exactly representable: Python compares exactly, so they differ.
        assert_ne!(
            PyValue::Int(9_007_199_254_740_993),
            PyValue::Float(9_007_199_254_740_992.0)
        );
    }

    #[test]
    fn sort_key_reproduces_the_int_float_quirk() {
        // Python: sorted((1, 1001), key=...) == (1001, 1) but (1.0, 1001) stays as it is.
        let ints = unorder_row(&[PyValue::Int(1), PyValue::Int(1001)]);
        assert!(matches!(ints[0], PyValue::Int(1001)));
        let mixed = unorder_row(&[PyValue::Float(1.0), PyValue::Int(1001)]);
        assert!(matches!(mixed[0], PyValue::Float(_)));
        assert_eq!(PyValue::None.sort_key(), "None<class 'NoneType'>");
    }

    #[test]
    fn text_decoding_follows_each_evaluator() {
        assert_eq!(
            decode_ignoring_errors(vec![b'a', 0xff, b'b', 0xe2, 0x82]),
            "ab"
        );
        assert!(PyValue::from_value_strict(Value::Text(vec![0xff])).is_err());
        assert!(matches!(
            PyValue::from_value_lenient(Value::Text(vec![0xff, b'x'])),
            PyValue::Str(s) if s == "x"
        ));
    }
}
