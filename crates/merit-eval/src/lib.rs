//! Official-equivalent evaluators for Spider and BIRD, Spider hardness, and the oracle.
//!
//! The reference scripts are Python; their verdicts depend on Python's value semantics and on
//! text rewrites applied before execution. Each is reproduced in its own module so a reader can
//! check it against the reference line by line:
//! - [`spider_text`]: the rewrites (`value`→`1`, `> =`, DISTINCT removal, `YEAR(CURDATE())`);
//! - [`python`]: `int`/`float` equality, `str(v)+str(type(v))`, text decoding;
//! - [`compare`]: Spider's bag/permutation match and BIRD's set match;
//! - [`evaluator`]: the per-pair procedures with gold-result caching;
//! - [`spider_sql`]: Spider's SQL parser and hardness levels;
//! - [`oracle`]: the gold-holding judge the repair loop calls;
//! - [`suite`]: batch evaluation and the official report tables.

#![warn(missing_docs)]

pub mod compare;
pub mod evaluator;
pub mod oracle;
pub mod python;
pub mod spider_sql;
pub mod spider_text;
pub mod suite;

pub use evaluator::{EvalConfig, Evaluator, Verdict};
pub use oracle::{Oracle, OracleError};
