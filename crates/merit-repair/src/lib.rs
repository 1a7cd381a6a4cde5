//! The repair agent of MERIT repair: prompts, SQL extraction and the repair episode.
//!
//! - [`prompts`]: the initial Text-to-SQL prompt of the `merit-prompts-v3` family (the repair
//!   and reflection prompts are in `repair::prompt`, beside the loop that fills them);
//! - [`extract`]: pulling one SQL statement out of a model reply;
//! - [`grammar`]: a decoding grammar that allows only the database's names (an aid);
//! - [`hints`]: repair hints read from the live database (an aid, off in the paper's setting);
//! - [`memory`]: the adapter from the episode's memory trait to `merit-memory`;
//! - [`repair`]: one repair episode, generic over the model, the oracle and the memory.

#![warn(missing_docs)]

/// SQL extraction lives in `merit_sql` (the interact agents use it too); re-exported here.
pub use merit_sql::extract;
pub mod grammar;
pub mod hints;
pub mod memory;
pub mod prompts;
pub mod repair;
