//! What the MCP tests share: a real MCP server (tests/support/mcp_server.py, written with the
//! official Python SDK pinned in requirements.txt) installed by the tests themselves into a
//! project-local virtual environment, started over stdio or streamable HTTP.
//!
//! Without python3 the tests print why they skip — except under CI (`CI` set), where a missing
//! python3 fails them: there they must run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

/// How long creating the environment and installing the SDK may take.
const INSTALL_LIMIT: Duration = Duration::from_secs(600);

fn support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support")
}

/// The test server's script.
pub fn server_script() -> PathBuf {
    support_dir().join("mcp_server.py")
}

/// The Python of the project-local environment with the MCP SDK installed, installing it the
/// first time; `None` (after printing why) where python3 is absent outside CI.
pub fn python() -> Option<PathBuf> {
    static READY: OnceLock<Mutex<Option<Option<PathBuf>>>> = OnceLock::new();
    let ready = READY.get_or_init(|| Mutex::new(None));
    let mut ready = ready.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = ready.as_ref() {
        return known.clone();
    }
    let found = install();
    *ready = Some(found.clone());
    found
}

fn install() -> Option<PathBuf> {
    let system = std::process::Command::new("python3")
        .arg("--version")
        .output();
    if !matches!(&system, Ok(out) if out.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is required for the MCP tests under CI"
        );
        eprintln!("skipping: python3 is not installed, so no MCP test server can run");
        return None;
    }
    let env_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-python");
    let python = env_dir.join("bin/python");
    let requirements = support_dir().join("requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("reads requirements.txt");
    let marker = env_dir.join("mull-installed.txt");
    if python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(&wanted) {
        return Some(python);
    }
    let started = Instant::now();
    run_bounded(
        std::process::Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&env_dir),
        started,
    );
    run_bounded(
        std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        started,
    );
    std::fs::write(&marker, wanted).expect("marks the environment installed");
    Some(python)
}

/// Runs `command` to its end, failing the test if it fails or outlives [`INSTALL_LIMIT`]
/// counted from `started`.
fn run_bounded(command: &mut std::process::Command, started: Instant) {
    let mut child = command
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starts {command:?}: {e}"));
    loop {
        if let Some(status) = child.try_wait().expect("waits for the installer") {
            assert!(status.success(), "{command:?} failed: {status}");
            return;
        }
        if started.elapsed() > INSTALL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {INSTALL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test server over streamable HTTP on a free loopback port, stopped when dropped.
pub struct HttpServer {
    child: tokio::process::Child,
    pub url: String,
}

impl HttpServer {
    /// Starts the server; each tool call is noted in `call_log`.
    pub async fn start(python: &Path, call_log: &Path) -> HttpServer {
        let mut child = tokio::process::Command::new(python)
            .arg(server_script())
            .arg("http")
            .env("MCP_CALL_LOG", call_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starts the HTTP test server");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the HTTP test server says where it listens within 60 s")
            .expect("reads the server's stdout")
            .expect("the server printed a line");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        HttpServer { child, url }
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The tool calls the server noted, as (tool, arguments) JSON lines.
pub fn calls(call_log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(call_log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a call line is JSON"))
        .collect()
}
