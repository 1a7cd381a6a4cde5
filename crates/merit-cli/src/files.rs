//! Writing result files so that a crash never leaves a half-written one behind.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes `contents` to `path` atomically: a temporary file in the same folder, flushed to
/// disk, then renamed over the target. Readers see the old file or the new one, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut temporary = tempfile::NamedTempFile::new_in(folder)
        .with_context(|| format!("cannot create a temporary file in {}", folder.display()))?;
    temporary
        .write_all(contents)
        .and_then(|()| temporary.as_file().sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    temporary
        .persist(path)
        .map_err(|error| error.error)
        .with_context(|| format!("cannot move the finished file to {}", path.display()))?;
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
