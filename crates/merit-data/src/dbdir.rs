//! Finding the SQLite file of each database, and which questions can be run at all.

use merit_core::Question;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A folder of benchmark databases: Spider's `database/` or BIRD's `dev_databases/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseDir {
    root: PathBuf,
}

/// A database id whose SQLite file is not in the folder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct MissingDatabase {
    /// The database id that was asked for.
    pub db_id: String,
    /// Every path that was checked, in order; empty when the id itself was refused (see
    /// [`DatabaseDir::locate`]).
    pub tried: Vec<PathBuf>,
}

impl fmt::Display for MissingDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tried.is_empty() {
            return write!(
                f,
                "database {:?} not looked up: a database id must be a plain folder name",
                self.db_id
            );
        }
        write!(f, "database {:?} not found; tried ", self.db_id)?;
        for (i, path) in self.tried.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", path.display())?;
        }
        Ok(())
    }
}

impl DatabaseDir {
    /// A database folder rooted at `root`; nothing is checked until [`DatabaseDir::locate`].
    pub fn new(root: impl Into<PathBuf>) -> DatabaseDir {
        DatabaseDir { root: root.into() }
    }

    /// The folder given to [`DatabaseDir::new`].
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The SQLite file of `db_id`.
    ///
    /// Tries the official layout `<root>/<db_id>/<db_id>.sqlite` first (Spider's `database/`,
    /// BIRD's `dev_databases/`), then a flat `<root>/<db_id>.sqlite`, which is how people
    /// often keep a handful of databases. Only regular files (or links to them) count.
    ///
    /// A db_id comes from a data file, so it is not trusted as a path: an empty id, `.`, `..`,
    /// or one containing a path separator or NUL is refused without touching the disk, so a
    /// crafted question cannot point the evaluator at a file outside `root`.
    pub fn locate(&self, db_id: &str) -> Result<PathBuf, MissingDatabase> {
        let plain = !db_id.is_empty()
            && db_id != "."
            && db_id != ".."
            && !db_id.contains(['/', '\\', '\0']);
        if !plain {
            return Err(MissingDatabase {
                db_id: db_id.to_owned(),
                tried: Vec::new(),
            });
        }
        let file = format!("{db_id}.sqlite");
        let tried = vec![self.root.join(db_id).join(&file), self.root.join(&file)];
        match tried.iter().find(|path| path.is_file()) {
            Some(found) => Ok(found.clone()),
            None => Err(MissingDatabase {
                db_id: db_id.to_owned(),
                tried,
            }),
        }
    }

    /// Splits `questions` into those whose database is present and those that cannot run.
    ///
    /// Each distinct db_id is looked up once. Reports must state how many questions were left
    /// out and why (the shared Spider copy lacks `wta_1`, for instance), hence the per-database
    /// counts rather than a bare filtered list.
    pub fn availability(&self, questions: &[Question]) -> Availability {
        let mut found: BTreeMap<&str, bool> = BTreeMap::new();
        let mut usable = Vec::new();
        let mut unavailable: BTreeMap<String, usize> = BTreeMap::new();
        for (position, question) in questions.iter().enumerate() {
            let present = *found
                .entry(question.db_id.as_str())
                .or_insert_with(|| self.locate(&question.db_id).is_ok());
            if present {
                usable.push(position);
            } else {
                *unavailable.entry(question.db_id.clone()).or_default() += 1;
            }
        }
        Availability {
            usable,
            unavailable,
        }
    }
}

/// Which questions can be evaluated against a [`DatabaseDir`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Availability {
    /// Positions in the slice given to [`DatabaseDir::availability`] whose database exists,
    /// in increasing order.
    pub usable: Vec<usize>,
    /// For each db_id without a database file, how many questions need it.
    pub unavailable: BTreeMap<String, usize>,
}

impl Availability {
    /// Number of questions examined (usable plus unavailable).
    pub fn total(&self) -> usize {
        self.usable.len() + self.unavailable.values().sum::<usize>()
    }

    /// One line for reports, e.g.
    /// `972 usable of 1034; unavailable: wta_1 (62 questions, database not found)`.
    pub fn summary(&self) -> String {
        let mut text = format!("{} usable of {}", self.usable.len(), self.total());
        if self.unavailable.is_empty() {
            text.push_str("; every database found");
            return text;
        }
        text.push_str("; unavailable: ");
        let parts: Vec<String> = self
            .unavailable
            .iter()
            .map(|(db_id, count)| {
                let noun = if *count == 1 { "question" } else { "questions" };
                format!("{db_id} ({count} {noun}, database not found)")
            })
            .collect();
        text.push_str(&parts.join(", "));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(index: usize, db_id: &str) -> Question {
        Question {
            id: format!("dev-{index}"),
            index,
            db_id: db_id.to_owned(),
            question: String::new(),
            evidence: String::new(),
            gold_sql: String::new(),
            difficulty: None,
        }
    }

    #[test]
    fn locates_nested_then_flat_layouts_and_lists_what_it_tried() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("nested")).unwrap();
        std::fs::write(root.join("nested/nested.sqlite"), b"").unwrap();
        std::fs::write(root.join("flat.sqlite"), b"").unwrap();
        // A folder named like the file does not count.
        std::fs::create_dir_all(root.join("odd/odd.sqlite")).unwrap();
        let dbs = DatabaseDir::new(root);
        assert_eq!(
            dbs.locate("nested").unwrap(),
            root.join("nested/nested.sqlite")
        );
        assert_eq!(dbs.locate("flat").unwrap(), root.join("flat.sqlite"));
        let missing = dbs.locate("odd").unwrap_err();
        assert_eq!(
            missing.tried,
            vec![root.join("odd/odd.sqlite"), root.join("odd.sqlite")]
        );
        let text = missing.to_string();
        assert!(
            text.starts_with("database \"odd\" not found; tried "),
            "{text}"
        );
        assert!(text.contains("odd.sqlite, "), "{text}");
    }

    #[test]
    fn refuses_ids_that_are_not_plain_names() {
        let dir = tempfile::tempdir().unwrap();
        let dbs = DatabaseDir::new(dir.path());
        for id in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b"] {
            let err = dbs.locate(id).unwrap_err();
            assert!(err.tried.is_empty(), "{id:?}");
            assert!(err.to_string().contains("plain folder name"));
        }
    }

    #[test]
    fn availability_counts_per_database() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/a.sqlite"), b"").unwrap();
        let dbs = DatabaseDir::new(dir.path());
        let questions = [
            question(0, "a"),
            question(1, "zz"),
            question(2, "a"),
            question(3, "b"),
            question(4, "zz"),
        ];
        let availability = dbs.availability(&questions);
        assert_eq!(availability.usable, vec![0, 2]);
        assert_eq!(availability.total(), 5);
        assert_eq!(
            availability.summary(),
            "2 usable of 5; unavailable: b (1 question, database not found), \
             zz (2 questions, database not found)"
        );
        let all = dbs.availability(&questions[..1]);
        assert_eq!(all.summary(), "1 usable of 1; every database found");
    }
}
