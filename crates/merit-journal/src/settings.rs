//! The settings a run directory was started with, written once and checked on every later
//! start: the repair run's `manifest.json` and the interact run's `settings.json`.
//!
//! A run continues only under the settings it began with, since episodes made under other
//! settings would not belong to the same experiment. The file is written atomically on the
//! first start; a later start compares the settings as JSON values (key order and layout do
//! not matter, so files written by older versions with another layout still match).

use serde::Serialize;
use std::path::{Path, PathBuf};

/// Why the settings could not be checked, or do not match.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file could not be read or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The settings file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The file exists but is not JSON.
    #[error("{} is not valid JSON: {message}", path.display())]
    Corrupt {
        /// The settings file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The run was started with other settings.
    #[error("{} was written for other settings:\n  recorded: {recorded}\n  now:      {now}", path.display())]
    Differs {
        /// The settings file.
        path: PathBuf,
        /// The recorded settings, as compact JSON.
        recorded: String,
        /// The settings of this start, as compact JSON.
        now: String,
    },
}

/// What [`ensure_settings`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingsCheck {
    /// No file was there: the settings were written (a new run).
    Written,
    /// The file holds the same settings (a run that continues).
    Matches,
}

/// Writes `settings` to `path` (pretty JSON and a final newline, atomically) when no file is
/// there, or checks that the file holds the same settings.
pub fn ensure_settings<S: Serialize>(
    path: &Path,
    settings: &S,
) -> Result<SettingsCheck, SettingsError> {
    let io = |error: &dyn std::fmt::Display| SettingsError::Io {
        path: path.to_path_buf(),
        message: error.to_string(),
    };
    let now = serde_json::to_value(settings).map_err(|e| io(&e))?;
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let recorded: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| SettingsError::Corrupt {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?;
            if recorded == now {
                Ok(SettingsCheck::Matches)
            } else {
                Err(SettingsError::Differs {
                    path: path.to_path_buf(),
                    recorded: recorded.to_string(),
                    now: now.to_string(),
                })
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let mut text = serde_json::to_string_pretty(settings).map_err(|e| io(&e))?;
            text.push('\n');
            if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(folder).map_err(|e| io(&e))?;
            }
            merit_core::fs::write_atomically(path, text.as_bytes()).map_err(|e| io(&e))?;
            Ok(SettingsCheck::Written)
        }
        Err(error) => Err(io(&error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_written_once_then_compared_as_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/settings.json");
        let first = serde_json::json!({"model": "m", "k": 7});
        assert_eq!(
            ensure_settings(&path, &first).unwrap(),
            SettingsCheck::Written
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"), "{text:?}");
        // Another layout and key order of the same values still matches.
        std::fs::write(&path, "{\"k\":7,\"model\":\"m\"}").unwrap();
        assert_eq!(
            ensure_settings(&path, &first).unwrap(),
            SettingsCheck::Matches
        );
        let error = ensure_settings(&path, &serde_json::json!({"model": "m", "k": 5}))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("recorded") && error.contains("\"k\":5"),
            "{error}"
        );
        std::fs::write(&path, "{not json").unwrap();
        let error = ensure_settings(&path, &first).unwrap_err();
        assert!(matches!(error, SettingsError::Corrupt { .. }), "{error}");
    }
}
