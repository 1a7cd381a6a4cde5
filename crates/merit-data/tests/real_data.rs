//! The loaders against the real Spider and BIRD files in the shared data folder.

use merit_core::Difficulty;
use merit_data::*;
use std::collections::BTreeMap;
use std::io::Write as _;

const SPIDER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/spider");
const BIRD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/bird");

fn spider(file: &str) -> String {
    format!("{SPIDER}/{file}")
}

fn bird(file: &str) -> String {
    format!("{BIRD}/{file}")
}

#[test]
fn spider_dev_questions_match_the_gold_file_line_for_line() {
    let questions = load_spider_questions(spider("dev.json"), "dev").unwrap();
    assert_eq!(questions.len(), 1034);
    assert_eq!(questions[0].id, "dev-0");
    assert_eq!(questions[0].db_id, "concert_singer");
    assert_eq!(questions[0].question, "How many singers do we have?");
    assert_eq!(questions[0].gold_sql, "SELECT count(*) FROM singer");
    assert_eq!(questions[1033].id, "dev-1033");
    assert!(questions
        .iter()
        .all(|q| q.evidence.is_empty() && q.difficulty.is_none()));

    let gold = load_gold_sql(spider("dev_gold.sql")).unwrap();
    assert_eq!(gold.len(), 1034);
    for (i, (q, g)) in questions.iter().zip(&gold).enumerate() {
        assert_eq!(g.line, i + 1);
        assert_eq!(g.sql, q.gold_sql, "line {}", g.line);
        assert_eq!(g.db_id, q.db_id, "line {}", g.line);
    }

    // The gold file read as a prediction file is the SQL column, line for line.
    let preds = load_predictions(spider("dev_gold.sql")).unwrap();
    assert_eq!(preds.len(), 1034);
    assert!(preds
        .iter()
        .zip(&gold)
        .all(|(p, g)| p.sql == g.sql && p.line == g.line));
}

#[test]
fn spider_train_questions() {
    let questions = load_spider_questions(spider("train.json"), "train").unwrap();
    assert_eq!(questions.len(), 5642);
    assert_eq!(questions[5641].id, "train-5641");
    assert!(questions
        .iter()
        .all(|q| !q.db_id.is_empty() && !q.gold_sql.is_empty()));
}

#[test]
fn spider_dev_availability_leaves_out_wta_1() {
    let questions = load_spider_questions(spider("dev.json"), "dev").unwrap();
    let dbs = DatabaseDir::new(spider("database"));
    let availability = dbs.availability(&questions);
    assert_eq!(availability.usable.len(), 972);
    assert_eq!(
        availability.unavailable,
        BTreeMap::from([("wta_1".to_owned(), 62)])
    );
    assert_eq!(
        availability.summary(),
        "972 usable of 1034; unavailable: wta_1 (62 questions, database not found)"
    );
    assert!(availability
        .usable
        .iter()
        .all(|&i| questions[i].db_id != "wta_1"));
    let found = dbs.locate("concert_singer").unwrap();
    assert!(found.ends_with("concert_singer/concert_singer.sqlite"));
    let missing = dbs.locate("wta_1").unwrap_err();
    assert_eq!(missing.tried.len(), 2);
    assert!(missing.to_string().contains("wta_1/wta_1.sqlite"));
}

#[test]
fn bird_dev_and_mini_dev_questions() {
    let entries = load_bird_entries(bird("dev.json"), "dev").unwrap();
    assert_eq!(entries.len(), 1534);
    assert!(entries
        .iter()
        .enumerate()
        .all(|(i, e)| e.question_id == Some(i as u64) && e.question.id == format!("dev-{i}")));
    let first = &entries[0].question;
    assert_eq!(first.db_id, "california_schools");
    assert!(first.evidence.starts_with("Eligible free rate for K-12"));
    assert!(first
        .gold_sql
        .starts_with("SELECT `Free Meal Count (K-12)`"));
    let counts = count_difficulties(entries.iter().map(|e| &e.question));
    assert_eq!(counts, [925, 464, 145]);

    let mini = load_bird_entries(bird("mini_dev.json"), "minidev").unwrap();
    assert_eq!(mini.len(), 500);
    assert_eq!(mini[0].question_id, Some(1471));
    assert_eq!(mini[0].question.id, "minidev-0");
    assert_eq!(
        count_difficulties(mini.iter().map(|e| &e.question)),
        [148, 250, 102]
    );

    let plain = load_bird_questions(bird("mini_dev.json"), "minidev").unwrap();
    assert_eq!(plain[499], mini[499].question);
}

fn count_difficulties<'a>(questions: impl Iterator<Item = &'a merit_core::Question>) -> [usize; 3] {
    let mut counts = [0; 3];
    for q in questions {
        let level = q
            .difficulty
            .expect("every BIRD dev question has a difficulty");
        counts[Difficulty::ALL.iter().position(|&d| d == level).unwrap()] += 1;
    }
    counts
}

/// The shared folder has no BIRD gold or prediction file, so we write them in the official
/// formats from dev.json and read them back.
#[test]
fn bird_gold_and_prediction_files_round_trip() {
    let questions = load_bird_questions(bird("dev.json"), "dev").unwrap();
    let dir = tempfile::tempdir().unwrap();

    let gold_path = dir.path().join("dev.sql");
    let mut gold_file = std::fs::File::create(&gold_path).unwrap();
    for q in &questions {
        writeln!(gold_file, "{}\t{}", q.gold_sql, q.db_id).unwrap();
    }
    drop(gold_file);
    let gold = load_bird_gold_sql(&gold_path).unwrap();
    assert_eq!(gold.len(), questions.len());
    for (q, g) in questions.iter().zip(&gold) {
        assert_eq!(
            (g.sql.as_str(), g.db_id.as_str()),
            (q.gold_sql.trim_start(), q.db_id.as_str())
        );
    }

    // Official predict_dev.json: keys in file order "0", "1", ..., which sorts "10" before "2"
    // as text; the loader must give numeric order.
    let object: serde_json::Map<String, serde_json::Value> = questions
        .iter()
        .map(|q| {
            (
                q.index.to_string(),
                format!("{}{BIRD_SEPARATOR}{}", q.gold_sql, q.db_id).into(),
            )
        })
        .collect();
    let pred_path = dir.path().join("predict_dev.json");
    std::fs::write(&pred_path, serde_json::to_vec(&object).unwrap()).unwrap();
    let preds = load_bird_predictions(&pred_path).unwrap();
    assert_eq!(preds.len(), questions.len());
    for (q, p) in questions.iter().zip(&preds) {
        assert_eq!(p.index, q.index);
        assert_eq!(p.sql, q.gold_sql);
        assert_eq!(p.db_id.as_deref(), Some(q.db_id.as_str()));
    }
}

#[test]
fn concert_singer_renders_as_expected() {
    let schemas = load_tables(spider("tables.json")).unwrap();
    assert_eq!(schemas.len(), 134);
    let schema = schemas
        .iter()
        .find(|s| s.db_id == "concert_singer")
        .unwrap();
    let expected = "\
CREATE TABLE stadium (
  Stadium_ID NUMBER,
  Location TEXT,
  Name TEXT,
  Capacity NUMBER,
  Highest NUMBER,
  Lowest NUMBER,
  Average NUMBER,
  PRIMARY KEY (Stadium_ID)
);

CREATE TABLE singer (
  Singer_ID NUMBER,
  Name TEXT,
  Country TEXT,
  Song_Name TEXT,
  Song_release_year TEXT,
  Age NUMBER,
  Is_male OTHERS,
  PRIMARY KEY (Singer_ID)
);

CREATE TABLE concert (
  concert_ID NUMBER,
  concert_Name TEXT,
  Theme TEXT,
  Stadium_ID TEXT,
  Year TEXT,
  PRIMARY KEY (concert_ID),
  FOREIGN KEY (Stadium_ID) REFERENCES stadium(Stadium_ID)
);

CREATE TABLE singer_in_concert (
  concert_ID NUMBER,
  Singer_ID TEXT,
  PRIMARY KEY (concert_ID),
  FOREIGN KEY (Singer_ID) REFERENCES singer(Singer_ID),
  FOREIGN KEY (concert_ID) REFERENCES concert(concert_ID)
);
";
    assert_eq!(render_create_tables(schema), expected);
}

#[test]
fn bird_schema_quotes_names_and_renders_composite_keys() {
    let schemas = load_tables(bird("dev_tables.json")).unwrap();
    assert_eq!(schemas.len(), 11);
    let schools = schemas
        .iter()
        .find(|s| s.db_id == "california_schools")
        .unwrap();
    let sql = render_create_tables(schools);
    assert!(
        sql.contains("  \"Free Meal Count (K-12)\" REAL,\n"),
        "{sql}"
    );
    let toxicology = schemas.iter().find(|s| s.db_id == "toxicology").unwrap();
    let sql = render_create_tables(toxicology);
    assert!(sql.contains("PRIMARY KEY (atom_id, atom_id2)"), "{sql}");
}

/// Every rendered schema must be valid SQLite, and must come back with exactly the names,
/// types and keys it was rendered from: that is what proves the quoting.
#[test]
fn every_rendered_schema_is_accepted_by_sqlite() {
    let mut checked = 0;
    for file in [spider("tables.json"), bird("dev_tables.json")] {
        for schema in load_tables(&file).unwrap() {
            let sql = render_create_tables(&schema);
            let db = rusqlite::Connection::open_in_memory().unwrap();
            db.execute_batch(&sql)
                .unwrap_or_else(|e| panic!("{}: {e}\n{sql}", schema.db_id));
            for table in &schema.tables {
                if table.name.starts_with("sqlite_") {
                    // SQLite's own table (world_1, soccer_1): left out of the rendering.
                    assert!(!sql.contains(&format!("CREATE TABLE {} (", table.name)));
                    continue;
                }
                let mut stmt = db
                    .prepare("SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid")
                    .unwrap();
                let got: Vec<(String, String, bool)> = stmt
                    .query_map([&table.name], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? > 0))
                    })
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                let want: Vec<(String, String, bool)> = table
                    .columns
                    .iter()
                    .map(|c| {
                        (
                            c.name.clone(),
                            c.sql_type.to_ascii_uppercase(),
                            c.primary_key,
                        )
                    })
                    .collect();
                assert_eq!(got, want, "{} / {}", schema.db_id, table.name);
                let fk_count: i64 = db
                    .query_row(
                        "SELECT count(*) FROM pragma_foreign_key_list(?1)",
                        [&table.name],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(fk_count as usize, table.foreign_keys.len());
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 134 + 11);
}

/// With BIRD's databases absent, an empty database built from dev_tables.json still lets
/// SQLite bind every gold query (EXPLAIN resolves every table and column name).
#[test]
fn every_bird_dev_gold_binds_against_the_rendered_schema() {
    let schemas = load_tables(bird("dev_tables.json")).unwrap();
    let connections: BTreeMap<String, rusqlite::Connection> = schemas
        .iter()
        .map(|schema| {
            let db = rusqlite::Connection::open_in_memory().unwrap();
            db.execute_batch(&render_create_tables(schema)).unwrap();
            (schema.db_id.clone(), db)
        })
        .collect();
    let questions = load_bird_questions(bird("dev.json"), "dev").unwrap();
    let mut failures = Vec::new();
    for q in &questions {
        let db = &connections[&q.db_id];
        if let Err(e) = db.prepare(&format!("EXPLAIN {}", q.gold_sql)) {
            failures.push(format!("{}: {e}", q.id));
        }
    }
    assert!(
        failures.is_empty(),
        "{} golds fail: {:#?}",
        failures.len(),
        failures
    );
}

/// The same for Spider, dev and train: every gold binds against its rendered schema except
/// the two train golds that the data README names as failing on SQLite itself (ORDER BY
/// before INTERSECT), so the schemas are complete enough for prompts.
#[test]
fn every_spider_gold_binds_against_the_rendered_schema() {
    let schemas = load_tables(spider("tables.json")).unwrap();
    let connections: BTreeMap<String, rusqlite::Connection> = schemas
        .iter()
        .map(|schema| {
            let db = rusqlite::Connection::open_in_memory().unwrap();
            db.execute_batch(&render_create_tables(schema)).unwrap();
            (schema.db_id.clone(), db)
        })
        .collect();
    let mut failures = Vec::new();
    for (file, split) in [("dev.json", "dev"), ("train.json", "train")] {
        for q in load_spider_questions(spider(file), split).unwrap() {
            let db = &connections[&q.db_id];
            let bound = db.prepare(&format!("EXPLAIN {}", q.gold_sql)).map(|_| ());
            if let Err(e) = bound {
                failures.push(format!("{}: {e}", q.id));
            }
        }
    }
    assert_eq!(
        failures,
        [
            "train-3613: ORDER BY clause should come after INTERSECT not before",
            "train-3614: ORDER BY clause should come after INTERSECT not before",
        ]
    );
}
