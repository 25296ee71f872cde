//! How the binary ends: an error is printed as its chain of causes and exits 1; a backtrace
//! only when `MULL_BACKTRACE=1` asks for one.
//!
//! Many Rust users keep `RUST_BACKTRACE=1` set. anyhow would then capture a backtrace for every
//! error and print it with a user's mistake (a typo in a path); a backtrace helps with a bug in
//! mull, not with that. So library backtraces follow `MULL_BACKTRACE` alone; a panic, which is
//! always a bug, still follows `RUST_BACKTRACE`.

use std::process::ExitCode;

/// The variable that turns backtraces of errors on.
pub const BACKTRACE_VAR: &str = "MULL_BACKTRACE";

/// Runs `body` (the whole command) and turns its result into the exit code.
pub fn run(body: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    let backtraces = wants_backtraces();
    // Single-threaded still: nothing else reads the environment yet. anyhow reads
    // RUST_LIB_BACKTRACE before RUST_BACKTRACE.
    std::env::set_var("RUST_LIB_BACKTRACE", if backtraces { "1" } else { "0" });
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprint!("{}", render(&err, backtraces));
            ExitCode::FAILURE
        }
    }
}

fn wants_backtraces() -> bool {
    std::env::var(BACKTRACE_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The error as printed: `Error: …` and its causes, as anyhow prints them, with the backtrace
/// only when asked for.
pub fn render(err: &anyhow::Error, backtraces: bool) -> String {
    if backtraces {
        return format!("Error: {err:?}\n");
    }
    let mut out = format!("Error: {err}\n");
    let causes: Vec<String> = err.chain().skip(1).map(|c| c.to_string()).collect();
    if !causes.is_empty() {
        out.push_str("\nCaused by:\n");
        for (i, cause) in causes.iter().enumerate() {
            if causes.len() == 1 {
                out.push_str(&format!("    {cause}\n"));
            } else {
                out.push_str(&format!("    {i}: {cause}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_prints_its_causes_and_no_backtrace() {
        let err = anyhow::anyhow!("no such log").context("opening x.db");
        assert_eq!(
            render(&err, false),
            "Error: opening x.db\n\nCaused by:\n    no such log\n"
        );
        let err = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(
            render(&err, false),
            "Error: outer\n\nCaused by:\n    0: middle\n    1: inner\n"
        );
    }
}
