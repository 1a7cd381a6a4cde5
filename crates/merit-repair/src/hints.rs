//! Repair hints read from the database: what a careful person would look up before editing a
//! failing query.
//!
//! The paper's repair prompt gives the model the status and the DBMS text only. A message such
//! as `no such column: FlightNo` (the most common failure of small models on Spider) says what
//! is wrong but not where the right identifier is, and a small model then either resubmits
//! its query or invents another column (issue 16). The hints below are built from two things
//! the agent is entitled to in production as much as in a benchmark, the live database and
//! the feedback of its own query, never from the gold:
//!
//! - an unknown column: the tables that hold a column of that name, the columns of the table
//!   the query named, or else the nearest existing column names;
//! - an unknown table: the nearest table names (and every table when there are few);
//! - an ambiguous column: which of the query's tables hold it;
//! - foreign-key join paths between the tables involved;
//! - a query that ran but returned no rows, and string literals compared with a column that
//!   never holds them, with the column's values that come closest.
//!
//! Hints are an aid applied identically to every method of a run (recorded in its manifest),
//! so they never separate one method from another.

use merit_core::Status;
use merit_sql::{Database, ExecLimits, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

/// Which hints to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct HintKinds {
    /// Identifier and join-path hints for schema errors.
    pub schema: bool,
    /// Empty results and literals that do not occur in their column.
    pub values: bool,
}

impl HintKinds {
    /// `true` when no hint is asked for.
    pub fn is_empty(self) -> bool {
        !self.schema && !self.values
    }
}

/// One table of a live database, as the hints need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTable {
    /// Table name as stored.
    pub name: String,
    /// Column names in declaration order.
    pub columns: Vec<String>,
    /// Foreign keys: (column, referenced table, referenced column).
    pub foreign_keys: Vec<(String, String, String)>,
}

/// The tables, columns and foreign keys of a live database, read with SQLite's introspection
/// pragmas (allowed on merit's read-only connections).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchemaCatalog {
    /// Tables in creation order.
    pub tables: Vec<CatalogTable>,
}

/// Limits for the hint queries: they are ours, short and capped.
const HINT_LIMITS: ExecLimits = ExecLimits {
    timeout: Duration::from_secs(2),
    max_rows: Some(1_000),
};

/// Most identifiers or values a hint names.
const MAX_SUGGESTIONS: usize = 3;

/// A name is offered as "close" from this similarity on (0..=1).
const MIN_SIMILARITY: f64 = 0.5;

/// Schemas with at most this many tables are listed whole in an unknown-table hint.
const LIST_ALL_TABLES: usize = 12;

fn text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        other => Some(other.display()),
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl SchemaCatalog {
    /// Reads the catalog of a SQLite database.
    pub fn read(database: &dyn Database) -> Result<SchemaCatalog, merit_sql::ExecError> {
        let names = database.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND lower(name) NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
            &HINT_LIMITS,
        )?;
        let mut tables = Vec::new();
        for row in &names.rows {
            let Some(name) = row.first().and_then(text) else {
                continue;
            };
            let info = database.query(
                &format!("PRAGMA table_info({})", quote_ident(&name)),
                &HINT_LIMITS,
            )?;
            let column_index = info.columns.iter().position(|c| c == "name").unwrap_or(1);
            let columns = info
                .rows
                .iter()
                .filter_map(|row| row.get(column_index).and_then(text))
                .collect();
            let keys = database.query(
                &format!("PRAGMA foreign_key_list({})", quote_ident(&name)),
                &HINT_LIMITS,
            )?;
            let at = |wanted: &str| keys.columns.iter().position(|c| c == wanted);
            let (from, table, to) = (at("from"), at("table"), at("to"));
            let foreign_keys = keys
                .rows
                .iter()
                .filter_map(|row| {
                    let from = row.get(from?).and_then(text)?;
                    let table = row.get(table?).and_then(text)?;
                    // A key without `to` references the parent's primary key; name it as the
                    // same column, which Spider's schemas do in practice.
                    let to = row.get(to?).and_then(text).unwrap_or_else(|| from.clone());
                    Some((from, table, to))
                })
                .collect();
            tables.push(CatalogTable {
                name,
                columns,
                foreign_keys,
            });
        }
        Ok(SchemaCatalog { tables })
    }

    fn table(&self, name: &str) -> Option<&CatalogTable> {
        self.tables
            .iter()
            .find(|table| table.name.eq_ignore_ascii_case(name))
    }

    /// Tables holding a column named `column` (case-insensitive), in catalog order.
    fn tables_with_column(&self, column: &str) -> Vec<&CatalogTable> {
        self.tables
            .iter()
            .filter(|table| table.columns.iter().any(|c| c.eq_ignore_ascii_case(column)))
            .collect()
    }

    /// Foreign-key edges as an undirected graph over lower-cased table names.
    fn join_graph(&self) -> HashMap<String, Vec<(String, String)>> {
        let mut graph: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for table in &self.tables {
            for (from, parent, to) in &table.foreign_keys {
                let Some(parent_table) = self.table(parent) else {
                    continue;
                };
                let condition = format!("{}.{from} = {}.{to}", table.name, parent_table.name);
                graph
                    .entry(table.name.to_lowercase())
                    .or_default()
                    .push((parent_table.name.to_lowercase(), condition.clone()));
                graph
                    .entry(parent_table.name.to_lowercase())
                    .or_default()
                    .push((table.name.to_lowercase(), condition));
            }
        }
        for edges in graph.values_mut() {
            edges.sort();
            edges.dedup();
        }
        graph
    }

    /// The join conditions of a shortest foreign-key path from `from` to `to` (at most three
    /// joins), or `None` when there is none.
    fn join_path(&self, from: &str, to: &str) -> Option<Vec<String>> {
        let graph = self.join_graph();
        let (from, to) = (from.to_lowercase(), to.to_lowercase());
        if from == to {
            return Some(Vec::new());
        }
        let mut previous: HashMap<String, (String, String)> = HashMap::new();
        let mut queue = VecDeque::from([(from.clone(), 0usize)]);
        let mut seen = BTreeSet::from([from.clone()]);
        while let Some((node, depth)) = queue.pop_front() {
            if depth == 3 {
                continue;
            }
            for (next, condition) in graph.get(&node).into_iter().flatten() {
                if !seen.insert(next.clone()) {
                    continue;
                }
                previous.insert(next.clone(), (node.clone(), condition.clone()));
                if *next == to {
                    let mut path = Vec::new();
                    let mut at = to.clone();
                    while let Some((back, condition)) = previous.get(&at) {
                        path.push(condition.clone());
                        at = back.clone();
                    }
                    path.reverse();
                    return Some(path);
                }
                queue.push_back((next.clone(), depth + 1));
            }
        }
        None
    }
}

/// Similarity of two identifiers in 0..=1: the better of normalised edit distance (for typos
/// and case) and the overlap of their word parts (`FlightNo` ~ `flight_number`).
pub fn name_similarity(a: &str, b: &str) -> f64 {
    let (a_lower, b_lower) = (a.to_lowercase(), b.to_lowercase());
    let longest = a_lower.chars().count().max(b_lower.chars().count()).max(1);
    let edit = 1.0 - levenshtein(&a_lower, &b_lower) as f64 / longest as f64;
    let (a_parts, b_parts) = (word_parts(a), word_parts(b));
    let shared = a_parts.intersection(&b_parts).count();
    let union = a_parts.union(&b_parts).count().max(1);
    edit.max(shared as f64 / union as f64)
}

/// Levenshtein distance over chars. Written here because the hints need only this one
/// function and the identifiers are short.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Lower-cased word parts of an identifier: split at `_`, spaces and lower→upper case changes.
fn word_parts(name: &str) -> BTreeSet<String> {
    let mut parts = BTreeSet::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                parts.insert(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            parts.insert(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        parts.insert(current);
    }
    parts
}

/// A token of the small SQL lexer the hints use: enough to find table references, aliases and
/// `column <op> 'literal'` comparisons in queries that may not even parse.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Literal(String),
    Symbol(String),
}

fn tokens(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' {
            let mut literal = String::new();
            i += 1;
            while i < chars.len() {
                if chars[i] == '\'' {
                    if chars.get(i + 1) == Some(&'\'') {
                        literal.push('\'');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                literal.push(chars[i]);
                i += 1;
            }
            out.push(Token::Literal(literal));
        } else if c == '"' || c == '`' || c == '[' {
            let close = if c == '[' { ']' } else { c };
            let mut name = String::new();
            i += 1;
            while i < chars.len() && chars[i] != close {
                name.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Token::Quoted(name));
        } else if c.is_alphanumeric() || c == '_' {
            let mut word = String::new();
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                word.push(chars[i]);
                i += 1;
            }
            out.push(Token::Word(word));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if matches!(two.as_str(), "!=" | "<>" | "<=" | ">=" | "==") {
                out.push(Token::Symbol(two));
                i += 2;
            } else {
                out.push(Token::Symbol(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

fn name_of(token: &Token) -> Option<&str> {
    match token {
        Token::Word(word) | Token::Quoted(word) => Some(word),
        _ => None,
    }
}

const NOT_ALIASES: &[&str] = &[
    "where",
    "join",
    "on",
    "group",
    "order",
    "limit",
    "inner",
    "left",
    "right",
    "outer",
    "cross",
    "natural",
    "union",
    "intersect",
    "except",
    "having",
    "using",
    "full",
    "as",
];

/// Tables the query names after FROM, JOIN or a comma in a FROM list, with their aliases
/// (alias → table, both lower-cased; a table is its own alias too).
fn table_references(sql: &str, catalog: &SchemaCatalog) -> BTreeMap<String, String> {
    let tokens = tokens(sql);
    let mut references = BTreeMap::new();
    let mut in_from = false;
    let mut i = 0;
    while i < tokens.len() {
        let keyword = match &tokens[i] {
            Token::Word(word) => word.to_lowercase(),
            _ => String::new(),
        };
        let starts_reference = keyword == "from"
            || keyword == "join"
            || (in_from && tokens[i] == Token::Symbol(",".into()));
        if matches!(
            keyword.as_str(),
            "where" | "group" | "order" | "having" | "limit" | "select" | "on"
        ) {
            in_from = false;
        }
        if keyword == "from" {
            in_from = true;
        }
        if starts_reference {
            if let Some(table) = tokens.get(i + 1).and_then(name_of) {
                if catalog.table(table).is_some() || keyword != "," {
                    let table_lower = table.to_lowercase();
                    references.insert(table_lower.clone(), table_lower.clone());
                    let mut next = i + 2;
                    if tokens
                        .get(next)
                        .and_then(name_of)
                        .is_some_and(|w| w.eq_ignore_ascii_case("as"))
                    {
                        next += 1;
                    }
                    if let Some(alias) = tokens.get(next).and_then(name_of) {
                        if !NOT_ALIASES.contains(&alias.to_lowercase().as_str()) {
                            references.insert(alias.to_lowercase(), table_lower);
                        }
                    }
                }
            }
        }
        i += 1;
    }
    references
}

/// `column <op> 'literal'` comparisons (`=`, `==`, `LIKE`), the column possibly qualified.
fn literal_comparisons(sql: &str) -> Vec<(Option<String>, String, String, bool)> {
    let tokens = tokens(sql);
    let mut found = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let Token::Literal(literal) = token else {
            continue;
        };
        let Some(operator) = i.checked_sub(1).and_then(|at| tokens.get(at)) else {
            continue;
        };
        let like = matches!(operator, Token::Word(w) if w.eq_ignore_ascii_case("like"));
        let equal = matches!(operator, Token::Symbol(s) if s == "=" || s == "==");
        if !like && !equal {
            continue;
        }
        let Some(column) = i
            .checked_sub(2)
            .and_then(|at| tokens.get(at))
            .and_then(name_of)
        else {
            continue;
        };
        let qualifier = (i >= 4 && tokens.get(i - 3) == Some(&Token::Symbol(".".into())))
            .then(|| tokens.get(i - 4).and_then(name_of).map(str::to_lowercase))
            .flatten();
        found.push((qualifier, column.to_string(), literal.clone(), like));
    }
    found
}

/// Splits `a.b.c` into (qualifier `b`, name `c`), dropping a `main.` schema prefix.
fn split_qualified(name: &str) -> (Option<String>, String) {
    let parts: Vec<&str> = name.trim().split('.').collect();
    match parts.as_slice() {
        [single] => (None, (*single).to_string()),
        [.., qualifier, column] => (Some(qualifier.to_lowercase()), (*column).to_string()),
        [] => (None, String::new()),
    }
}

fn closest<'a>(wanted: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut scored: Vec<(f64, &str)> = candidates
        .map(|candidate| (name_similarity(wanted, candidate), candidate))
        .filter(|(score, _)| *score >= MIN_SIMILARITY)
        .collect();
    // Highest similarity first; equal scores in name order, so the hint is deterministic.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut names: Vec<String> = Vec::new();
    for (_, name) in scored {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        if names.len() == MAX_SUGGESTIONS {
            break;
        }
    }
    names
}

fn join_hints(catalog: &SchemaCatalog, tables: &[String]) -> Vec<String> {
    let mut hints = Vec::new();
    for (i, a) in tables.iter().enumerate() {
        for b in &tables[i + 1..] {
            if let Some(path) = catalog.join_path(a, b) {
                if !path.is_empty() {
                    hints.push(format!("{a} joins {b} on {}.", path.join(" and ")));
                }
            }
        }
    }
    hints
}

fn display_name(catalog: &SchemaCatalog, lower: &str) -> String {
    catalog
        .table(lower)
        .map(|t| t.name.clone())
        .unwrap_or_else(|| lower.to_string())
}

/// Hints for one failed attempt, in a fixed order; empty when none applies.
pub fn hints_for(
    catalog: &SchemaCatalog,
    database: &dyn Database,
    kinds: HintKinds,
    sql: &str,
    status: Status,
    error: Option<&str>,
) -> Vec<String> {
    let mut hints = Vec::new();
    let references = table_references(sql, catalog);
    let query_tables: Vec<String> = references
        .values()
        .filter(|t| catalog.table(t).is_some())
        .map(|t| display_name(catalog, t))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let error = error.unwrap_or("");
    if kinds.schema {
        if let Some(unknown) = error.strip_prefix("no such column: ") {
            hints.extend(unknown_column(catalog, &references, &query_tables, unknown));
        } else if let Some(unknown) = error.strip_prefix("no such table: ") {
            let (_, name) = split_qualified(unknown);
            let similar = closest(&name, catalog.tables.iter().map(|t| t.name.as_str()));
            if !similar.is_empty() {
                hints.push(format!(
                    "There is no table {name}; the closest table names are {}.",
                    similar.join(", ")
                ));
            }
            if catalog.tables.len() <= LIST_ALL_TABLES {
                let all: Vec<&str> = catalog.tables.iter().map(|t| t.name.as_str()).collect();
                hints.push(format!("The database's tables are {}.", all.join(", ")));
            }
        } else if let Some(column) = error.strip_prefix("ambiguous column name: ") {
            let (_, name) = split_qualified(column);
            let holders: Vec<String> = query_tables
                .iter()
                .filter(|t| {
                    catalog
                        .table(t)
                        .is_some_and(|t| t.columns.iter().any(|c| c.eq_ignore_ascii_case(&name)))
                })
                .cloned()
                .collect();
            if holders.len() > 1 {
                hints.push(format!(
                    "Column {name} is in more than one of the query's tables ({}): write it as \
                     table.{name} or alias.{name}.",
                    holders.join(", ")
                ));
            }
        }
        if status == Status::ExecutionError && query_tables.len() > 1 {
            hints.extend(join_hints(catalog, &query_tables));
        }
    }
    if kinds.values && status == Status::DenotationMismatch {
        hints.extend(value_hints(catalog, database, &references, sql));
    }
    // The unknown-column hint and the general one can name the same join: say it once.
    let mut seen = BTreeSet::new();
    hints.retain(|hint| seen.insert(hint.clone()));
    hints
}

fn unknown_column(
    catalog: &SchemaCatalog,
    references: &BTreeMap<String, String>,
    query_tables: &[String],
    unknown: &str,
) -> Vec<String> {
    let mut hints = Vec::new();
    let (qualifier, name) = split_qualified(unknown);
    let named_table = qualifier
        .as_ref()
        .and_then(|q| references.get(q).cloned().or_else(|| Some(q.clone())))
        .and_then(|t| catalog.table(&t));
    let holders = catalog.tables_with_column(&name);
    if !holders.is_empty() {
        // A holder the query already names is shown with its aliases there: a small model
        // that reads "exists in table Addresses" keeps writing `T2.` otherwise.
        let names: Vec<String> = holders
            .iter()
            .map(|table| {
                let lower = table.name.to_lowercase();
                let aliases: Vec<&str> = references
                    .iter()
                    .filter(|(alias, target)| **target == lower && **alias != lower)
                    .map(|(alias, _)| alias.as_str())
                    .collect();
                if aliases.is_empty() {
                    table.name.clone()
                } else {
                    format!("{} (named {} in the query)", table.name, aliases.join(", "))
                }
            })
            .collect();
        hints.push(format!(
            "A column named {name} exists in table{} {}.",
            if names.len() == 1 { "" } else { "s" },
            names.join(", ")
        ));
        // Joining the holder to the query's tables is what the query is missing.
        let mut involved: Vec<String> = query_tables.to_vec();
        if let Some(first) = holders.first() {
            if !involved.iter().any(|t| t.eq_ignore_ascii_case(&first.name)) {
                involved.push(first.name.clone());
            }
        }
        hints.extend(join_hints(catalog, &involved));
    } else {
        let pool: Vec<String> = match named_table {
            Some(table) => table.columns.clone(),
            None => {
                let scope: Vec<&CatalogTable> = if query_tables.is_empty() {
                    catalog.tables.iter().collect()
                } else {
                    query_tables
                        .iter()
                        .filter_map(|t| catalog.table(t))
                        .collect()
                };
                scope
                    .iter()
                    .flat_map(|t| t.columns.iter().map(move |c| format!("{}.{c}", t.name)))
                    .collect()
            }
        };
        let similar = closest(
            &name,
            pool.iter()
                .map(|c| c.rsplit('.').next().unwrap_or(c.as_str())),
        );
        let similar: Vec<String> = similar
            .iter()
            .map(|column| {
                pool.iter()
                    .find(|c| c.rsplit('.').next() == Some(column.as_str()))
                    .cloned()
                    .unwrap_or_else(|| column.clone())
            })
            .collect();
        if !similar.is_empty() {
            hints.push(format!(
                "No table has a column named {name}; the closest column names are {}.",
                similar.join(", ")
            ));
        } else {
            hints.push(format!("No table has a column named {name}."));
        }
    }
    if let Some(table) = named_table {
        if !table.columns.iter().any(|c| c.eq_ignore_ascii_case(&name)) {
            hints.push(format!(
                "Table {} (named {} in the query) has the columns {}.",
                table.name,
                qualifier.unwrap_or_default(),
                table.columns.join(", ")
            ));
        }
    }
    hints
}

fn value_hints(
    catalog: &SchemaCatalog,
    database: &dyn Database,
    references: &BTreeMap<String, String>,
    sql: &str,
) -> Vec<String> {
    let mut hints = Vec::new();
    if let Ok(result) = database.query(
        sql,
        &ExecLimits {
            max_rows: Some(1),
            ..HINT_LIMITS
        },
    ) {
        if result.rows.is_empty() {
            hints.push("The query ran and returned no rows.".to_string());
        }
    }
    for (qualifier, column, literal, like) in literal_comparisons(sql) {
        let table = match &qualifier {
            Some(q) => references.get(q).and_then(|t| catalog.table(t)),
            None => references
                .values()
                .filter_map(|t| catalog.table(t))
                .find(|t| t.columns.iter().any(|c| c.eq_ignore_ascii_case(&column))),
        };
        let Some(table) = table else {
            continue;
        };
        let Some(stored) = table
            .columns
            .iter()
            .find(|c| c.eq_ignore_ascii_case(&column))
        else {
            continue;
        };
        let (t, c) = (quote_ident(&table.name), quote_ident(stored));
        let condition = if like { "LIKE" } else { "=" };
        let count = database.query(
            &format!(
                "SELECT 1 FROM {t} WHERE {c} {condition} {} LIMIT 1",
                quote_literal(&literal)
            ),
            &HINT_LIMITS,
        );
        if !matches!(count, Ok(ref r) if r.rows.is_empty()) {
            continue;
        }
        let core = literal.trim_matches('%');
        let similar = database
            .query(
                &format!(
                    "SELECT DISTINCT {c} FROM {t} WHERE {c} LIKE {} LIMIT {MAX_SUGGESTIONS}",
                    quote_literal(&format!("%{core}%"))
                ),
                &HINT_LIMITS,
            )
            .map(|r| {
                r.rows
                    .iter()
                    .filter_map(|row| row.first().and_then(text))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let shown: Vec<String> = similar.iter().map(|v| quote_literal(v)).collect();
        if shown.is_empty() {
            hints.push(format!(
                "No row of {}.{stored} matches {}.",
                table.name,
                quote_literal(&literal)
            ));
        } else {
            hints.push(format!(
                "No row of {}.{stored} matches {}; values containing it: {}.",
                table.name,
                quote_literal(&literal),
                shown.join(", ")
            ));
        }
    }
    hints
}

/// Where a database id's SQLite file is.
type Locate = Box<dyn Fn(&str) -> Option<std::path::PathBuf> + Send + Sync>;

/// Hints from SQLite databases (a benchmark folder's `<db_id>/<db_id>.sqlite`, or named
/// files), each opened read-only on first use and its catalog read once.
pub struct DatabaseHints {
    locate: Locate,
    opened: std::sync::Mutex<HashMap<String, std::sync::Arc<Opened>>>,
}

struct Opened {
    database: Option<merit_sql::SqliteDatabase>,
    catalog: SchemaCatalog,
}

impl std::fmt::Debug for DatabaseHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseHints").finish_non_exhaustive()
    }
}

impl DatabaseHints {
    /// Hints over the databases under `databases`.
    pub fn new(databases: merit_data::DatabaseDir) -> DatabaseHints {
        DatabaseHints {
            locate: Box::new(move |db_id| databases.locate(db_id).ok()),
            opened: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Hints over named database files (a service's configured databases).
    pub fn for_files(files: HashMap<String, std::path::PathBuf>) -> DatabaseHints {
        DatabaseHints {
            locate: Box::new(move |db_id| files.get(db_id).cloned()),
            opened: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn open(&self, db_id: &str) -> std::sync::Arc<Opened> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = opened.get(db_id) {
            return std::sync::Arc::clone(found);
        }
        // A database that cannot be opened or read gives no hints rather than failing the
        // run: hints are an aid, and the oracle reports the real problem.
        let database =
            (self.locate)(db_id).and_then(|path| merit_sql::SqliteDatabase::open(&path).ok());
        let catalog = database
            .as_ref()
            .and_then(|db| SchemaCatalog::read(db).ok())
            .unwrap_or_default();
        let entry = std::sync::Arc::new(Opened { database, catalog });
        opened.insert(db_id.to_string(), std::sync::Arc::clone(&entry));
        entry
    }
}

impl crate::repair::DatabaseAids for DatabaseHints {
    fn hints(
        &self,
        db_id: &str,
        sql: &str,
        status: Status,
        error: Option<&str>,
        kinds: HintKinds,
    ) -> Vec<String> {
        let opened = self.open(db_id);
        match &opened.database {
            Some(database) => hints_for(&opened.catalog, database, kinds, sql, status, error),
            None => Vec::new(),
        }
    }

    fn sql_grammar(&self, db_id: &str, aliases: crate::grammar::AliasRule) -> Option<String> {
        // Built on each call: microseconds for a catalog, against seconds for the model call
        // it constrains.
        let opened = self.open(db_id);
        (!opened.catalog.tables.is_empty())
            .then(|| crate::grammar::sql_grammar(&opened.catalog, aliases))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_prefers_typos_and_shared_word_parts() {
        assert!(name_similarity("FlightNo", "flightno") > 0.99);
        assert!(name_similarity("FlightNo", "Flight_No") >= 0.75);
        assert!(name_similarity("singer_name", "Name") >= 0.5);
        assert!(name_similarity("Airline", "Country") < MIN_SIMILARITY);
    }

    #[test]
    fn levenshtein_counts_edits() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    fn catalog() -> SchemaCatalog {
        SchemaCatalog {
            tables: vec![
                CatalogTable {
                    name: "airlines".into(),
                    columns: vec!["uid".into(), "Airline".into(), "Country".into()],
                    foreign_keys: vec![],
                },
                CatalogTable {
                    name: "flights".into(),
                    columns: vec!["Airline".into(), "FlightNo".into(), "SourceAirport".into()],
                    foreign_keys: vec![("Airline".into(), "airlines".into(), "uid".into())],
                },
            ],
        }
    }

    #[test]
    fn table_references_find_tables_and_aliases() {
        let refs = table_references(
            "SELECT T1.Airline FROM airlines AS T1 JOIN flights T2 ON T1.uid = T2.Airline WHERE T2.x = 1",
            &catalog(),
        );
        assert_eq!(refs.get("t1").map(String::as_str), Some("airlines"));
        assert_eq!(refs.get("t2").map(String::as_str), Some("flights"));
        assert_eq!(refs.get("flights").map(String::as_str), Some("flights"));
        assert!(!refs.contains_key("on"));
    }

    #[test]
    fn an_unknown_column_names_its_table_and_the_join() {
        let hints = unknown_column(
            &catalog(),
            &table_references(
                "SELECT Airline FROM airlines WHERE FlightNo < 200",
                &catalog(),
            ),
            &["airlines".to_string()],
            "FlightNo",
        );
        assert_eq!(
            hints,
            vec![
                "A column named FlightNo exists in table flights.".to_string(),
                "airlines joins flights on flights.Airline = airlines.uid.".to_string(),
            ]
        );
    }

    #[test]
    fn an_invented_column_gets_the_closest_names_of_the_named_table() {
        let refs = table_references("SELECT T1.flight_number FROM flights AS T1", &catalog());
        let hints = unknown_column(
            &catalog(),
            &refs,
            &["flights".to_string()],
            "T1.flight_number",
        );
        assert_eq!(
            hints[0],
            "No table has a column named flight_number; the closest column names are FlightNo."
        );
        assert_eq!(
            hints[1],
            "Table flights (named t1 in the query) has the columns Airline, FlightNo, SourceAirport."
        );
    }

    #[test]
    fn literal_comparisons_are_found_with_their_qualifier() {
        let found = literal_comparisons(
            "SELECT * FROM singer AS T1 WHERE T1.Country = 'france' AND name LIKE '%Jo''e%'",
        );
        assert_eq!(
            found,
            vec![
                (Some("t1".into()), "Country".into(), "france".into(), false),
                (None, "name".into(), "%Jo'e%".into(), true),
            ]
        );
    }
}
