//! One test body for the read contract, run against every backend: it writes a small log
//! through [`EventLog`] and checks every [`ReadLog`] read against what was appended. The SQLite
//! log and [`MemoryLog`](crate::MemoryLog) run it in this crate's tests, the PostgreSQL log in
//! `mull-store-pg`'s, so the three answer the same questions the same way.

use chrono::{DateTime, Utc};
use mull_core::{EntryPath, Envelope, Event, StreamPart, TurnStatus, Usage};

use crate::backend::EventLog;
use crate::read::{ChangeCursor, ReadLog, SessionKey};

fn at(n: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_735_689_600_000_000 + n * 1000).unwrap_or_default()
}

fn opened() -> Event {
    Event::SessionOpened {
        agent: "contract".into(),
        metadata: serde_json::json!({}),
    }
}

fn started(request: &str) -> Event {
    Event::TurnStarted {
        request_id: request.to_owned(),
        message_id: format!("msg_{request}"),
        entry: EntryPath::Chat,
        continuation: false,
        attempt: 0,
        body: serde_json::json!({}),
    }
}

fn finished(request: &str) -> Event {
    Event::TurnFinished {
        request_id: request.to_owned(),
        status: TurnStatus::Completed,
        error: None,
        steps: 1,
        usage: Usage::default(),
        response_owed: false,
    }
}

fn delta(text: &str) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t0".into(),
            text: text.into(),
        },
        original: None,
    }
}

/// What the writes of [`check_read_contract`] left, to compare reads with.
struct Written {
    /// (session, seq, turn, kind) of every event, in append order.
    events: Vec<(String, u64, Option<String>, String)>,
    clock: i64,
}

impl Written {
    fn append(
        &mut self,
        log: &dyn EventLog,
        session: &str,
        turn: Option<&str>,
        event: Event,
    ) -> Result<u64, String> {
        self.clock += 1;
        let kind = event.kind().to_owned();
        let appended = log
            .append_event(session, turn, at(self.clock), event)
            .map_err(|e| format!("appending to {session}: {e}"))?;
        self.events.push((
            session.to_owned(),
            appended.seq,
            turn.map(str::to_owned),
            kind,
        ));
        Ok(appended.seq)
    }

    fn seqs_of(&self, session: &str) -> Vec<u64> {
        self.events
            .iter()
            .filter(|e| e.0 == session)
            .map(|e| e.1)
            .collect()
    }
}

fn seqs(events: &[Envelope]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Writes a log through `writer` (sessions `rc_a` and `rc_b` interleaved, a turn left running,
/// a fork `rc_f` of `rc_a`) and checks every read of `reader` against it. `reader` must read
/// what `writer` writes, and the log must hold nothing else. Returns what did not hold.
///
/// Long because it is one scenario written top to bottom: every read is checked against the
/// log the same run wrote.
pub async fn check_read_contract(
    writer: &dyn EventLog,
    reader: &dyn ReadLog,
) -> Result<(), String> {
    let start = reader.cursor().map_err(|e| e.to_string())?;
    let mut w = Written {
        events: Vec::new(),
        clock: 0,
    };
    for session in ["rc_a", "rc_b"] {
        writer
            .open_session(session)
            .await
            .map_err(|e| format!("opening {session}: {e}"))?;
    }
    w.append(writer, "rc_a", None, opened())?;
    w.append(writer, "rc_a", Some("t1"), started("r1"))?;
    w.append(writer, "rc_b", None, opened())?;
    w.append(writer, "rc_b", Some("t2"), started("r2"))?;
    for i in 0..5 {
        w.append(writer, "rc_a", Some("t1"), delta(&format!("a{i}")))?;
        w.append(writer, "rc_b", Some("t2"), delta(&format!("b{i}")))?;
    }
    let fork_point = w.append(writer, "rc_a", Some("t1"), finished("r1"))?;
    w.append(writer, "rc_a", Some("t3"), started("r3"))?;
    w.append(writer, "rc_a", Some("t3"), delta("late"))?;
    for session in ["rc_a", "rc_b"] {
        writer
            .flush(session)
            .await
            .map_err(|e| format!("flushing {session}: {e}"))?;
    }
    let err = |e: crate::StoreError| e.to_string();

    // A session's events, paged from a position.
    let a = reader.session_events("rc_a", 0).map_err(err)?;
    ensure!(
        seqs(&a) == w.seqs_of("rc_a"),
        "rc_a read back as {:?}, written {:?}",
        seqs(&a),
        w.seqs_of("rc_a")
    );
    ensure!(
        a.iter().all(|e| e.session_id == "rc_a"),
        "rc_a's page holds other sessions' events"
    );
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = reader.session_page("rc_a", after, 3).map_err(err)?;
        ensure!(page.len() <= 3, "a page of 3 held {}", page.len());
        let Some(last) = page.last() else { break };
        after = last.seq;
        paged.extend(seqs(&page));
    }
    ensure!(paged == w.seqs_of("rc_a"), "rc_a paged by 3 as {paged:?}");
    let from_middle = reader.session_page("rc_a", a[4].seq, 100).map_err(err)?;
    ensure!(
        seqs(&from_middle) == seqs(&a[5..]),
        "a page from rc_a's 5th event was {:?}",
        seqs(&from_middle)
    );
    ensure!(reader.has_session("rc_b").map_err(err)?, "rc_b not found");
    ensure!(
        !reader.has_session("rc_none").map_err(err)?,
        "a session never written was found"
    );
    let named = reader.event_at("rc_a", a[3].seq).map_err(err)?;
    ensure!(
        named.as_ref() == Some(&a[3]),
        "event_at(rc_a, {}) was {named:?}",
        a[3].seq
    );

    // A turn's events: its lifecycle events and its chunks, nothing of the other session.
    let t1 = reader.turn_events("rc_a", "t1").map_err(err)?;
    let want: Vec<u64> = w
        .events
        .iter()
        .filter(|e| e.0 == "rc_a" && e.2.as_deref() == Some("t1"))
        .map(|e| e.1)
        .collect();
    ensure!(
        seqs(&t1) == want,
        "turn t1 read as {:?}, written {want:?}",
        seqs(&t1)
    );
    let turns = reader.turns("rc_a").map_err(err)?;
    ensure!(turns.len() == 2, "rc_a has {} turns, not 2", turns.len());
    ensure!(
        turns[0].status == TurnStatus::Completed,
        "t1 is {:?}",
        turns[0].status
    );

    // Sessions listed by time, newest first, paged.
    let newest = reader.newest_sessions(None, 1).map_err(err)?;
    ensure!(
        newest.len() == 1 && newest[0].session_id == "rc_a",
        "the newest session is {newest:?}"
    );
    ensure!(
        newest[0].last_seq == *w.seqs_of("rc_a").last().unwrap_or(&0),
        "rc_a's last seq listed as {}",
        newest[0].last_seq
    );
    let older = reader
        .newest_sessions(Some(&SessionKey::of(&newest[0])), 10)
        .map_err(err)?;
    ensure!(
        older.len() == 1 && older[0].session_id == "rc_b",
        "the sessions before rc_a are {older:?}"
    );
    let all = reader.sessions().map_err(err)?;
    let ids: Vec<&str> = all.iter().map(|s| s.session_id.as_str()).collect();
    ensure!(
        ids == ["rc_a", "rc_b"],
        "sessions listed oldest first as {ids:?}"
    );
    ensure!(
        reader.event_count().map_err(err)? == w.events.len() as u64,
        "event count is not {}",
        w.events.len()
    );

    // Changes since a cursor: both sessions; then nothing; then only the one that moved.
    let changes = reader.changes(start).map_err(err)?;
    let mut changed: Vec<&str> = changes
        .sessions
        .iter()
        .map(|c| c.session_id.as_str())
        .collect();
    changed.sort_unstable();
    changed.dedup();
    ensure!(
        changed == ["rc_a", "rc_b"],
        "changes since the start: {changed:?}"
    );
    let quiet = reader.changes(changes.cursor).map_err(err)?;
    ensure!(
        quiet.sessions.is_empty(),
        "changes with nothing written: {:?}",
        quiet.sessions
    );
    let late = w.append(writer, "rc_b", Some("t2"), finished("r2"))?;
    writer.flush("rc_b").await.map_err(|e| e.to_string())?;
    let moved = reader.changes(quiet.cursor).map_err(err)?;
    ensure!(
        moved.sessions.iter().all(|c| c.session_id == "rc_b")
            && moved.sessions.iter().any(|c| c.last_seq == late),
        "changes after one append to rc_b: {:?}",
        moved.sessions
    );
    ensure!(moved.cursor >= quiet.cursor, "the cursor went back");
    ensure!(
        start <= moved.cursor || start == ChangeCursor::START,
        "the cursor went back"
    );

    // A fork: its origin named by session and seq, its history the origin's prefix.
    writer
        .open_session("rc_f")
        .await
        .map_err(|e| e.to_string())?;
    w.append(
        writer,
        "rc_f",
        None,
        Event::SessionForked {
            origin: "rc_a".into(),
            origin_seq: fork_point,
            origin_turn: None,
        },
    )?;
    w.append(writer, "rc_f", Some("t4"), started("r4"))?;
    writer.flush("rc_f").await.map_err(|e| e.to_string())?;
    let origin = reader.fork_origin("rc_f").map_err(err)?;
    ensure!(
        origin == Some(("rc_a".to_owned(), fork_point)),
        "rc_f's origin is {origin:?}"
    );
    ensure!(
        reader.fork_origin("rc_a").map_err(err)?.is_none(),
        "rc_a has an origin"
    );
    ensure!(
        reader.lineage("rc_f").map_err(err)? == ["rc_a"],
        "rc_f's lineage"
    );
    let history = reader.session_history("rc_f").map_err(err)?;
    let inherited: Vec<u64> = history
        .iter()
        .filter(|e| e.session_id == "rc_a")
        .map(|e| e.seq)
        .collect();
    let want: Vec<u64> = w
        .seqs_of("rc_a")
        .into_iter()
        .filter(|s| *s <= fork_point)
        .collect();
    ensure!(
        inherited == want,
        "rc_f inherits {inherited:?}, not {want:?}"
    );
    ensure!(
        history.iter().filter(|e| e.session_id == "rc_f").count() == 2,
        "rc_f's own events"
    );
    let state = reader.load_session("rc_f").map_err(err)?;
    ensure!(
        state.turns.len() == 2,
        "rc_f folds to {} turns, not 2 (t1 inherited, t4)",
        state.turns.len()
    );
    let overviews = reader.session_overviews().map_err(err)?;
    ensure!(
        overviews.get("rc_f").and_then(|o| o.forked_from.clone())
            == Some(("rc_a".to_owned(), fork_point)),
        "rc_f's overview does not name its origin"
    );
    ensure!(
        overviews
            .get("rc_a")
            .is_some_and(|o| o.status.completed == 1),
        "rc_a's overview does not count its completed turn"
    );
    Ok(())
}
