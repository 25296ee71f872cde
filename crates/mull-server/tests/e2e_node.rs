//! End-to-end: the AI SDK's own client (npm `ai`, pinned in e2e/package-lock.json) drives the
//! server over SSE and WebSocket from Node: a text turn, server tools, a client tool round trip,
//! tool approvals answered with `addToolApprovalResponse` (over SSE and over WebSocket),
//! a regenerated answer (the chat's own `regenerate()`), a dropped-and-resumed stream on each
//! transport, a cancel and a stop.
//!
//! Needs Node 20+ and npm (it runs `npm ci` in e2e/ itself), so it is ignored by default:
//! `cargo test -p mull-server --test e2e_node -- --ignored`. Binds 127.0.0.1 only; the server
//! and the Node process end with the test.

mod harness;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness::server;
use tokio::process::Command;

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e")
}

async fn tool_version(tool: &str) -> Result<String, String> {
    let output = Command::new(tool)
        .arg("--version")
        .output()
        .await
        .map_err(|e| {
            format!("`{tool}` was not found ({e}); the end-to-end test needs Node 20+ and npm")
        })?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node 20+ and npm; run with --ignored"]
async fn the_ai_sdk_client_drives_the_server() {
    let node = tool_version("node").await.unwrap_or_else(|e| panic!("{e}"));
    let npm = tool_version("npm").await.unwrap_or_else(|e| panic!("{e}"));
    let major: u32 = node
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 20,
        "Node {node} is too old; the end-to-end test needs Node 20+"
    );
    eprintln!("node {node}, npm {npm}");

    let dir = e2e_dir();
    let install = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .await
        .expect("npm ci runs");
    assert!(install.success(), "`npm ci` failed in {}", dir.display());

    let server = server().await;
    let addr = server.addr;

    let mut client = Command::new("node")
        .arg("client.mjs")
        .arg(format!("http://{addr}"))
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let stdout = client.stdout.take().expect("stdout");
    let stderr = client.stderr.take().expect("stderr");
    let status = tokio::time::timeout(Duration::from_secs(120), client.wait())
        .await
        .expect("the Node client finishes within 2 minutes")
        .expect("node exit status");
    let mut out = String::new();
    let mut err = String::new();
    use tokio::io::AsyncReadExt;
    let _ = tokio::io::BufReader::new(stdout)
        .read_to_string(&mut out)
        .await;
    let _ = tokio::io::BufReader::new(stderr)
        .read_to_string(&mut err)
        .await;
    server.shut_down().await;
    eprintln!("{out}{err}");
    assert!(status.success(), "the AI SDK client failed:\n{out}\n{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        10,
        "{out}"
    );
}
