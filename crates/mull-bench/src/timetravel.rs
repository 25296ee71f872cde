//! Time travel over the log: backtesting a policy over many recorded demo sessions
//! (sessions/s), and forking a long session (one event, however long the origin; then the
//! fork opened, which folds the inherited history).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use mull::engine::{Session, SessionOptions};
use mull::policy::ToolPolicy;
use mull::replay::{BacktestOptions, ReplayOptions};
use mull_core::{Clock, FixedClock, RandomIds};
use mull_store::{ForkPoint, Log, LogReader};

use crate::log::{write_turns, SESSION};
use crate::report::{print, Measurement};

/// Arguments of `mull-bench timetravel`.
#[derive(Args)]
pub struct TimeTravelArgs {
    /// Recorded demo sessions to backtest (a quarter recorded under `no-weather`, a quarter
    /// under `guides-only`).
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// The built-in policy to backtest.
    #[arg(long, default_value = "guides-only")]
    pub policy: String,
    /// Sessions re-executed at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Events in the session that is forked.
    #[arg(long, default_value_t = 1_000_000)]
    pub fork_events: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs both measurements once and prints them.
pub fn run(args: &TimeTravelArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut results = runtime.block_on(backtest(dir.path(), args))?;
    results.extend(runtime.block_on(fork(dir.path(), args.fork_events))?);
    print(&results, args.json)
}

async fn backtest(dir: &Path, args: &TimeTravelArgs) -> anyhow::Result<Vec<Measurement>> {
    let path = dir.join("demos.db");
    let log = Log::open(&path)?;
    let events = mull::demo::record_sessions(&log, args.sessions).await?;
    log.close()?;
    let policy = ToolPolicy::builtin(&args.policy)
        .with_context(|| format!("no built-in policy {:?}", args.policy))?;
    let reader = LogReader::open(&path)?;
    let options = BacktestOptions {
        replay: ReplayOptions::default(),
        concurrency: args.concurrency,
    };
    let start = Instant::now();
    let report =
        mull::replay::backtest_with(&reader, &[], mull::demo::guarded_agent(policy), options)
            .await?;
    let secs = start.elapsed().as_secs_f64();
    let s = &report.summary;
    if s.skipped > 0 || s.sessions != args.sessions {
        bail!("{} of {} sessions skipped", s.skipped, s.sessions);
    }
    Ok(vec![
        Measurement {
            bench: "tt",
            metric: "backtest_sessions_per_s".into(),
            value: args.sessions as f64 / secs,
            unit: "sessions/s",
            goal: None,
            met: None,
            note: format!(
                "{} demo sessions ({events} events), policy {}, {} at once: {} decisions changed, {} unusable from there, {} unchanged; {secs:.1} s",
                args.sessions,
                args.policy,
                args.concurrency,
                s.decisions_changed,
                s.sessions_unusable,
                s.same
            ),
        },
        Measurement {
            bench: "tt",
            metric: "backtest_recorded_events_per_s".into(),
            value: events as f64 / secs,
            unit: "events/s",
            goal: None,
            met: None,
            note: "recorded events covered per second (each session re-executed up to where it stops)"
                .into(),
        },
    ])
}

async fn fork(dir: &Path, events: usize) -> anyhow::Result<Vec<Measurement>> {
    let path = dir.join("long.db");
    let log = Log::open(&path)?;
    write_turns(&log, events)?;
    let last = log.last_seq();
    let options = |id: &str| {
        SessionOptions::new(id)
            .with_clock(Arc::new(FixedClock::at_fixture_epoch()))
            .with_ids(Arc::new(RandomIds))
    };
    // The fork proper: resolve the point, write one event.
    let start = Instant::now();
    let resolved = log.with_reader(|r| Ok(r.fork_point(SESSION, &ForkPoint::AtSeq(last))))??;
    log.append(
        "fork_1",
        None,
        FixedClock::at_fixture_epoch().now(),
        resolved.event(),
    )?;
    log.flush().await?;
    let point_ms = start.elapsed().as_secs_f64() * 1000.0;
    // Session::fork end to end: the same, then the fork opened (its history folded).
    let start = Instant::now();
    let (session, _) = Session::fork(
        &log,
        mull::demo::agent(),
        SESSION,
        &ForkPoint::AtSeq(last),
        options("fork_2"),
    )
    .await?;
    let open_ms = start.elapsed().as_secs_f64() * 1000.0;
    let inherited = session.read_state(|s| s.messages.len());
    drop(session);
    log.close()?;
    Ok(vec![
        Measurement {
            bench: "tt",
            metric: "fork_point_and_event".into(),
            value: point_ms,
            unit: "ms",
            goal: Some("< 1000".into()),
            met: Some(point_ms < 1000.0),
            note: format!("fork of a {events}-event session at its last event: resolve the point, write session_forked, commit"),
        },
        Measurement {
            bench: "tt",
            metric: "session_fork_open".into(),
            value: open_ms,
            unit: "ms",
            goal: Some("< 1000".into()),
            met: Some(open_ms < 1000.0),
            note: format!("Session::fork end to end, the fork opened on the inherited history ({inherited} messages folded from {events} events)"),
        },
    ])
}
