//! `mull approve DB --session S APPROVAL_ID [--deny] [--reason R] [--model SPEC]`: answers a
//! tool call waiting for approval. The answer is one input event written through the library;
//! when it completes its step, the continuation runs with the agent `--model` names (as for
//! `mull chat`: a model spec, `scripted-demo`, or `MULL_MODEL`). Answers waiting in the log's
//! inbox for the session (posted by the dashboard while no writer ran) are taken first.
//!
//! When another process writes the log (`mull serve`, `mull demo`: SQLite has one writer per
//! file), the answer is posted to the log's inbox instead, as the dashboard's `a` / `x` do, and
//! that writer records it when it next looks.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use mull::engine::{Approval, CommandOptions, Session, SessionOptions};
use mull_core::{Clock, SystemClock};
use mull_store::{Inbox, InboxMessage, Log, StoreError};

use crate::cli::agent::choose_agent;

/// What `mull approve` takes.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The database (it must exist).
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
            approved: true,
            reason: args.reason.clone(),
        }
    };
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
    let verb = if args.deny { "denied" } else { "approved" };
    match outcome? {
        Some(turn) => println!(
            "{verb} {} · continuation {} {:?}",
            args.approval_id, turn.request_id, turn.status
        ),
        None => println!(
            "{verb} {} · other calls of its step still wait",
            args.approval_id
        ),
    }
    Ok(())
}

/// Another process writes the log: the answer goes to its inbox, for that writer to take.
fn post_to_inbox(args: &ApproveArgs) -> Result<()> {
    let inbox = Inbox::open(&args.db)
        .with_context(|| format!("opening the inbox of {}", args.db.display()))?;
    let message = InboxMessage::ApprovalAnswer {
        approval_id: args.approval_id.clone(),
        approved: !args.deny,
        reason: args.reason.clone(),
    };
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
