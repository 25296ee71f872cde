//! Load: many sessions with concurrent turns in one process, on the Scripted model, over one
//! log. Every session fires all its turns at once, so its turn lock must queue them; the log
//! is then read back to check that no turn interleaves with another in the same session and
//! that every turn completed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use async_trait::async_trait;
use mull_core::{Event, LanguageModel, TurnStatus, UIMessage};
use mull_engine::{Agent, OutcomeStatus, Session, SessionOptions, TurnOptions};
use mull_providers::scripted::ScriptedModel;
use mull_store::{Log, LogReader};

/// The shape of a load run.
#[derive(Debug, Clone, Copy)]
pub struct LoadPlan {
    pub sessions: usize,
    /// Turns each session starts at once.
    pub turns_per_session: usize,
    /// Text deltas per turn.
    pub chunks_per_turn: usize,
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub plan: LoadPlan,
    pub turns: u64,
    pub events: u64,
    pub elapsed: Duration,
    /// Turns completed per second of wall time.
    pub turns_per_sec: f64,
    /// Events committed per second of wall time.
    pub events_per_sec: f64,
    /// From the call to its outcome, queueing behind the session's other turns included.
    pub call_p50: Duration,
    pub call_p99: Duration,
    /// A turn alone, from its `turn_started` to its `turn_finished` (injected clock, ms).
    pub turn_p50_ms: u64,
    pub turn_p99_ms: u64,
    /// Peak resident memory of the process (VmHWM), when the platform reports it.
    pub peak_rss_kib: Option<u64>,
}

struct LoadAgent {
    model: Arc<ScriptedModel>,
}

#[async_trait]
impl Agent for LoadAgent {
    fn name(&self) -> &str {
        "load"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone()
    }
}

fn percentile<T: Copy + Ord>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Peak resident set size of this process, from `/proc/self/status`.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the plan against a fresh log at `db`, then checks the log.
pub async fn run(db: &Path, plan: LoadPlan) -> anyhow::Result<LoadReport> {
    let log = Log::open(db).with_context(|| format!("opening {}", db.display()))?;
    let mut sessions = Vec::with_capacity(plan.sessions);
    for s in 0..plan.sessions {
        let mut builder = ScriptedModel::builder("scripted-load");
        for _ in 0..plan.turns_per_session {
            let deltas: Vec<String> = (0..plan.chunks_per_turn)
                .map(|i| format!("w{i} "))
                .collect();
            builder = builder.step(move |step| step.text_deltas(deltas).usage(20, 10));
        }
        let agent = Arc::new(LoadAgent {
            model: Arc::new(builder.build()),
        });
        let session = Session::open(&log, agent, SessionOptions::new(format!("sess_{s:05}")))
            .await
            .context("opening a session")?;
        sessions.push(session);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for session in &sessions {
        for t in 0..plan.turns_per_session {
            let session = session.clone();
            tasks.push(tokio::spawn(async move {
                let began = Instant::now();
                let outcome = session
                    .save_messages(
                        vec![UIMessage::user(format!("u_{}_{t}", session.id()), "hello")],
                        TurnOptions::default(),
                    )
                    .await;
                (outcome, began.elapsed())
            }));
        }
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (outcome, latency) = task.await.context("a turn task panicked")?;
        let outcome = outcome?;
        ensure!(
            outcome.status == OutcomeStatus::Completed,
            "a turn ended {:?}: {:?}",
            outcome.status,
            outcome.error
        );
        latencies.push(latency);
    }
    log.flush().await?;
    let elapsed = started.elapsed();
    let reader = log.reader()?;
    let events = reader.max_seq()?;
    let turn_durations = check_log(&reader, plan)?;
    latencies.sort_unstable();
    let turns = latencies.len() as u64;
    Ok(LoadReport {
        plan,
        turns,
        events,
        elapsed,
        turns_per_sec: turns as f64 / elapsed.as_secs_f64(),
        events_per_sec: events as f64 / elapsed.as_secs_f64(),
        call_p50: percentile(&latencies, 0.50).unwrap_or_default(),
        call_p99: percentile(&latencies, 0.99).unwrap_or_default(),
        turn_p50_ms: percentile(&turn_durations, 0.50).unwrap_or_default(),
        turn_p99_ms: percentile(&turn_durations, 0.99).unwrap_or_default(),
        peak_rss_kib: peak_rss_kib(),
    })
}

/// Reads the whole log in seq order and checks, per session, that turns never interleave and
/// that every turn completed; returns the turns' durations in ms.
pub fn check_log(reader: &LogReader, plan: LoadPlan) -> anyhow::Result<Vec<u64>> {
    // The turn each session is inside of: its turn id and request id.
    let mut open: HashMap<String, (Option<String>, String)> = HashMap::new();
    let mut finished: HashMap<String, usize> = HashMap::new();
    let mut after = 0;
    loop {
        let page = reader.page(after, 4096)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for env in &page {
            let session = &env.session_id;
            match (&env.event, open.get(session)) {
                (Event::TurnStarted { request_id, .. }, Some((_, running))) => {
                    anyhow::bail!(
                        "seq {}: turn {request_id} of {session} started while {running} was running",
                        env.seq
                    );
                }
                (Event::TurnStarted { request_id, .. }, None) => {
                    open.insert(session.clone(), (env.turn_id.clone(), request_id.clone()));
                }
                (
                    Event::TurnFinished {
                        request_id, status, ..
                    },
                    Some((_, running)),
                ) => {
                    ensure!(
                        request_id == running,
                        "seq {}: turn {request_id} of {session} finished inside {running}",
                        env.seq
                    );
                    ensure!(
                        *status == TurnStatus::Completed,
                        "seq {}: turn {request_id} ended {status:?}",
                        env.seq
                    );
                    open.remove(session);
                    *finished.entry(session.clone()).or_default() += 1;
                }
                (
                    Event::UserMessagesSaved {
                        request_id: Some(request_id),
                        ..
                    },
                    Some((_, running)),
                ) => {
                    ensure!(
                        request_id == running,
                        "seq {}: messages of {request_id} saved inside turn {running} of {session}",
                        env.seq
                    );
                }
                (_, Some((turn_id, running))) => {
                    if let (Some(event_turn), Some(turn_id)) = (&env.turn_id, turn_id) {
                        ensure!(
                            event_turn == turn_id,
                            "seq {}: an event of turn {event_turn} inside turn {running} of {session}",
                            env.seq
                        );
                    }
                }
                (_, None) => {}
            }
        }
    }
    ensure!(open.is_empty(), "{} turn(s) never finished", open.len());
    ensure!(
        finished.len() == plan.sessions,
        "{} sessions ran turns, not {}",
        finished.len(),
        plan.sessions
    );
    for (session, count) in &finished {
        ensure!(
            *count == plan.turns_per_session,
            "{session} finished {count} turns"
        );
    }
    let mut durations: Vec<u64> = Vec::new();
    for s in 0..plan.sessions {
        for turn in reader.turns(&format!("sess_{s:05}"))? {
            durations.push(turn.duration_ms.unwrap_or_default());
        }
    }
    durations.sort_unstable();
    Ok(durations)
}
