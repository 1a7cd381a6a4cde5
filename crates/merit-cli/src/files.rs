//! Writing result files so that a crash never leaves a half-written one behind.

use anyhow::Result;
use std::path::Path;

/// Writes `contents` to `path` atomically (see [`merit_lab::run::write_atomically`]):
/// readers see the old file or the new one, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    merit_lab::run::write_atomically(path, contents)?;
    Ok(())
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub fn progress_bar(length: usize, message: &'static str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(length as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(message);
    bar
}
