//! The check a writer runs when it opens a log: SQLite's `quick_check` within a work budget,
//! then the newest rows, so that nothing is appended to a file no reader can get through (see
//! [`crate::integrity`]).

use std::path::Path;

use rusqlite::Connection;

use crate::error::{damaged, StoreError};

/// How much of `quick_check` a writer's open may run: progress-handler calls of
/// 1,000 SQLite steps each. Measured: a log of 300,000 events (43 MB) takes 4,200 calls and
/// 0.14 s to check whole, so the budget covers about 1.4 million events (200 MB) whole; a larger
/// log is checked as far as the budget goes, and its right edge always.
pub const OPEN_CHECK_BUDGET: u32 = 20_000;

/// SQLite steps between two calls of the progress handler during the open check.
const BUDGET_STEP: i32 = 1_000;

/// How many of SQLite's complaints an error quotes: the first few say where the damage is.
const QUOTED_PROBLEMS: usize = 3;

/// Runs the open check on a writer's connection: `quick_check` within the budget, then the
/// last rows of the event table. A problem is [`StoreError::Damaged`].
pub(crate) fn check_at_open(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let handler = |what: &str| StoreError::sqlite(format!("{}: {what}", path.display()));
    let mut calls = 0u32;
    conn.progress_handler(
        BUDGET_STEP,
        Some(move || {
            calls += 1;
            calls > OPEN_CHECK_BUDGET
        }),
    )
    .map_err(handler("bounding the open check"))?;
    let result = quick_check(conn);
    conn.progress_handler(BUDGET_STEP, None::<fn() -> bool>)
        .map_err(handler("ending the open check"))?;
    let problems = match result {
        Ok(problems) => problems,
        // The budget ran out before the check did: what it saw was sound.
        Err(err) if err.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => {
            Vec::new()
        }
        Err(err) => vec![err.to_string()],
    };
    if !problems.is_empty() {
        return Err(damaged(path, describe_problems(&problems)));
    }
    // The right edge, which every append extends: the last rows must read.
    conn.query_row(
        "SELECT count(*) FROM (SELECT payload FROM events ORDER BY seq DESC LIMIT 64)",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map_err(|err| damaged(path, format!("the newest events cannot be read ({err})")))?;
    Ok(())
}

/// `PRAGMA quick_check`'s complaints (none when it answers `ok`).
fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

fn describe_problems(problems: &[String]) -> String {
    let quoted = problems[..problems.len().min(QUOTED_PROBLEMS)].join("; ");
    match problems.len() {
        n if n > QUOTED_PROBLEMS => format!("{quoted}; and {} more problems", n - QUOTED_PROBLEMS),
        _ => quoted,
    }
}
