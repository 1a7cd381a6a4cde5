//! Live mode of MERIT repair: the repair loop and its memory for production, where no gold
//! oracle says whether SQL is right.
//!
//! Both papers decide a memory's polarity with the benchmark's oracle. A production
//! Text-to-SQL service has two weaker signals: the database (an attempt executes, fails or
//! times out; always there, at once) and the user (confirm, reject, or a correction; maybe
//! later, maybe never). Live mode repairs from the first and learns from both:
//!
//! - [`judge::ExecutionJudge`] runs attempts read-only with a deadline and a row cap; the loop
//!   stops at the first query that executes, so live mode repairs execution errors and
//!   timeouts, with precedents from memory;
//! - an answer waits for feedback; [`live::LiveMemory::feedback`] or, after a configurable
//!   wait, [`live::LiveMemory::finalize_expired`] finalizes it, and [`signals`] decides the
//!   entry's polarity and confidence from what was said (provenance recorded with it);
//! - a memory retrieved into answers the user later rejects is retired automatically
//!   ([`signals::RetirementPolicy`]): out of retrieval, kept, logged, and reversible;
//! - everything is journaled, one fsync'd line per event, before a call returns; the memory is
//!   rebuilt from the journal when opened, so acknowledged feedback survives `kill -9`
//!   ([`store`]: the file journal, or a journal shared on PostgreSQL by several replicas);
//! - causality holds as in the papers: an episode sees only entries of episodes finalized
//!   before its retrieval, never its own.
//!
//! One [`live::LiveMemory`] serves one database; a service keeps one per (tenant, database).

#![warn(missing_docs)]

pub mod judge;
pub mod live;
pub mod signals;
pub mod store;
pub mod types;

pub use live::{
    Answer, AskRequest, Finalization, LiveAttempt, LiveConfig, LiveDeps, LiveError, LiveEvent,
    LiveMemory, LiveStats, MemoryInfo, OpenReport, TimelinePoint, UsedMemory,
};
pub use signals::{Record, RetirementPolicy, Signal, UserFeedback};
pub use store::{FileJournal, JournalStore, PostgresJournal};
