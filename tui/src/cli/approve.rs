//! `mull approve DB|URL --session S APPROVAL_ID [--deny] [--reason R] [--model SPEC]`: answers a
//! tool call waiting for approval. The answer is one input event written through the library;
//! when it completes its step, the continuation runs with the agent `--model` names (as for
//! `mull chat`: a model spec, `scripted-demo`, or `MULL_MODEL`). Answers waiting in the log's
//! inbox for the session (posted by the dashboard while no writer ran) are taken first.
//!
//! When another process writes the log (`mull serve`, `mull demo`: SQLite has one writer per
//! file), the answer is posted to the log's inbox instead, as the dashboard's `a` / `x` do, and
//! that writer records it when it next looks.
//!
//! On a `postgres://` log the answer is always posted to the log's inbox. When a node holds
//! the session, that node records it at its next sweep; when none does, this process opens the
//! session (taking its lease, as a node would) and takes the session's waiting messages itself,
//! then gives the session back.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use mull::engine::{
    Approval, CommandOptions, EngineError, Reply, Session, SessionOptions, TurnOutcome,
};
use mull_core::{Clock, SystemClock};
use mull_store::{EventLog, Inbox, InboxMessage, InboxStore, Log, StoreError};
use mull_store_pg::{PgInbox, PgLog, PgOptions};

use crate::cli::agent::choose_agent;

/// What `mull approve` takes.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The database (it must exist): a SQLite file or a `postgres://` URL.
    pub db: PathBuf,
    /// The session whose tool call waits.
    #[arg(long)]
    pub session: String,
    /// The approval request's id (the dashboard lists pending ones).
    pub approval_id: String,
    /// Deny the call instead: it does not run, and the model sees the reason.
    #[arg(long)]
    pub deny: bool,
    /// Why (for a denial, what the model sees).
    #[arg(long)]
    pub reason: Option<String>,
    /// The agent that continues the conversation (a model spec or `scripted-demo`; default
    /// MULL_MODEL).
    #[arg(long)]
    pub model: Option<String>,
}

/// Answers, runs the continuation the answer starts, and prints what happened.
pub fn run(args: ApproveArgs) -> Result<()> {
    if let Some(url) = crate::cli::pg::url(&args.db) {
        return run_postgres(&args, url);
    }
    anyhow::ensure!(
        args.db.exists(),
        "no database at {} (mull approve answers a request in an existing log)",
        args.db.display()
    );
    let log = match Log::open(&args.db) {
        Ok(log) => log,
        // Another process writes the log; it needs no agent here.
        Err(StoreError::Locked { .. }) => return post_to_inbox(&args),
        Err(e) => return Err(e).with_context(|| format!("opening {}", args.db.display())),
    };
    let agent = choose_agent(args.model.as_deref(), false)?;
    let inbox = Inbox::open(&args.db)
        .with_context(|| format!("opening the inbox of {}", args.db.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let answer = if args.deny {
        Approval::deny(args.reason.clone())
    } else {
        Approval {
            reason: args.reason.clone(),
            ..Approval::approve()
        }
    }
    .by(ANSWERER);
    let outcome = runtime.block_on(async {
        let session = Session::open(&log, agent, SessionOptions::new(args.session.as_str()))
            .await
            .with_context(|| format!("opening session {}", args.session))?;
        let taken = session
            .take_inbox(&inbox, CommandOptions::default())
            .await
            .context("taking the answers waiting in the inbox")?;
        if !taken.is_empty() {
            println!("took {} answer(s) waiting in the inbox", taken.len());
        }
        session
            .answer_approval(&args.approval_id, answer)
            .await
            .with_context(|| format!("answering {}", args.approval_id))
    });
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    report(&args, outcome?.as_ref());
    Ok(())
}

/// Prints what came of an answer: the continuation it started, or that its step still waits.
fn report(args: &ApproveArgs, continuation: Option<&TurnOutcome>) {
    let verb = if args.deny { "denied" } else { "approved" };
    match continuation {
        Some(turn) => println!(
            "{verb} {} · continuation {} {:?}",
            args.approval_id, turn.request_id, turn.status
        ),
        None => println!(
            "{verb} {} · other calls of its step still wait",
            args.approval_id
        ),
    }
}

/// Another process writes the log: the answer goes to its inbox, for that writer to take.
fn post_to_inbox(args: &ApproveArgs) -> Result<()> {
    let inbox = Inbox::open(&args.db)
        .with_context(|| format!("opening the inbox of {}", args.db.display()))?;
    let message = message(args);
    inbox
        .post(&args.session, &message, SystemClock.now())
        .with_context(|| format!("posting the answer to {}", args.approval_id))?;
    let verb = if args.deny { "denial" } else { "approval" };
    println!(
        "{} is written by another process: the {verb} of {} is in its inbox, and that writer records it when it next looks",
        args.db.display(),
        args.approval_id
    );
    Ok(())
}

/// Who the log says answered, for answers given here.
const ANSWERER: &str = "mull approve";

/// The inbox message `args` stand for.
fn message(args: &ApproveArgs) -> InboxMessage {
    InboxMessage::ApprovalAnswer {
        approval_id: args.approval_id.clone(),
        approved: !args.deny,
        reason: args.reason.clone(),
        by: Some(ANSWERER.to_owned()),
    }
}

/// A PostgreSQL log: posts the answer to the inbox, and takes it here when no node holds the
/// session.
fn run_postgres(args: &ApproveArgs, url: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let verb = if args.deny { "denial" } else { "approval" };
    runtime.block_on(async {
        let node = format!("approve-{}", std::process::id());
        let log = PgLog::connect(url, PgOptions::new(node))
            .await
            .context("opening the PostgreSQL log")?;
        if log.reads().last_seq(&args.session).await? == 0 {
            bail!("no session {} in {}", args.session, log.database());
        }
        let inbox = PgInbox::open(url)
            .await
            .context("opening the PostgreSQL log's inbox")?;
        let id = inbox
            .post(&args.session, &message(args), SystemClock.now())
            .await
            .with_context(|| format!("posting the answer to {}", args.approval_id))?;
        let held = |owner: &str| {
            println!(
                "node {owner} holds session {}: the {verb} of {} is in the log's inbox, and that node records it when it next looks",
                args.session, args.approval_id
            )
        };
        if let Some(owner) = log.holder(&args.session).await? {
            held(&owner);
            return Ok(());
        }
        let agent = choose_agent(args.model.as_deref(), false)?;
        let opened = Session::open_on(
            Arc::new(log.clone()),
            agent,
            SessionOptions::new(args.session.as_str()),
        )
        .await;
        let session = match opened {
            Ok(session) => session,
            // A node took the session meanwhile: the answer waits for it.
            Err(EngineError::Store {
                source: StoreError::LeaseHeld { owner, .. },
                ..
            }) => {
                held(&owner);
                return Ok(());
            }
            Err(e) => return Err(e).with_context(|| format!("opening session {}", args.session)),
        };
        let taken = session.take_inbox(&inbox, CommandOptions::default()).await;
        drop(session);
        log.release_session(&args.session).await?;
        log.flush_all().await?;
        let taken = taken.context("taking the answers waiting in the inbox")?;
        let entry = inbox.get(id).await?.context("the posted answer is gone")?;
        match entry.outcome.as_deref() {
            Some("answered") => report(
                args,
                taken.iter().rev().find_map(|r| match r {
                    Reply::Turn(turn) => Some(&**turn),
                    _ => None,
                }),
            ),
            Some(refused) => bail!("answering {}: {refused}", args.approval_id),
            None => println!(
                "the answer to {} is in the log's inbox, taken by a node that opened the session meanwhile",
                args.approval_id
            ),
        }
        Ok(())
    })
}
