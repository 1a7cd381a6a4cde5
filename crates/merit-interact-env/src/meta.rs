//! Per-database metafiles: the schema text, column meanings and the knowledge base
//! (protocol §1, "Metafiles per DB"; tool outputs in §4).
//!
//! All of this is agent-visible material except two knowledge-base fields (`type` and
//! `children_knowledge`), which are kept private here, and the entries a task deletes, which
//! [`KnowledgeView`] filters out.

use crate::error::LoadError;
use crate::json::{self, At};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One knowledge-base entry (`{db}_kb.jsonl`).
#[derive(Debug, Clone)]
pub struct KnowledgeEntry {
    id: i64,
    knowledge: String,
    description: String,
    definition: String,
    /// Read for completeness but never shown: the protocol lets the agent see four fields only.
    #[allow(dead_code)]
    kind: Option<String>,
    #[allow(dead_code)]
    children: Value,
}

impl KnowledgeEntry {
    /// The entry's id (what `deleted_knowledge` refers to).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The entry's name (`knowledge`), what `get_knowledge_definition` matches on.
    pub fn name(&self) -> &str {
        &self.knowledge
    }

    /// The four fields an agent may see.
    pub fn visible(&self) -> VisibleKnowledge<'_> {
        VisibleKnowledge {
            id: self.id,
            knowledge: &self.knowledge,
            description: &self.description,
            definition: &self.definition,
        }
    }
}

/// The agent-visible part of a knowledge entry, serialized in this field order.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct VisibleKnowledge<'a> {
    /// Entry id.
    pub id: i64,
    /// Entry name.
    pub knowledge: &'a str,
    /// Short description.
    pub description: &'a str,
    /// Definition (often a formula).
    pub definition: &'a str,
}

/// The metafiles of one database, plus where its SQLite file is (if present).
#[derive(Debug, Clone)]
pub struct DatabaseMeta {
    name: String,
    schema: String,
    /// Keys lower-cased at load time (the files mix case; lookups are case-insensitive).
    column_meanings: Map<String, Value>,
    knowledge: Vec<KnowledgeEntry>,
    sqlite_file: Option<PathBuf>,
}

impl DatabaseMeta {
    /// Loads `{name}_schema.txt`, `{name}_column_meaning_base.json` and `{name}_kb.jsonl` from
    /// `dir`, and notes `{name}.sqlite` (or `{name}_template.sqlite`) when one exists there.
    ///
    /// A missing metafile is an error; a missing database file is not (the mini-interact mirror
    /// lacks three), it is reported by [`DatabaseMeta::sqlite_file`] returning `None`.
    pub fn load(dir: &Path, name: &str) -> Result<DatabaseMeta, LoadError> {
        let schema = json::read_text(&dir.join(format!("{name}_schema.txt")))?;
        let meanings_path = dir.join(format!("{name}_column_meaning_base.json"));
        let column_meanings = load_column_meanings(&meanings_path)?;
        let knowledge = load_knowledge(&dir.join(format!("{name}_kb.jsonl")))?;
        let sqlite_file = [format!("{name}.sqlite"), format!("{name}_template.sqlite")]
            .into_iter()
            .map(|file| dir.join(file))
            .find(|path| path.is_file());
        Ok(DatabaseMeta {
            name: name.to_string(),
            schema,
            column_meanings,
            knowledge,
            sqlite_file,
        })
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema file, verbatim (what `get_schema` returns).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Column meanings keyed `db|table|column`, lower-cased, in file order.
    pub fn column_meanings(&self) -> &Map<String, Value> {
        &self.column_meanings
    }

    /// The meaning of `table.column`, matched case-insensitively under `db|table|column`.
    ///
    /// Deviation: when that key is absent, a key with any database prefix and the same
    /// `|table|column` is used. mini-interact's `cross_db` file prefixes every key with
    /// `cross`, so the exact rule would answer "not found" for every column of that database.
    pub fn column_meaning(&self, table: &str, column: &str) -> Option<&Value> {
        let suffix = format!("|{table}|{column}").to_lowercase();
        let key = format!("{}{suffix}", self.name.to_lowercase());
        self.column_meanings.get(&key).or_else(|| {
            self.column_meanings
                .iter()
                .find(|(k, _)| k.ends_with(&suffix) && !k[..k.len() - suffix.len()].contains('|'))
                .map(|(_, v)| v)
        })
    }

    /// Every knowledge entry in file order, duplicates included.
    pub fn knowledge(&self) -> &[KnowledgeEntry] {
        &self.knowledge
    }

    /// The SQLite file, when the data set ships one for this database.
    pub fn sqlite_file(&self) -> Option<&Path> {
        self.sqlite_file.as_deref()
    }

    /// The same metafiles with the database file at `path` (for task sets that ship their
    /// metafiles but take the databases from elsewhere, e.g. a Spider download).
    pub fn with_sqlite_file(mut self, path: PathBuf) -> DatabaseMeta {
        self.sqlite_file = Some(path);
        self
    }

    /// The knowledge base as one task's agent may see it: entries whose id the task deletes
    /// are gone.
    pub fn knowledge_view(&self, deleted: &BTreeSet<i64>) -> KnowledgeView<'_> {
        KnowledgeView {
            entries: self
                .knowledge
                .iter()
                .filter(|entry| !deleted.contains(&entry.id))
                .collect(),
        }
    }
}

/// A task's filtered knowledge base (protocol §4, "KB filter").
///
/// Deviation (protocol §11.10): upstream indexes the KB by name, so of two entries with the same
/// name only the later survives. Here both stay: the names list shows the name once, and a
/// definition lookup of a duplicated name returns all matching entries as a JSON array.
#[derive(Debug, Clone)]
pub struct KnowledgeView<'m> {
    entries: Vec<&'m KnowledgeEntry>,
}

impl<'m> KnowledgeView<'m> {
    /// Distinct names in file order.
    pub fn names(&self) -> Vec<&'m str> {
        let mut seen = BTreeSet::new();
        self.entries
            .iter()
            .map(|entry| entry.knowledge.as_str())
            .filter(|name| seen.insert(*name))
            .collect()
    }

    /// The visible entries named exactly `name` (case-sensitive, as upstream).
    pub fn lookup(&self, name: &str) -> Vec<VisibleKnowledge<'m>> {
        self.entries
            .iter()
            .filter(|entry| entry.knowledge == name)
            .map(|entry| entry.visible())
            .collect()
    }

    /// All visible entries in file order.
    pub fn all(&self) -> Vec<VisibleKnowledge<'m>> {
        self.entries.iter().map(|entry| entry.visible()).collect()
    }
}

fn load_column_meanings(path: &Path) -> Result<Map<String, Value>, LoadError> {
    let text = json::read_text(path)?;
    let value = json::parse(&text, path, 0)?;
    let at = At { path, line: 1 };
    let object = json::object(&value, at, "(document)")?;
    let mut lowered = Map::new();
    for (key, meaning) in object {
        match meaning {
            Value::String(_) | Value::Object(_) => {
                lowered.insert(key.to_lowercase(), meaning.clone());
            }
            _ => return Err(at.field(key.clone(), "must be a string or an object")),
        }
    }
    Ok(lowered)
}

fn load_knowledge(path: &Path) -> Result<Vec<KnowledgeEntry>, LoadError> {
    let text = json::read_text(path)?;
    let mut entries = Vec::new();
    for record in json::records(&text, path) {
        let (at, value) = record?;
        let map = json::object(&value, at, "(record)")?;
        let id = json::opt_int(map, "id", at, "")?.ok_or_else(|| at.field("id", "is missing"))?;
        entries.push(KnowledgeEntry {
            id,
            knowledge: json::req_str(map, "knowledge", at, "")?,
            description: json::opt_str(map, "description", at, "")?.unwrap_or_default(),
            definition: json::opt_str(map, "definition", at, "")?.unwrap_or_default(),
            kind: json::opt_str(map, "type", at, "")?,
            children: map
                .get("children_knowledge")
                .cloned()
                .unwrap_or(Value::Null),
        });
    }
    Ok(entries)
}
