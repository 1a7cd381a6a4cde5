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

/// The status of a failure described on the command line: `--status` when given, else an
/// execution error when there is DBMS text (`--error`), else a result mismatch.
pub fn failure_status(status: Option<StatusArg>, error: Option<&str>) -> Status {
    match (status, error) {
        (Some(status), _) => status.into(),
        (None, Some(_)) => Status::ExecutionError,
        (None, None) => Status::DenotationMismatch,
    }
}

/// Parses a sampling temperature, refusing what no backend samples sensibly: a value that is
/// not a finite number from 0 (greedy) to 2.
pub fn sampling_temperature(text: &str) -> Result<f32, String> {
    let temperature: f32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(format!("{text} is outside 0 to 2"));
    }
    Ok(temperature)
}

#[cfg(test)]
mod tests {
    use super::{failure_status, sampling_temperature, StatusArg};
    use merit_core::Status;

    #[test]
    fn a_failure_without_status_is_an_execution_error_only_with_dbms_text() {
        assert_eq!(
            failure_status(Some(StatusArg::Timeout), Some("x")),
            Status::Timeout
        );
        assert_eq!(
            failure_status(None, Some("no such column")),
            Status::ExecutionError
        );
        assert_eq!(failure_status(None, None), Status::DenotationMismatch);
    }

    #[test]
    fn sampling_temperatures_outside_zero_to_two_are_refused() {
        assert_eq!(sampling_temperature("0.7"), Ok(0.7));
        assert_eq!(sampling_temperature("0"), Ok(0.0));
        assert_eq!(sampling_temperature("2"), Ok(2.0));
        assert_eq!(
            sampling_temperature("2.5"),
            Err("2.5 is outside 0 to 2".into())
        );
        assert_eq!(
            sampling_temperature("-0.1"),
            Err("-0.1 is outside 0 to 2".into())
        );
        assert_eq!(
            sampling_temperature("NaN"),
            Err("NaN is outside 0 to 2".into())
        );
        assert_eq!(
            sampling_temperature("warm"),
            Err("`warm` is not a number".into())
        );
    }
}
