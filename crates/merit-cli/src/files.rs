//! Writing result files so that a crash never leaves a half-written one behind, and printing to
//! stdout so that a closed pipe ends the program quietly (`say!`, `say_raw!`).

/// `println!` through [`write_text`]: a closed stdout pipe ends the program quietly.
macro_rules! say {
    () => {
        crate::files::write_text("\n")
    };
    ($($arg:tt)*) => {
        crate::files::write_text(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write_text`].
macro_rules! say_raw {
    ($($arg:tt)*) => {
        crate::files::write_text(&format!($($arg)*))
    };
}

use anyhow::{Context, Result};
use std::path::Path;

/// Writes a result file atomically ([`merit_core::fs::write_atomically`]): readers see the
/// old file or the new one, never a part; a failure names the file.
pub fn write_result_file(path: &Path, contents: &[u8]) -> Result<()> {
    merit_core::fs::write_atomically(path, contents)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Claims the run directory `dir` for this process (see [`merit_core::fs::lock_folder`]), or
/// says that another process is using it.
pub fn lock_run_dir(dir: &Path) -> Result<merit_core::fs::FolderLock> {
    merit_core::fs::lock_folder(dir)
        .with_context(|| format!("cannot lock {}", dir.display()))?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} is in use by another merit process (a run or resume of the same \
                 directory); wait for it to end, or use another output folder",
                dir.display()
            )
        })
}

/// Claims the folder that holds `file` (created if missing; `.` for a bare file name), for a
/// command that appends to one file of its own rather than owning a run directory: two such
/// processes on one file would log the same items twice.
pub fn lock_folder_of(file: &Path) -> Result<merit_core::fs::FolderLock> {
    let folder = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("cannot create {}", folder.display()))?;
    lock_run_dir(&folder)
}

/// [`merit_core::parallel::all_at_once`] with a thread that panicked as an error naming `what`.
pub fn all_at_once<T: Sync, R: Send>(
    items: &[T],
    what: &str,
    work: impl Fn(&T) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    merit_core::parallel::all_at_once(items, work)
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err(anyhow::anyhow!("{what} failed unexpectedly"))))
        .collect()
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
/// Prints the bar's state as a plain line every `every` steps (and at the end) when standard
/// error is not a terminal. indicatif draws nothing there, and a long background run whose
/// log stays silent for an hour cannot be told apart from a stuck one.
pub fn log_progress_when_not_a_terminal(bar: &indicatif::ProgressBar, every: u64) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        return;
    }
    let position = bar.position();
    let length = bar.length().unwrap_or(0);
    if position.is_multiple_of(every.max(1)) || position == length {
        let elapsed = bar.elapsed().as_secs();
        eprintln!(
            "{} {position}/{length} [{:02}:{:02}:{:02}]",
            bar.message(),
            elapsed / 3600,
            elapsed / 60 % 60,
            elapsed % 60
        );
    }
}

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

/// Writes `text` to stdout. When stdout is a closed pipe (`merit memory ls | head`), the
/// program ends quietly, as command-line tools do, instead of panicking like `println!`.
pub(crate) fn write_text(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {error}");
        std::process::exit(1);
    }
}
