//! Argument types more than one command takes.

use clap::ValueEnum;
use merit_core::Status;

/// An oracle status as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// The query ran but its result is wrong.
    DenotationMismatch,
    /// The DBMS rejected the query.
    ExecutionError,
    /// The query ran out of time.
    Timeout,
}

impl From<StatusArg> for Status {
    fn from(value: StatusArg) -> Status {
        match value {
            StatusArg::DenotationMismatch => Status::DenotationMismatch,
            StatusArg::ExecutionError => Status::ExecutionError,
            StatusArg::Timeout => Status::Timeout,
        }
    }
}
