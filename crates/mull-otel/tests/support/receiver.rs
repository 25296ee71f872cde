//! A real OTLP/HTTP receiver for tests (otlp_receiver.py beside this file, which decodes with the
//! official `opentelemetry-proto` package pinned in requirements.txt), installed by the tests
//! themselves into a project-local virtual environment (see python_env.rs), and helpers to read
//! what it received.
//! Shared by this crate's tests and the binary's (which include this file by path), so it needs
//! only std, serde_json and tempfile.
//!
//! Without python3 the tests print why they skip — except under CI (`CI` set), where a missing
//! python3 fails them: there they must run.

// Each including test crate uses its own part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../../../tests/support/python_env.rs"]
mod python_env;

use python_env::workspace;

fn support_dir() -> PathBuf {
    workspace().join("crates/mull-otel/tests/support")
}

/// The Python of the project-local environment with `opentelemetry-proto` installed, installing
/// it the first time; `None` (after printing why) where python3 is absent outside CI.
pub fn python() -> Option<PathBuf> {
    python_env::python_env(
        "otlp-python",
        &support_dir().join("requirements.txt"),
        "the OTLP receiver tests",
    )
}

/// The receiver on a free loopback port, killed when dropped.
pub struct Receiver {
    child: Child,
    /// Its base URL (spans go to `URL/v1/traces`).
    pub url: String,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts the receiver; `None` where the tests skip (see [`python`]).
    pub fn start() -> Option<Receiver> {
        let python = python()?;
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("spans.jsonl");
        let mut child = Command::new(python)
            .arg(support_dir().join("otlp_receiver.py"))
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starts the OTLP receiver");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("the OTLP receiver did not say where it listens within 60 s");
            }
        };
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Some(Receiver {
            child,
            url,
            out,
            _dir: dir,
        })
    }

    /// Every span received so far, as the receiver decoded it.
    pub fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a span line is JSON"))
            .collect()
    }

    /// Every metric received so far (one entry per metric per request), as the receiver
    /// decoded it.
    pub fn metrics(&self) -> Vec<Value> {
        let mut path = self.out.clone().into_os_string();
        path.push(".metrics");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a metric line is JSON"))
            .collect()
    }

    /// The metrics received once one named `name` has arrived (waiting up to 30 s).
    pub fn wait_for_metric(&self, name: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let metrics = self.metrics();
            if metrics.iter().any(|m| m["name"] == name) || Instant::now() > deadline {
                return metrics;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The spans received once at least `n` have arrived (waiting up to 30 s).
    pub fn wait_for(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if spans.len() >= n || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The span named `name`, failing with every name received when there is none.
pub fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans.iter().find(|s| s["name"] == name).unwrap_or_else(|| {
        let names: Vec<&Value> = spans.iter().map(|s| &s["name"]).collect();
        panic!("no span {name:?} among {names:?}")
    })
}

/// Attribute `key` of a received span, as its OTLP `AnyValue` JSON (`{"string_value": …}`).
pub fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// A string attribute.
pub fn attr_str<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    attr(span, key)?.get("string_value")?.as_str()
}

/// An integer attribute (OTLP's JSON writes 64-bit integers as strings).
pub fn attr_int(span: &Value, key: &str) -> Option<i64> {
    let v = attr(span, key)?.get("int_value")?;
    v.as_i64().or_else(|| v.as_str()?.parse().ok())
}

/// A floating-point attribute.
pub fn attr_f64(span: &Value, key: &str) -> Option<f64> {
    attr(span, key)?.get("double_value")?.as_f64()
}

/// A boolean attribute.
pub fn attr_bool(span: &Value, key: &str) -> Option<bool> {
    attr(span, key)?.get("bool_value")?.as_bool()
}

/// A time field of a received span, in nanoseconds since the epoch.
pub fn nanos(span: &Value, field: &str) -> i64 {
    let v = &span[field];
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{field} of {span}"))
}
