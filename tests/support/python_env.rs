//! A project-local Python virtual environment for tests that need a real peer written in Python
//! (the MCP test server, the OTLP receiver). Each caller names its environment and its pinned
//! `requirements.txt`; the environment lives under `target/` and is rebuilt only when the pins
//! change. Included by path from each crate's test support, so it needs only std.
//!
//! Without python3 the tests print why they skip — except under CI (`CI` set), where a missing
//! python3 fails them: there they must run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long creating an environment and installing its packages may take.
const INSTALL_LIMIT: Duration = Duration::from_secs(600);

/// The workspace's root, found from whichever crate includes this file.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("Cargo.lock").exists())
        .expect("inside the workspace")
        .to_path_buf()
}

/// The Python of environment `target/<name>` with `requirements` installed, installing it the
/// first time in this process; `None` (after printing why) where python3 is absent outside CI.
/// `purpose` completes "python3 is required for …" in the skip or failure message.
pub fn python_env(name: &str, requirements: &Path, purpose: &str) -> Option<PathBuf> {
    static READY: OnceLock<Mutex<HashMap<String, Option<PathBuf>>>> = OnceLock::new();
    let ready = READY.get_or_init(|| Mutex::new(HashMap::new()));
    let mut ready = ready.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = ready.get(name) {
        return known.clone();
    }
    let found = install(name, requirements, purpose);
    ready.insert(name.to_owned(), found.clone());
    found
}

fn install(name: &str, requirements: &Path, purpose: &str) -> Option<PathBuf> {
    let system = Command::new("python3").arg("--version").output();
    if !matches!(&system, Ok(out) if out.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is required for {purpose} under CI"
        );
        eprintln!("skipping: python3 is not installed, so {purpose} cannot run");
        return None;
    }
    let env_dir = workspace().join("target").join(name);
    let python = env_dir.join("bin/python");
    let wanted = std::fs::read_to_string(requirements)
        .unwrap_or_else(|e| panic!("reads {}: {e}", requirements.display()));
    let marker = env_dir.join("mull-installed.txt");
    if python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(&wanted) {
        return Some(python);
    }
    let started = Instant::now();
    run_bounded(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&env_dir),
        started,
    );
    run_bounded(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(requirements),
        started,
    );
    std::fs::write(&marker, wanted).expect("marks the environment installed");
    Some(python)
}

/// Runs `command` to its end, failing the test if it fails or outlives [`INSTALL_LIMIT`]
/// counted from `started`.
fn run_bounded(command: &mut Command, started: Instant) {
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
