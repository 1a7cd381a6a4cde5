//! One integration-test binary for merit-learn (it links candle; one binary keeps the disk small).

mod rules;
mod selector;
mod student;
mod train;
