//! Official-equivalent evaluators for Spider and BIRD, Spider hardness, and the oracle.

pub mod spider_sql;
