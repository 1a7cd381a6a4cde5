//! Where a live memory's journal is kept: a JSON Lines file (the default; one process) or a
//! PostgreSQL table that several service replicas share.
//!
//! The journal is the memory's only storage: every replica keeps the exact in-process index of
//! [`merit_memory::Memory`] and builds it by replaying the journal's events in order, the same
//! way one process rebuilds it at start. Replicas share a memory by sharing the journal:
//!
//! - **One writer at a time.** Every decision that writes (an ask's answer, feedback and its
//!   finalization, a retirement) runs between [`JournalStore::claim`] and
//!   [`JournalStore::release`]; on PostgreSQL the claim is an advisory lock of that memory, so
//!   replicas take turns and each one first replays what the others wrote.
//! - **Positions are the journal's.** Event `n` is written as number `n`, and the store refuses
//!   a second event with the same number, so two writers that somehow decided at once cannot
//!   both land (the loser's call fails; nothing is duplicated).
//! - **Episode ids are the store's.** An ask takes its id before its model calls (outside the
//!   claim); the store hands out ids no other replica gets.
//!
//! Retrieval therefore scores exactly as the embedded store does (it is the embedded store),
//! and a replica sees another's finalized memories as soon as it next reads the journal,
//! which it does before every retrieval, listing and decision.

use crate::types::{LiveError, LiveEvent};
use merit_journal::jsonl::{self as journal, Appender, Tail};
use std::path::{Path, PathBuf};

/// A live memory's journal (see the module docs).
pub trait JournalStore: Send {
    /// Where the journal is, for messages (a path, or a server and memory name; never a
    /// password).
    fn describe(&self) -> String;

    /// Waits until this writer alone may decide and write; held until [`JournalStore::release`].
    fn claim(&mut self) -> Result<(), LiveError>;

    /// Ends a [`JournalStore::claim`].
    fn release(&mut self) -> Result<(), LiveError>;

    /// The events from number `from` (0-based) on, in order.
    fn read_from(&mut self, from: u64) -> Result<Vec<LiveEvent>, LiveError>;

    /// Writes `event` as event number `at` and returns once it is durable. Another event
    /// already there is an error: nothing is overwritten or written twice.
    fn append_at(&mut self, at: u64, event: &LiveEvent) -> Result<(), LiveError>;

    /// An episode id that no writer of this journal has had or will get, at least `at_least`.
    fn allocate_episode(&mut self, at_least: u64) -> Result<u64, LiveError>;

    /// Bytes of a torn last line cut off when the journal was opened (files only).
    fn torn_bytes(&self) -> usize {
        0
    }
}

fn corrupt(path: impl Into<PathBuf>, message: String) -> LiveError {
    LiveError::Corrupt {
        path: path.into(),
        message,
    }
}

/// The journal as one append-only JSONL file ([`merit_journal::jsonl`]): one process writes it
/// (`merit serve` holds the state folder), so claims are no-ops and ids are counted locally.
pub struct FileJournal {
    path: PathBuf,
    appender: Appender,
    /// The events read at open, handed out by the first [`JournalStore::read_from`].
    opened: Vec<LiveEvent>,
    count: u64,
    torn_bytes: usize,
}

impl FileJournal {
    /// Opens (creating) the journal file `path`, cutting off a torn last line.
    pub fn open(path: &Path) -> Result<FileJournal, LiveError> {
        let parse = |raw: &[u8]| {
            if raw.iter().all(u8::is_ascii_whitespace) {
                return Ok(None);
            }
            serde_json::from_slice::<LiveEvent>(raw)
                .map(Some)
                .map_err(|e| e.to_string())
        };
        let (events, ending) = journal::read_all(path, Tail::Torn, parse)?;
        let appender = Appender::resume(path, &ending)?;
        Ok(FileJournal {
            path: path.to_path_buf(),
            appender,
            count: events.len() as u64,
            opened: events,
            torn_bytes: ending.torn.as_ref().map_or(0, |torn| torn.bytes),
        })
    }
}

impl JournalStore for FileJournal {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn claim(&mut self) -> Result<(), LiveError> {
        Ok(())
    }

    fn release(&mut self) -> Result<(), LiveError> {
        Ok(())
    }

    fn read_from(&mut self, from: u64) -> Result<Vec<LiveEvent>, LiveError> {
        // One writer: after the events read at open, only this process's own appends exist,
        // and the memory has applied those already.
        if from == 0 {
            return Ok(std::mem::take(&mut self.opened));
        }
        Ok(Vec::new())
    }

    fn append_at(&mut self, at: u64, event: &LiveEvent) -> Result<(), LiveError> {
        if at != self.count {
            return Err(corrupt(
                &self.path,
                format!("event {at} written after {} events", self.count),
            ));
        }
        self.appender.append_record(event)?;
        self.count += 1;
        Ok(())
    }

    fn allocate_episode(&mut self, at_least: u64) -> Result<u64, LiveError> {
        Ok(at_least)
    }

    fn torn_bytes(&self) -> usize {
        self.torn_bytes
    }
}

/// The journal as rows of a PostgreSQL table shared by replicas (see the module docs):
/// `merit_live_events (memory, seq, event)` with `(memory, seq)` unique, and an episode counter
/// per memory in `merit_live_counters`. The role needs to create those two tables (or find
/// them); no model-written SQL runs on this connection.
pub struct PostgresJournal {
    client: postgres::Client,
    memory: String,
    lock_key: i64,
    describe: String,
}

fn pg_error(describe: &str, error: postgres::Error) -> LiveError {
    let message = error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_string());
    LiveError::Store {
        store: describe.to_string(),
        message,
    }
}

impl PostgresJournal {
    /// Connects to `url` and opens the journal named `memory` (e.g. `tenant/database`),
    /// creating the tables when they are missing.
    pub fn connect(url: &str, memory: &str) -> Result<PostgresJournal, LiveError> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e| corrupt("postgresql", format!("not a PostgreSQL URL: {e}")))?;
        let host = config
            .get_hosts()
            .first()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_default();
        let describe = format!(
            "postgresql://{host}/{} (memory {memory})",
            config.get_dbname().unwrap_or("")
        );
        let client = config
            .connect(postgres::NoTls)
            .map_err(|e| pg_error(&describe, e))?;
        // The advisory lock's key: a stable hash of the memory's name.
        let lock_key = merit_core::hash::fnv1a(format!("merit-live:{memory}").as_bytes()) as i64;
        let mut journal = PostgresJournal {
            client,
            memory: memory.to_string(),
            lock_key,
            describe,
        };
        // Replicas starting together must not race on creating the tables.
        journal.claim()?;
        let created = journal.client.batch_execute(
            "CREATE TABLE IF NOT EXISTS merit_live_events (memory text NOT NULL, seq bigint NOT \
             NULL, event text NOT NULL, PRIMARY KEY (memory, seq)); \
             CREATE TABLE IF NOT EXISTS merit_live_counters (memory text PRIMARY KEY, \
             next_episode bigint NOT NULL);",
        );
        let released = journal.release();
        created.map_err(|e| pg_error(&journal.describe, e))?;
        released?;
        Ok(journal)
    }
}

impl JournalStore for PostgresJournal {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn claim(&mut self) -> Result<(), LiveError> {
        self.client
            .execute("SELECT pg_advisory_lock($1)", &[&self.lock_key])
            .map(|_| ())
            .map_err(|e| pg_error(&self.describe, e))
    }

    fn release(&mut self) -> Result<(), LiveError> {
        self.client
            .execute("SELECT pg_advisory_unlock($1)", &[&self.lock_key])
            .map(|_| ())
            .map_err(|e| pg_error(&self.describe, e))
    }

    fn read_from(&mut self, from: u64) -> Result<Vec<LiveEvent>, LiveError> {
        let from = from as i64;
        let rows = self
            .client
            .query(
                "SELECT seq, event FROM merit_live_events WHERE memory = $1 AND seq >= $2 \
                 ORDER BY seq",
                &[&self.memory, &from],
            )
            .map_err(|e| pg_error(&self.describe, e))?;
        rows.iter()
            .enumerate()
            .map(|(offset, row)| {
                let seq: i64 = row.get(0);
                if seq != from + offset as i64 {
                    return Err(corrupt(
                        self.describe.as_str(),
                        format!("event {} is missing", from + offset as i64),
                    ));
                }
                let text: String = row.get(1);
                serde_json::from_str(&text)
                    .map_err(|e| corrupt(self.describe.as_str(), format!("event {seq}: {e}")))
            })
            .collect()
    }

    fn append_at(&mut self, at: u64, event: &LiveEvent) -> Result<(), LiveError> {
        let text = serde_json::to_string(event)
            .map_err(|e| corrupt(self.describe.as_str(), e.to_string()))?;
        let at = at as i64;
        self.client
            .execute(
                "INSERT INTO merit_live_events (memory, seq, event) VALUES ($1, $2, $3)",
                &[&self.memory, &at, &text],
            )
            .map(|_| ())
            .map_err(|e| pg_error(&self.describe, e))
    }

    fn allocate_episode(&mut self, at_least: u64) -> Result<u64, LiveError> {
        let at_least = at_least as i64;
        let row = self
            .client
            .query_one(
                "INSERT INTO merit_live_counters (memory, next_episode) \
                 VALUES ($1, $2::bigint + 1) ON CONFLICT (memory) DO UPDATE SET next_episode = \
                 GREATEST(merit_live_counters.next_episode, $2::bigint) + 1 \
                 RETURNING next_episode - 1",
                &[&self.memory, &at_least],
            )
            .map_err(|e| pg_error(&self.describe, e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}
