//! Writes the database files of the bad-input corpus (`tests/badinput/db/`): real mull logs
//! damaged in the ways a disk, a crash or a newer build damages them, plus a SQLite file of
//! another program. Regenerate with `cargo run -p mull-reliability -- gen-badinput`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use mull_core::{Clock, EntryPath, Event, FixedClock, StreamPart, TurnStatus, UIMessage, Usage};
use mull_store::{writer::lock_path, Log};

/// Events in the damaged logs: enough pages that damage in the middle hits rows.
const CHUNKS: u32 = 1000;

/// Writes a log of one session with one finished turn of `CHUNKS` text deltas.
pub fn write_sample_log(path: &Path, chunks: u32) -> anyhow::Result<()> {
    let log = Log::open(path).with_context(|| format!("creating {}", path.display()))?;
    let clock = FixedClock::at_fixture_epoch();
    let append = |turn: Option<&str>, event: Event| -> anyhow::Result<()> {
        clock.advance(Duration::from_millis(1));
        log.append("sess_corpus", turn, clock.now(), event)?;
        Ok(())
    };
    append(
        None,
        Event::SessionOpened {
            agent: "corpus".into(),
            metadata: serde_json::Value::Null,
        },
    )?;
    append(
        None,
        Event::UserMessagesSaved {
            request_id: Some("req_1".into()),
            messages: vec![UIMessage::user("msg_user_1", "tell me a long story")],
        },
    )?;
    append(
        Some("turn_1"),
        Event::TurnStarted {
            request_id: "req_1".into(),
            message_id: "msg_1".into(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: serde_json::Value::Null,
        },
    )?;
    append(Some("turn_1"), Event::StepStarted { step: 0 })?;
    for i in 0..chunks {
        append(
            Some("turn_1"),
            Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "t0".into(),
                    text: format!("word {i} of a long story, "),
                },
                original: None,
            },
        )?;
    }
    append(
        Some("turn_1"),
        Event::TurnFinished {
            request_id: "req_1".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    )?;
    log.close()?;
    // The last close checkpointed the WAL into the file; the lock sidecar is not corpus.
    let _ = std::fs::remove_file(lock_path(path));
    Ok(())
}

/// Overwrites the big-endian u32 at `offset` of the file's header.
fn patch_u32(path: &Path, offset: usize, value: u32) -> anyhow::Result<()> {
    let mut bytes = std::fs::read(path)?;
    bytes[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
    std::fs::write(path, bytes)?;
    Ok(())
}

/// Writes every database file of the corpus into `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let fresh = |name: &str| -> anyhow::Result<std::path::PathBuf> {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        Ok(path)
    };

    // A schema newer than this build: user_version (header offset 60) one past ours.
    let newer = fresh("newer_schema.db")?;
    write_sample_log(&newer, 3)?;
    patch_u32(&newer, 60, mull_store::schema::SCHEMA_VERSION as u32 + 1)?;

    // Cut in the middle, as a copy interrupted half-way leaves it.
    let truncated = fresh("truncated.db")?;
    write_sample_log(&truncated, CHUNKS)?;
    let bytes = std::fs::read(&truncated)?;
    let page = 4096;
    let keep = (bytes.len() / 2) / page * page + page / 2;
    std::fs::write(&truncated, &bytes[..keep])?;

    // Garbage over a run of pages in the middle, header intact.
    let corrupt = fresh("corrupt.db")?;
    write_sample_log(&corrupt, CHUNKS)?;
    let mut bytes = std::fs::read(&corrupt)?;
    let pages = bytes.len() / page;
    let (from, to) = (pages / 3 * page, (pages / 3 + 3) * page);
    for (i, b) in bytes[from..to].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&corrupt, bytes)?;

    // A SQLite database some other program made.
    let foreign = fresh("foreign.db")?;
    let conn = rusqlite::Connection::open(&foreign)?;
    conn.execute_batch(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
         INSERT INTO notes (body) VALUES ('not a mull log');",
    )?;
    drop(conn);

    std::fs::write(
        fresh("not_sqlite.db")?,
        "This file is plain text. It is named like a database but it is not one.\n",
    )?;
    Ok(())
}
