//! JSONL export and import: one envelope per line, stable key order, byte-for-byte round trip.
//!
//! A line is `{"seq":…,"session_id":…,"turn_id":…,"at":"…","v":…,"event":{…}}`. The event is
//! written exactly as stored, so unknown kinds from a newer writer survive verbatim, and
//! export → import into a fresh log → export gives the same bytes.
//!
//! Import is all-or-nothing and streams: each line is checked as it is read (JSON shape,
//! timestamp form, seqs strictly increasing, the event decodes) and inserted, a batch of a few
//! thousand rows at a time, into one write transaction that is committed only after the last
//! line. A truncated or malformed line, a read error or a failed insert rolls it back:
//! the import fails with the source name, the line number and what was wrong, and nothing of
//! that file is written; events already in the log are kept. Memory is bounded by a batch,
//! not by the file. Imported events keep their seqs, so they must all come after the log's
//! last seq; appends wait while an import runs.

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
    write_envelope_line(
        line,
        row.seq,
        row.session_id,
        row.turn_id,
        row.at,
        row.v,
        row.payload,
    )
}

/// Appends one JSONL line (with its newline) for an event stored as `payload`: the one line
/// format of every backend's export.
pub fn write_envelope_line(
    line: &mut Vec<u8>,
    seq: u64,
    session_id: &str,
    turn_id: Option<&str>,
    at: chrono::DateTime<chrono::Utc>,
    v: u16,
    payload: &str,
) -> std::io::Result<()> {
    write!(line, "{{\"seq\":{seq},\"session_id\":")?;
    serde_json::to_writer(&mut *line, session_id)?;
    line.extend_from_slice(b",\"turn_id\":");
    serde_json::to_writer(&mut *line, &turn_id)?;
    line.extend_from_slice(b",\"at\":");
    serde_json::to_writer(&mut *line, &timestamp::format(at))?;
    write!(line, ",\"v\":{v},\"event\":")?;
    line.extend_from_slice(payload.as_bytes());
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
    log.import(source_name, |import| {
        let mut text = String::new();
        let mut number = 0u64;
        let mut previous_seq = import.after();
        loop {
            text.clear();
            number += 1;
            let read = input
                .read_line(&mut text)
                .map_err(|err| bad(number, format!("cannot read: {err}")))?;
            if read == 0 {
                return Ok(());
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
            // SQLite stores seqs as i64; a larger one would fail the insert without a line number.
            if i64::try_from(line.seq).is_err() {
                return Err(bad(
                    number,
                    format!(
                        "seq {} is past the largest seq a log holds ({})",
                        line.seq,
                        i64::MAX
                    ),
                ));
            }
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
            import
                .push(Row {
                    seq: line.seq,
                    session_id: Arc::from(line.session_id),
                    turn_id: line.turn_id.map(Arc::from),
                    at,
                    v: line.v,
                    kind: kind_of(&event),
                    payload,
                })
?;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::IMPORT_BATCH;
    use chrono::{DateTime, Utc};
    use mull_core::{EntryPath, StreamPart, UIMessage};
    use proptest::prelude::*;
    use serde_json::json;

    fn at(micros: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(1_735_689_600_000_000 + micros).expect("valid time")
    }

    fn fresh(dir: &std::path::Path, name: &str) -> Log {
        Log::open(dir.join(name)).expect("opens")
    }

    fn export(log: &Log, session: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        export_jsonl(&log.reader().expect("reader"), session, &mut out).expect("exports");
        out
    }

    const LINE_1: &str = r#"{"seq":1,"session_id":"sess_1","turn_id":null,"at":"2025-01-01T00:00:00.000000Z","v":1,"event":{"type":"step_started","step":0}}"#;

    #[test]
    fn lines_have_a_stable_key_order_and_the_payload_verbatim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = fresh(dir.path(), "a.db");
        log.append("sess_1", None, at(0), Event::StepStarted { step: 0 })
            .expect("appends");
        log.append(
            "sess_1",
            Some("turn_\"1\""),
            at(1),
            Event::UserMessagesSaved {
                request_id: None,
                messages: vec![UIMessage::user("m", "line\nbreak ✓")],
            },
        )
        .expect("appends");
        log.flush_blocking().expect("flushes");
        let text = String::from_utf8(export(&log, None)).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], LINE_1);
        assert!(lines[1].starts_with(
            r#"{"seq":2,"session_id":"sess_1","turn_id":"turn_\"1\"","at":"2025-01-01T00:00:00.000001Z","v":1,"event":{"type":"user_messages_saved""#
        ));
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn export_import_export_is_byte_identical_and_keeps_unknown_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = format!(
            "{LINE_1}\n{}\n",
            r#"{"seq":7,"session_id":"sess_1","turn_id":"turn_1","at":"2025-01-01T00:00:01.000000Z","v":3,"event":{"type":"from_the_future","b":1.5e300,"a":{"z":null,"y":[]}}}"#
        );
        let first = fresh(dir.path(), "a.db");
        let n = import_jsonl(source.as_bytes(), "source.jsonl", &first).expect("imports");
        assert_eq!(n, 2);
        let exported = export(&first, None);
        assert_eq!(String::from_utf8(exported.clone()).expect("utf8"), source);
        let second = fresh(dir.path(), "b.db");
        import_jsonl(exported.as_slice(), "a.jsonl", &second).expect("imports");
        assert_eq!(export(&second, None), exported);
        let state = second
            .reader()
            .expect("reader")
            .load_session("sess_1")
            .expect("loads");
        assert_eq!(state.unknown_events, 1);
        assert_eq!(state.last_seq, 7);
    }

    #[test]
    fn a_session_export_holds_only_that_session() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = fresh(dir.path(), "a.db");
        for (i, s) in ["a", "b", "a"].iter().enumerate() {
            log.append(s, None, at(i as i64), Event::StepStarted { step: 0 })
                .expect("appends");
        }
        log.flush_blocking().expect("flushes");
        let text = String::from_utf8(export(&log, Some("a"))).expect("utf8");
        assert_eq!(text.lines().count(), 2);
        assert!(!text.contains("\"session_id\":\"b\""));
    }

    fn import_err(source: &str) -> (String, Log, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = fresh(dir.path(), "a.db");
        let err = import_jsonl(source.as_bytes(), "bad.jsonl", &log).expect_err("refused");
        (err.to_string(), log, dir)
    }

    #[test]
    fn a_truncated_line_names_the_source_and_line_and_imports_nothing() {
        let truncated = &LINE_1.replace("\"seq\":1", "\"seq\":2")[..80];
        let (err, log, _dir) = import_err(&format!("{LINE_1}\n{truncated}"));
        assert!(err.starts_with("bad.jsonl:2: truncated envelope"), "{err}");
        assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 0);
    }

    #[test]
    fn malformed_lines_say_what_was_wrong() {
        let cases = [
            ("not json at all", "bad.jsonl:1: malformed envelope"),
            ("", "bad.jsonl:1: empty line"),
            (
                &LINE_1.replace("\"v\":1", "\"v\":1,\"extra\":true"),
                "unknown field `extra`",
            ),
            (
                &LINE_1.replace("00:00:00.000000Z", "00:00:00Z"),
                "is not fixed-width RFC 3339",
            ),
            (
                &LINE_1.replace(
                    r#"{"type":"step_started","step":0}"#,
                    r#"{"type":"step_started","step":"zero"}"#,
                ),
                "bad.jsonl:1: seq 1: event of kind \"step_started\" does not fit its shape",
            ),
            (
                &LINE_1.replace("\"seq\":1", "\"seq\":9223372036854775808"),
                "bad.jsonl:1: seq 9223372036854775808 is past the largest seq a log holds",
            ),
            (
                &format!("{LINE_1}\n{LINE_1}"),
                "bad.jsonl:2: seq 1 does not come after seq 1",
            ),
        ];
        for (source, expected) in cases {
            let (err, _log, _dir) = import_err(&format!("{source}\n"));
            assert!(err.contains(expected), "{source:?}: {err}");
        }
    }

    #[test]
    fn an_import_must_come_after_the_logs_events_which_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = fresh(dir.path(), "a.db");
        log.append("s", None, at(0), Event::StepStarted { step: 0 })
            .expect("appends");
        log.flush_blocking().expect("flushes");
        let err =
            import_jsonl(format!("{LINE_1}\n").as_bytes(), "x.jsonl", &log).expect_err("seq clash");
        assert!(
            err.to_string()
                .contains("x.jsonl:1: seq 1 does not come after seq 1"),
            "{err}"
        );
        assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 1);
        let later = LINE_1.replace("\"seq\":1", "\"seq\":5");
        import_jsonl(format!("{later}\n").as_bytes(), "x.jsonl", &log).expect("imports");
        let next = log
            .append("s", None, at(1), Event::StepStarted { step: 1 })
            .expect("appends");
        assert_eq!(next.seq, 6, "appends continue after the imported seqs");
    }

    /// `count` valid lines with seqs `first..`, one session, a microsecond apart.
    fn lines(first: u64, count: u64) -> String {
        (first..first + count)
            .map(|seq| {
                format!(
                    "{{\"seq\":{seq},\"session_id\":\"sess_1\",\"turn_id\":null,\"at\":\"{}\",\"v\":1,\"event\":{{\"type\":\"step_started\",\"step\":{seq}}}}}\n",
                    timestamp::format(at(seq as i64))
                )
            })
            .collect()
    }

    /// A log holding three appended events, committed.
    fn log_with_three(dir: &std::path::Path) -> Log {
        let log = fresh(dir, "a.db");
        for step in 0..3 {
            log.append(
                "s",
                None,
                at(step),
                Event::StepStarted { step: step as u32 },
            )
            .expect("appends");
        }
        log.flush_blocking().expect("flushes");
        log
    }

    #[test]
    fn an_import_of_more_than_a_batch_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let total = 2 * IMPORT_BATCH as u64 + 10;
        let source = lines(1, total);
        let log = fresh(dir.path(), "a.db");
        let n = import_jsonl(source.as_bytes(), "big.jsonl", &log).expect("imports");
        assert_eq!(n, total);
        assert_eq!(log.last_seq(), total);
        assert_eq!(String::from_utf8(export(&log, None)).expect("utf8"), source);
        let next = log
            .append("s", None, at(0), Event::StepStarted { step: 0 })
            .expect("appends");
        assert_eq!(next.seq, total + 1);
        log.flush_blocking().expect("flushes");
    }

    #[test]
    fn a_bad_line_after_more_than_a_batch_rolls_back_every_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with_three(dir.path());
        let before = export(&log, None);
        let good = IMPORT_BATCH as u64 + 10;
        let source = format!("{}garbage\n", lines(4, good));
        let err = import_jsonl(source.as_bytes(), "big.jsonl", &log).expect_err("refused");
        let expected = format!("big.jsonl:{}: malformed envelope", good + 1);
        assert!(err.to_string().starts_with(&expected), "{err}");
        assert_eq!(log.last_seq(), 3);
        assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 3);
        assert_eq!(export(&log, None), before);
        let next = log
            .append("s", None, at(9), Event::StepStarted { step: 9 })
            .expect("the log still works");
        assert_eq!(next.seq, 4);
        log.flush_blocking().expect("flushes");
    }

    /// Gives `data`, then fails like a broken disk would.
    struct FailsAfter(std::io::Cursor<Vec<u8>>);

    impl std::io::Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::Error::other("the disk went away")),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn a_read_error_after_more_than_a_batch_rolls_back_every_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with_three(dir.path());
        let before = export(&log, None);
        let good = IMPORT_BATCH as u64 + 10;
        let input = FailsAfter(std::io::Cursor::new(lines(4, good).into_bytes()));
        let err =
            import_jsonl(std::io::BufReader::new(input), "big.jsonl", &log).expect_err("refused");
        let expected = format!("big.jsonl:{}: cannot read: the disk went away", good + 1);
        assert_eq!(err.to_string(), expected);
        assert_eq!(log.last_seq(), 3);
        assert_eq!(export(&log, None), before);
    }

    #[test]
    fn a_failed_insert_after_a_batch_rolls_back_and_the_log_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with_three(dir.path());
        let before = export(&log, None);
        // Another connection makes one insert of the second batch fail, as a full disk would.
        let refused = 4 + IMPORT_BATCH as u64 + 5;
        let raw = rusqlite::Connection::open(log.path()).expect("raw");
        raw.busy_timeout(std::time::Duration::from_secs(5))
            .expect("timeout");
        raw.execute_batch(&format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.seq = {refused} \
             BEGIN SELECT RAISE(ABORT, 'disk is full'); END;"
        ))
        .expect("trigger");
        let source = lines(4, IMPORT_BATCH as u64 + 10);
        let err = import_jsonl(source.as_bytes(), "big.jsonl", &log).expect_err("refused");
        let text = err.to_string();
        assert!(matches!(err, StoreError::Sqlite { .. }), "{text}");
        assert!(
            text.starts_with(&format!(
                "big.jsonl: importing seqs {}..=",
                4 + IMPORT_BATCH
            )) && text.contains("disk is full"),
            "{text}"
        );
        assert_eq!(log.last_seq(), 3);
        assert_eq!(export(&log, None), before);
        raw.execute_batch("DROP TRIGGER refuse")
            .expect("drop trigger");
        drop(raw);
        let n = import_jsonl(source.as_bytes(), "big.jsonl", &log).expect("imports");
        assert_eq!(n, IMPORT_BATCH as u64 + 10);
        let next = log
            .append("s", None, at(0), Event::StepStarted { step: 0 })
            .expect("the writer did not stop");
        assert_eq!(next.seq, 4 + n);
        log.flush_blocking().expect("flushes");
    }

    /// Lines sent one at a time over a channel; tells `started` when it is first read.
    struct Fed {
        lines: std::sync::mpsc::Receiver<String>,
        started: Option<std::sync::mpsc::Sender<()>>,
        held: Vec<u8>,
        at: usize,
    }

    impl std::io::Read for Fed {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = std::io::BufRead::fill_buf(self)?.len().min(buf.len());
            buf[..n].copy_from_slice(&self.held[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    impl BufRead for Fed {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            if let Some(started) = self.started.take() {
                started.send(()).expect("test waits");
            }
            if self.at == self.held.len() {
                self.held = self
                    .lines
                    .recv()
                    .map(String::into_bytes)
                    .unwrap_or_default();
                self.at = 0;
            }
            Ok(&self.held[self.at..])
        }

        fn consume(&mut self, amount: usize) {
            self.at += amount;
        }
    }

    #[test]
    fn appends_during_an_import_wait_for_it_and_follow_its_seqs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with_three(dir.path());
        let (feed, lines_in) = std::sync::mpsc::channel();
        let (started, has_started) = std::sync::mpsc::channel();
        let importer = {
            let log = log.clone();
            std::thread::spawn(move || {
                let input = Fed {
                    lines: lines_in,
                    started: Some(started),
                    held: Vec::new(),
                    at: 0,
                };
                import_jsonl(input, "fed.jsonl", &log)
            })
        };
        has_started.recv().expect("the import reads");
        feed.send(lines(10, 1)).expect("feeds");
        let appender = {
            let log = log.clone();
            std::thread::spawn(move || {
                log.append("s", None, at(0), Event::StepStarted { step: 0 })
                    .expect("appends")
                    .seq
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !appender.is_finished(),
            "an append went in during the import"
        );
        feed.send(lines(11, 1)).expect("feeds");
        drop(feed);
        assert_eq!(importer.join().expect("import thread").expect("imports"), 2);
        assert_eq!(appender.join().expect("append thread"), 12);
        log.flush_blocking().expect("flushes");
        assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 12);
    }

    fn event_strategy() -> impl Strategy<Value = Event> {
        let text = "[a-zA-Z0-9 \\n\"\\\\é✓{}]{0,24}";
        prop_oneof![
            text.prop_map(|t| Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "t0".into(),
                    text: t
                },
                original: None,
            }),
            Just(Event::Chunk {
                step: 0,
                part: StreamPart::TextStart { id: "t0".into() },
                original: None,
            }),
            (0u32..4).prop_map(|n| Event::TurnStarted {
                request_id: format!("req_{n}"),
                message_id: format!("msg_{n}"),
                entry: EntryPath::Chat,
                continuation: n % 2 == 1,
                attempt: 0,
                body: json!({"n": n}),
            }),
            (0u32..3, text).prop_map(|(n, t)| Event::UserMessagesSaved {
                request_id: None,
                messages: vec![UIMessage::user(format!("msg_u{n}"), t)],
            }),
            (0u32..3, text).prop_map(|(n, t)| Event::Chunk {
                step: 0,
                part: StreamPart::ToolCall {
                    call_id: format!("call_{n}"),
                    tool_name: "search".into(),
                    input: t,
                },
                original: None,
            }),
            (text, any::<i64>()).prop_map(|(t, x)| {
                Event::decode(
                    1,
                    &json!({"type": "future_kind", "t": t, "x": x}).to_string(),
                )
                .expect("unknown kinds decode")
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn export_import_fold_equals_fold(
            events in proptest::collection::vec((0usize..2, proptest::option::of(0usize..2), event_strategy()), 0..60)
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let original = fresh(dir.path(), "a.db");
            let sessions = ["sess_1", "sess_2"];
            let turns = ["turn_1", "turn_2"];
            let mut live: Vec<crate::SessionState> =
                sessions.iter().map(|s| crate::SessionState::new(*s)).collect();
            for (i, (s, t, event)) in events.into_iter().enumerate() {
                let env = original
                    .append(sessions[s], t.map(|t| turns[t]), at(i as i64 * 997), event)
                    .expect("appends");
                live[s].apply(&env);
            }
            original.flush_blocking().expect("flushes");
            let exported = export(&original, None);
            let copy = fresh(dir.path(), "b.db");
            import_jsonl(exported.as_slice(), "a.jsonl", &copy).expect("imports");
            prop_assert_eq!(&export(&copy, None), &exported);
            let reader = copy.reader().expect("reader");
            for (s, state) in sessions.iter().zip(&live) {
                prop_assert_eq!(&reader.load_session(s).expect("loads"), state);
            }
        }
    }
}
