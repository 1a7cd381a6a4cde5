//! The service's configuration file (TOML) and API keys, which it holds only as hashes.
//!
//! ```toml
//! state_dir = "merit-state"        # live memories: <state_dir>/<tenant>/<database>/
//! finalize_after_secs = 86400      # an answer without feedback is finalized after this
//! max_body_bytes = 65536           # larger requests get 413
//! max_rows = 1000                  # rows an answer carries at most
//! query_timeout_secs = 30          # per execution
//! k = 7                            # repair budget
//! hints = true                     # repair aid: hints read from the database
//! grammar = true                   # repair aid: decode under the database's names (GBNF)
//! free_aliases = false             # with grammar: any new name after AS (see merit run)
//! negative_memory = true           # false: rejected or failed answers leave no memory
//! precedents = "full"              # "change": precedents without their failing SQL
//!
//! [[databases]]
//! name = "concert_singer"
//! path = "/data/concert_singer.sqlite"
//!
//! [[databases]]                    # or a database on a PostgreSQL server
//! name = "shop"
//! postgres = "postgresql://merit:secret@127.0.0.1:5432/postgres"
//! database = "shop"                # its name there (default: name)
//!
//! [[keys]]
//! tenant = "acme"
//! sha256 = "5e8848…"               # merit serve --hash-key < key.txt
//! databases = ["concert_singer"]
//! ```
//!
//! Each key belongs to one tenant and names the databases it may use. Memory is kept per
//! (tenant, database): two tenants using the same database never see each other's memory.

use merit_repair::repair::PrecedentView;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {message}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The file is not valid TOML of this shape.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// The settings do not fit together.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("merit-state")
}

fn default_finalize_after_secs() -> u64 {
    24 * 3600
}

fn default_max_body_bytes() -> usize {
    64 * 1024
}

fn default_max_rows() -> usize {
    1_000
}

fn default_query_timeout_secs() -> u64 {
    30
}

fn default_k() -> u32 {
    7
}

fn default_true() -> bool {
    true
}

/// A database the service answers on: a SQLite file (`path`), or a database on a PostgreSQL
/// server (`postgres`, the server's URL, and `database`, its name there).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// The name requests use.
    pub name: String,
    /// The SQLite file (opened read-only).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A PostgreSQL server (`postgresql://user:password@host:port/admin-db`; a role that is
    /// not a superuser).
    #[serde(default)]
    pub postgres: Option<String>,
    /// The database's name on the PostgreSQL server (default: `name`).
    #[serde(default)]
    pub database: Option<String>,
}

/// An API key, as its hash.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Whose key it is; memory is kept per tenant.
    pub tenant: String,
    /// SHA-256 of the key, in hex ([`hash_key`]).
    pub sha256: String,
    /// The databases the key may use.
    pub databases: Vec<String>,
}

/// The configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Where the live memories are kept.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Keep every memory's journal on this PostgreSQL server instead of `state_dir`, so
    /// several `merit serve` replicas share one memory per tenant and database (see
    /// `merit_live::store`).
    #[serde(default)]
    pub memory_postgres: Option<String>,
    /// Host names (or `host:port`) the MCP endpoint at `/mcp` answers under, beyond the
    /// loopback names it accepts by default (a guard against DNS rebinding; list the names
    /// clients reach this service by).
    #[serde(default)]
    pub mcp_hosts: Vec<String>,
    /// Seconds an answer waits for feedback before it is finalized without.
    #[serde(default = "default_finalize_after_secs")]
    pub finalize_after_secs: u64,
    /// Largest request body accepted.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Most rows an answer carries.
    #[serde(default = "default_max_rows")]
    pub max_rows: usize,
    /// Time limit of one execution, in seconds.
    #[serde(default = "default_query_timeout_secs")]
    pub query_timeout_secs: u64,
    /// Repair budget K.
    #[serde(default = "default_k")]
    pub k: u32,
    /// Repair aid: hints read from the database about each failure (nearest names, where a
    /// column lives, join paths, literals that never occur).
    #[serde(default = "default_true")]
    pub hints: bool,
    /// Repair aid: decode repairs under a grammar of the database's names (the embedded model
    /// and llama.cpp servers; turn it off for servers that take no GBNF grammar, e.g. vLLM).
    #[serde(default = "default_true")]
    pub grammar: bool,
    /// With `grammar`: the name after `AS` is free and must end at punctuation, a clause
    /// keyword or the end of the query (`merit run --free-aliases`). Off by default until its
    /// calibration on Spider train says otherwise.
    #[serde(default)]
    pub free_aliases: bool,
    /// Keep negative entries (the last failed direction of an answer that was rejected or
    /// never executed), as the paper does. `false` keeps confirmed and corrected repairs only:
    /// on the Spider train calibration a 1.5B repairer copied the failed queries that negative
    /// entries show (`merit_live::LiveConfig::negative_memory`).
    #[serde(default = "default_true")]
    pub negative_memory: bool,
    /// How much of each retrieved precedent a repair request shows: `full`, the paper's (the
    /// earlier question, its failing SQL, the feedback and the change), or `change`, the same
    /// without the failing SQL (`merit run --precedents change`). On the Spider train
    /// calibration the 1.5B repairer copied a shown query in 14.3% of its revisions with
    /// `full` and 4.0% with `change` (docs/results/repair/calibration).
    #[serde(default)]
    pub precedents: PrecedentView,
    /// The databases.
    #[serde(default)]
    pub databases: Vec<DatabaseConfig>,
    /// The API keys.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
}

/// SHA-256 of an API key in lowercase hex: what the configuration stores.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.trim().as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A name safe as one path component (tenants and databases become folders).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl ServeConfig {
    /// Reads and checks the configuration at `path` (relative paths inside it are taken
    /// relative to the file's folder).
    pub fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut config = ServeConfig::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        if config.state_dir.is_relative() {
            config.state_dir = base.join(&config.state_dir);
        }
        for database in &mut config.databases {
            if let Some(file) = database.path.as_mut().filter(|file| file.is_relative()) {
                *file = base.join(&*file);
            }
        }
        config.check().map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    /// Parses TOML text (no checks).
    pub fn parse(text: &str) -> Result<ServeConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Refuses names that cannot be folders, duplicates, keys that are not hashes, and keys
    /// that name databases the service does not have.
    pub fn check(&self) -> Result<(), String> {
        let mut names = BTreeSet::new();
        for database in &self.databases {
            if !is_plain_name(&database.name) {
                return Err(format!(
                    "database name {:?}: use letters, digits, '_' and '-' (at most 64)",
                    database.name
                ));
            }
            if !names.insert(database.name.as_str()) {
                return Err(format!("database {:?} is listed twice", database.name));
            }
            if database.path.is_some() == database.postgres.is_some() {
                return Err(format!(
                    "database {:?}: give either `path` (SQLite) or `postgres` (a server URL)",
                    database.name
                ));
            }
            if database.database.is_some() && database.postgres.is_none() {
                return Err(format!(
                    "database {:?}: `database` names a database on a `postgres` server",
                    database.name
                ));
            }
        }
        let mut hashes = BTreeSet::new();
        for key in &self.keys {
            if !is_plain_name(&key.tenant) {
                return Err(format!(
                    "tenant name {:?}: use letters, digits, '_' and '-' (at most 64)",
                    key.tenant
                ));
            }
            let hash = key.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!(
                    "the key of tenant {:?} is not a SHA-256 hex digest (64 hex digits; make one \
                     with `merit serve --hash-key`)",
                    key.tenant
                ));
            }
            if !hashes.insert(hash) {
                return Err(format!("a key of tenant {:?} is listed twice", key.tenant));
            }
            for database in &key.databases {
                if !names.contains(database.as_str()) {
                    return Err(format!(
                        "the key of tenant {:?} names database {database:?}, which is not in \
                         [[databases]]",
                        key.tenant
                    ));
                }
            }
        }
        if self.max_body_bytes < 1024 || self.max_rows == 0 || self.query_timeout_secs == 0 {
            return Err(
                "max_body_bytes must be at least 1024, max_rows and query_timeout_secs above 0"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// Key hash → (tenant, databases it may use).
    pub fn key_table(&self) -> BTreeMap<String, (String, BTreeSet<String>)> {
        self.keys
            .iter()
            .map(|key| {
                (
                    key.sha256.to_ascii_lowercase(),
                    (key.tenant.clone(), key.databases.iter().cloned().collect()),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keys: &str) -> Result<(), String> {
        let text = format!("[[databases]]\nname = \"concert_singer\"\npath = \"a.sqlite\"\n{keys}");
        ServeConfig::parse(&text)?.check()
    }

    #[test]
    fn keys_are_hashed_and_checked() {
        let hash = hash_key("secret-key\n");
        assert_eq!(hash, hash_key("secret-key"));
        assert_eq!(hash.len(), 64);
        let key = format!(
            "[[keys]]\ntenant = \"acme\"\nsha256 = \"{hash}\"\ndatabases = [\"concert_singer\"]\n"
        );
        config(&key).unwrap();
        let plain = "[[keys]]\ntenant = \"acme\"\nsha256 = \"secret-key\"\ndatabases = []\n";
        assert!(config(plain).unwrap_err().contains("SHA-256"));
        let unknown = key.replace("[\"concert_singer\"]", "[\"pets_1\"]");
        assert!(config(&unknown).unwrap_err().contains("pets_1"));
        let traversal = key.replace("\"acme\"", "\"../acme\"");
        assert!(config(&traversal).unwrap_err().contains("tenant name"));
        let defaults = ServeConfig::parse("").unwrap();
        assert!(defaults.grammar && !defaults.free_aliases && defaults.negative_memory);
        assert!(
            !ServeConfig::parse("negative_memory = false\n")
                .unwrap()
                .negative_memory
        );
        assert_eq!(defaults.precedents, PrecedentView::Full);
        assert_eq!(
            ServeConfig::parse("precedents = \"change\"\n")
                .unwrap()
                .precedents,
            PrecedentView::Change
        );
        assert!(ServeConfig::parse("precedents = \"diff\"\n")
            .unwrap_err()
            .contains("precedents"));
        assert!(
            ServeConfig::parse("free_aliases = true\n")
                .unwrap()
                .free_aliases
        );
        let typo = ServeConfig::parse("stat_dir = \"x\"\n").unwrap_err();
        assert!(typo.contains("stat_dir"), "{typo}");
    }
}
