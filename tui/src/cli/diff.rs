//! `mull diff A B`: two runs of a conversation compared turn by turn (see `mull_store::diff`).
//!
//! A and B are each `PATH` or `PATH@SESSION`, where PATH is a database (a SQLite file or a
//! `postgres://` URL) or a JSONL file; the
//! session may be left out when the log holds only one. Prints a table (or JSON with
//! `--json`) and exits 1 when the runs diverge, like diff(1).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use mull_store::diff::{diff_runs, read_run, DiffOptions, Run};
use mull_store::ReadLog;

use crate::cli::import::import_into;

/// What `mull diff` takes.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first run: PATH or PATH@SESSION (PATH a database, a `postgres://` URL or a .jsonl
    /// file).
    pub a: String,
    /// The second run, the same way.
    pub b: String,
    /// Compare only this turn (counted from 1) of each run.
    #[arg(long)]
    pub turn: Option<usize>,
    /// Print the diff as JSON.
    #[arg(long)]
    pub json: bool,
    /// Compare runs even when they look like different conversations.
    #[arg(long)]
    pub unrelated: bool,
    /// Leave timing out.
    #[arg(long)]
    pub no_timing: bool,
}

/// Prints the diff; returns whether the runs diverge.
pub fn run(args: DiffArgs) -> Result<bool> {
    let scratch = tempfile::tempdir().context("creating a temporary directory")?;
    let mut a = load(&args.a, scratch.path(), "a")?;
    let mut b = load(&args.b, scratch.path(), "b")?;
    if let Some(turn) = args.turn {
        a = only_turn(&a, turn)?;
        b = only_turn(&b, turn)?;
    }
    let options = DiffOptions {
        allow_unrelated: args.unrelated,
        ignore_timing: args.no_timing,
    };
    let diff = diff_runs(&a, &b, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff)?);
    } else {
        print!("{}", diff.table());
    }
    Ok(!diff.is_same())
}

fn only_turn(run: &Run, turn: usize) -> Result<Run> {
    match run.only_turn(turn) {
        Some(run) => Ok(run),
        None => bail!(
            "{} has no turn {turn} (it has {} turns)",
            run.label,
            run.turns.len()
        ),
    }
}

/// Reads `PATH[@SESSION]`; a JSONL file is imported into a scratch database first, a
/// PostgreSQL log is read where it is.
fn load(spec: &str, scratch: &Path, side: &str) -> Result<Run> {
    let (path, session) = split_spec(spec);
    let path = PathBuf::from(path);
    let postgres = super::pg::url(&path).is_some();
    if !postgres && !path.exists() {
        bail!("{}: no such file", path.display());
    }
    let db = if !postgres && path.extension().is_some_and(|e| e == "jsonl") {
        let db = scratch.join(format!("{side}.db"));
        import_into(&path, &db)?;
        db
    } else {
        path.clone()
    };
    let reader = super::pg::open_log(&db)?;
    let reader = &*reader;
    let session = match session {
        Some(session) => {
            if !reader.has_session(session)? {
                bail!(
                    "{} holds no session {session:?} (sessions: {})",
                    path.display(),
                    session_list(reader)?
                );
            }
            session.to_owned()
        }
        None => {
            let sessions = reader.sessions()?;
            match sessions.as_slice() {
                [only] => only.session_id.clone(),
                [] => bail!("{} holds no session", path.display()),
                _ => bail!(
                    "{} holds {} sessions; name one as {}@SESSION (sessions: {})",
                    path.display(),
                    sessions.len(),
                    path.display(),
                    session_list(reader)?
                ),
            }
        }
    };
    let label = format!("{}@{session}", path.display());
    Ok(read_run(reader, &session, label)?)
}

/// `PATH@SESSION` → (PATH, SESSION); the last `@` splits, so a path may hold one.
fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.rsplit_once('@') {
        Some((path, session)) if !session.is_empty() && !session.contains('/') => {
            (path, Some(session))
        }
        _ => (spec, None),
    }
}

fn session_list(reader: &dyn ReadLog) -> Result<String> {
    let ids: Vec<String> = reader
        .sessions()?
        .into_iter()
        .map(|s| s.session_id)
        .take(12)
        .collect();
    Ok(ids.join(", "))
}
