//! Spider hardness against the official evaluator's verdicts.
//!
//! - every record of `golden/eval_vectors_dev.jsonl` (3,044 pairs) must get the recorded
//!   `spider_hardness` (including `null` for golds process_sql cannot parse or that are
//!   punkt-sensitive);
//! - the 1,034 dev golds must split 248 / 446 / 174 / 166 (easy / medium / hard / extra).
//!
//! An ignored test (`dump_for_crosscheck`) writes tokens, trees and hardness for a list of
//! queries so that they can be compared with the real Python `process_sql` + NLTK.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use merit_core::Hardness;
use merit_eval::spider_sql::{
    hardness_of, is_punkt_sensitive, parse_spider_sql, spider_hardness, spider_tokenize,
    SpiderSchema,
};
use serde_json::{json, Value};

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"))
}

/// Mirrors `process_sql.get_schema(db)`: table names from `sqlite_master`, columns from
/// `PRAGMA table_info`, everything lower-cased (SpiderSchema lower-cases too).
fn schema_from_sqlite(path: &Path) -> SpiderSchema {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type='table';")
        .unwrap();
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|t| t.unwrap().to_lowercase())
        .collect();
    let mut out = Vec::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("PRAGMA table_info('{table}')"))
            .unwrap();
        let cols: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        out.push((table, cols));
    }
    SpiderSchema::new(out)
}

/// For a database whose `.sqlite` file is missing (wta_1 in this copy of dev), the schema
/// from `tables.json` (original table and column names), which is what `get_schema` reads
/// from the file for the other databases.
fn schema_from_tables_json(db_id: &str) -> Option<SpiderSchema> {
    let text = std::fs::read_to_string(data_dir().join("spider/tables.json")).ok()?;
    let all: Vec<Value> = serde_json::from_str(&text).ok()?;
    let entry = all.iter().find(|e| e["db_id"] == db_id)?;
    let tables: Vec<String> = entry["table_names_original"]
        .as_array()?
        .iter()
        .map(|t| t.as_str().unwrap_or_default().to_string())
        .collect();
    let mut cols: Vec<Vec<String>> = vec![Vec::new(); tables.len()];
    for c in entry["column_names_original"].as_array()? {
        let (Some(ti), Some(name)) = (c[0].as_i64(), c[1].as_str()) else {
            continue;
        };
        if let Ok(ti) = usize::try_from(ti) {
            cols[ti].push(name.to_string());
        }
    }
    Some(SpiderSchema::new(tables.into_iter().zip(cols)))
}

#[derive(Default)]
struct Schemas(HashMap<String, SpiderSchema>);

impl Schemas {
    fn get(&mut self, db_id: &str) -> &SpiderSchema {
        self.0.entry(db_id.to_string()).or_insert_with(|| {
            let path = data_dir().join(format!("spider/database/{db_id}/{db_id}.sqlite"));
            if path.exists() {
                schema_from_sqlite(&path)
            } else {
                schema_from_tables_json(db_id)
                    .unwrap_or_else(|| panic!("no schema for {db_id} ({})", path.display()))
            }
        })
    }
}

fn parse_level(v: &Value) -> Option<Hardness> {
    let s = v.as_str()?;
    Hardness::ALL.into_iter().find(|h| h.as_str() == s)
}

fn show(h: Option<Hardness>) -> &'static str {
    h.map_or("null", Hardness::as_str)
}

#[test]
fn golden_hardness_matches_official_on_every_pair() {
    let path = data_dir().join("golden/eval_vectors_dev.jsonl");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut schemas = Schemas::default();
    let mut total = 0;
    let mut mismatches = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.unwrap();
        if line.trim().is_empty() {
            continue;
        }
        let rec: Value = serde_json::from_str(&line).unwrap();
        total += 1;
        let db = rec["db_id"].as_str().unwrap();
        let gold = rec["gold"].as_str().unwrap();
        let expected = parse_level(&rec["spider_hardness"]);
        let got = spider_hardness(schemas.get(db), gold);
        if got != expected {
            let why = match parse_spider_sql(schemas.get(db), gold) {
                Ok(_) => "parsed".to_string(),
                Err(e) => e.to_string(),
            };
            mismatches.push(format!(
                "{}: got {} expected {} ({why}) gold={gold:?}",
                rec["id"],
                show(got),
                show(expected)
            ));
        }
    }
    for m in &mismatches {
        eprintln!("MISMATCH {m}");
    }
    assert_eq!(total, 3044, "golden file record count");
    assert!(
        mismatches.is_empty(),
        "{} of {total} records disagree with the official hardness",
        mismatches.len()
    );
}

#[test]
fn dev_golds_have_the_official_distribution() {
    let path = data_dir().join("spider/dev.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dev: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut schemas = Schemas::default();
    let mut counts: HashMap<Option<Hardness>, usize> = HashMap::new();
    for q in &dev {
        let db = q["db_id"].as_str().unwrap();
        let sql = q["query"].as_str().unwrap();
        let h = spider_hardness(schemas.get(db), sql);
        if h.is_none() {
            eprintln!("no hardness for {db}: {sql}");
        }
        *counts.entry(h).or_default() += 1;
    }
    assert_eq!(dev.len(), 1034);
    let got: Vec<usize> = [
        Some(Hardness::Easy),
        Some(Hardness::Medium),
        Some(Hardness::Hard),
        Some(Hardness::Extra),
        None,
    ]
    .iter()
    .map(|h| counts.get(h).copied().unwrap_or(0))
    .collect();
    assert_eq!(got, [248, 446, 174, 166, 0]);
}

/// Cross-check helper, run by hand:
/// `SPIDER_XCHECK_IN=in.jsonl SPIDER_XCHECK_OUT=out.jsonl cargo test -p merit-eval --test
/// hardness_golden -- --ignored dump_for_crosscheck`.
/// Each input line is `{"db_id": .., "query": ..}`; each output line carries the tokens (or
/// the error), the parse tree as Python's `json.dumps(get_sql(..))` would print it (or the
/// error), the hardness and the punkt flag.
#[test]
#[ignore]
fn dump_for_crosscheck() {
    let (Ok(input), Ok(output)) = (
        std::env::var("SPIDER_XCHECK_IN"),
        std::env::var("SPIDER_XCHECK_OUT"),
    ) else {
        eprintln!("set SPIDER_XCHECK_IN and SPIDER_XCHECK_OUT");
        return;
    };
    let mut schemas = Schemas::default();
    let mut out = std::io::BufWriter::new(std::fs::File::create(output).unwrap());
    for line in BufReader::new(std::fs::File::open(input).unwrap()).lines() {
        let rec: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let db = rec["db_id"].as_str().unwrap();
        let sql = rec["query"].as_str().unwrap();
        let schema = schemas.get(db);
        let toks = match spider_tokenize(sql) {
            Ok(t) => json!(t),
            Err(e) => json!({ "error": e.to_string() }),
        };
        let (tree, hardness) = match parse_spider_sql(schema, sql) {
            Ok(p) => (p.to_python_json(), json!(hardness_of(&p).as_str())),
            Err(e) => (json!({ "error": e.to_string() }), Value::Null),
        };
        let row = json!({
            "toks": toks,
            "tree": tree,
            "hardness": hardness,
            "punkt": is_punkt_sensitive(sql),
        });
        writeln!(out, "{row}").unwrap();
    }
}
