//! Files replaced whole: a reader (or a run resumed after a kill) sees the old contents or the
//! new ones, never a part. The one implementation every crate's result, manifest, checkpoint
//! and metafile writer goes through.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes the temporary files of one process.
static TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary name beside `path` (same folder, so that the final rename is atomic;
/// hidden, and unique to this process and call).
pub fn temporary_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Puts the finished file `temporary` in place of `path`: syncs it, renames it over `path`,
/// and syncs the folder (on Unix) so that the rename survives a power cut. On failure the
/// temporary file is removed and `path` is left as it was.
pub fn persist(temporary: &Path, path: &Path) -> io::Result<()> {
    let result = File::open(temporary)
        .and_then(|file| file.sync_all())
        .and_then(|()| std::fs::rename(temporary, path));
    if result.is_err() {
        let _ = std::fs::remove_file(temporary);
        return result;
    }
    #[cfg(unix)]
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // Best effort: some filesystems refuse to sync a directory; the rename is done.
        let _ = File::open(folder).and_then(|dir| dir.sync_all());
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, renamed over it.
/// A missing folder is created first.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)?;
    }
    let temporary = temporary_beside(path);
    let written = File::create(&temporary).and_then(|mut file| file.write_all(bytes));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    persist(&temporary, path)
}

/// An exclusive claim on a folder for the life of this value (an OS file lock on
/// `FOLDER/.lock`, released when dropped or when the process dies, even by `kill -9`).
#[derive(Debug)]
pub struct FolderLock {
    _file: File,
}

/// Claims `folder` (which must exist) for this process, so that two processes never append to
/// the same run's logs at once. `Ok(None)` when another process holds it.
pub fn lock_folder(folder: &Path) -> io::Result<Option<FolderLock>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(folder.join(".lock"))?;
    match file.try_lock() {
        Ok(()) => {
            // This process now owns the folder: a temporary file in it can only be the
            // leftover of a writer killed between writing and renaming, never another
            // process's file in flight.
            remove_leftover_temporaries(folder);
            Ok(Some(FolderLock { _file: file }))
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(error)) => Err(error),
    }
}

/// `true` for a name [`temporary_beside`] makes: `.NAME.tmp-PID-N`.
fn is_temporary_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((_, tail)) = rest.rsplit_once(".tmp-") else {
        return false;
    };
    let mut parts = tail.split('-');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(pid), Some(n), None)
            if !pid.is_empty() && !n.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && n.bytes().all(|b| b.is_ascii_digit())
    )
}

/// Removes, best effort, the temporaries of killed writers in `folder` and below.
fn remove_leftover_temporaries(folder: &Path) {
    let mut pending = vec![folder.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() && is_temporary_name(&entry.file_name().to_string_lossy()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claiming_a_folder_removes_the_temporaries_of_killed_writers_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("report")).unwrap();
        let leftovers = [".settings.json.tmp-123-0", "report/.table.md.tmp-9-17"];
        let kept = [
            "settings.json",
            ".lockfile",
            ".a.tmp-x-1",
            "report/table.md",
        ];
        for name in leftovers.iter().chain(&kept) {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let lock = lock_folder(dir.path())
            .unwrap()
            .expect("the folder is free");
        for name in leftovers {
            assert!(!dir.path().join(name).exists(), "{name} is left");
        }
        for name in kept {
            assert!(dir.path().join(name).exists(), "{name} was removed");
        }
        drop(lock);
        assert!(is_temporary_name(".x.tmp-1-2") && !is_temporary_name("x.tmp-1-2"));
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = std::env::temp_dir().join(format!("merit-core-fs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("result.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("result.json")]);
        // A folder that does not exist is created first.
        let nested = dir.join("absent").join("x.json");
        write_atomically(&nested, b"x").unwrap();
        assert_eq!(std::fs::read(&nested).unwrap(), b"x");
        // A folder that cannot be created (a file stands in its way) is an error.
        let blocked = path.join("x.json");
        assert!(write_atomically(&blocked, b"x").is_err());
        assert_ne!(temporary_beside(&path), temporary_beside(&path));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_is_held_by_one_claim_at_a_time() {
        let dir = std::env::temp_dir().join(format!("merit-core-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock_folder(&dir).unwrap();
        assert!(first.is_some());
        // A second claim (as another process would make) is refused while the first holds.
        assert!(lock_folder(&dir).unwrap().is_none());
        drop(first);
        assert!(lock_folder(&dir).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
