//! A list of hook calls, one line each, that an agent (or several agents and extensions)
//! writes to and a test reads back.

use std::sync::{Arc, Mutex};

/// Hook calls in the order they happened; clones share the same list.
#[derive(Clone, Default)]
pub struct HookCalls(Arc<Mutex<Vec<String>>>);

impl HookCalls {
    /// Adds one call.
    pub fn record(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    /// Every call so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Every call so far, one a line.
    pub fn joined(&self) -> String {
        self.lines().join("\n")
    }

    /// Every call so far, one a line, with runs of identical lines folded into `… xN`.
    pub fn folded(&self) -> String {
        fold(&self.lines()).join("\n")
    }
}

/// `lines` with each run of identical lines written once, followed by ` xN` when N > 1.
pub fn fold(lines: &[String]) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in lines {
        match out.last_mut() {
            Some((last, n)) if last == line => *n += 1,
            _ => out.push((line.clone(), 1)),
        }
    }
    out.into_iter()
        .map(|(l, n)| if n > 1 { format!("{l} x{n}") } else { l })
        .collect()
}
