//! The initial Text-to-SQL generation prompt (`merit-prompts-v3`, `prompts/initial.txt`).
//!
//! One user message and no system prompt, as the repair paper specifies for every template:
//! the question, the schema as `CREATE TABLE` statements, BIRD's evidence when there is one,
//! and an instruction to answer with one query in a ```` ```sql ```` block. The paper names
//! the prompt version `spider-initial-v3` / `bird-initial-v3` but does not print the text, so
//! the wording here is merit's own (see `prompts/initial.txt`).
//!
//! The schema can come from the dataset's `tables.json` (`merit_data::render_create_tables`)
//! or, when only the database file is at hand, from the live database
//! ([`schema_from_database`]).

use merit_core::model::{ChatMessage, ChatRequest, Decoding};
use merit_core::template::fill;
use merit_core::Benchmark;
use merit_sql::{Database, Dialect, ExecError, ExecLimits, Value};

/// Name of the prompt family every template belongs to.
pub const INITIAL_PROMPT_FAMILY: &str = "merit-prompts-v3";

/// The template text; `{{question}}`, `{{dialect}}`, `{{schema}}` and `{{evidence_block}}`
/// are filled in.
pub const INITIAL_TEMPLATE: &str = include_str!("../../prompts/initial.txt");

/// The block that carries BIRD's evidence (shared with the other templates).
const EVIDENCE_TEMPLATE: &str = include_str!("../../prompts/evidence_block.txt");

/// Everything the initial prompt is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitialTask<'a> {
    /// Decides the prompt version id (`spider-initial-v3` / `bird-initial-v3`).
    pub benchmark: Benchmark,
    /// The SQL dialect named in the prompt.
    pub dialect: Dialect,
    /// The schema as `CREATE TABLE` statements.
    pub schema: &'a str,
    /// The natural-language question.
    pub question: &'a str,
    /// BIRD's evidence; `None` or blank leaves the evidence block out.
    pub evidence: Option<&'a str>,
}

/// The prompt-version identifier of the initial prompt, part of every reply-cache key.
pub fn initial_prompt_version(benchmark: Benchmark) -> String {
    format!("{benchmark}-initial-v3")
}

/// The initial prompt's text.
pub fn initial_prompt_text(task: &InitialTask<'_>) -> String {
    let evidence_block = match task.evidence.map(str::trim) {
        Some(evidence) if !evidence.is_empty() => {
            fill(EVIDENCE_TEMPLATE, &[("evidence", evidence)])
        }
        _ => String::new(),
    };
    fill(
        INITIAL_TEMPLATE,
        &[
            ("question", task.question.trim()),
            ("dialect", dialect_name(task.dialect)),
            ("schema", task.schema.trim_end()),
            ("evidence_block", &evidence_block),
        ],
    )
    .trim_end()
    .to_string()
}

/// The initial prompt as the one user message of a conversation.
pub fn initial_messages(task: &InitialTask<'_>) -> Vec<ChatMessage> {
    vec![ChatMessage::user(initial_prompt_text(task))]
}

/// A complete chat request for the initial generation, with `decoding` (greedy by default).
pub fn initial_request(task: &InitialTask<'_>, decoding: Decoding) -> ChatRequest {
    ChatRequest {
        messages: initial_messages(task),
        decoding,
        prompt_version: initial_prompt_version(task.benchmark),
        tools: Vec::new(),
    }
}

/// The dialect as the prompts name it.
pub fn dialect_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "SQLite",
        Dialect::Postgres => "PostgreSQL",
    }
}

/// The schema of a live database as `CREATE TABLE` statements, in creation order.
///
/// For SQLite these are the statements stored in `sqlite_master` (exactly as the database was
/// created, comments and original types included), each ending in `;`, separated by blank
/// lines. SQLite's own `sqlite_*` tables are left out. Views and indexes are left out too:
/// Spider and BIRD questions are about tables, and the shorter prompt leaves more room.
///
/// For PostgreSQL, whose catalog keeps no statement text, the tables of the current schema
/// are rendered from `information_schema.columns` (name and declared type per column, in
/// column order; names that are not plain lower case quoted, as the SQL must write them).
pub fn schema_from_database(database: &dyn Database) -> Result<String, ExecError> {
    if database.dialect() == Dialect::Postgres {
        return postgres_schema(database);
    }
    let result = database.query(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL \
         AND lower(name) NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
        &ExecLimits::AGENT,
    )?;
    let statements: Vec<String> = result
        .rows
        .iter()
        .filter_map(|row| row.first().and_then(Value::as_text))
        .map(|sql| sql.trim().trim_end_matches(';').trim_end())
        .filter(|sql| !sql.is_empty())
        .map(|sql| format!("{sql};"))
        .collect();
    Ok(statements.join("\n\n"))
}

/// A PostgreSQL identifier as SQL must write it: bare when plain lower case, else quoted.
fn postgres_identifier(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn postgres_schema(database: &dyn Database) -> Result<String, ExecError> {
    let result = database.query(
        "SELECT table_name, column_name, data_type FROM information_schema.columns \
         WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        &ExecLimits::AGENT,
    )?;
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for row in &result.rows {
        let text = |i: usize| {
            row.get(i)
                .and_then(Value::as_text)
                .unwrap_or("")
                .to_string()
        };
        let (table, column, kind) = (text(0), text(1), text(2));
        let line = format!("  {} {}", postgres_identifier(&column), kind.to_uppercase());
        match tables.last_mut() {
            Some((name, columns)) if *name == table => columns.push(line),
            _ => tables.push((table, vec![line])),
        }
    }
    Ok(tables
        .iter()
        .map(|(table, columns)| {
            format!(
                "CREATE TABLE {} (\n{}\n);",
                postgres_identifier(table),
                columns.join(",\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task<'a>(evidence: Option<&'a str>) -> InitialTask<'a> {
        InitialTask {
            benchmark: Benchmark::Spider,
            dialect: Dialect::Sqlite,
            schema: "CREATE TABLE singer (\n  Singer_ID INT,\n  Name TEXT\n);\n",
            question: "How many singers do we have?",
            evidence,
        }
    }

    #[test]
    fn the_spider_prompt_has_question_schema_and_instruction_and_no_evidence() {
        let text = initial_prompt_text(&task(None));
        assert_eq!(
            text,
            "Write one SQL query that answers the question below, using only the tables and \
             columns of this database.\n\nQUESTION\nHow many singers do we have?\n\n\
             DATABASE SCHEMA (SQLite)\nCREATE TABLE singer (\n  Singer_ID INT,\n  Name TEXT\n);\
             \n\nAnswer with exactly one SQL query in a ```sql code block and nothing else."
        );
        assert!(!text.contains("{{"));
    }

    #[test]
    fn bird_evidence_gets_its_block_and_blank_evidence_none() {
        let text = initial_prompt_text(&task(Some("young means age < 30")));
        assert!(text.contains(
            ");\n\nEVIDENCE (external knowledge given with the question)\n\
             young means age < 30\n\nAnswer with"
        ));
        assert_eq!(
            initial_prompt_text(&task(Some("  "))),
            initial_prompt_text(&task(None))
        );
    }

    #[test]
    fn placeholders_inside_values_are_not_expanded() {
        let mut t = task(None);
        t.question = "what is {{schema}}?";
        let text = initial_prompt_text(&t);
        assert!(text.contains("QUESTION\nwhat is {{schema}}?\n"));
        assert_eq!(text.matches("CREATE TABLE").count(), 1);
    }

    #[test]
    fn the_request_is_one_user_message_with_the_versioned_id() {
        let request = initial_request(&task(None), Decoding::default());
        assert_eq!(request.messages.len(), 1);
        assert_eq!(request.messages[0].role, merit_core::model::Role::User);
        assert_eq!(request.prompt_version, "spider-initial-v3");
        assert_eq!(request.decoding.temperature, 0.0);
        assert_eq!(initial_prompt_version(Benchmark::Bird), "bird-initial-v3");
    }

    #[test]
    fn the_template_uses_only_known_placeholders() {
        let known = ["question", "dialect", "schema", "evidence_block"];
        let mut rest = INITIAL_TEMPLATE;
        while let Some(open) = rest.find("{{") {
            let close = rest[open..].find("}}").expect("closed placeholder") + open;
            let name = &rest[open + 2..close];
            assert!(known.contains(&name), "unknown placeholder {name}");
            rest = &rest[close + 2..];
        }
    }

    #[test]
    fn fill_leaves_unknown_and_unclosed_placeholders_alone() {
        assert_eq!(fill("a {{x}} {{y}} {{", &[("x", "1")]), "a 1 {{y}} {{");
    }

    #[test]
    fn the_live_schema_comes_from_sqlite_master_in_creation_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .execute_batch(
                "CREATE TABLE singer (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);\
                 CREATE TABLE \"concert\" (\n  id int, -- the key\n  singer_id int \
                 REFERENCES singer(id)\n);\
                 CREATE INDEX concert_singer ON concert(singer_id);\
                 CREATE VIEW v AS SELECT 1;\
                 INSERT INTO singer(name) VALUES ('a');",
            )
            .unwrap();
        drop(connection);
        let database = merit_sql::SqliteDatabase::open(&path).unwrap();
        let schema = schema_from_database(&database).unwrap();
        assert_eq!(
            schema,
            "CREATE TABLE singer (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);\n\n\
             CREATE TABLE \"concert\" (\n  id int, -- the key\n  singer_id int REFERENCES \
             singer(id)\n);"
        );
    }
}
