//! `scripts/checkpoint.sh`, which carries the long experiments' run folders and reply cache
//! across machines, on a scratch copy: saves are deterministic and leave out what the script
//! says; a restore brings back only what is missing, never over a newer local file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch project: `scripts/checkpoint.sh` copied in (it works relative to its own folder),
/// a `runs/` folder and a reply cache under `home`.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let home = dir.path().join("merit-home");
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/checkpoint.sh");
        std::fs::copy(script, root.join("scripts/checkpoint.sh")).unwrap();
        Scratch {
            _dir: dir,
            root,
            home,
        }
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn write_segment(&self, name: &str, text: &str) {
        let dir = self.home.join("replies");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(path)).ok()
    }

    fn run(&self, action: &str, extra: &[(&str, &str)]) -> String {
        let output = Command::new("bash")
            .arg(self.root.join("scripts/checkpoint.sh"))
            .arg(action)
            .env("MERIT_HOME", &self.home)
            .envs(extra.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "checkpoint.sh {action}: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned() + &stderr
    }
}

#[test]
fn a_checkpoint_round_trips_what_a_resume_needs_and_nothing_else() {
    let scratch = Scratch::new();
    scratch.write(
        "runs/repair-dev/chosen/episodes/merit-seed0.jsonl",
        "{\"a\":1}\n",
    );
    scratch.write("runs/repair-dev/chosen/manifest.json", "{}\n");
    scratch.write("runs/repair-dev/source-commit", "abc\n");
    // Left out: the pinned binary, a repair stream's memory (rebuilt from its log), logs.
    scratch.write("runs/repair-dev/merit", "binary");
    scratch.write("runs/repair-dev/chosen/memory/positive.jsonl", "{}\n");
    scratch.write("runs/queue.log", "log\n");
    scratch.write_segment("seg-1.jsonl", "{\"reply\":1}\n");
    scratch.run("save", &[]);
    let archive = scratch.root.join("checkpoints/runs.tar.gz");
    let first = std::fs::read(&archive).unwrap();
    // Saving again over unchanged runs gives the same bytes (no new commit).
    scratch.run("save", &[]);
    assert_eq!(std::fs::read(&archive).unwrap(), first);
    assert!(scratch
        .root
        .join("checkpoints/replies/seg-1.jsonl.gz")
        .is_file());

    // A fresh machine: the run folder and the cache come back, the left-out files do not.
    std::fs::remove_dir_all(scratch.root.join("runs")).unwrap();
    std::fs::remove_dir_all(&scratch.home).unwrap();
    scratch.write("runs/repair-dev/source-commit", "newer\n");
    let said = scratch.run("restore", &[]);
    assert!(said.contains("restored 1 reply-cache segments"), "{said}");
    assert_eq!(
        scratch
            .read("runs/repair-dev/chosen/episodes/merit-seed0.jsonl")
            .as_deref(),
        Some("{\"a\":1}\n")
    );
    assert_eq!(
        scratch.read("runs/repair-dev/source-commit").as_deref(),
        Some("newer\n"),
        "a local file is never overwritten"
    );
    for left_out in [
        "runs/repair-dev/merit",
        "runs/repair-dev/chosen/memory/positive.jsonl",
        "runs/queue.log",
    ] {
        assert_eq!(scratch.read(left_out), None, "{left_out}");
    }
    assert_eq!(
        std::fs::read_to_string(scratch.home.join("replies/seg-1.jsonl")).unwrap(),
        "{\"reply\":1}\n"
    );

    // A segment that grew locally stays the local (newer) copy.
    scratch.write_segment("seg-1.jsonl", "{\"reply\":1}\n{\"reply\":2}\n");
    let said = scratch.run("restore", &[]);
    assert!(said.contains("restored 0 reply-cache segments"), "{said}");
    assert_eq!(
        std::fs::read_to_string(scratch.home.join("replies/seg-1.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
}

#[test]
fn a_reply_cache_over_the_limit_is_left_out_with_a_message() {
    let scratch = Scratch::new();
    scratch.write("runs/a/episodes/x.jsonl", "{}\n");
    // Incompressible-enough text well over a 0 MB limit.
    let text: String = (0..20_000)
        .map(|i| format!("{i:x}{}\n", i * 7919))
        .collect();
    scratch.write_segment("seg-big.jsonl", &text);
    let said = scratch.run("save", &[("REPLIES_MAX_MB", "0")]);
    assert!(said.contains("not saved"), "{said}");
    assert!(!scratch.root.join("checkpoints/replies").exists());
    assert!(scratch.root.join("checkpoints/runs.tar.gz").is_file());
}
