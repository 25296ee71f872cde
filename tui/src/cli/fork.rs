//! `mull fork DB --session S (--turn T [--at-seq N | --at-chunk K] | --at-seq N) [--into NEW]`:
//! a new session whose history is S's up to that point, going on with the demo agent (under a
//! stricter built-in policy with `--policy`): `--rerun` sends the forked turn's user messages
//! again, `--message TEXT` sends a new one, `--continue` continues the cut turn.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use mull::core::{IdSource, RandomIds, SystemClock, UIMessage};
use mull::engine::{Agent, Session, SessionOptions, TurnOptions};
use mull_store::{EventLog, ForkError, ForkPoint, Log, ResolvedFork, TurnRef};
use mull_store_pg::{PgLog, PgOptions};

use crate::cli::demo::builtin_policy;

/// What `mull fork` takes.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The database (it must exist): a SQLite file or a `postgres://` URL.
    pub db: PathBuf,
    /// The session to fork.
    #[arg(long)]
    pub session: String,
    /// The turn to fork in (its number from 1, or its id); alone: fork before it began.
    #[arg(long)]
    pub turn: Option<String>,
    /// Fork after the event at this seq (inside `--turn` when given).
    #[arg(long, conflicts_with = "at_chunk")]
    pub at_seq: Option<u64>,
    /// Fork after this chunk (from 1) of `--turn`.
    #[arg(long, requires = "turn")]
    pub at_chunk: Option<usize>,
    /// The new session's id (default: a fresh one).
    #[arg(long)]
    pub into: Option<String>,
    /// A stricter built-in tool policy over the demo agent (`guides-only`, `no-weather`).
    #[arg(long)]
    pub policy: Option<String>,
    /// Run the forked turn again from its user messages (a fork before a turn only).
    #[arg(long, conflicts_with_all = ["message", "continue_turn"])]
    pub rerun: bool,
    /// Send this user message in the fork.
    #[arg(long, conflicts_with = "continue_turn")]
    pub message: Option<String>,
    /// Continue the cut turn (`continue_last_turn`).
    #[arg(long = "continue")]
    pub continue_turn: bool,
}

/// Forks, goes on as asked, and prints what happened.
pub fn run(args: ForkArgs) -> Result<()> {
    let point = match (&args.turn, args.at_seq, args.at_chunk) {
        (None, Some(seq), None) => ForkPoint::AtSeq(seq),
        (Some(turn), None, None) => ForkPoint::BeforeTurn(TurnRef::parse(turn)),
        (Some(turn), Some(seq), None) => ForkPoint::InTurn {
            turn: TurnRef::parse(turn),
            seq,
        },
        (Some(turn), None, Some(chunk)) => ForkPoint::AtChunk {
            turn: TurnRef::parse(turn),
            chunk,
        },
        _ => bail!("name a fork point: --turn T [--at-seq N | --at-chunk K], or --at-seq N"),
    };
    if args.rerun && !matches!(point, ForkPoint::BeforeTurn(_)) {
        bail!("--rerun runs a turn again from its start: fork with --turn T alone");
    }
    let agent: Arc<dyn Agent> = match &args.policy {
        Some(name) => mull::demo::guarded_agent(builtin_policy(name)?),
        None => mull::demo::agent(),
    };
    let into = args
        .into
        .clone()
        .unwrap_or_else(|| RandomIds.next_id("fork"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let options = SessionOptions::new(into.clone())
        .with_clock(Arc::new(SystemClock))
        .with_ids(Arc::new(RandomIds));
    if let Some(url) = super::pg::url(&args.db) {
        fork_on_postgres(&runtime, url, &args, &point, agent, options)?;
    } else {
        if !args.db.exists() {
            bail!("{}: no such log", args.db.display());
        }
        let log = Log::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
        let result = runtime.block_on(async {
            let (session, fork) =
                Session::fork(&log, agent, &args.session, &point, options).await?;
            go_on(session, &fork, &args, &into).await
        });
        log.close()
            .with_context(|| format!("committing {}", args.db.display()))?;
        result?;
    }
    println!(
        "compare: mull diff {db}@{} {db}@{into}",
        args.session,
        db = args.db.display()
    );
    Ok(())
}

/// Prints the fork and goes on in it as asked (`--rerun`, `--message`, `--continue`).
async fn go_on(session: Session, fork: &ResolvedFork, args: &ForkArgs, into: &str) -> Result<()> {
    println!(
        "forked {} at seq {}{} into {into}",
        fork.origin,
        fork.origin_seq,
        fork.origin_turn
            .as_deref()
            .map(|t| format!(" (inside {t})"))
            .unwrap_or_default()
    );
    let outcome = if args.rerun {
        Some(
            session
                .save_messages(fork.turn_messages.clone(), TurnOptions::default())
                .await?,
        )
    } else if let Some(text) = &args.message {
        let message = UIMessage::user(RandomIds.next_id("msg"), text.clone());
        Some(
            session
                .save_messages(vec![message], TurnOptions::default())
                .await?,
        )
    } else if args.continue_turn {
        Some(session.continue_last_turn(TurnOptions::default()).await?)
    } else {
        None
    };
    if let Some(outcome) = outcome {
        println!("  {} {:?}", outcome.request_id, outcome.status);
    }
    Ok(())
}

/// The fork on a PostgreSQL log: the fork point is found in the database (the same resolution
/// as on a SQLite file, through the read contract; seqs are the database's own); the fork's
/// first event is written under a lease of its own, and the session opened on it.
fn fork_on_postgres(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    args: &ForkArgs,
    point: &ForkPoint,
    agent: Arc<dyn Agent>,
    options: SessionOptions,
) -> Result<()> {
    let into = options.session_id.clone();
    let fork = {
        let reader = super::pg::open_log(&args.db)?;
        reader
            .fork_point(&args.session, point)
            .with_context(|| format!("forking {} into {into}", args.session))?
    };
    runtime.block_on(async {
        let node = format!("fork-{}", std::process::id());
        let log = PgLog::connect(url, PgOptions::new(node))
            .await
            .context("opening the PostgreSQL log")?;
        if log.reads().last_seq(&into).await? > 0 {
            bail!(
                "forking {} into {into}: {}",
                args.session,
                ForkError::Exists(into.clone())
            );
        }
        log.open_session(&into).await?;
        log.append_event(&into, None, options.clock.now(), fork.event())?;
        EventLog::flush(&log, &into).await?;
        let session = Session::open_on(Arc::new(log.clone()), agent, options).await?;
        let result = go_on(session, &fork, args, &into).await;
        log.release_session(&into).await?;
        log.flush_all().await?;
        result
    })
}
