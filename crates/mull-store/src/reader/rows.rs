//! Stored rows read back: an envelope decoded from a row's columns (borrowing what it can),
//! the raw row an export writes out, and the one error a row read can end in.

use chrono::{DateTime, Utc};
use mull_core::{Envelope, EventRef};
use rusqlite::types::ValueRef;

use crate::error::StoreError;
use crate::timestamp;

/// A stored row, borrowed from SQLite.
pub(crate) struct RawRow<'a> {
    pub seq: u64,
    pub session_id: &'a str,
    pub turn_id: Option<&'a str>,
    pub at: DateTime<Utc>,
    pub v: u16,
    pub payload: &'a str,
}

pub(crate) enum RowError {
    Sqlite(rusqlite::Error),
    Store(StoreError),
}

impl RowError {
    /// As the one error type of the log.
    pub(crate) fn into_store(self) -> StoreError {
        match self {
            RowError::Sqlite(source) => StoreError::Sqlite {
                context: "reading a row".to_owned(),
                source,
            },
            RowError::Store(err) => err,
        }
    }
}

impl From<rusqlite::Error> for RowError {
    fn from(err: rusqlite::Error) -> Self {
        RowError::Sqlite(err)
    }
}

/// A row decoded but for its session id, its turn id borrowed from the row.
pub(crate) struct RowParts<'r> {
    seq: u64,
    turn_id: Option<&'r str>,
    at: DateTime<Utc>,
    v: u16,
    event: mull_core::Event,
}

impl RowParts<'_> {
    pub(crate) fn event_ref(&self) -> EventRef<'_> {
        EventRef {
            seq: self.seq,
            at: self.at,
            turn_id: self.turn_id,
            event: &self.event,
        }
    }
}

pub(crate) fn decode_parts<'r>(row: &'r rusqlite::Row<'_>) -> Result<RowParts<'r>, RowError> {
    let seq: u64 = row.get(0)?;
    let v: u16 = row.get(4)?;
    let at = stored_at(seq, row.get_ref(3)?).map_err(RowError::Store)?;
    // The payload's bytes go to the decoder as they are: it checks UTF-8 while it parses
    // instead of in a separate pass over the whole column.
    let event = match crate::decode::fast_delta(v, text_bytes(row, 5)?) {
        Some(event) => event,
        None => mull_core::Event::decode(v, text(row, 5)?)
            .map_err(|source| RowError::Store(StoreError::Decode { seq, source }))?,
    };
    Ok(RowParts {
        seq,
        turn_id: text_or_null(row, 2)?,
        at,
        v,
        event,
    })
}

pub(crate) fn decode_row(row: &rusqlite::Row<'_>) -> Result<Envelope, RowError> {
    let session_id = row.get(1)?;
    let parts = decode_parts(row)?;
    Ok(Envelope {
        seq: parts.seq,
        session_id,
        turn_id: parts.turn_id.map(str::to_owned),
        at: parts.at,
        v: parts.v,
        event: parts.event,
    })
}

/// The time of the row at `seq`, from its `at` column: microseconds since the epoch. Anything
/// else (text an older layout left unconverted, a hand-made row) is refused, naming the row.
pub(super) fn stored_at(seq: u64, value: ValueRef<'_>) -> Result<DateTime<Utc>, StoreError> {
    let at = match value {
        ValueRef::Integer(micros) => timestamp::from_stored(micros),
        _ => None,
    };
    at.ok_or_else(|| StoreError::BadTimestamp {
        seq,
        text: match value {
            ValueRef::Text(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            ValueRef::Integer(n) => n.to_string(),
            ValueRef::Real(x) => x.to_string(),
            ValueRef::Null => "NULL".to_owned(),
            ValueRef::Blob(bytes) => format!("a blob of {} bytes", bytes.len()),
        },
    })
}

/// A text column, borrowed.
pub(super) fn text<'a>(row: &'a rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'a str> {
    row.get_ref(index)?.as_str().map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(err))
    })
}

/// A text column's bytes, borrowed, not yet checked as UTF-8 (anything but text fails as
/// [`text`] does).
fn text_bytes<'a>(row: &'a rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'a [u8]> {
    match row.get_ref(index)? {
        rusqlite::types::ValueRef::Text(bytes) => Ok(bytes),
        _ => text(row, index).map(str::as_bytes),
    }
}

/// A nullable text column, borrowed.
pub(super) fn text_or_null<'a>(
    row: &'a rusqlite::Row<'_>,
    index: usize,
) -> rusqlite::Result<Option<&'a str>> {
    row.get_ref(index)?.as_str_or_null().map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(err))
    })
}
