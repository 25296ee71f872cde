//! The log on PostgreSQL at speed, side by side in one run:
//! `cargo run --release -p mull-bench -- pg-speed`.
//!
//! Starts a throwaway PostgreSQL (the tests' harness; `MULL_TEST_PG` to use a running server)
//! and measures, in this process:
//! - the turn shapes (a), (b), (c) per text chunk on SQLite and on PostgreSQL;
//! - each shape's physical floor, timed on the same cluster and shown per chunk beside it: the
//!   rows the shape's first turn logged (read back from the run just made) inserted into
//!   `mull_events` again by bare statements that commit — for (c), one round trip per turn; for
//!   the long turns of (a) and (b), the writer's batches one after another on one connection;
//!   for (c) also with a round trip before each turn that takes its session (a lease row), since
//!   every (c) turn opens a new session;
//! - group commit: (c) turns of 100 sessions at once on one node against one session's turns
//!   one after another, in turns/s.
//!
//! Everything runs on one runtime, the turn bench's single thread unless `--runtime
//! multi-thread` asks for a worker per core. Every PostgreSQL row states the cluster's `fsync`
//! and `synchronous_commit`, the runtime and the writer's batch size; the load
//! average before and after the run is printed too, since the machine may be shared.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use mull_store::{EventLog, Log};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions};
use tokio_postgres::types::ToSql;

use crate::report::{print, Measurement};
use crate::runtime::{run_as_task, RuntimeKind};
use crate::turns::{process_cpu_ms, run_shape_as, Shape, SHAPES};

/// Arguments of the PostgreSQL speed bench.
#[derive(Debug, Clone, clap::Args)]
pub struct PgSpeedArgs {
    /// Which shapes to run, comma-separated.
    #[arg(long, default_value = "a,b,c", value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Clients running (c) turns at once in the group-commit run (each turn its own session).
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// (c) turns each of those clients runs in a row (and the one client run alone).
    #[arg(long, default_value_t = 10)]
    pub turns_per_session: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Measure only the shapes and their floors, not group commit (as the peers script does).
    #[arg(long)]
    pub no_group_commit: bool,
    /// The writer's batch size (`PgOptions::batch_max_events`); the floors of (a) and (b) use
    /// the same. The log's default unless given.
    #[arg(long)]
    batch_max_events: Option<usize>,
    /// The runtime the turns and the floors run on (the turn bench's own by default).
    #[arg(long, value_enum, default_value_t)]
    runtime: RuntimeKind,
}

/// Runs the bench and prints the table.
pub fn run(args: &PgSpeedArgs) -> anyhow::Result<()> {
    let Some(pg) = TestPg::start("the PostgreSQL speed bench") else {
        anyhow::bail!("no PostgreSQL: see the printed reason, or set MULL_TEST_PG");
    };
    let load_before = load_average();
    let runtime = args.runtime.build()?;
    let dir = tempfile::tempdir().context("creating a scratch folder")?;
    let (pg, folder, task_args) = (Arc::new(pg), dir.path().to_owned(), args.clone());
    let results = run_as_task(&runtime, async move {
        let args = task_args;
        let mut results = Vec::new();
        let settings = format!(
            "{}; {} runtime; batches of up to {} rows",
            cluster_settings(&pg.database()).await?,
            args.runtime.label(),
            bench_options(&args).batch_max_events
        );
        for name in &args.scenarios {
            let shape = Shape::named(name)?;
            results.extend(shape_rows(&pg, &folder, shape, &settings, &args).await?);
        }
        if !args.no_group_commit {
            results.extend(group_commit(&pg, &args, &settings).await?);
        }
        Ok(results)
    })?;
    print(&results, args.json)?;
    let load = format!(
        "load average (1 min) before {load_before}, after {}; the machine may be shared with \
         other work",
        load_average()
    );
    // JSON lines stay JSON: the note goes to stderr.
    if args.json {
        eprintln!("{load}");
    } else {
        println!("{load}");
    }
    Ok(())
}

/// The 1-minute load average, as `/proc/loadavg` says it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The node's options: the log's defaults, with `--batch-max-events` when given.
fn bench_options(args: &PgSpeedArgs) -> PgOptions {
    let mut options = PgOptions::new("bench");
    if let Some(batch) = args.batch_max_events {
        options.batch_max_events = batch.max(1);
    }
    options
}

/// `fsync=…, synchronous_commit=…` of the cluster behind `url`.
async fn cluster_settings(url: &str) -> anyhow::Result<String> {
    let client = connect(url).await?;
    let mut out = Vec::new();
    for name in ["fsync", "synchronous_commit"] {
        let row = client.query_one(&format!("SHOW {name}"), &[]).await?;
        out.push(format!("{name}={}", row.get::<_, String>(0)));
    }
    Ok(out.join(", "))
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// One shape on SQLite and on PostgreSQL (µs per text chunk); for a shape of many short turns,
/// the floor beside it.
async fn shape_rows(
    pg: &TestPg,
    dir: &std::path::Path,
    shape: Shape,
    settings: &str,
    args: &PgSpeedArgs,
) -> anyhow::Result<Vec<Measurement>> {
    let (runtime, options) = (args.runtime, bench_options(args));
    let mut out = Vec::new();
    let url = pg.database();
    for backend in ["sqlite", "postgres"] {
        let pg_log = match backend {
            "sqlite" => None,
            _ => Some(PgLog::connect(&url, options.clone()).await?),
        };
        let log: Arc<dyn EventLog> = match &pg_log {
            None => Arc::new(Log::open(dir.join(format!("shape-{}.db", shape.name)))?),
            Some(pg_log) => Arc::new(pg_log.clone()),
        };
        let traffic = pg_log.as_ref().map(PgLog::traffic);
        let (calls, texts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start = Instant::now();
        run_shape_as(&log, &shape, "sess", &calls, &texts).await?;
        let wall = start.elapsed();
        let chunks = shape.text_chunks();
        // Round trips per turn: sessions taken (lease and history together) and batches
        // committed.
        let trips = match (&pg_log, traffic) {
            (Some(pg_log), Some(before)) => {
                let after = pg_log.traffic();
                let turns = (shape.text_chunks() / shape.chunks_per_turn()).max(1) as f64;
                format!(
                    "; round trips per turn: {:.2} opening, {:.2} commits",
                    (after.opening - before.opening) as f64 / turns,
                    (after.commits - before.commits) as f64 / turns
                )
            }
            _ => String::new(),
        };
        anyhow::ensure!(
            texts.load(std::sync::atomic::Ordering::Relaxed) as usize == chunks,
            "shape {} on {backend}: not every text chunk was seen",
            shape.name
        );
        out.push(Measurement {
            bench: "pg",
            metric: format!("turn_{}_{backend}", shape.name),
            value: wall.as_secs_f64() * 1e6 / chunks as f64,
            unit: "us/chunk",
            goal: None,
            met: None,
            note: match backend {
                "postgres" => format!(
                    "shape ({}) {}; {settings}{trips}",
                    shape.name,
                    shape.describe()
                ),
                _ => format!(
                    "shape ({}) {}; {} runtime",
                    shape.name,
                    shape.describe(),
                    runtime.label()
                ),
            },
        });
    }
    let turns = shape.text_chunks() / shape.chunks_per_turn();
    let bare = if turns > 1 {
        // Many short turns: each turn's rows in one statement, as a turn's gate commits them.
        let per_turn = floor(&url, usize::MAX, turns, false).await?;
        Floor {
            per_chunk: per_turn / shape.chunks_per_turn() as f64,
            note: format!(
                "one bare round trip per turn inserting a ({}) turn's rows and committing ({:.0} \
                 us per turn)",
                shape.name,
                per_turn * 1e6
            ),
        }
    } else {
        // One long turn: its rows in the writer's batches, one statement after another on one
        // connection — what the server needs to take them in, with no engine before it.
        let batch = options.batch_max_events;
        let per_turn = floor(&url, batch, FLOOR_REPEATS, false).await?;
        Floor {
            per_chunk: per_turn / shape.text_chunks() as f64,
            note: format!(
                "the ({}) turn's rows inserted again in batches of {batch}, one bare statement \
                 after another on one connection ({:.1} ms per turn)",
                shape.name,
                per_turn * 1e3
            ),
        }
    };
    out.push(Measurement {
        bench: "pg",
        metric: format!("turn_{}_floor", shape.name),
        value: bare.per_chunk * 1e6,
        unit: "us/chunk",
        goal: None,
        met: None,
        note: format!("{}; {settings}", bare.note),
    });
    if turns > 1 {
        // Each (c) turn is a new session: the least a node does before the turn can start is
        // a round trip that takes the session.
        let per_turn = floor(&url, usize::MAX, turns, true).await?;
        out.push(Measurement {
            bench: "pg",
            metric: format!("turn_{}_floor_with_open", shape.name),
            value: per_turn * 1e6 / shape.chunks_per_turn() as f64,
            unit: "us/chunk",
            goal: None,
            met: None,
            note: format!(
                "two bare round trips per turn: a new session's lease row inserted (not \
                 waiting for the disk, as the log takes a lease), then the turn's rows ({:.0} us \
                 per turn); {settings}",
                per_turn * 1e6
            ),
        });
    }
    Ok(out)
}

/// How often a long turn's floor is measured (and averaged).
const FLOOR_REPEATS: usize = 3;

/// A shape's physical floor on the cluster, per text chunk, and how it was measured.
struct Floor {
    per_chunk: f64,
    note: String,
}

/// Seconds per repeat of the physical floor: the rows the run's first turn logged, inserted
/// `repeats` times (under a fresh session id each time) by bare statements of at most `batch`
/// rows that commit, one after another on one connection. The rows are unnested in the select
/// list, as the writer does. With `open`, each repeat first inserts its session's lease row, in a
/// round trip of its own.
async fn floor(url: &str, batch: usize, repeats: usize, open: bool) -> anyhow::Result<f64> {
    let client = connect(url).await?;
    let rows = client
        .query(
            "SELECT seq, turn_id, at, v, kind, payload, epoch FROM mull_events \
             WHERE session_id = 'sess_0' ORDER BY seq",
            &[],
        )
        .await?;
    anyhow::ensure!(!rows.is_empty(), "the run logged no turn to copy");
    let insert = client
        .prepare(
            "INSERT INTO mull_events (session_id, seq, turn_id, at, v, kind, payload, epoch)
             SELECT $1, unnest($2::int8[]), unnest($3::text[]), unnest($4::int8[]),
                    unnest($5::int2[]), unnest($6::text[]), unnest($7::text[]), unnest($8::int8[])",
        )
        .await?;
    // As the log takes a lease: committed without waiting for the disk (the rows written
    // under it wait, and the server's log is flushed in order).
    let take = client
        .prepare(
            "INSERT INTO mull_leases (session_id, owner, epoch, expires_at)
             SELECT $1, 'floor', 1, now() + interval '1 minute'
             FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait",
        )
        .await?;
    // The statements' parameters, made before the clock starts.
    let batches: Vec<_> = rows
        .chunks(batch.max(1))
        .map(|rows| {
            (
                rows.iter().map(|r| r.get(0)).collect::<Vec<i64>>(),
                rows.iter()
                    .map(|r| r.get(1))
                    .collect::<Vec<Option<String>>>(),
                rows.iter().map(|r| r.get(2)).collect::<Vec<i64>>(),
                rows.iter().map(|r| r.get(3)).collect::<Vec<i16>>(),
                rows.iter().map(|r| r.get(4)).collect::<Vec<String>>(),
                rows.iter().map(|r| r.get(5)).collect::<Vec<String>>(),
                rows.iter().map(|r| r.get(6)).collect::<Vec<i64>>(),
            )
        })
        .collect();
    let start = Instant::now();
    for repeat in 0..repeats.max(1) {
        let session = format!("floor_{}{repeat}", if open { "open_" } else { "" });
        if open {
            client.execute(&take, &[&session]).await?;
        }
        for (seqs, turn_ids, ats, vs, kinds, payloads, epochs) in &batches {
            let params: [&(dyn ToSql + Sync); 8] =
                [&session, seqs, turn_ids, ats, vs, kinds, payloads, epochs];
            client.execute(&insert, &params).await?;
        }
    }
    Ok(start.elapsed().as_secs_f64() / repeats.max(1) as f64)
}

/// (c) turns — each its own session, as in (c) — one after another, then `sessions` clients'
/// at once on one node (so that many sessions are open at any moment).
async fn group_commit(
    pg: &TestPg,
    args: &PgSpeedArgs,
    settings: &str,
) -> anyhow::Result<Vec<Measurement>> {
    let shape = SHAPES[2].with_turns(args.turns_per_session);
    let url = pg.database();
    let pg_log = PgLog::connect(&url, bench_options(args)).await?;
    let log: Arc<dyn EventLog> = Arc::new(pg_log.clone());
    let (calls, texts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // Untimed first: the node's connections prepare their statements and the server's backends
    // load their caches on first use, which ten timed turns would otherwise mostly measure.
    run_shape_as(&log, &shape, "warm", &calls, &texts).await?;
    let start = Instant::now();
    run_shape_as(&log, &shape, "one", &calls, &texts).await?;
    let one = args.turns_per_session as f64 / start.elapsed().as_secs_f64();

    let (before, cpu_before) = (pg_log.traffic(), process_cpu_ms());
    let start = Instant::now();
    let mut running = Vec::new();
    for s in 0..args.sessions {
        let (log, calls, texts) = (Arc::clone(&log), Arc::clone(&calls), Arc::clone(&texts));
        running.push(tokio::spawn(async move {
            run_shape_as(&log, &shape, &format!("many{s}"), &calls, &texts).await
        }));
    }
    for task in running {
        task.await??;
    }
    let wall = start.elapsed();
    let turns = (args.sessions * args.turns_per_session) as f64;
    let many = turns / wall.as_secs_f64();
    let cpu_ms = process_cpu_ms() - cpu_before;
    let commits = (pg_log.traffic().commits - before.commits).max(1) as f64;
    let row = |metric: &str, value: f64, note: String| Measurement {
        bench: "pg",
        metric: metric.into(),
        value,
        unit: "turns/s",
        goal: None,
        met: None,
        note,
    };
    Ok(vec![
        row(
            "group_commit_1_session",
            one,
            format!(
                "{} (c) turns one after another (each its own session, as in (c)), one node; \
                 {settings}",
                args.turns_per_session
            ),
        ),
        row(
            &format!("group_commit_{}_sessions", args.sessions),
            many,
            format!(
                "{} clients x {} (c) turns at once (each turn its own session), one node; \
                 {:.1}x one at a time; {:.1} turns per commit; this process's CPU {:.2} ms per turn ({:.2} of the machine's cores \
                 busy with it); {settings}",
                args.sessions,
                args.turns_per_session,
                many / one,
                turns / commits,
                cpu_ms / turns,
                cpu_ms / 1000.0 / wall.as_secs_f64()
            ),
        ),
    ])
}
