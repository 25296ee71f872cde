//! `mull replay FILE`: fold a JSONL log (or a PostgreSQL log given by its `postgres://` URL)
//! and print what it amounts to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use mull_core::{Role, UIPart};
use mull_store::projection::SessionState;
use mull_store::{LogReader, ReadLog};

use crate::cli::import::import_into;

/// Replays each file in turn, under a heading of its name when there are several.
pub fn run(files: &[PathBuf]) -> Result<()> {
    for file in files {
        // Refused before anything is printed: a database given for JSONL names the way out.
        crate::cli::import::refuse_database(file)?;
    }
    for (i, file) in files.iter().enumerate() {
        if files.len() > 1 {
            if i > 0 {
                println!();
            }
            println!("== {}", file.display());
        }
        run_one(file)?;
    }
    Ok(())
}

/// Imports `file` into a temporary database (a PostgreSQL log is read where it is) and prints
/// every session.
fn run_one(file: &Path) -> Result<()> {
    if super::pg::url(file).is_some() {
        let reader = super::pg::open_log(file)?;
        print!("{}", report(&*reader)?);
        return Ok(());
    }
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let db = dir.path().join("replay.db");
    import_into(file, &db)?;
    let reader = LogReader::open(&db).with_context(|| format!("opening {}", db.display()))?;
    print!("{}", report(&reader)?);
    Ok(())
}

/// Every session's conversation and turn table, as printed.
pub fn report(reader: &dyn ReadLog) -> Result<String> {
    let mut out = String::new();
    for session in reader.sessions()? {
        let state = reader.load_session(&session.session_id)?;
        writeln!(out, "session {}", session.session_id)?;
        conversation(&state, &mut out)?;
        turn_table(&state, &mut out)?;
        out.push('\n');
    }
    Ok(out)
}

fn conversation(state: &SessionState, out: &mut String) -> Result<()> {
    let messages = state.messages.iter().chain(state.draft.iter());
    for message in messages {
        let who = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        };
        writeln!(out, "  {who}:")?;
        for part in &message.parts {
            match part {
                UIPart::Text { text, .. } => {
                    for line in text.lines() {
                        writeln!(out, "    {line}")?;
                    }
                }
                UIPart::Reasoning { text, .. } => {
                    writeln!(out, "    [reasoning, {} chars]", text.chars().count())?
                }
                UIPart::Tool(tool) => writeln!(
                    out,
                    "    [tool {} {} → {}]",
                    tool.tool_name,
                    tool.input,
                    tool.output
                        .as_ref()
                        .map(|o| o.to_string())
                        .or_else(|| tool.error_text.clone())
                        .unwrap_or_else(|| "pending".into())
                )?,
                UIPart::StepStart => {}
                other => writeln!(
                    out,
                    "    [{}]",
                    serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
                        .unwrap_or_default()
                )?,
            }
        }
    }
    Ok(())
}

fn turn_table(state: &SessionState, out: &mut String) -> Result<()> {
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let rows = state
        .turns
        .iter()
        .map(|turn| {
            let errors = turn.tools.failures + turn.hook_failures + u32::from(turn.error.is_some());
            vec![
                turn.turn_id
                    .as_deref()
                    .unwrap_or(&turn.request_id)
                    .to_owned(),
                turn.status.as_str().to_owned(),
                turn.steps.to_string(),
                n(turn.usage.input_tokens),
                n(turn.usage.output_tokens),
                n(turn.usage.cached_input_tokens),
                turn.tools.calls.to_string(),
                errors.to_string(),
            ]
        })
        .collect();
    let header = [
        "turn", "status", "steps", "in", "out", "cached", "tools", "errors",
    ];
    out.push_str(&super::table::render(
        Some(&header),
        &[2, 3, 4, 5, 6, 7],
        rows,
    ));
    // The errors, after the table, each naming the turn it ended.
    for turn in &state.turns {
        if let Some(error) = &turn.error {
            writeln!(
                out,
                "  {}: error: {error}",
                turn.turn_id.as_deref().unwrap_or(&turn.request_id)
            )?;
        }
    }
    Ok(())
}
