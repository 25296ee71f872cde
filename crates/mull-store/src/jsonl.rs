//! JSONL export and import: one envelope per line, stable key order, byte-for-byte round trip.
//!
//! A line is `{"seq":…,"session_id":…,"turn_id":…,"at":"…","v":…,"event":{…}}`. The event is
//! written exactly as stored, so unknown kinds from a newer writer survive verbatim, and
//! export → import into a fresh log → export gives the same bytes.
//!
//! Import is all-or-nothing: every line is checked first (JSON shape, timestamp form, seqs
//! strictly increasing, the event decodes), then all rows are committed in one transaction.
//! A truncated or malformed line fails the import with the source name, the line number and
//! what was wrong, and nothing of that file is written; events already in the log are kept.
//! Imported events keep their seqs, so they must all come after the log's last seq. The whole
//! file is held in memory while it is checked.

use std::io::{BufRead, Write};
use std::sync::Arc;

use mull_core::Event;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::StoreError;
use crate::reader::{LogReader, RawRow};
use crate::timestamp;
use crate::writer::{kind_of, Log, Row};

/// How many rows an export reads per read transaction.
const EXPORT_PAGE: usize = 4096;

/// Writes the log (or one session of it) as JSONL to `out`; returns the number of lines.
pub fn export_jsonl(
    reader: &LogReader,
    session: Option<&str>,
    mut out: impl Write,
) -> Result<u64, StoreError> {
    let mut line = Vec::with_capacity(512);
    let mut after = 0u64;
    let mut total = 0u64;
    loop {
        let count = reader.scan_raw(session, after, EXPORT_PAGE, |row| {
            after = row.seq;
            line.clear();
            write_line(&mut line, &row).map_err(StoreError::Export)?;
            out.write_all(&line).map_err(StoreError::Export)
        })?;
        total += count as u64;
        if count < EXPORT_PAGE {
            break;
        }
    }
    out.flush().map_err(StoreError::Export)?;
    Ok(total)
}

fn write_line(line: &mut Vec<u8>, row: &RawRow<'_>) -> std::io::Result<()> {
    write!(line, "{{\"seq\":{},\"session_id\":", row.seq)?;
    serde_json::to_writer(&mut *line, row.session_id)?;
    line.extend_from_slice(b",\"turn_id\":");
    serde_json::to_writer(&mut *line, &row.turn_id)?;
    line.extend_from_slice(b",\"at\":");
    serde_json::to_writer(&mut *line, row.at)?;
    write!(line, ",\"v\":{},\"event\":", row.v)?;
    line.extend_from_slice(row.payload.as_bytes());
    line.extend_from_slice(b"}\n");
    Ok(())
}

/// One line as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    seq: u64,
    session_id: String,
    turn_id: Option<String>,
    at: String,
    v: u16,
    #[serde(borrow)]
    event: &'a RawValue,
}

/// Reads JSONL from `input` (named `source_name` in errors) into `log` in one transaction;
/// returns the number of events imported. See the module docs for the rules.
pub fn import_jsonl(
    mut input: impl BufRead,
    source_name: &str,
    log: &Log,
) -> Result<u64, StoreError> {
    let bad = |line: u64, message: String| StoreError::Jsonl {
        source_name: source_name.to_owned(),
        line,
        message,
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut text = String::new();
    let mut number = 0u64;
    let mut previous_seq = log.last_seq();
    loop {
        text.clear();
        number += 1;
        let read = input
            .read_line(&mut text)
            .map_err(|err| bad(number, format!("cannot read: {err}")))?;
        if read == 0 {
            break;
        }
        let content = text.strip_suffix('\n').unwrap_or(&text);
        if content.trim().is_empty() {
            return Err(bad(number, "empty line".to_owned()));
        }
        let line: Line<'_> = serde_json::from_str(content).map_err(|err| {
            let what = if err.is_eof() {
                "truncated envelope"
            } else {
                "malformed envelope"
            };
            bad(number, format!("{what}: {err}"))
        })?;
        if line.seq <= previous_seq {
            return Err(bad(
                number,
                format!(
                    "seq {} does not come after seq {previous_seq} (seqs must increase, and follow the log's last seq)",
                    line.seq
                ),
            ));
        }
        previous_seq = line.seq;
        let at = timestamp::parse(&line.at).ok_or_else(|| {
            bad(
                number,
                format!(
                    "seq {}: at {:?} is not fixed-width RFC 3339 UTC with microseconds",
                    line.seq, line.at
                ),
            )
        })?;
        let raw = line.event.get();
        let event = Event::decode(line.v, raw)
            .map_err(|err| bad(number, format!("seq {}: {err}", line.seq)))?;
        let payload = match &event {
            Event::Unknown(_) => raw.to_owned(),
            known => known.encode(),
        };
        rows.push(Row {
            seq: line.seq,
            session_id: Arc::from(line.session_id),
            turn_id: line.turn_id.map(Arc::from),
            at,
            v: line.v,
            kind: kind_of(&event),
            payload,
        });
    }
    let count = rows.len() as u64;
    log.import_rows(rows, source_name)?;
    Ok(count)
}
