//! What the MCP tests share: a real MCP server (tests/support/mcp_server.py, written with the
//! official Python SDK pinned in requirements.txt) installed by the tests themselves into a
//! project-local virtual environment (see python_env.rs), started over stdio or streamable HTTP.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

#[path = "../../../../tests/support/python_env.rs"]
mod python_env;

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
    python_env::python_env(
        "mcp-python",
        &support_dir().join("requirements.txt"),
        "the MCP test server",
    )
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
