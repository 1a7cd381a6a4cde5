//! `merit serve` as a process: the key helper, the README's request flow over a real socket,
//! and acknowledged feedback surviving `kill -9` under load (20 trials).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "serve-test-key";
pub(crate) const WORDS: [&str; 4] = ["singer", "name", "country", "age"];

/// Every repair the model writes.
pub(crate) fn chat(_body: &Value) -> Value {
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "finish_reason": "stop", "message":
               {"role": "assistant", "content": "```sql\nSELECT Name FROM singer\n```"}}],
           "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}})
}

fn merit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_merit"))
}

/// One HTTP/1.1 request with `Connection: close`; `None` when the server is gone.
fn http(address: &str, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, payload) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(payload).unwrap_or(Value::Null)))
}

fn write_config(dir: &Path) -> std::path::PathBuf {
    let database = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/spider/database/concert_singer/concert_singer.sqlite");
    let hash = merit_serve::hash_key(KEY);
    let text = format!(
        "state_dir = \"state\"\n[[databases]]\nname = \"concert_singer\"\npath = \"{}\"\n\
         [[keys]]\ntenant = \"acme\"\nsha256 = \"{hash}\"\ndatabases = [\"concert_singer\"]\n",
        database.display()
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts `merit serve` on a free port against the stand-in models; returns the process and
/// the address it printed.
pub(crate) fn start(config: &Path, models: &str, cache: &Path) -> (Child, String) {
    let mut child = merit()
        .args(["serve", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--sweep-secs", "3600"])
        .args(["--llm-url", models, "--llm-model", "stand-in"])
        .args(["--embed-url", models, "--embed-model", "e", "--cache"])
        .arg(cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("merit serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines
            .next()
            .expect("merit serve printed its address before exiting")
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.trim().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, address)
}

fn ask_and_answer(address: &str, turn: u64) -> Option<(u64, Value)> {
    let (status, answer) = http(
        address,
        "POST",
        "/v1/ask",
        Some(
            &json!({"database": "concert_singer", "question": format!("Singer names, turn {turn}?"),
                     "sql": "SELECT nme FROM singer"}),
        ),
    )?;
    assert_eq!(status, 200, "{answer}");
    let episode = answer["episode"].as_u64()?;
    let kind = if turn.is_multiple_of(3) {
        "reject"
    } else {
        "confirm"
    };
    let (status, done) = http(
        address,
        "POST",
        "/v1/feedback",
        Some(&json!({"database": "concert_singer", "episode": episode,
                     "feedback": {"kind": kind}})),
    )?;
    assert_eq!(status, 200, "{done}");
    Some((episode, done))
}

#[test]
fn the_key_helper_prints_the_hash_the_configuration_stores() {
    let mut child = merit()
        .args(["serve", "--hash-key"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"my-key\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        merit_serve::hash_key("my-key")
    );
}

/// Twenty times: four clients ask and give feedback as fast as they can, and the server is
/// killed with SIGKILL at a different moment each time. Every feedback the server acknowledged
/// must be in the memory after the restart, once, with the entry it reported.
#[test]
fn acknowledged_feedback_survives_kill_9_under_load() {
    let models = crate::stand_in::serve(chat, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cache = dir.path().join("replies");
    let acknowledged: Arc<Mutex<Vec<(u64, Value)>>> = Arc::new(Mutex::new(Vec::new()));
    for trial in 0..20u64 {
        let (mut child, address) = start(&config, &models, &cache);
        let before = acknowledged.lock().unwrap().len();
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..4u64)
            .map(|client| {
                let (address, stop, acknowledged) = (
                    address.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&acknowledged),
                );
                std::thread::spawn(move || {
                    let mut turn = trial * 10_000 + client * 1_000;
                    while !stop.load(Ordering::SeqCst) {
                        match ask_and_answer(&address, turn) {
                            Some(done) => acknowledged.lock().unwrap().push(done),
                            None => break,
                        }
                        turn += 1;
                    }
                })
            })
            .collect();
        // The kill comes at a different moment of each trial, counted from when the load is
        // under way (two feedbacks acknowledged in this trial), so that a busy machine, slow to
        // answer the first requests, still kills a server under load.
        let under_way = std::time::Instant::now();
        while acknowledged.lock().unwrap().len() < before + 2
            && under_way.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(150 + (trial * 53) % 250));
        child.kill().unwrap();
        child.wait().unwrap();
        stop.store(true, Ordering::SeqCst);
        for client in clients {
            client.join().unwrap();
        }
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 40,
        "only {} acknowledged",
        acknowledged.len()
    );
    eprintln!(
        "{} feedbacks acknowledged across 20 kills under load",
        acknowledged.len()
    );

    let (mut child, address) = start(&config, &models, &cache);
    let (status, listed) = http(
        &address,
        "GET",
        "/v1/databases/concert_singer/memories",
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
    let listed = listed.as_array().unwrap().clone();
    let mut episodes: Vec<u64> = listed
        .iter()
        .map(|m| m["episode"].as_u64().unwrap())
        .collect();
    let mut ids: Vec<u64> = listed.iter().map(|m| m["id"].as_u64().unwrap()).collect();
    episodes.sort_unstable();
    episodes.dedup();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(episodes.len(), listed.len(), "an episode made two entries");
    assert_eq!(ids.len(), listed.len(), "two entries share an id");
    for (episode, done) in &acknowledged {
        let id = done["memory"]
            .as_u64()
            .expect("every repaired episode makes an entry");
        let entry = listed
            .iter()
            .find(|m| m["id"].as_u64() == Some(id))
            .unwrap_or_else(|| panic!("acknowledged entry m{id} of episode {episode} is lost"));
        assert_eq!(entry["episode"].as_u64(), Some(*episode));
        assert_eq!(entry["signal"], done["signal"]);
    }
    // And an acknowledged episode is final: its feedback cannot be given again.
    let (episode, _) = &acknowledged[acknowledged.len() / 2];
    let (status, _) = http(
        &address,
        "POST",
        "/v1/feedback",
        Some(&json!({"database": "concert_singer", "episode": episode,
                     "feedback": {"kind": "confirm"}})),
    )
    .unwrap();
    assert_eq!(status, 409);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Initial SQL that does not execute; every repair executes.
fn initial_fails(body: &Value) -> Value {
    let text = body["messages"].to_string();
    let sql = if text.contains("Write one SQL query that answers") {
        "SELECT nme FROM singer"
    } else {
        "SELECT count(*) FROM singer"
    };
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "finish_reason": "stop", "message":
               {"role": "assistant", "content": format!("```sql\n{sql}\n```")}}],
           "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}})
}

/// `merit live-experiment` end to end on the shipped Spider sample against stand-in models:
/// every arm answers the same questions, the report compares each with `none` and shows the
/// repair experiment's streams of the same questions beside them, a reference from another
/// stream is refused before any arm runs, and running the same command again changes nothing.
#[test]
fn the_live_experiment_runs_its_arms_and_reports_them() {
    let models = crate::stand_in::serve(initial_fails, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/spider-sample");
    let out = dir.path().join("live");
    let common = |command: &str, limit: &str| {
        let mut args: Vec<std::ffi::OsString> = vec![command.into(), "--data".into()];
        args.push(sample.clone().into());
        args.push("--db-dir".into());
        args.push(sample.join("database").into());
        for arg in [
            "--limit",
            limit,
            "--seeds",
            "0",
            "--k",
            "2",
            "--layout",
            "fresh",
            "--repeat-guard",
            "--llm-url",
            &models,
            "--llm-model",
            "stand-in",
            "--embed-url",
            &models,
            "--embed-model",
            "e",
            "--cache",
        ] {
            args.push(arg.into());
        }
        args.push(dir.path().join("replies").into());
        args
    };
    // The repair experiment on the same six questions, and on four (another stream).
    for (limit, name) in [("6", "repair"), ("4", "repair-4")] {
        let output = merit()
            .args(common("run", limit))
            .args(["--methods", "iterative,merit", "--out"])
            .arg(dir.path().join(name))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let reference = |run: &str, method: &str| {
        let log = dir
            .path()
            .join(run)
            .join(format!("episodes/{method}-seed0.jsonl"));
        format!("{method}={}", log.display())
    };
    let live = |references: &[String]| {
        let mut command = merit();
        command.args(common("live-experiment", "6")).args([
            "--arms",
            "none",
            "oracle",
            "p=0.5,e=0.2",
        ]);
        for reference in references {
            command.arg("--reference").arg(reference);
        }
        command.arg("--out").arg(&out).output().unwrap()
    };
    let wrong = live(&[reference("repair-4", "iterative")]);
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("4 episodes for a stream of 6"), "{stderr}");
    assert!(
        !out.join("arms").exists(),
        "no arm ran before the reference was checked"
    );
    let references = [
        reference("repair", "iterative"),
        reference("repair", "merit"),
    ];
    let command = || {
        let output = live(&references);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let report = command();
    for row in [
        "| none | 6 |",
        "| oracle-feedback | 6 |",
        "| p0.5-e0.2 | 6 |",
        "| reference iterative | 6 |",
        "| reference merit | 6 |",
        "| oracle-feedback − none | +",
        "| reference iterative − none |",
        "| reference merit − reference iterative |",
    ] {
        assert!(report.contains(row), "{row}: {report}");
    }
    assert!(out.join("accuracy-over-stream.svg").is_file());
    let answers = std::fs::read_to_string(out.join("arms/none/answers.jsonl")).unwrap();
    assert_eq!(answers.lines().count(), 6);
    assert!(answers.contains("\"attempts\":2"), "{answers}");
    assert_eq!(
        command(),
        report,
        "a finished experiment reports the same again"
    );
    // Continuing the arms with another repair budget is refused, naming what differs.
    let mut other_k = merit();
    let args: Vec<std::ffi::OsString> = common("live-experiment", "6")
        .into_iter()
        .map(|arg| if arg == "2" { "3".into() } else { arg })
        .collect();
    let output = other_k
        .args(args)
        .args(["--arms", "none"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("this arm was started with another repair configuration"),
        "{stderr}"
    );
}

/// `merit run` on 12 questions of the Spider sample (Iterative and MERIT, K = 2) against the
/// stand-in models: into `out`, or resuming it.
fn sample_run_args(models: &str, cache: &Path, out: &Path, resume: bool) -> Vec<String> {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/spider-sample");
    let mut args: Vec<String> = vec![
        "run".into(),
        "--data".into(),
        sample.display().to_string(),
        "--db-dir".into(),
        sample.join("database").display().to_string(),
    ];
    for extra in [
        "--methods",
        "iterative,merit",
        "--seeds",
        "0",
        "--limit",
        "12",
        "--k",
        "2",
    ] {
        args.push(extra.to_string());
    }
    args.extend(crate::mcp_tools::model_args(models, cache));
    args.push(if resume { "--resume" } else { "--out" }.into());
    args.push(out.display().to_string());
    args
}

/// Every file under `dir` (relative path → bytes).
fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A small tmpfs mounted for one test, unmounted when dropped (even after a failed assert).
struct Mounted(std::path::PathBuf);

impl Mounted {
    /// `None` where this process may not mount (not root, or no CAP_SYS_ADMIN).
    fn tmpfs(at: &Path) -> Option<Mounted> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
            .arg(at)
            .output()
            .ok()?;
        mounted.status.success().then(|| Mounted(at.to_path_buf()))
    }

    fn remount(&self, mode: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Issue 22, storage faults: a run directory on a file system that turned read-only. Resuming
/// it, and starting a new run there, stop at once with an error naming the folder and the
/// cause; nothing that was there changes; once writable again the same resume ends
/// byte-identical to a run that never stopped. Needs root (it mounts a tmpfs), so a plain
/// `cargo test` lists it as ignored; run where mounting fails it skips loudly, and fails
/// instead under `MERIT_REQUIRE_MOUNT=1` (which `.ci/run` sets where it can mount).
#[test]
#[ignore = "needs root to mount a tmpfs; run with --include-ignored, as CI does"]
fn a_read_only_run_directory_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mount) = Mounted::tmpfs(&dir.path().join("mnt")) else {
        merit_core::optional::missing(
            "MERIT_REQUIRE_MOUNT",
            "the read-only run directory test (mounting a tmpfs failed)",
            "run the tests as root on a machine that allows `mount -t tmpfs`",
        );
        return;
    };
    let models = crate::stand_in::serve(initial_fails, &WORDS);
    let cache = dir.path().join("replies");
    let run = |out: &Path, resume: bool| {
        merit()
            .args(sample_run_args(&models, &cache, out, resume))
            .output()
            .unwrap()
    };
    let reference = dir.path().join("reference");
    assert!(run(&reference, false).status.success());
    let expected = files_under(&reference.join("episodes"));

    // A run cut short on the mounted file system: its logs hold part of the work.
    let out = mount.0.join("run");
    assert!(run(&out, false).status.success());
    let log = out.join("episodes/merit-seed0.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: String = text.lines().take(5).map(|l| format!("{l}\n")).collect();
    std::fs::write(&log, kept).unwrap();
    let before = files_under(&out);

    mount.remount("ro");
    for (target, resume) in [(out.clone(), true), (mount.0.join("new"), false)] {
        let refused = run(&target, resume);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{stderr}");
        assert!(
            stderr.contains("Read-only file system")
                && stderr.contains(&*mount.0.to_string_lossy()),
            "a clear error naming the folder: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert_eq!(files_under(&out), before, "nothing that was there changed");

    mount.remount("rw");
    let resumed = run(&out, true);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        files_under(&out.join("episodes")),
        expected,
        "the resumed logs equal the uninterrupted ones"
    );
}

/// Issue 22, storage faults: a repair run whose episode logs outgrow a full disk (a file-size
/// limit, its signal ignored so that writes fail with EFBIG) stops with a clear error; the
/// append that failed is cut back, so the same command with room again ends byte-identical
/// to a run that never failed.
#[test]
fn a_full_disk_stops_a_repair_run_cleanly_and_it_resumes() {
    let models = crate::stand_in::serve(initial_fails, &WORDS);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("replies");
    let args = |out: &Path, resume: bool| sample_run_args(&models, &cache, out, resume);
    let run = |out: &Path, resume: bool| merit().args(args(out, resume)).output().unwrap();
    assert!(run(&dir.path().join("warm-up"), false).status.success());
    let reference = dir.path().join("reference");
    assert!(run(&reference, false).status.success());
    let episodes = |dir: &Path| {
        ["iterative-seed0.jsonl", "merit-seed0.jsonl"]
            .map(|name| std::fs::read(dir.join("episodes").join(name)).unwrap())
    };
    let expected = episodes(&reference);
    let limit_kib = (expected[1].len() / 1024 / 2).max(1);

    let out = dir.path().join("full-disk");
    let full = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {limit_kib}; exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_merit"))
        .args(args(&out, false))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert!(
        !full.status.success(),
        "the run fit under the limit: {stderr}"
    );
    assert!(
        stderr.contains("File too large") && stderr.contains("merit run --resume"),
        "a clear error saying how to continue: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    eprintln!("the full disk: {stderr}");
    let resumed = run(&out, true);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        episodes(&out),
        expected,
        "the resumed logs equal the uninterrupted ones"
    );
}

/// Issue 21, item 4: two `merit serve` replicas whose configurations name one PostgreSQL
/// server for memory. An answer given by one takes feedback through the other; the memory it
/// makes is listed by both; clients asking and giving feedback through both replicas at once
/// leave one memory, the same through either, with no duplicate.
#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn two_replicas_share_one_memory_on_postgresql() {
    let Some(url) = crate::postgres_url("replicas on one PostgreSQL memory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let models = crate::stand_in::serve(chat, &WORDS);
    // Each replica has its own state folder and cache; only the memory is shared. A tenant
    // name of its own keeps this run's memory apart from earlier runs on the same server.
    let tenant = format!("replicas{}", std::process::id());
    let config = |name: &str| {
        let path = write_config(dir.path());
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(
                "state_dir = \"state\"",
                &format!(
                    "state_dir = \"state-{name}\"\nmemory_postgres = \"{}\"",
                    url.as_str()
                ),
            )
            .replace("tenant = \"acme\"", &format!("tenant = \"{tenant}\""));
        let path = dir.path().join(format!("serve-{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let (config_a, config_b) = (config("a"), config("b"));
    let (mut a, address_a) = start(&config_a, &models, &dir.path().join("cache-a"));
    let (mut b, address_b) = start(&config_b, &models, &dir.path().join("cache-b"));

    let (status, answer) = http(
        &address_a,
        "POST",
        "/v1/ask",
        Some(
            &json!({"database": "concert_singer", "question": "Singer names?",
                     "sql": "SELECT nme FROM singer"}),
        ),
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    let (status, done) = http(
        &address_b,
        "POST",
        "/v1/feedback",
        Some(
            &json!({"database": "concert_singer", "episode": answer["episode"],
                     "feedback": {"kind": "confirm"}}),
        ),
    )
    .unwrap();
    assert_eq!(status, 200, "{done}");
    let memories = "/v1/databases/concert_singer/memories";
    let (_, listed) = http(&address_a, "GET", memories, None).unwrap();
    assert_eq!(listed[0]["id"], done["memory"], "{listed}");

    std::thread::scope(|scope| {
        for (client, address) in [&address_a, &address_b, &address_a, &address_b]
            .into_iter()
            .enumerate()
        {
            scope.spawn(move || {
                for round in 0..3u64 {
                    ask_and_answer(address, 100 * client as u64 + round + 1)
                        .expect("the replica answers");
                }
            });
        }
    });
    let (_, through_a) = http(&address_a, "GET", memories, None).unwrap();
    let (_, through_b) = http(&address_b, "GET", memories, None).unwrap();
    assert_eq!(through_a, through_b);
    let list = through_a.as_array().unwrap();
    assert_eq!(list.len(), 13, "one memory per finalized repaired answer");
    let episodes: std::collections::BTreeSet<u64> = list
        .iter()
        .map(|m| m["episode"].as_u64().unwrap())
        .collect();
    assert_eq!(episodes.len(), 13, "no duplicate");
    for child in [&mut a, &mut b] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
