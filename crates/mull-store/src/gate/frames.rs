//! The record file's format: one frame per row — its length, a CRC-32 of its bytes, and the
//! row — and the two ways of reading it back: [`scan`] (what a writer inserts; tells a torn
//! tail from damage) and [`salvage`] (what a recovery keeps: every frame that verifies).

use std::borrow::Cow;
use std::sync::Arc;

use crate::row::Row;
use crate::timestamp;

/// Bytes before a frame's body: its length and its CRC-32.
const HEAD: usize = 8;

/// The smallest body: seq, time, version and four string lengths.
const MIN_BODY: usize = 8 + 8 + 2 + 4 * 4;

/// The largest body a frame may claim; a longer one is not a frame (a damaged length).
const MAX_BODY: usize = 1 << 30;

/// Appends one row's frame to `buf`.
pub(crate) fn encode_row(buf: &mut Vec<u8>, row: &Row) {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEAD]);
    buf.extend_from_slice(&row.seq.to_le_bytes());
    buf.extend_from_slice(&timestamp::to_stored(row.at).to_le_bytes());
    buf.extend_from_slice(&row.v.to_le_bytes());
    put_str(buf, Some(&row.session_id));
    put_str(buf, row.turn_id.as_deref());
    put_str(buf, Some(&row.kind));
    put_str(buf, Some(&row.payload));
    let body = start + HEAD;
    let len = (buf.len() - body) as u32;
    let crc = crc32fast::hash(&buf[body..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..body].copy_from_slice(&crc.to_le_bytes());
}

fn put_str(buf: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
            buf.extend_from_slice(s.as_bytes());
        }
        None => buf.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// What a record file holds, read front to back.
#[derive(Default)]
pub(crate) struct Scan {
    /// The rows of the frames that verify, up to the first that does not.
    pub rows: Vec<Row>,
    /// Where the first frame that does not verify begins, if one does not.
    pub stop: Option<Stop>,
}

/// A frame that does not verify, and what follows it.
pub(crate) struct Stop {
    /// Its byte offset, and how many frames verified before it.
    pub offset: usize,
    pub index: usize,
    /// Frames after it that verify: none means a torn tail (the last `write`, cut by a kill,
    /// which never returned); any means damage (bytes changed after they were written).
    pub frames_after: usize,
}

impl Scan {
    /// Whether frames that verify follow one that does not: damage, not a torn tail.
    pub fn is_damaged(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.frames_after > 0)
    }
}

/// Reads the file's frames in order. A frame that is cut short or does not match its CRC ends
/// the rows; the rest of the file is then searched for frames that verify, to tell a torn tail
/// (there are none) from damage.
pub(crate) fn scan(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut at = 0;
    while at < bytes.len() {
        match frame_at(bytes, at) {
            Some((row, next)) => {
                scan.rows.push(row);
                at = next;
            }
            None => {
                let after = scan.rows.last().map_or(0, |r| r.seq);
                scan.stop = Some(Stop {
                    offset: at,
                    index: scan.rows.len(),
                    frames_after: resync(bytes, at + 1, after).count(),
                });
                break;
            }
        }
    }
    scan
}

/// Every row of a damaged file that still verifies, in file order: the frames before the
/// damage, and those after it, found by searching byte by byte for a frame whose CRC matches
/// (a CRC-32 matches by chance once in four billion tries).
pub(crate) fn salvage(bytes: &[u8]) -> Vec<Row> {
    let scan = scan(bytes);
    let mut rows = scan.rows;
    if let Some(stop) = scan.stop {
        let after = rows.last().map_or(0, |r| r.seq);
        rows.extend(resync(bytes, stop.offset + 1, after).map(|(row, _)| row));
    }
    rows
}

/// The frames that verify from `from` on, each found by searching from where the one before
/// ended (or byte by byte, past bytes that are no frame), with seqs above `after`.
fn resync(bytes: &[u8], from: usize, after: u64) -> impl Iterator<Item = (Row, usize)> + '_ {
    let mut at = from;
    let mut last = after;
    std::iter::from_fn(move || {
        while at + HEAD + MIN_BODY <= bytes.len() {
            if let Some((row, next)) = frame_at(bytes, at).filter(|(row, _)| row.seq > last) {
                at = next;
                last = row.seq;
                return Some((row, next));
            }
            at += 1;
        }
        None
    })
}

/// The frame at `at`, if it is whole and verifies, and where the next begins.
fn frame_at(bytes: &[u8], at: usize) -> Option<(Row, usize)> {
    let head = bytes.get(at..at + HEAD)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if !(MIN_BODY..=MAX_BODY).contains(&len) {
        return None;
    }
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let body = bytes.get(at + HEAD..at + HEAD + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    Some((Body(body).row()?, at + HEAD + len))
}

/// Reads the fields of a row's body; `None` at anything that does not decode.
struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn str(&mut self) -> Option<Option<&'a str>> {
        let len = self.u32()?;
        if len == u32::MAX {
            return Some(None);
        }
        std::str::from_utf8(self.take(len as usize)?).ok().map(Some)
    }

    fn row(mut self) -> Option<Row> {
        let seq = self.u64()?;
        let at = timestamp::from_stored(self.u64()? as i64)?;
        let v = u16::from_le_bytes(self.take(2)?.try_into().ok()?);
        let session_id: Arc<str> = Arc::from(self.str()??);
        let turn_id = self.str()?.map(Arc::from);
        let kind = Cow::Owned(self.str()??.to_owned());
        let payload = self.str()??.to_owned();
        self.0.is_empty().then_some(Row {
            seq,
            session_id,
            turn_id,
            at,
            v,
            kind,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn row(seq: u64, payload: &str) -> Row {
        Row {
            seq,
            session_id: Arc::from("s"),
            turn_id: seq.is_multiple_of(2).then(|| Arc::from("t")),
            at: Utc
                .timestamp_micros(1_700_000_000_123_456)
                .single()
                .expect("time"),
            v: 1,
            kind: Cow::Borrowed("chunk"),
            payload: payload.to_owned(),
        }
    }

    fn encoded(rows: &[Row]) -> Vec<u8> {
        let mut buf = Vec::new();
        for r in rows {
            encode_row(&mut buf, r);
        }
        buf
    }

    fn seqs(rows: &[Row]) -> Vec<u64> {
        rows.iter().map(|r| r.seq).collect()
    }

    #[test]
    fn rows_read_back_as_written() {
        let rows = [row(1, "{}"), row(2, "{\"a\":\"é\"}")];
        let back = scan(&encoded(&rows));
        assert!(back.stop.is_none());
        assert_eq!(back.rows.len(), 2);
        for (a, b) in rows.iter().zip(&back.rows) {
            assert_eq!(
                (&a.session_id, &a.turn_id, a.at, a.v, &a.kind, &a.payload),
                (&b.session_id, &b.turn_id, b.at, b.v, &b.kind, &b.payload)
            );
        }
    }

    #[test]
    fn a_file_cut_anywhere_is_a_torn_tail_never_damage() {
        let rows: Vec<Row> = (1..=3).map(|s| row(s, "some payload")).collect();
        let bytes = encoded(&rows);
        for cut in 0..bytes.len() {
            let back = scan(&bytes[..cut]);
            assert!(back.rows.len() < 3, "a cut at {cut} keeps a whole file");
            assert!(!back.is_damaged(), "a cut at {cut} is taken for damage");
            assert_eq!(seqs(&back.rows), seqs(&rows[..back.rows.len()]));
        }
    }

    #[test]
    fn a_changed_byte_followed_by_more_frames_is_damage_and_salvage_keeps_the_rest() {
        let rows: Vec<Row> = (1..=40).map(|s| row(s, "a chunk of text")).collect();
        let bytes = encoded(&rows);
        let eleventh = encoded(&rows[..10]).len()..encoded(&rows[..11]).len();
        // Every byte of frame 11, the length and CRC included.
        for offset in eleventh {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x04;
            let back = scan(&damaged);
            assert_eq!(back.rows.len(), 10, "flipping byte {offset}");
            assert!(
                back.is_damaged(),
                "flipping byte {offset} reads as a torn tail"
            );
            let kept = salvage(&damaged);
            let expected: Vec<u64> = (1..=40).filter(|s| *s != 11).collect();
            assert_eq!(seqs(&kept), expected, "flipping byte {offset}");
        }
        // In the first frame, all the rows after it are still found.
        let mut first = bytes.clone();
        first[12] ^= 0x01;
        let back = scan(&first);
        assert!(back.rows.is_empty() && back.is_damaged());
        assert_eq!(salvage(&first).len(), 39);
        // In the last frame, nothing follows: a torn tail.
        let mut last = bytes.clone();
        let end = last.len() - 3;
        last[end] ^= 0x01;
        let back = scan(&last);
        assert_eq!(back.rows.len(), 39);
        assert!(!back.is_damaged());
    }
}
