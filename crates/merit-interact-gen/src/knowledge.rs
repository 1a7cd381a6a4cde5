//! Knowledge-base entries for generated tasks (BIRD-Interact's `{db}_kb.jsonl`).
//!
//! BIRD-Interact's databases come with a knowledge base of named domain concepts, and their
//! requests use those names: the agent can look a name up (`get_knowledge_definition`), and
//! for a knowledge ambiguity the task deletes the entry it needs, so that only asking the user
//! settles it (protocol §1 and §4). Spider has no knowledge base, so merit derives one from the
//! generated tasks themselves, without another model call:
//!
//! * **Which tasks.** A verified Query record whose ambiguity map blurs a row condition that
//!   compares one column with a literal (the term "pricier books" for `price > 30`): the first
//!   such critical ambiguity in map order. Conditions of other shapes, Management records
//!   and records without such an ambiguity get no entry.
//! * **The entry.** Its name is the blurred term in title case ("Pricier Books"), its
//!   definition the condition with the column's table spelled out (`book.price > 30`), its
//!   description a fixed sentence naming the database (ours), its type `domain_knowledge`,
//!   no children. The ambiguity becomes a `knowledge_linking_ambiguity`: the request's term
//!   links to the entry.
//! * **Visible or deleted.** Decided by the target id (a stable hash, so a set mixes both and
//!   a rerun decides the same): a visible entry lets the agent settle the term by reading the
//!   knowledge base; a deleted one is listed in the task's `knowledge_ambiguity` with
//!   `deleted_knowledge` set, hidden from all three knowledge tools for that task, and counted
//!   in its budget.
//! * **Ids and names.** Ids count from 0 per database in task-file order. A name already in
//!   the database's knowledge base with the same definition is reused (the task points to the
//!   existing entry); with a different definition the task gets no entry, since
//!   BIRD-Interact's lookups keep only one entry per name.
//!
//! The stage runs over a whole task file ([`add_knowledge`], `merit interact gen
//! --knowledge` after generating), deterministically and idempotently: records that already
//! point to an entry are left alone, and new entries continue each database's ids. The task
//! file is the source of truth: every record carries the entry it added, and
//! [`write_knowledge_files`] rewrites each database's `{db}_kb.jsonl` from the records, so a
//! run killed between the two writes is repaired by running the stage again.

use super::record::{AmbiguityEntry, GeneratedTask};
use super::{io_error, GenError};
use merit_data::DatabaseSchema;
use serde::{Deserialize, Serialize};
use sqlparser::ast::{BinaryOperator, Expr, TableFactor, UnaryOperator, Value};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The type written on every derived entry.
pub const KNOWLEDGE_TYPE: &str = "domain_knowledge";

/// One line of `{db}_kb.jsonl`, as BIRD-Interact writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeLine {
    /// The entry's id within its database.
    pub id: i64,
    /// Its name, what requests say and lookups match.
    pub knowledge: String,
    /// One sentence on what it is.
    pub description: String,
    /// The condition it stands for.
    pub definition: String,
    /// [`KNOWLEDGE_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// `-1`: derived entries build on no other entry.
    pub children_knowledge: i64,
}

/// What [`attach_knowledge`] did to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attached {
    /// The record got a new entry (returned, to be appended to its database's file).
    New,
    /// The record points to an existing entry of the same name and definition.
    Reused,
    /// No condition of the right shape, or a name taken by another definition.
    Nothing,
}

/// Gives `task` a knowledge entry when one of its ambiguities allows (see the module docs).
/// `base` is its database's knowledge base so far (the new entry is pushed onto it);
/// `schema` resolves the condition's column to its table.
pub fn attach_knowledge(
    task: &mut GeneratedTask,
    schema: &DatabaseSchema,
    base: &mut Vec<KnowledgeLine>,
) -> Attached {
    if task.category != "Query" || task.knowledge_entry.is_some() {
        return Attached::Nothing;
    }
    let Some(sql) = task.sol_sql.first() else {
        return Attached::Nothing;
    };
    let tables = query_tables(sql);
    let found = task
        .user_query_ambiguity
        .critical_ambiguity
        .iter()
        .enumerate()
        .find_map(|(at, entry)| Some((at, definition(&entry.sql_snippet, &tables, schema)?)));
    let Some((at, definition)) = found else {
        return Attached::Nothing;
    };
    let term = task.user_query_ambiguity.critical_ambiguity[at]
        .term
        .clone();
    let name = title_case(&term);
    let (id, attached) = match base.iter().find(|line| line.knowledge == name) {
        Some(line) if line.definition == definition => (line.id, Attached::Reused),
        Some(_) => return Attached::Nothing,
        None => {
            let id = base.last().map_or(0, |line| line.id + 1);
            let line = KnowledgeLine {
                id,
                knowledge: name.clone(),
                description: format!(
                    "What a request about the {} data means by \"{}\".",
                    task.selected_database,
                    term.to_lowercase()
                ),
                definition,
                kind: KNOWLEDGE_TYPE.to_string(),
                children_knowledge: -1,
            };
            task.knowledge_entry = Some(line.clone());
            base.push(line);
            (id, Attached::New)
        }
    };
    let entry = &mut task.user_query_ambiguity.critical_ambiguity[at];
    entry.kind = "knowledge_linking_ambiguity".to_string();
    task.external_knowledge = vec![id];
    if deletes_entry(&task.generation.target_id) {
        task.knowledge_ambiguity = vec![AmbiguityEntry {
            term: name,
            sql_snippet: entry.sql_snippet.clone(),
            is_mask: false,
            kind: "knowledge_ambiguity".to_string(),
            deleted_knowledge: Some(id),
        }];
    }
    attached
}

/// Counts of [`add_knowledge`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KnowledgeReport {
    /// Records given a new entry.
    pub new_entries: usize,
    /// Records pointing to an existing entry of the same name and definition.
    pub reused_entries: usize,
    /// Records whose entry is deleted for them (a knowledge ambiguity).
    pub deleted_for_task: usize,
    /// Records with an entry from an earlier pass (left alone).
    pub earlier: usize,
    /// Records left without an entry.
    pub without: usize,
}

/// Runs [`attach_knowledge`] over a task file's records in order (see the module docs).
/// Records of a database missing from `schemas` get no entry.
pub fn add_knowledge(
    tasks: &mut [GeneratedTask],
    schemas: &BTreeMap<String, DatabaseSchema>,
) -> KnowledgeReport {
    let mut bases: BTreeMap<String, Vec<KnowledgeLine>> = BTreeMap::new();
    for task in tasks.iter() {
        if let Some(line) = &task.knowledge_entry {
            bases
                .entry(task.selected_database.clone())
                .or_default()
                .push(line.clone());
        }
    }
    let mut report = KnowledgeReport::default();
    for task in tasks.iter_mut() {
        if !task.external_knowledge.is_empty() {
            report.earlier += 1;
            continue;
        }
        let Some(schema) = schemas.get(&task.selected_database) else {
            report.without += 1;
            continue;
        };
        let base = bases.entry(task.selected_database.clone()).or_default();
        match attach_knowledge(task, schema, base) {
            Attached::New => report.new_entries += 1,
            Attached::Reused => report.reused_entries += 1,
            Attached::Nothing => report.without += 1,
        }
        report.deleted_for_task += usize::from(!task.knowledge_ambiguity.is_empty());
    }
    report
}

/// Writes `{root}/{db}/{db}_kb.jsonl` for every database of `tasks`, from their entries
/// ([`knowledge_base`]), each atomically.
pub fn write_knowledge_files(root: &Path, tasks: &[GeneratedTask]) -> Result<(), GenError> {
    let databases: BTreeSet<&str> = tasks
        .iter()
        .map(|task| task.selected_database.as_str())
        .collect();
    for db in databases {
        let path = root.join(db).join(format!("{db}_kb.jsonl"));
        let text = knowledge_file_text(&knowledge_base(tasks, db));
        merit_core::fs::write_atomically(&path, text.as_bytes()).map_err(io_error(&path))?;
    }
    Ok(())
}

/// Whether the task with this target id hides its entry (about half of the ids).
fn deletes_entry(target_id: &str) -> bool {
    target_id.bytes().fold(0u32, |sum, byte| {
        sum.wrapping_mul(31).wrapping_add(u32::from(byte))
    }) % 2
        == 1
}

/// The knowledge base of database `db` as the records of `tasks` define it (their entries in
/// file order).
pub fn knowledge_base<'a>(
    tasks: impl IntoIterator<Item = &'a GeneratedTask>,
    db: &str,
) -> Vec<KnowledgeLine> {
    tasks
        .into_iter()
        .filter(|task| task.selected_database == db)
        .filter_map(|task| task.knowledge_entry.clone())
        .collect()
}

/// The JSONL text of a knowledge base.
pub fn knowledge_file_text(base: &[KnowledgeLine]) -> String {
    base.iter()
        .map(|line| serde_json::to_string(line).expect("a knowledge line serializes") + "\n")
        .collect()
}

/// The definition of a condition `column OP literal` (either way round), with the column
/// qualified by its table: `book.price > 30`. `None` for anything else, or when the column
/// belongs to none of the query's tables.
fn definition(
    snippet: &str,
    tables: &[(String, String)],
    schema: &DatabaseSchema,
) -> Option<String> {
    let expr = Parser::new(&SQLiteDialect {})
        .try_with_sql(snippet)
        .ok()?
        .parse_expr()
        .ok()?;
    let Expr::BinaryOp { left, op, right } = expr else {
        return None;
    };
    let comparison = matches!(
        op,
        BinaryOperator::Gt
            | BinaryOperator::Lt
            | BinaryOperator::GtEq
            | BinaryOperator::LtEq
            | BinaryOperator::Eq
            | BinaryOperator::NotEq
    );
    if !comparison {
        return None;
    }
    let (column, literal) = match (column_of(&left), literal_of(&right)) {
        (Some(column), Some(literal)) => (column, literal),
        _ => (column_of(&right)?, literal_of(&left)?),
    };
    let qualified = qualify(&column, tables, schema)?;
    Some(if column_of(&left).is_some() {
        format!("{qualified} {op} {literal}")
    } else {
        format!("{literal} {op} {qualified}")
    })
}

/// `(qualifier, column)` of a plain or qualified column reference.
fn column_of(expr: &Expr) -> Option<(Option<String>, String)> {
    match expr {
        Expr::Identifier(ident) => Some((None, ident.value.clone())),
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
            Some((Some(parts[0].value.clone()), parts[1].value.clone()))
        }
        Expr::Nested(inner) => column_of(inner),
        _ => None,
    }
}

/// The SQL text of a number or string literal (a leading minus allowed).
fn literal_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::Number(..) | Value::SingleQuotedString(_) => Some(value.value.to_string()),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => literal_of(expr).map(|text| format!("-{text}")),
        Expr::Nested(inner) => literal_of(inner),
        _ => None,
    }
}

/// `table.column` for a reference of the query, its qualifier read as an alias or a table
/// name, or, unqualified, the first of the query's tables that has the column.
fn qualify(
    (qualifier, column): &(Option<String>, String),
    tables: &[(String, String)],
    schema: &DatabaseSchema,
) -> Option<String> {
    let has_column = |table: &str| {
        schema
            .tables
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(table))
            .and_then(|t| {
                t.columns
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(column))
                    .map(|c| (t.name.clone(), c.name.clone()))
            })
    };
    let (table, column) = match qualifier {
        Some(qualifier) => {
            let table = tables
                .iter()
                .find(|(_, alias)| alias.eq_ignore_ascii_case(qualifier))
                .map_or(qualifier.as_str(), |(table, _)| table.as_str());
            has_column(table)?
        }
        None => tables.iter().find_map(|(table, _)| has_column(table))?,
    };
    Some(format!("{table}.{column}"))
}

/// The tables a query reads, with their alias (the table name when it has none), in order.
fn query_tables(sql: &str) -> Vec<(String, String)> {
    struct Tables(Vec<(String, String)>);
    impl sqlparser::ast::Visitor for Tables {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table { name, alias, .. } = factor {
                if let Some(ident) = name.0.last().and_then(|part| part.as_ident()) {
                    let alias = alias
                        .as_ref()
                        .map_or(ident.value.clone(), |alias| alias.name.value.clone());
                    self.0.push((ident.value.clone(), alias));
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut tables = Tables(Vec::new());
    if let Some(query) = super::sqlast::parse_query(sql) {
        let _ = sqlparser::ast::Visit::visit(&query, &mut tables);
    }
    tables.0
}

/// Each word's first letter upper-cased.
fn title_case(term: &str) -> String {
    term.split_whitespace()
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or(String::new(), |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_data::{ColumnSchema, TableSchema};

    fn schema() -> DatabaseSchema {
        let table = |name: &str, columns: &[&str]| TableSchema {
            name: name.to_string(),
            columns: columns
                .iter()
                .map(|column| ColumnSchema {
                    name: column.to_string(),
                    sql_type: "number".to_string(),
                    primary_key: false,
                })
                .collect(),
            foreign_keys: Vec::new(),
        };
        DatabaseSchema {
            db_id: "concert_singer".to_string(),
            tables: vec![
                table("singer", &["Singer_ID", "Name", "Age", "Country"]),
                table("concert", &["concert_ID", "Year", "Stadium_ID"]),
            ],
        }
    }

    fn task(target_id: &str, sql: &str, ambiguities: &[(&str, &str, &str)]) -> GeneratedTask {
        let critical: Vec<serde_json::Value> = ambiguities
            .iter()
            .map(|(term, snippet, kind)| {
                serde_json::json!({"term": term, "sql_snippet": snippet, "is_mask": true, "type": kind})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "instance_id": format!("concert_singer_g{target_id}"),
            "selected_database": "concert_singer",
            "amb_user_query": "a vague request",
            "query": "a clear request",
            "preprocess_sql": [], "clean_up_sqls": [], "sol_sql": [sql],
            "external_knowledge": [], "test_cases": [], "category": "Query",
            "conditions": {"decimal": -1, "distinct": false, "order": false},
            "user_query_ambiguity": {"critical_ambiguity": critical, "non_critical_ambiguity": []},
            "knowledge_ambiguity": [],
            "generation": {"format": "merit-interact-gen-v1", "target_id": target_id,
                "seed_id": "dev-1", "seed_sql": sql, "perturbations": [], "model": "m",
                "prompt_family": "f"}
        }))
        .expect("a record")
    }

    fn schemas() -> BTreeMap<String, DatabaseSchema> {
        BTreeMap::from([("concert_singer".to_string(), schema())])
    }

    #[test]
    fn a_blurred_comparison_becomes_an_entry_with_its_table_spelled_out() {
        let mut tasks = vec![task(
            "a1",
            "SELECT T1.Name FROM singer AS T1 JOIN concert AS T2 ON T1.Singer_ID = T2.Stadium_ID WHERE T1.age > 30",
            &[
                ("some names", "T1.Name", "intent_ambiguity"),
                ("older singers", "T1.age > 30", "semantic_ambiguity"),
            ],
        )];
        let report = add_knowledge(&mut tasks, &schemas());
        assert_eq!(report.new_entries, 1);
        let entry = tasks[0].knowledge_entry.clone().expect("an entry");
        assert_eq!(entry.id, 0);
        assert_eq!(entry.knowledge, "Older Singers");
        assert_eq!(entry.definition, "singer.Age > 30");
        assert_eq!(entry.kind, KNOWLEDGE_TYPE);
        assert!(entry.description.contains("\"older singers\""));
        assert_eq!(tasks[0].external_knowledge, vec![0]);
        let critical = &tasks[0].user_query_ambiguity.critical_ambiguity;
        assert_eq!(critical[0].kind, "intent_ambiguity");
        assert_eq!(critical[1].kind, "knowledge_linking_ambiguity");
        // Unqualified columns find their table among the query's, literals either side.
        let mut tasks = vec![task(
            "a1",
            "SELECT count(*) FROM concert WHERE 2014 <= year",
            &[("recent shows", "2014 <= year", "temporal_ambiguity")],
        )];
        add_knowledge(&mut tasks, &schemas());
        assert_eq!(
            tasks[0].knowledge_entry.as_ref().unwrap().definition,
            "2014 <= concert.Year"
        );
    }

    #[test]
    fn other_shapes_get_nothing() {
        let mut tasks = vec![
            task(
                "b1",
                "SELECT count(*) FROM singer ORDER BY Age DESC",
                &[
                    ("how many", "count(*)", "aggregation_ambiguity"),
                    ("oldest", "ORDER BY Age DESC", "sort_ambiguity"),
                ],
            ),
            task(
                "b2",
                "SELECT Name FROM singer WHERE Age > Singer_ID",
                &[("odd ones", "Age > Singer_ID", "semantic_ambiguity")],
            ),
            task(
                "b3",
                "SELECT Name FROM singer WHERE Height > 2",
                &[("tall ones", "Height > 2", "semantic_ambiguity")],
            ),
        ];
        let mut write = task(
            "b4",
            "DELETE FROM singer WHERE Age > 90",
            &[("very old", "Age > 90", "semantic_ambiguity")],
        );
        write.category = "Management".to_string();
        tasks.push(write);
        let report = add_knowledge(&mut tasks, &schemas());
        assert_eq!(report.without, 4, "{report:?}");
        assert!(tasks.iter().all(|t| t.external_knowledge.is_empty()
            && t.knowledge_entry.is_none()
            && t.knowledge_ambiguity.is_empty()));
    }

    #[test]
    fn names_are_shared_or_refused_and_a_second_pass_changes_nothing() {
        let older = |id: &str, age: u32| {
            task(
                id,
                &format!("SELECT Name FROM singer WHERE Age > {age}"),
                &[(
                    "older singers",
                    &format!("Age > {age}"),
                    "semantic_ambiguity",
                )],
            )
        };
        let mut tasks = vec![
            older("c1", 30),
            older("c2", 30),
            older("c3", 40),
            task(
                "c4",
                "SELECT Name FROM singer WHERE Country = 'France'",
                &[("from there", "Country = 'France'", "entity_ambiguity")],
            ),
        ];
        let report = add_knowledge(&mut tasks, &schemas());
        assert_eq!(
            (report.new_entries, report.reused_entries, report.without),
            (2, 1, 1),
            "{report:?}"
        );
        assert_eq!(tasks[1].external_knowledge, vec![0]);
        assert!(tasks[1].knowledge_entry.is_none());
        assert!(tasks[2].external_knowledge.is_empty());
        assert_eq!(tasks[3].external_knowledge, vec![1]);
        assert_eq!(
            tasks[3].knowledge_entry.as_ref().unwrap().definition,
            "singer.Country = 'France'"
        );
        let base = knowledge_base(&tasks, "concert_singer");
        assert_eq!(base.iter().map(|l| l.id).collect::<Vec<_>>(), vec![0, 1]);
        let text = knowledge_file_text(&base);
        assert_eq!(text.lines().count(), 2);
        let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(line["children_knowledge"], -1);
        assert_eq!(line["type"], KNOWLEDGE_TYPE);

        let before = tasks.clone();
        let again = add_knowledge(&mut tasks, &schemas());
        assert_eq!(tasks, before);
        assert_eq!((again.earlier, again.new_entries), (3, 0));
    }

    #[test]
    fn about_half_of_the_tasks_hide_their_entry_as_a_knowledge_ambiguity() {
        let mut tasks: Vec<GeneratedTask> = (0..40)
            .map(|i| {
                task(
                    &format!("{i:016x}"),
                    &format!("SELECT Name FROM singer WHERE Age > {i}"),
                    &[(
                        &format!("band {i}"),
                        &format!("Age > {i}"),
                        "semantic_ambiguity",
                    )],
                )
            })
            .collect();
        let report = add_knowledge(&mut tasks, &schemas());
        assert_eq!(report.new_entries, 40);
        assert!((10..=30).contains(&report.deleted_for_task), "{report:?}");
        for task in &tasks {
            let id = task.external_knowledge[0];
            match task.knowledge_ambiguity.as_slice() {
                [] => assert!(!deletes_entry(&task.generation.target_id)),
                [hidden] => {
                    assert!(deletes_entry(&task.generation.target_id));
                    assert_eq!(hidden.deleted_knowledge, Some(id));
                    assert_eq!(hidden.kind, "knowledge_ambiguity");
                    assert_eq!(
                        hidden.term,
                        task.knowledge_entry.as_ref().unwrap().knowledge
                    );
                    assert!(!hidden.is_mask);
                }
                more => panic!("{more:?}"),
            }
        }
    }
}
