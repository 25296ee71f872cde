//! The dashboard on a large PostgreSQL log: a generated SQLite log (`mull gen-bench-log`) is
//! imported into a throwaway PostgreSQL (`fsync=off`), then `mull dash --bench-first-frame URL`
//! is run as a child process (first frame, newest turn's timeline, peak RSS: the log is read
//! where it is, no copy), and the dashboard's idle refresh — the change query it runs every
//! poll — is timed beside the full-table `GROUP BY` a session list used to cost.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use mull_store::{LogReader, ReadLog};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, PgReader};

use crate::report::{print, Measurement};

/// Arguments of the PostgreSQL dashboard bench.
#[derive(Debug, Args)]
pub struct DashPgArgs {
    /// A generated SQLite log to import (`mull gen-bench-log FILE --events N`).
    #[arg(long)]
    pub sqlite: PathBuf,
    /// The `mull` binary to run the dashboard with.
    #[arg(long, default_value = "target/release/mull")]
    pub mull: PathBuf,
    /// First-frame runs.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the bench and prints the table.
pub fn run(args: &DashPgArgs) -> anyhow::Result<()> {
    let Some(pg) = TestPg::start("the PostgreSQL dashboard bench") else {
        anyhow::bail!("no PostgreSQL: see the printed reason, or set MULL_TEST_PG");
    };
    let url = pg.database();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let mut results = Vec::new();

    let source = LogReader::open(&args.sqlite)
        .with_context(|| format!("opening {}", args.sqlite.display()))?;
    let events = source.max_seq()?;
    let sessions = LogReader::sessions(&source)?.len();
    let started = Instant::now();
    runtime.block_on(async {
        // A node's open migrates the empty database first.
        drop(PgLog::connect(&url, PgOptions::new("bench")).await?);
        mull_store_pg::import(&url, &source).await?;
        anyhow::Ok(())
    })?;
    let import = started.elapsed();
    drop(source);
    results.push(measure(
        "import",
        events as f64 / import.as_secs_f64(),
        "events/s",
        None,
        format!(
            "{events} events of {sessions} sessions imported in {:.1} s (fsync=off)",
            import.as_secs_f64()
        ),
    ));
    let client = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client.batch_execute("VACUUM ANALYZE").await?;
        anyhow::Ok(client)
    })?;

    for run in 1..=args.runs {
        let output = Command::new(&args.mull)
            .args(["dash", "--bench-first-frame", &url])
            .output()
            .with_context(|| format!("running {}", args.mull.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        anyhow::ensure!(
            output.status.success(),
            "mull dash failed: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let frame = number_after(&stdout, "first frame ").unwrap_or(f64::NAN);
        let rss = number_after(&stdout, "peak RSS ").unwrap_or(f64::NAN);
        results.push(measure(
            "dash",
            frame,
            "ms",
            Some(("<= 500 ms", frame <= 500.0)),
            format!("first frame, run {run}: {stdout}"),
        ));
        results.push(measure(
            "dash",
            rss,
            "MB",
            Some(("<= 100 MB", rss <= 100.0)),
            format!("peak RSS of the dashboard, run {run}"),
        ));
    }

    let reader = PgReader::open(&url)?;
    let cursor = reader.cursor()?;
    let polls = 200u32;
    let start = Instant::now();
    let mut changed = 0;
    for _ in 0..polls {
        changed += reader.changes(cursor)?.sessions.len();
    }
    let per_poll = start.elapsed() / polls;
    results.push(measure(
        "dash",
        per_poll.as_secs_f64() * 1e6,
        "µs",
        None,
        format!(
            "idle refresh: the sessions changed since the cursor ({changed} over {polls} polls)"
        ),
    ));
    let start = Instant::now();
    let grouped = runtime.block_on(client.query(
        "SELECT session_id, max(seq) FROM mull_events GROUP BY session_id",
        &[],
    ))?;
    results.push(measure(
        "dash",
        start.elapsed().as_secs_f64() * 1e6,
        "µs",
        None,
        format!(
            "for comparison: one GROUP BY session over mull_events ({} sessions), what a refresh cost before",
            grouped.len()
        ),
    ));
    print(&results, args.json)
}

fn measure(
    metric: &str,
    value: f64,
    unit: &'static str,
    goal: Option<(&str, bool)>,
    note: String,
) -> Measurement {
    Measurement {
        bench: "dashpg",
        metric: metric.to_owned(),
        value,
        unit,
        goal: goal.map(|(g, _)| g.to_owned()),
        met: goal.map(|(_, met)| met),
        note,
    }
}

/// The number just after `label` in `text` (`first frame 12.3 ms` → 12.3).
fn number_after(text: &str, label: &str) -> Option<f64> {
    let rest = &text[text.find(label)? + label.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}
