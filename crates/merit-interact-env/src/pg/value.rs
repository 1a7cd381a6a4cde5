//! PostgreSQL result values → judge [`Cell`]s, as psycopg2 would present them to Python.
//!
//! The `postgres` crate receives every result column in PostgreSQL's *binary* format; this
//! module decodes those bytes itself (no chrono/serde features), so that each value becomes
//! the cell for the Python object psycopg2 builds from the same value:
//!
//! | PostgreSQL | psycopg2 (Python) | cell |
//! |---|---|---|
//! | `boolean` | `bool` | `Bool` |
//! | `smallint`, `integer`, `bigint`, `oid` | `int` | `Int` |
//! | `real` | `float` parsed from PostgreSQL's shortest text, e.g. `1.1` (not `1.100000023841858`) | `Float` |
//! | `double precision` | `float` | `Float` |
//! | `numeric` | `Decimal` with the column's scale (`1.50`), `NaN`/`Infinity` | `Decimal` (canonical text) |
//! | `text`, `varchar`, `char(n)`, `name`, `"char"`, enums, `citext`, `xml`, `uuid` | `str` | `Text` |
//! | `bytea` | `memoryview` | `Bytes` |
//! | `date` | `date` (`infinity` → `date.max`) | `Date` |
//! | `timestamp`, `timestamptz` | `datetime` (session time zone; merit sets UTC) | `DateTime` |
//! | `time`, `timetz`, `interval` | `time`, `timedelta` | `Text` holding Python's `str()` of it |
//! | `json`, `jsonb` | `json.loads` result | scalar cells, or `Json` for lists/objects |
//! | arrays | nested `list` | `Json` when every element is JSON-representable, else `Text` |
//!
//! `time`/`interval` as text compare equal exactly when the Python objects do (their `str()`
//! is canonical), except against other types. Types outside the table (money, ranges, network
//! and geometric types, composites) fail the query with a message that names the type and
//! suggests a cast, rather than being guessed at.

use crate::judge::Cell;
use postgres::types::{FromSql, Kind, Type};

/// The raw bytes of one value (`None` for NULL), for any column type.
pub(crate) struct RawValue<'a>(pub(crate) Option<&'a [u8]>);

impl<'a> FromSql<'a> for RawValue<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> Result<RawValue<'a>, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<RawValue<'a>, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

// Built-in type OIDs (pg_type.dat); stable across PostgreSQL versions.
const BOOL: u32 = 16;
const BYTEA: u32 = 17;
const CHAR: u32 = 18;
const NAME: u32 = 19;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const OID: u32 = 26;
const JSON: u32 = 114;
const XML: u32 = 142;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const UNKNOWN: u32 = 705;
const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;
const DATE: u32 = 1082;
const TIME: u32 = 1083;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const INTERVAL: u32 = 1186;
const TIMETZ: u32 = 1266;
const NUMERIC: u32 = 1700;
const UUID: u32 = 2950;
const JSONB: u32 = 3802;

const MICROS_PER_DAY: i64 = 86_400_000_000;
/// PostgreSQL counts dates from 2000-01-01, which is day 10,957 after 1970-01-01.
const DAYS_1970_TO_2000: i64 = 10_957;

/// Decodes one value of type `ty`; the error is a message for the agent.
pub(crate) fn decode(ty: &Type, raw: Option<&[u8]>) -> Result<Cell, String> {
    let Some(bytes) = raw else {
        return Ok(Cell::Null);
    };
    match ty.kind() {
        Kind::Enum(_) => return text(bytes),
        Kind::Domain(base) => return decode(base, raw),
        Kind::Array(element) => return array(element, bytes),
        _ => {}
    }
    let malformed = || format!("malformed binary value of type {}", ty.name());
    match ty.oid() {
        BOOL => Ok(Cell::Bool(
            bytes.first().copied().ok_or_else(malformed)? != 0,
        )),
        INT2 => Ok(Cell::Int(i64::from(i16::from_be_bytes(
            fixed(bytes).ok_or_else(malformed)?,
        )))),
        INT4 => Ok(Cell::Int(i64::from(i32::from_be_bytes(
            fixed(bytes).ok_or_else(malformed)?,
        )))),
        OID => Ok(Cell::Int(i64::from(u32::from_be_bytes(
            fixed(bytes).ok_or_else(malformed)?,
        )))),
        INT8 => Ok(Cell::Int(i64::from_be_bytes(
            fixed(bytes).ok_or_else(malformed)?,
        ))),
        FLOAT4 => {
            let value = f32::from_be_bytes(fixed(bytes).ok_or_else(malformed)?);
            // psycopg2 parses PostgreSQL's text output, which is the shortest text that reads
            // back as the same float4 (extra_float_digits = 1, the default since v12). Rust's
            // f32 Display is that same shortest text; parsing it as f64 gives Python's float.
            Ok(Cell::Float(if value.is_finite() {
                value.to_string().parse().map_err(|_| malformed())?
            } else {
                f64::from(value)
            }))
        }
        FLOAT8 => Ok(Cell::Float(f64::from_be_bytes(
            fixed(bytes).ok_or_else(malformed)?,
        ))),
        NUMERIC => numeric(bytes).map(Cell::Decimal).ok_or_else(malformed),
        TEXT | VARCHAR | BPCHAR | NAME | UNKNOWN | XML | CHAR => text(bytes),
        _ if ty.name() == "citext" => text(bytes),
        BYTEA => Ok(Cell::Bytes(bytes.to_vec())),
        UUID => {
            let b: [u8; 16] = fixed(bytes).ok_or_else(malformed)?;
            let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
            Ok(Cell::Text(format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            )))
        }
        DATE => {
            let days = i32::from_be_bytes(fixed(bytes).ok_or_else(malformed)?);
            let (year, month, day) = match days {
                // psycopg2 maps ±infinity to date.max / date.min.
                i32::MAX => (9999, 12, 31),
                i32::MIN => (1, 1, 1),
                _ => civil(i64::from(days)),
            };
            check_year(year)?;
            Ok(Cell::Date { year, month, day })
        }
        TIMESTAMP | TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(bytes).ok_or_else(malformed)?);
            let (year, month, day, time) = match micros {
                // psycopg2 maps ±infinity to datetime.max / datetime.min.
                i64::MAX => (9999, 12, 31, MICROS_PER_DAY - 1),
                i64::MIN => (1, 1, 1, 0),
                _ => {
                    let (y, m, d) = civil(micros.div_euclid(MICROS_PER_DAY));
                    (y, m, d, micros.rem_euclid(MICROS_PER_DAY))
                }
            };
            check_year(year)?;
            let mut text = format!("{year:04}-{month:02}-{day:02} {}", clock(time));
            if ty.oid() == TIMESTAMPTZ {
                // merit's sessions run with TimeZone = UTC, so the offset is always +00:00.
                text.push_str("+00:00");
            }
            Ok(Cell::DateTime {
                year,
                month,
                day,
                text,
            })
        }
        TIME => {
            let micros = i64::from_be_bytes(fixed(bytes).ok_or_else(malformed)?);
            Ok(Cell::Text(clock(micros)))
        }
        TIMETZ => {
            if bytes.len() != 12 {
                return Err(malformed());
            }
            let micros = i64::from_be_bytes(fixed(&bytes[..8]).ok_or_else(malformed)?);
            // The zone is stored in seconds *west* of UTC.
            let west = i32::from_be_bytes(fixed(&bytes[8..]).ok_or_else(malformed)?);
            let east = -i64::from(west);
            let sign = if east < 0 { '-' } else { '+' };
            let offset = east.abs();
            let mut text = format!(
                "{}{sign}{:02}:{:02}",
                clock(micros),
                offset / 3600,
                offset % 3600 / 60
            );
            if offset % 60 != 0 {
                text.push_str(&format!(":{:02}", offset % 60));
            }
            Ok(Cell::Text(text))
        }
        INTERVAL => {
            if bytes.len() != 16 {
                return Err(malformed());
            }
            let micros = i64::from_be_bytes(fixed(&bytes[..8]).ok_or_else(malformed)?);
            let days = i32::from_be_bytes(fixed(&bytes[8..12]).ok_or_else(malformed)?);
            let months = i32::from_be_bytes(fixed(&bytes[12..]).ok_or_else(malformed)?);
            Ok(Cell::Text(timedelta_str(micros, days, months)))
        }
        JSON => json(bytes),
        JSONB => match bytes.split_first() {
            Some((1, rest)) => json(rest),
            _ => Err(malformed()),
        },
        _ => Err(format!(
            "merit cannot read values of PostgreSQL type {}; cast the column to text (::text)",
            ty.name()
        )),
    }
}

fn fixed<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

fn text(bytes: &[u8]) -> Result<Cell, String> {
    std::str::from_utf8(bytes)
        .map(|s| Cell::Text(s.to_string()))
        .map_err(|_| "a text value is not valid UTF-8".to_string())
}

/// Python's `date`/`datetime` only hold years 1–9999; psycopg2 fails the fetch otherwise.
fn check_year(year: i32) -> Result<(), String> {
    if (1..=9999).contains(&year) {
        Ok(())
    } else {
        Err(format!("year {year} is out of range"))
    }
}

/// Days since 2000-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil(days_since_2000: i64) -> (i32, u32, u32) {
    let z = days_since_2000 + DAYS_1970_TO_2000 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (i32::try_from(year).unwrap_or(i32::MAX), month, day)
}

/// Python's `str()` of a `time`: `HH:MM:SS`, plus `.ffffff` when there are microseconds.
fn clock(micros_of_day: i64) -> String {
    let seconds = micros_of_day.div_euclid(1_000_000);
    let micro = micros_of_day.rem_euclid(1_000_000);
    let mut text = format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    );
    if micro != 0 {
        text.push_str(&format!(".{micro:06}"));
    }
    text
}

/// Python's `str()` of the `timedelta` psycopg2 builds from an interval: it reads years as 365
/// days and months as 30 days, then `timedelta` normalizes (days may be negative, the clock
/// part never is).
pub(crate) fn timedelta_str(micros: i64, days: i32, months: i32) -> String {
    // PostgreSQL prints `months` as whole years and the remaining months, both truncated
    // toward zero; psycopg2 converts each part.
    let years = i128::from(months / 12);
    let rest_months = i128::from(months % 12);
    let total_days = years * 365 + rest_months * 30 + i128::from(days);
    let total = total_days * i128::from(MICROS_PER_DAY) + i128::from(micros);
    let day_micros = i128::from(MICROS_PER_DAY);
    let d = total.div_euclid(day_micros);
    let rem = total.rem_euclid(day_micros);
    let seconds = rem / 1_000_000;
    let micro = rem % 1_000_000;
    let mut text = format!(
        "{}:{:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    );
    if d != 0 {
        let plural = if d.abs() == 1 { "" } else { "s" };
        text = format!("{d} day{plural}, {text}");
    }
    if micro != 0 {
        text.push_str(&format!(".{micro:06}"));
    }
    text
}

/// PostgreSQL's binary `numeric` → its canonical text (`-12.3450`, `NaN`, `Infinity`).
pub(crate) fn numeric(bytes: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> {
        Some(u16::from_be_bytes(bytes.get(i..i + 2)?.try_into().ok()?))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    match sign {
        0xC000 => return Some("NaN".to_string()),
        0xD000 => return Some("Infinity".to_string()),
        0xF000 => return Some("-Infinity".to_string()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    let mut digits = Vec::with_capacity(ndigits);
    for i in 0..ndigits {
        let digit = word(8 + 2 * i)?;
        if digit > 9999 {
            return None;
        }
        digits.push(digit);
    }
    if bytes.len() != 8 + 2 * ndigits {
        return None;
    }
    // Base-10000 digit at position `weight - k` for k = 0.. (index k in `digits`).
    let digit_at = |group: i64| -> u16 {
        // `group` is the power of 10000; digits[k] has power weight - k.
        let k = weight - group;
        if k < 0 {
            0
        } else {
            usize::try_from(k)
                .ok()
                .and_then(|k| digits.get(k).copied())
                .unwrap_or(0)
        }
    };
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        for group in (0..=weight).rev() {
            let digit = digit_at(group);
            if group == weight {
                text.push_str(&digit.to_string());
            } else {
                text.push_str(&format!("{digit:04}"));
            }
        }
    }
    if dscale > 0 {
        let mut fraction = String::with_capacity(dscale + 4);
        let mut group = -1i64;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit_at(group)));
            group -= 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Some(text)
}

/// A JSON document → the cell for what `json.loads` returns: scalars become plain cells, lists
/// and objects stay JSON.
fn json(bytes: &[u8]) -> Result<Cell, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|_| "a json value could not be parsed".to_string())?;
    Ok(json_cell(value))
}

fn json_cell(value: serde_json::Value) -> Cell {
    use serde_json::Value;
    match value {
        Value::Null => Cell::Null,
        Value::Bool(b) => Cell::Bool(b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Cell::Int(i),
            // An integer past i64 (Python keeps it exact): a decimal without fraction compares
            // like that int.
            _ if n.is_u64() => Cell::Decimal(n.to_string()),
            (_, Some(f)) => Cell::Float(f),
            _ => Cell::Text(n.to_string()),
        },
        Value::String(s) => Cell::Text(s),
        other => Cell::Json(other),
    }
}

/// A binary array (any number of dimensions) → nested lists, as psycopg2 returns them.
fn array(element: &Type, bytes: &[u8]) -> Result<Cell, String> {
    let malformed = || format!("malformed binary array of {}", element.name());
    let int = |i: usize| -> Option<i32> {
        Some(i32::from_be_bytes(bytes.get(i..i + 4)?.try_into().ok()?))
    };
    let ndim = usize::try_from(int(0).ok_or_else(malformed)?).map_err(|_| malformed())?;
    let mut dims = Vec::with_capacity(ndim);
    for d in 0..ndim {
        let len = int(12 + 8 * d).ok_or_else(malformed)?;
        dims.push(usize::try_from(len).map_err(|_| malformed())?);
    }
    let mut offset = 12 + 8 * ndim;
    let total: usize = if ndim == 0 { 0 } else { dims.iter().product() };
    let mut cells = Vec::with_capacity(total.min(1 << 16));
    for _ in 0..total {
        let len = int(offset).ok_or_else(malformed)?;
        offset += 4;
        let value = if len < 0 {
            None
        } else {
            let len = usize::try_from(len).map_err(|_| malformed())?;
            let slice = bytes.get(offset..offset + len).ok_or_else(malformed)?;
            offset += len;
            Some(slice)
        };
        cells.push(decode(element, value)?);
    }
    let json: Option<Vec<serde_json::Value>> = cells.iter().map(cell_json).collect();
    match json {
        Some(values) => Ok(Cell::Json(nest(values, &dims))),
        // Python's json.dumps cannot serialize Decimal, date or bytes elements (the reference
        // would crash on them); show them as text rather than inventing a JSON form.
        None => Ok(Cell::Text(format!(
            "[{}]",
            cells
                .iter()
                .map(Cell::display)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Splits a flat element list into nested lists by dimension lengths (row-major).
fn nest(values: Vec<serde_json::Value>, dims: &[usize]) -> serde_json::Value {
    match dims {
        [] | [_] => serde_json::Value::Array(values),
        [_, inner @ ..] => {
            let chunk: usize = inner.iter().product::<usize>().max(1);
            let mut rows = Vec::new();
            let mut values = values.into_iter().peekable();
            while values.peek().is_some() {
                let part: Vec<_> = values.by_ref().take(chunk).collect();
                rows.push(nest(part, inner));
            }
            serde_json::Value::Array(rows)
        }
    }
}

/// The JSON form of a cell inside a list, when Python's `json.dumps` could write it.
fn cell_json(cell: &Cell) -> Option<serde_json::Value> {
    use serde_json::Value;
    Some(match cell {
        Cell::Null => Value::Null,
        Cell::Bool(b) => Value::Bool(*b),
        Cell::Int(i) => Value::from(*i),
        Cell::Float(f) => Value::Number(serde_json::Number::from_f64(*f)?),
        Cell::Text(s) => Value::String(s.clone()),
        Cell::Json(v) => v.clone(),
        Cell::Bytes(_) | Cell::Decimal(_) | Cell::Date { .. } | Cell::DateTime { .. } => {
            return None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend((digits.len() as u16).to_be_bytes());
        out.extend(weight.to_be_bytes());
        out.extend(sign.to_be_bytes());
        out.extend(dscale.to_be_bytes());
        for d in digits {
            out.extend(d.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_print_like_postgres() {
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 4, &[12, 3450])).as_deref(),
            Some("12.3450")
        );
        assert_eq!(
            numeric(&numeric_bytes(1, 0x4000, 2, &[1, 2345, 6700])).as_deref(),
            Some("-12345.67")
        );
        assert_eq!(
            numeric(&numeric_bytes(-2, 0, 6, &[1200])).as_deref(),
            Some("0.000012")
        );
        assert_eq!(
            numeric(&numeric_bytes(2, 0, 0, &[1])).as_deref(),
            Some("100000000")
        );
        assert_eq!(numeric(&numeric_bytes(0, 0, 0, &[])).as_deref(), Some("0"));
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 2, &[])).as_deref(),
            Some("0.00")
        );
        assert_eq!(
            numeric(&numeric_bytes(0, 0xC000, 0, &[])).as_deref(),
            Some("NaN")
        );
        assert_eq!(numeric(&numeric_bytes(0, 0x1234, 0, &[])), None);
        assert_eq!(numeric(&[0, 1]), None);
    }

    #[test]
    fn dates_and_clocks() {
        assert_eq!(civil(0), (2000, 1, 1));
        assert_eq!(civil(-1), (1999, 12, 31));
        assert_eq!(civil(59), (2000, 2, 29));
        assert_eq!(civil(8834), (2024, 3, 9));
        assert_eq!(clock(0), "00:00:00");
        assert_eq!(clock(45_296_000_001), "12:34:56.000001");
    }

    #[test]
    fn intervals_print_like_python_timedeltas() {
        assert_eq!(timedelta_str(0, 0, 0), "0:00:00");
        assert_eq!(timedelta_str(3_600_000_000, 1, 0), "1 day, 1:00:00");
        assert_eq!(timedelta_str(0, 2, 14), "427 days, 0:00:00");
        assert_eq!(timedelta_str(-1, 0, 0), "-1 day, 23:59:59.999999");
        assert_eq!(timedelta_str(0, -3, 0), "-3 days, 0:00:00");
    }

    #[test]
    fn floats_read_as_python_does() {
        let cell = decode(&Type::FLOAT4, Some(&1.1f32.to_be_bytes())).unwrap();
        assert_eq!(cell, Cell::Float(1.1));
        let cell = decode(&Type::BOOL, Some(&[1])).unwrap();
        assert_eq!(cell, Cell::Bool(true));
        assert!(decode(&Type::INT4, Some(&[0, 1])).is_err());
        assert_eq!(decode(&Type::TEXT, None).unwrap(), Cell::Null);
        let error = decode(&Type::INET, Some(&[2, 32, 0, 4, 127, 0, 0, 1])).unwrap_err();
        assert!(error.contains("inet"), "{error}");
    }

    #[test]
    fn json_scalars_become_plain_cells() {
        assert_eq!(json(b"1").unwrap(), Cell::Int(1));
        assert_eq!(json(b"\"a\"").unwrap(), Cell::Text("a".into()));
        assert_eq!(json(b"null").unwrap(), Cell::Null);
        assert_eq!(json(b"true").unwrap(), Cell::Bool(true));
        assert!(matches!(json(b"[1, 2]").unwrap(), Cell::Json(_)));
    }
}
