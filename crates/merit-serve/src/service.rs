//! The service behind the HTTP API: the databases, the per-(tenant, database) live memories,
//! the models, and the key table. Every method is blocking (model calls, SQLite, fsync); the
//! API runs them on tokio's blocking pool.

use crate::config::{hash_key, ServeConfig};
use merit_core::model::{ChatModel, Embedder};
use merit_interact_env::{PostgresDatabase, PostgresServer};
use merit_live::{
    Answer, AskRequest, FileJournal, Finalization, JournalStore, LiveConfig, LiveDeps, LiveError,
    LiveMemory, LiveStats, MemoryInfo, PostgresJournal, TimelinePoint, UserFeedback,
};
use merit_repair::grammar::AliasRule;
use merit_repair::hints::{DatabaseHints, HintKinds};
use merit_repair::prompts::initial::schema_from_database;
use merit_repair::repair::{RepairAids, RepairLayout};
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configured database could not be opened or its schema read.
    #[error("database {name} ({path}): {message}")]
    Database {
        /// Its name.
        name: String,
        /// Its file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A live memory could not be opened (its journal is unreadable or inconsistent).
    #[error("the memory of tenant {tenant} on {database}: {source}")]
    Memory {
        /// The tenant.
        tenant: String,
        /// The database.
        database: String,
        /// What went wrong.
        source: LiveError,
    },
}

/// Who is calling: a tenant and the databases its key may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant.
    pub tenant: String,
    /// The databases the key may use.
    pub databases: BTreeSet<String>,
}

/// Why a request was refused; the API turns each into an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No key, or one the service does not know.
    #[error("{0}")]
    Unauthorized(String),
    /// The key may not use this database.
    #[error("this API key may not use database {0:?}")]
    Forbidden(String),
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// What live mode said.
    #[error(transparent)]
    Live(#[from] LiveError),
}

struct Served {
    database: Arc<dyn Database>,
    schema: String,
}

/// A memory found by [`Service::search_memories`], with its BM25 score.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScoredMemory {
    /// How well it matches the query (higher is better).
    pub score: f64,
    /// The memory.
    #[serde(flatten)]
    pub memory: MemoryInfo,
}

/// The models of the service.
pub struct ServiceModels {
    /// Writes the repairs (and the initial SQL unless `initial`).
    pub repair: Arc<dyn ChatModel>,
    /// Writes the initial SQL when it differs from the repair model.
    pub initial: Option<Arc<dyn ChatModel>>,
    /// Embeds memory entries and queries.
    pub embedder: Arc<dyn Embedder>,
}

/// A clock in milliseconds since the Unix epoch (tests give their own).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The service (see the module docs).
pub struct Service {
    keys: BTreeMap<String, (String, BTreeSet<String>)>,
    databases: BTreeMap<String, Served>,
    memories: Mutex<HashMap<(String, String), Arc<LiveMemory>>>,
    model: Arc<dyn ChatModel>,
    initial_model: Option<Arc<dyn ChatModel>>,
    embedder: Arc<dyn Embedder>,
    hints: DatabaseHints,
    live: LiveConfig,
    config: ServeConfig,
    clock: Clock,
}

fn system_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The live-mode settings a configuration asks for.
fn live_config(config: &ServeConfig) -> LiveConfig {
    LiveConfig {
        k: config.k,
        finalize_after_ms: config.finalize_after_secs.saturating_mul(1000),
        limits: ExecLimits {
            timeout: Duration::from_secs(config.query_timeout_secs),
            max_rows: Some(config.max_rows),
        },
        // The repair configuration chosen on the Spider train calibration slice
        // (docs/results/repair/calibration): repeat guard, fresh layout, and the database
        // aids the configuration keeps on.
        aids: RepairAids {
            repeat_guard: true,
            layout: RepairLayout::Fresh,
            hints: HintKinds {
                schema: config.hints,
                values: config.hints,
            },
            grammar: config.grammar,
            grammar_aliases: AliasRule::free_when(config.free_aliases),
            precedents: config.precedents,
        },
        negative_memory: config.negative_memory,
        ..LiveConfig::default()
    }
}

impl Service {
    /// Opens every configured database (read-only), reads its schema, and opens the live
    /// memory of every (tenant, database) pair a key allows, which finalizes feedback that was
    /// acknowledged before a crash.
    pub fn start(config: ServeConfig, models: ServiceModels) -> Result<Service, StartError> {
        Service::start_with_clock(config, models, Arc::new(system_clock))
    }

    /// [`Service::start`] with a given clock.
    pub fn start_with_clock(
        config: ServeConfig,
        models: ServiceModels,
        clock: Clock,
    ) -> Result<Service, StartError> {
        let mut databases = BTreeMap::new();
        for database in &config.databases {
            let failed = |message: String| StartError::Database {
                name: database.name.clone(),
                path: database.path.as_ref().map_or_else(
                    || "PostgreSQL".to_string(),
                    |file| file.display().to_string(),
                ),
                message,
            };
            let opened: Arc<dyn Database> = match (&database.path, &database.postgres) {
                (Some(file), _) => {
                    Arc::new(SqliteDatabase::open(file).map_err(|e| failed(e.to_string()))?)
                }
                (None, Some(url)) => {
                    let server = PostgresServer::new(url).map_err(|e| failed(e.to_string()))?;
                    let name = database.database.as_deref().unwrap_or(&database.name);
                    Arc::new(
                        PostgresDatabase::connect(&server, name)
                            .map_err(|e| failed(e.to_string()))?,
                    )
                }
                (None, None) => return Err(failed("neither a path nor a server".to_string())),
            };
            let schema =
                schema_from_database(opened.as_ref()).map_err(|e| failed(e.to_string()))?;
            databases.insert(
                database.name.clone(),
                Served {
                    database: opened,
                    schema,
                },
            );
        }
        let live = live_config(&config);
        let hints = DatabaseHints::for_files(
            config
                .databases
                .iter()
                // Hints and the grammar read SQLite catalogs; a PostgreSQL database has none.
                .filter_map(|d| d.path.clone().map(|file| (d.name.clone(), file)))
                .collect(),
        );
        let service = Service {
            keys: config.key_table(),
            databases,
            memories: Mutex::new(HashMap::new()),
            model: models.repair,
            initial_model: models.initial,
            embedder: models.embedder,
            hints,
            live,
            config,
            clock,
        };
        let pairs: BTreeSet<(String, String)> = service
            .keys
            .values()
            .flat_map(|(tenant, dbs)| dbs.iter().map(|db| (tenant.clone(), db.clone())))
            .collect();
        for (tenant, database) in pairs {
            service
                .memory_of(&tenant, &database)
                .map_err(|source| StartError::Memory {
                    tenant,
                    database,
                    source,
                })?;
        }
        Ok(service)
    }

    /// The caller of a request with this `Authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, ServiceError> {
        let key = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .ok_or_else(|| {
                ServiceError::Unauthorized(
                    "missing API key: send the header `Authorization: Bearer <key>`".into(),
                )
            })?;
        let (tenant, databases) = self
            .keys
            .get(&hash_key(key))
            .ok_or_else(|| ServiceError::Unauthorized("unknown API key".into()))?;
        Ok(Caller {
            tenant: tenant.clone(),
            databases: databases.clone(),
        })
    }

    fn memory_of(&self, tenant: &str, database: &str) -> Result<Arc<LiveMemory>, LiveError> {
        let mut memories = self.memories.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.to_string(), database.to_string());
        if let Some(memory) = memories.get(&key) {
            return Ok(Arc::clone(memory));
        }
        let journal: Box<dyn JournalStore> = match &self.config.memory_postgres {
            // Shared by every replica that names the same server.
            Some(url) => Box::new(PostgresJournal::connect(
                url,
                &format!("{tenant}/{database}"),
            )?),
            None => {
                let dir = self.config.state_dir.join(tenant).join(database);
                Box::new(FileJournal::open(
                    &dir.join(merit_live::live::JOURNAL_FILE),
                )?)
            }
        };
        let (memory, _) = LiveMemory::open_with_store(
            journal,
            database,
            Arc::clone(&self.embedder),
            self.live.clone(),
        )?;
        let memory = Arc::new(memory);
        memories.insert(key, Arc::clone(&memory));
        Ok(memory)
    }

    /// The memory and database `caller` may use under `database`.
    fn scoped(
        &self,
        caller: &Caller,
        database: &str,
    ) -> Result<(Arc<LiveMemory>, &Served), ServiceError> {
        // Out of scope and unknown look the same: a key learns nothing about other databases.
        let served = self
            .databases
            .get(database)
            .filter(|_| caller.databases.contains(database))
            .ok_or_else(|| ServiceError::Forbidden(database.to_string()))?;
        Ok((self.memory_of(&caller.tenant, database)?, served))
    }

    /// The databases `caller` may use.
    pub fn databases(&self, caller: &Caller) -> Vec<String> {
        caller.databases.iter().cloned().collect()
    }

    /// Answers a question on `database` (SQL from the model, or `sql` to be repaired).
    pub fn ask(
        &self,
        caller: &Caller,
        database: &str,
        question: &str,
        evidence: &str,
        sql: Option<&str>,
    ) -> Result<Answer, ServiceError> {
        if question.trim().is_empty() || question.len() > 4_000 {
            return Err(ServiceError::BadRequest(
                "question must be between 1 and 4000 bytes".into(),
            ));
        }
        let (memory, served) = self.scoped(caller, database)?;
        let request = AskRequest {
            database: None,
            question,
            evidence,
            schema: &served.schema,
            initial_sql: sql,
        };
        let deps = LiveDeps {
            model: self.model.as_ref(),
            initial_model: self.initial_model.as_deref(),
            database: served.database.as_ref(),
            aids: Some(&self.hints),
        };
        Ok(memory.ask(&request, &deps, (self.clock)())?)
    }

    /// Records feedback on an answer and finalizes its episode.
    pub fn feedback(
        &self,
        caller: &Caller,
        database: &str,
        episode: u64,
        feedback: UserFeedback,
    ) -> Result<Finalization, ServiceError> {
        let (memory, served) = self.scoped(caller, database)?;
        Ok(memory.feedback(episode, feedback, served.database.as_ref(), (self.clock)())?)
    }

    /// The memories of `caller` on `database` (`retired`: only retired ones, only active ones,
    /// or all).
    pub fn memories(
        &self,
        caller: &Caller,
        database: &str,
        retired: Option<bool>,
    ) -> Result<Vec<MemoryInfo>, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory
            .memories()
            .into_iter()
            .filter(|m| retired.is_none_or(|wanted| m.retired == wanted))
            .collect())
    }

    /// The memories of `caller` on `database` that match `query` best (see
    /// [`LiveMemory::search`]), with their scores, at most `limit` (1 to 100).
    pub fn search_memories(
        &self,
        caller: &Caller,
        database: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ScoredMemory>, ServiceError> {
        if query.trim().is_empty() || query.len() > 4_000 {
            return Err(ServiceError::BadRequest(
                "a search query must be between 1 and 4000 bytes".into(),
            ));
        }
        if !(1..=100).contains(&limit) {
            return Err(ServiceError::BadRequest(format!(
                "limit must be between 1 and 100, not {limit}"
            )));
        }
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory
            .search(query, limit)
            .into_iter()
            .map(|(score, memory)| ScoredMemory { score, memory })
            .collect())
    }

    /// One memory.
    pub fn memory(
        &self,
        caller: &Caller,
        database: &str,
        id: u64,
    ) -> Result<MemoryInfo, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        memory
            .memory(id)
            .ok_or(ServiceError::Live(LiveError::UnknownMemory(id)))
    }

    /// Retires a memory.
    pub fn retire(
        &self,
        caller: &Caller,
        database: &str,
        id: u64,
        reason: &str,
    ) -> Result<MemoryInfo, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory.retire(id, reason, (self.clock)())?)
    }

    /// Restores a retired memory.
    pub fn restore(
        &self,
        caller: &Caller,
        database: &str,
        id: u64,
    ) -> Result<MemoryInfo, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory.restore(id, (self.clock)())?)
    }

    /// Memory growth and the users' verdicts of `caller`'s memory on `database`, one point
    /// per finalized episode.
    pub fn timeline(
        &self,
        caller: &Caller,
        database: &str,
    ) -> Result<Vec<TimelinePoint>, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory.timeline())
    }

    /// The counts of `caller`'s memory on `database`.
    pub fn stats(&self, caller: &Caller, database: &str) -> Result<LiveStats, ServiceError> {
        let (memory, _) = self.scoped(caller, database)?;
        Ok(memory.stats())
    }

    /// Finalizes every answer that waited past the configured wait, in every open memory;
    /// returns how many.
    pub fn finalize_expired(&self) -> Result<usize, LiveError> {
        let memories: Vec<Arc<LiveMemory>> = self
            .memories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let now = (self.clock)();
        let mut done = 0;
        for memory in memories {
            done += memory.finalize_expired(now)?.len();
        }
        Ok(done)
    }

    /// The configuration the service runs with.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_repair::repair::PrecedentView;

    #[test]
    fn the_configuration_reaches_the_live_repair_settings() {
        let defaults = live_config(&ServeConfig::parse("").unwrap());
        assert_eq!(defaults.aids.precedents, PrecedentView::Full);
        assert!(defaults.negative_memory && defaults.aids.repeat_guard);
        let chosen = live_config(
            &ServeConfig::parse(
                "precedents = \"change\"\nnegative_memory = false\nk = 3\nhints = false\n",
            )
            .unwrap(),
        );
        assert_eq!(chosen.aids.precedents, PrecedentView::Change);
        assert!(!chosen.negative_memory);
        assert_eq!(chosen.k, 3);
        assert!(!chosen.aids.hints.schema && !chosen.aids.hints.values);
    }
}
