//! `mull approve DB --session S APPROVAL_ID [--deny] [--reason R] [--model SPEC]`: answers a
//! tool call waiting for approval. The answer is one input event written through the library;
//! when it completes its step, the continuation runs with the agent `--model` names (as for
//! `mull chat`: a model spec, `scripted-demo`, or `MULL_MODEL`). The dashboard is read-only by
//! design (SQLite has one writer per file, which may be the process being watched), so this is
//! where a person answers from the terminal.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use mull::engine::{Approval, Session, SessionOptions};
use mull_store::Log;

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
    let agent = choose_agent(args.model.as_deref(), false)?;
    let log = Log::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
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
