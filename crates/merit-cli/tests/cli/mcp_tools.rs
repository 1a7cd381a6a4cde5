//! merit's MCP tools driven by the official MCP Python SDK (issue 21, item 1): over streamable
//! HTTP (`/mcp` of a `merit serve` process) and over stdio (`merit mcp`), the same flow an
//! agent follows (ask → repaired answer → confirm → memory found by search → retire →
//! restore), with refusals read as tool errors and tenants kept apart.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) const KEY: &str = "mcp-test-key";
const OTHER_KEY: &str = "mcp-other-tenant-key";

/// The python of a virtual environment with the MCP SDK (`scripts/setup-mcp-client.sh`), or
/// `None` (skipping loudly) when it is not given and not required.
fn mcp_python() -> Option<String> {
    merit_core::optional::from_env(
        "MERIT_MCP_PYTHON",
        "MERIT_REQUIRE_MCP",
        "the MCP client test",
        "MERIT_MCP_PYTHON=$(bash scripts/setup-mcp-client.sh | tail -n 1)",
    )
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/mcp_client.py")
}

/// Two tenants on concert_singer; pets_1 is configured but outside the first key's scope.
pub(crate) fn write_config(dir: &Path) -> PathBuf {
    let spider = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/spider/database");
    let text = format!(
        "state_dir = \"{state}\"\n\
         [[databases]]\nname = \"concert_singer\"\npath = \"{spider}/concert_singer/concert_singer.sqlite\"\n\
         [[databases]]\nname = \"pets_1\"\npath = \"{spider}/pets_1/pets_1.sqlite\"\n\
         [[keys]]\ntenant = \"acme\"\nsha256 = \"{a}\"\ndatabases = [\"concert_singer\"]\n\
         [[keys]]\ntenant = \"globex\"\nsha256 = \"{b}\"\ndatabases = [\"concert_singer\", \"pets_1\"]\n",
        state = dir.join("state").display(),
        spider = spider.display(),
        a = merit_serve::hash_key(KEY),
        b = merit_serve::hash_key(OTHER_KEY),
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn model_args(models: &str, cache: &Path) -> Vec<String> {
    [
        "--llm-url",
        models,
        "--llm-model",
        "stand-in",
        "--embed-url",
        models,
        "--embed-model",
        "e",
        "--cache",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([cache.display().to_string()])
    .collect()
}

/// What the client saw, checked the same way for both transports.
fn check(seen: &Value) {
    assert_eq!(seen["repaired_sql"], "SELECT Name FROM singer", "{seen}");
    assert_eq!(seen["polarity"], "positive", "{seen}");
    assert_eq!(seen["retired"], true, "{seen}");
    assert_eq!(seen["listed_retired"], json!([seen["memory"]]), "{seen}");
    assert_eq!(seen["restored"], true, "{seen}");
    assert_eq!(seen["asked"], 1, "{seen}");
    let again = seen["second_feedback"].as_str().unwrap();
    assert!(again.contains("finalized"), "{again}");
    let outside = seen["outside_scope"].as_str().unwrap();
    assert!(
        outside.contains("may not use database \"pets_1\""),
        "{outside}"
    );
}

fn run_client(python: &str, args: &[String], env: &[(&str, &str)]) -> Value {
    let output = Command::new(python)
        .arg(client_script())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the MCP client runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the MCP client failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

#[test]
#[ignore = "needs the MCP Python SDK: MERIT_MCP_PYTHON=$(bash scripts/setup-mcp-client.sh | tail -n 1); run with --include-ignored, as CI does"]
fn the_official_python_client_drives_the_tools_over_streamable_http() {
    let Some(python) = mcp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let models = crate::stand_in::serve(crate::serve_process::chat, &crate::serve_process::WORDS);
    let (mut server, address) =
        crate::serve_process::start(&config, &models, &dir.path().join("cache"));
    let url = format!("http://{address}/mcp");
    let seen = run_client(
        &python,
        &["http".into(), url.clone(), KEY.into(), OTHER_KEY.into()],
        &[],
    );
    check(&seen);
    assert_eq!(
        seen["databases"],
        json!(["concert_singer"]),
        "a key lists only its own databases"
    );
    assert_eq!(
        seen["other_tenant_memories"],
        json!([]),
        "another tenant reads none of this memory"
    );
    // Without a known key the endpoint answers 401 before any MCP session exists.
    let refused = Command::new(&python)
        .args([
            "-c",
            "import sys, urllib.request, urllib.error\n\
             request = urllib.request.Request(sys.argv[1], data=b'{}', method='POST',\n\
                 headers={'Authorization': 'Bearer wrong', 'Content-Type': 'application/json'})\n\
             try:\n    urllib.request.urlopen(request)\nexcept urllib.error.HTTPError as e:\n    print(e.code)",
            &url,
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&refused.stdout).trim(), "401");
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
#[ignore = "needs the MCP Python SDK: MERIT_MCP_PYTHON=$(bash scripts/setup-mcp-client.sh | tail -n 1); run with --include-ignored, as CI does"]
fn the_official_python_client_drives_merit_mcp_over_stdio() {
    let Some(python) = mcp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let models = crate::stand_in::serve(crate::serve_process::chat, &crate::serve_process::WORDS);
    let mut args = vec![
        "stdio".to_string(),
        env!("CARGO_BIN_EXE_merit").to_string(),
        "mcp".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    args.extend(model_args(&models, &dir.path().join("cache")));
    let seen = run_client(&python, &args, &[("MERIT_API_KEY", KEY)]);
    check(&seen);
    // The memory is the tenant's on disk, where `merit serve` would find it too.
    assert!(dir
        .path()
        .join("state/acme/concert_singer/live.jsonl")
        .exists());

    // Without a key, `merit mcp` stops at once with a message naming what to set.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["mcp", "--config"])
        .arg(&config)
        .env_remove("MERIT_API_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("MERIT_API_KEY"), "{stderr}");
}
