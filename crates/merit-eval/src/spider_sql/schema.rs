//! The schema view that `process_sql` works with.

use std::collections::HashMap;

/// Lower-cased table name -> lower-cased column names, as `process_sql`'s
/// `Schema(get_schema(db))` builds it, plus the derived identifier map.
///
/// `get_schema` reads `SELECT name FROM sqlite_master WHERE type='table'` and then
/// `PRAGMA table_info(<table>)` for each table, lower-casing every name; feed those
/// pairs, in that order, to [`SpiderSchema::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpiderSchema {
    /// Tables in first-insertion order (a Python dict keeps the first position of a key
    /// and the last value written to it).
    tables: Vec<(String, Vec<String>)>,
    /// Position of each table in `tables`.
    index: HashMap<String, usize>,
    /// `Schema.idMap`: `*`, `table.column` and `table` keys to their identifiers.
    id_map: HashMap<String, String>,
}

impl SpiderSchema {
    /// Builds the schema from `(table, columns)` pairs; names are lower-cased here.
    ///
    /// A repeated table name replaces the earlier column list but keeps its position,
    /// which is what assigning into a Python dict does.
    pub fn new(tables: impl IntoIterator<Item = (String, Vec<String>)>) -> SpiderSchema {
        let mut out = SpiderSchema::default();
        for (table, columns) in tables {
            let table = table.to_lowercase();
            let columns: Vec<String> = columns.iter().map(|c| c.to_lowercase()).collect();
            match out.index.get(&table) {
                Some(&i) => out.tables[i].1 = columns,
                None => {
                    out.index.insert(table.clone(), out.tables.len());
                    out.tables.push((table, columns));
                }
            }
        }
        // Mirrors Schema._map: '*' first, then every table.column, then every table.
        out.id_map.insert("*".to_string(), "__all__".to_string());
        for (table, columns) in &out.tables {
            for col in columns {
                let key = format!("{table}.{col}");
                out.id_map.insert(key.clone(), format!("__{key}__"));
            }
        }
        for (table, _) in &out.tables {
            out.id_map.insert(table.clone(), format!("__{table}__"));
        }
        out
    }

    /// The tables and their columns, lower-cased, in schema order.
    pub fn tables(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.tables.iter().map(|(t, c)| (t.as_str(), c.as_slice()))
    }

    /// Columns of `table` (`schema.schema[table]` in Python), `None` for an unknown table.
    pub(crate) fn columns(&self, table: &str) -> Option<&[String]> {
        self.index.get(table).map(|&i| self.tables[i].1.as_slice())
    }

    /// `schema.idMap[key]`, `None` where Python would raise `KeyError`.
    pub(crate) fn id_of(&self, key: &str) -> Option<&str> {
        self.id_map.get(key).map(String::as_str)
    }

    /// Table names in schema order (the iteration order of the Python dict).
    pub(crate) fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.iter().map(|(t, _)| t.as_str())
    }
}
