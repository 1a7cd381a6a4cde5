//! (in progress)

pub mod initial;
