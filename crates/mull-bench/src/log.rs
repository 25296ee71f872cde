//! The event log bench: append throughput (Log writer vs. raw batched inserts into the same
//! schema), projection rebuild rate, and tail latency across processes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use clap::Args;
use mull_core::{
    Clock, EntryPath, Event, FinishReason, Role, StepReport, StreamPart, SystemClock, TurnStatus,
    UIMessage, UIPart, Usage, EVENT_VERSION,
};
use mull_store::{schema, timestamp, Log, LogOptions, LogReader};
use serde_json::json;

use crate::report::{print, Measurement};

/// Options of `mull-bench log`.
#[derive(Args)]
pub struct LogArgs {
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    json: bool,
    /// Chunk events appended in the throughput bench.
    #[arg(long, default_value_t = 500_000)]
    append_events: usize,
    /// Events in the log whose projection is rebuilt.
    #[arg(long, default_value_t = 1_000_000)]
    rebuild_events: usize,
    /// Events the tail-latency bench writes (one every `--tail-interval-us`).
    #[arg(long, default_value_t = 2_000)]
    tail_events: usize,
    /// Gap between two appends in the tail-latency bench.
    #[arg(long, default_value_t = 1_000)]
    tail_interval_us: u64,
}

/// Options of the tail child.
#[derive(Args)]
pub struct TailChildArgs {
    #[arg(long)]
    db: PathBuf,
    #[arg(long)]
    events: usize,
}

pub(crate) const SESSION: &str = "sess_bench";

/// A small deterministic generator, so every run appends the same rows.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

const WORDS: &[&str] = &[
    "the", "model", "streams", "a", "token", "while", "log", "keeps", "every", "fact", "of",
    "turn", "and", "hook", "decides", "what", "tool", "runs", "next", "é", "→",
];

/// Text of 50..190 bytes: with the envelope around it a payload of ~110-250 bytes.
fn delta_text(rng: &mut Lcg) -> String {
    let target = 50 + (rng.next() % 140) as usize;
    let mut text = String::with_capacity(target + 8);
    while text.len() < target {
        text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
        text.push(' ');
    }
    text
}

fn delta(text: String) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "txt_0".into(),
            text,
        },
        original: None,
    }
}

fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_735_689_600, 0).unwrap_or_default()
}

fn at(i: usize) -> DateTime<Utc> {
    epoch() + chrono::Duration::microseconds(i as i64 * 250)
}

/// Runs every log bench and prints the results.
pub fn run(args: &LogArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a scratch folder")?;
    let mut results = Vec::new();
    results.extend(append_throughput(dir.path(), args.append_events)?);
    results.extend(rebuild(dir.path(), args.rebuild_events)?);
    results.extend(tail_latency(
        dir.path(),
        args.tail_events,
        Duration::from_micros(args.tail_interval_us),
    )?);
    print(&results, args.json)
}

fn append_throughput(dir: &Path, n: usize) -> anyhow::Result<Vec<Measurement>> {
    let mut rng = Lcg(42);
    let events: Vec<Event> = (0..n).map(|_| delta(delta_text(&mut rng))).collect();
    let payload_bytes: usize = events.iter().map(|e| e.encode().len()).sum();
    let mean_payload = payload_bytes as f64 / n as f64;

    // Raw: the same rows, pre-encoded, batched 512 per transaction into the same schema.
    let rows: Vec<(i64, String)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| (timestamp::to_stored(at(i)), e.encode()))
        .collect();
    let raw_path = dir.join("raw.db");
    let mut conn = schema::open_writer(&raw_path)?;
    // Checkpoints at the same WAL size as the Log's, so both copy the WAL back as often.
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        LogOptions::default().checkpoint_pages,
    )?;
    let start = Instant::now();
    for (batch_index, batch) in rows.chunks(512).enumerate() {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (seq, session_id, turn_id, at, v, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for (i, (at, payload)) in batch.iter().enumerate() {
                let seq = (batch_index * 512 + i + 1) as i64;
                insert.execute(rusqlite::params![
                    seq,
                    SESSION,
                    "turn_1",
                    at,
                    EVENT_VERSION,
                    "chunk",
                    payload
                ])?;
            }
        }
        tx.commit()?;
    }
    let raw_rate = n as f64 / start.elapsed().as_secs_f64();
    drop(conn);

    // Log: append (encode + queue) on this thread, group commit on the writer thread. The
    // chunks stream inside a turn, as the engine writes them (and as the raw rows are kinded).
    let log = Log::open(dir.join("log.db"))?;
    log.append(
        SESSION,
        Some("turn_1"),
        epoch(),
        Event::TurnStarted {
            request_id: "req_1".into(),
            message_id: "msg_1".into(),
            entry: EntryPath::Chat,
            continuation: false,
            attempt: 0,
            body: json!({}),
        },
    )?;
    log.flush_blocking()?;
    let start = Instant::now();
    for (i, event) in events.into_iter().enumerate() {
        log.append(SESSION, Some("turn_1"), at(i), event)?;
    }
    let queued = start.elapsed();
    log.flush_blocking()?;
    let elapsed = start.elapsed();
    let log_rate = n as f64 / elapsed.as_secs_f64();
    let append_ns = queued.as_nanos() as f64 / n as f64;
    log.close()?;

    let ratio = log_rate / raw_rate * 100.0;
    Ok(vec![
        Measurement {
            bench: "log",
            metric: "append_raw_rusqlite".into(),
            value: raw_rate,
            unit: "events/s",
            goal: None,
            met: None,
            note: format!(
                "{n} pre-encoded rows, 512/txn, same schema+indexes, mean payload {mean_payload:.0} B"
            ),
        },
        Measurement {
            bench: "log",
            metric: "append_log_writer".into(),
            value: log_rate,
            unit: "events/s",
            goal: None,
            met: None,
            note: format!(
                "Log::append (encode+queue) then flush; group commit 512/5ms; the caller spent {append_ns:.0} ns/append"
            ),
        },
        Measurement {
            bench: "log",
            metric: "append_log_vs_raw".into(),
            value: ratio,
            unit: "%",
            goal: Some(">= 70 %".into()),
            met: Some(ratio >= 70.0),
            note: "Log writer throughput as a share of raw inserts, same run".into(),
        },
    ])
}

/// Writes `n` events shaped like real turns: lifecycle events around long text streams.
pub(crate) fn write_turns(log: &Log, n: usize) -> anyhow::Result<()> {
    let mut rng = Lcg(7);
    let mut i = 0usize;
    let mut turn = 0usize;
    const DELTAS: usize = 1000;
    while i < n {
        turn += 1;
        let turn_id = format!("turn_{turn}");
        let message_id = format!("msg_{turn}");
        let request_id = format!("req_{turn}");
        let mut emit = |event: Event| -> anyhow::Result<()> {
            log.append(SESSION, Some(&turn_id), at(i), event)?;
            i += 1;
            Ok(())
        };
        emit(Event::UserMessagesSaved {
            request_id: Some(request_id.clone()),
            messages: vec![UIMessage::user(format!("u_{turn}"), "tell me more")],
        })?;
        emit(Event::TurnStarted {
            request_id: request_id.clone(),
            message_id: message_id.clone(),
            entry: EntryPath::Chat,
            continuation: false,
            attempt: 0,
            body: json!({}),
        })?;
        emit(Event::StepStarted { step: 0 })?;
        emit(Event::Chunk {
            step: 0,
            part: StreamPart::TextStart { id: "txt_0".into() },
            original: None,
        })?;
        let mut text = String::new();
        for _ in 0..DELTAS {
            let piece = delta_text(&mut rng);
            text.push_str(&piece);
            emit(delta(piece))?;
        }
        emit(Event::Chunk {
            step: 0,
            part: StreamPart::TextEnd { id: "txt_0".into() },
            original: None,
        })?;
        let usage = Usage {
            input_tokens: Some(1200),
            output_tokens: Some(900),
            ..Usage::default()
        };
        emit(Event::StepFinished {
            record: Box::new(StepReport {
                step: 0,
                model_id: "bench".into(),
                finish_reason: FinishReason::Stop,
                usage: usage.clone(),
                ..StepReport::default()
            }),
        })?;
        emit(Event::AssistantMessageSaved {
            request_id: request_id.clone(),
            message: UIMessage {
                id: message_id,
                role: Role::Assistant,
                metadata: None,
                parts: vec![
                    UIPart::StepStart,
                    UIPart::Text {
                        text,
                        streaming: false,
                    },
                ],
            },
        })?;
        emit(Event::TurnFinished {
            request_id,
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage,
            response_owed: false,
        })?;
    }
    log.flush_blocking()?;
    Ok(())
}

fn rebuild(dir: &Path, n: usize) -> anyhow::Result<Vec<Measurement>> {
    let path = dir.join("rebuild.db");
    let log = Log::open(&path)?;
    write_turns(&log, n)?;
    log.close()?;
    let reader = LogReader::open(&path)?;
    let events = reader.max_seq()?;
    // Warm the page cache once, then measure the best of three.
    let mut best = Duration::MAX;
    let mut turns = 0;
    for _ in 0..4 {
        let start = Instant::now();
        let state = reader.load_session(SESSION)?;
        let elapsed = start.elapsed();
        if state.last_seq != events {
            bail!("rebuild saw seq {} of {events}", state.last_seq);
        }
        turns = state.turns.len();
        best = best.min(elapsed);
    }
    let rate = events as f64 / best.as_secs_f64();
    let start = Instant::now();
    let listed = reader.turns(SESSION)?;
    let turns_ms = start.elapsed().as_secs_f64() * 1000.0;
    Ok(vec![
        Measurement {
            bench: "log",
            metric: "rebuild_load_session".into(),
            value: rate,
            unit: "events/s",
            goal: Some(">= 1,000,000".into()),
            met: Some(rate >= 1_000_000.0),
            note: format!(
                "load_session over {events} events ({turns} turns of 1000 deltas): read + decode + apply of what the state can see (no chunk of an ended turn), counted over every event it covers, best of 3 warm"
            ),
        },
        Measurement {
            bench: "log",
            metric: "turns_list".into(),
            value: turns_ms,
            unit: "ms",
            goal: None,
            met: None,
            note: format!(
                "LogReader::turns over the same log ({} turns; lifecycle index, no chunks)",
                listed.len()
            ),
        },
    ])
}

fn tail_latency(dir: &Path, n: usize, interval: Duration) -> anyhow::Result<Vec<Measurement>> {
    let path = dir.join("tail.db");
    let log = Log::open(&path)?;
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let mut child = Command::new(exe)
        .arg("log-tail-child")
        .arg("--db")
        .arg(&path)
        .arg("--events")
        .arg(n.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the tail child")?;
    let stdout = child.stdout.take().context("the child's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    match lines.next() {
        Some(Ok(line)) if line == "READY" => {}
        other => bail!("the tail child did not start: {other:?}"),
    }
    let clock = SystemClock;
    let mut rng = Lcg(3);
    for _ in 0..n {
        log.append(
            SESSION,
            Some("turn_1"),
            clock.now(),
            delta(delta_text(&mut rng)),
        )?;
        std::thread::sleep(interval);
    }
    log.flush_blocking()?;
    let report = lines.next().context("the tail child printed no result")??;
    if !child.wait()?.success() {
        bail!("the tail child failed");
    }
    let stats: serde_json::Value = serde_json::from_str(&report)?;
    let get = |k: &str| {
        stats
            .get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let p99 = get("p99_ms");
    let note = format!(
        "{n} chunk events, one per {} us, no barrier (group commit 512/5ms); another process tails (poll 5 ms); latency = seen - at",
        interval.as_micros()
    );
    Ok(vec![
        Measurement {
            bench: "log",
            metric: "tail_latency_p50".into(),
            value: get("p50_ms"),
            unit: "ms",
            goal: None,
            met: None,
            note: note.clone(),
        },
        Measurement {
            bench: "log",
            metric: "tail_latency_p99".into(),
            value: p99,
            unit: "ms",
            goal: Some("<= 50 ms".into()),
            met: Some(p99 <= 50.0),
            note,
        },
        Measurement {
            bench: "log",
            metric: "tail_latency_max".into(),
            value: get("max_ms"),
            unit: "ms",
            goal: None,
            met: None,
            note: "same run".into(),
        },
    ])
}

/// The child side: tails the log and reports latency percentiles as one JSON line.
pub fn tail_child(args: &TailChildArgs) -> anyhow::Result<()> {
    let mut tail = LogReader::open(&args.db)?.tail(0);
    println!("READY");
    std::io::stdout().flush()?;
    let clock = SystemClock;
    let mut latencies = Vec::with_capacity(args.events);
    let deadline = Instant::now() + Duration::from_secs(300);
    while latencies.len() < args.events {
        if Instant::now() > deadline {
            bail!("tailed only {} of {} events", latencies.len(), args.events);
        }
        for env in tail.next_batch(Duration::from_millis(500))? {
            let seen = clock.now();
            latencies.push((seen - env.at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "{}",
        json!({
            "p50_ms": pick(0.50),
            "p99_ms": pick(0.99),
            "max_ms": pick(1.0),
            "count": latencies.len(),
        })
    );
    Ok(())
}
