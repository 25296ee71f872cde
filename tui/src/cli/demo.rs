//! `mull demo`: the scripted demo agent writing a log, shown live in the dashboard in one
//! command; `--headless` runs it without a screen.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use mull::demo::{self, ApprovalNotice, DemoOptions, DemoReport};
use mull::policy::ToolPolicy;
use mull_core::{IdSource, RandomIds};
use mull_store::{EventLog, Log};
use mull_store_pg::{PgInbox, PgLog, PgOptions};

use crate::dash::app::{SelfAnswer, SelfAnswers};
use crate::dash::{self as dashboard, DashOptions};

/// Arguments of `mull demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The database the demo writes: a SQLite file or a `postgres://` URL.
    #[arg(long, default_value = "mull.db")]
    pub db: PathBuf,
    /// Run without the dashboard and print what happened.
    #[arg(long)]
    pub headless: bool,
    /// Fixed clock, counting ids and no pacing: the same log bytes every run.
    #[arg(long)]
    pub deterministic: bool,
    /// The session to write (default: `demo` when deterministic, a fresh id otherwise).
    #[arg(long)]
    pub session: Option<String>,
    /// A stricter tool policy over the demo agent's own: a built-in example (`guides-only`,
    /// `no-weather`, `demo`).
    #[arg(long)]
    pub policy: Option<String>,
    /// No pacing (real clock and ids): the demo's seven turns in a moment (the booking is
    /// approved at once).
    #[arg(long)]
    pub fast: bool,
    #[command(flatten)]
    pub mcp: crate::cli::mcp::McpArgs,
    #[command(flatten)]
    pub budget: crate::cli::budget::BudgetArgs,
    /// How many seconds the booking waits for a person's approval before the demo approves
    /// it itself (the screen says when).
    #[arg(long, value_name = "SECONDS", default_value_t = demo::APPROVAL_WAIT.as_secs())]
    pub approval_wait: u64,
}

/// How long the dashboard waits for the demo's first turn before opening anyway.
const FIRST_TURN_WAIT: Duration = Duration::from_secs(5);

/// Runs the demo, headless or under the dashboard.
pub fn run(args: DemoArgs) -> Result<()> {
    let log = match crate::cli::pg::url(&args.db) {
        Some(url) => DemoLog::Postgres(url.to_owned()),
        None => DemoLog::Sqlite(
            super::open_log(&args.db).with_context(|| format!("opening {}", args.db.display()))?,
        ),
    };
    let policy = args.policy.as_deref().map(builtin_policy).transpose()?;
    let mut options = DemoOptions {
        deterministic: args.deterministic,
        policy,
        fast: args.fast,
        tool_sources: demo::ToolSources(args.mcp.servers()?),
        budget: args.budget.budget()?,
        approval_wait: if args.fast {
            Duration::ZERO
        } else {
            Duration::from_secs(args.approval_wait)
        },
        ..DemoOptions::default()
    };
    if let Some(session) = &args.session {
        options.session_id = session.clone();
    } else if !args.deterministic {
        // A fresh session per run, so running the demo again adds to the log.
        options.session_id = RandomIds.next_id("demo");
    }
    let session_id = options.session_id.clone();
    if args.headless {
        // Under the dashboard its approvals view says the same, with the key.
        let db = args.db.clone();
        options.on_approval_wait = Some(ApprovalNotice(Arc::new(move |pending, plan| {
            println!(
                "{} waits for approval ({}): press a in mull dash {} to approve; if nobody \
                 answers, the demo approves it itself at {} UTC (in {} s)",
                pending.tool,
                pending.approval_id,
                db.display(),
                plan.at.format("%H:%M:%S"),
                plan.wait.as_secs()
            );
        })));
        let report = run_demo(&log, options)?;
        log.close()
            .with_context(|| format!("committing {}", args.db.display()))?;
        print_report(&report, &args.db);
        return Ok(());
    }

    // The dashboard announces the demo's own approval before it happens.
    let self_answers = SelfAnswers::default();
    let announce = self_answers.clone();
    let announced_session = session_id.clone();
    options.on_approval_wait = Some(ApprovalNotice(Arc::new(move |pending, plan| {
        announce.announce(SelfAnswer {
            session_id: announced_session.clone(),
            approval_id: pending.approval_id.clone(),
            tool: pending.tool.clone(),
            at: plan.at,
            who: "mull demo".to_owned(),
        });
    })));
    // Quitting the dashboard stops the demo after the turn in progress, so the log closes
    // (and its -wal and -shm files go) without waiting out the rest of the script.
    let stop = Arc::new(AtomicBool::new(false));
    options.stop = Some(Arc::clone(&stop));
    let writer = log.clone();
    let agent = std::thread::Builder::new()
        .name("mull-demo".into())
        .spawn(move || run_demo(&writer, options))
        .context("starting the demo thread")?;
    wait_for_first_turn(&args.db, &session_id);
    let shown = dashboard::run(
        &args.db,
        DashOptions {
            follow: true,
            self_answers,
            ..DashOptions::default()
        },
    );
    stop.store(true, Ordering::SeqCst);
    if !agent.is_finished() {
        println!("stopping the demo after the turn in progress…");
    }
    let report = agent
        .join()
        .map_err(|_| anyhow::anyhow!("the demo thread panicked"))?;
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    shown?;
    let report = report?;
    print_report(&report, &args.db);
    Ok(())
}

/// A built-in tool policy by name, or an error listing them.
pub fn builtin_policy(name: &str) -> Result<ToolPolicy> {
    ToolPolicy::builtin(name).ok_or_else(|| {
        anyhow::anyhow!(
            "no built-in policy {name:?} (built-in: {})",
            ToolPolicy::BUILTIN.join(", ")
        )
    })
}

/// The log the demo writes.
#[derive(Clone)]
enum DemoLog {
    Sqlite(Log),
    /// A PostgreSQL database: the demo is a node of its own, for its run.
    Postgres(String),
}

impl DemoLog {
    /// Commits what is queued (a PostgreSQL node commits and gives back its session when
    /// its run ends).
    fn close(self) -> Result<()> {
        match self {
            DemoLog::Sqlite(log) => log.close().context("committing the demo's log"),
            DemoLog::Postgres(_) => Ok(()),
        }
    }
}

fn run_demo(log: &DemoLog, options: DemoOptions) -> Result<DemoReport> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the demo's runtime")?;
    match log {
        DemoLog::Sqlite(log) => Ok(runtime.block_on(demo::run(log, options))?),
        DemoLog::Postgres(url) => runtime.block_on(async {
            let session_id = options.session_id.clone();
            let node = PgLog::connect(url, PgOptions::new(format!("demo-{}", std::process::id())))
                .await
                .context("opening the PostgreSQL log")?;
            let inbox = PgInbox::open(url)
                .await
                .context("opening the PostgreSQL log's inbox")?;
            let report = demo::run_on(Arc::new(node.clone()), &inbox, options).await;
            node.flush_all().await?;
            node.release_session(&session_id).await?;
            Ok(report?)
        }),
    }
}

/// Lets the dashboard open on a running turn rather than an empty log.
fn wait_for_first_turn(db: &Path, session_id: &str) {
    let start = Instant::now();
    while start.elapsed() < FIRST_TURN_WAIT {
        let started = crate::cli::pg::open_log(db)
            .and_then(|reader| Ok(reader.turns(session_id)?))
            .map(|turns| !turns.is_empty())
            .unwrap_or(false);
        if started {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn print_report(report: &DemoReport, db: &Path) {
    if report.stopped {
        println!("stopped early: the dashboard was closed");
    }
    println!(
        "demo session {} · {} turns · {} events in {}",
        report.session_id,
        report.turns.len(),
        report.events,
        db.display()
    );
    for turn in &report.turns {
        println!("  {} {:?}", turn.request_id, turn.status);
    }
    println!("look again with: mull dash {}", db.display());
}
