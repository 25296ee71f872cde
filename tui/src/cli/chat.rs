//! `mull chat`: a terminal chat with the model `--model` or `MULL_MODEL` names (or the demo's
//! scripted model, offline), streaming each answer as it arrives while every event goes to the log.
//!
//! At a terminal, Ctrl-C cancels the running turn (it ends `aborted`, its partial answer kept)
//! and a second Ctrl-C — or one at the prompt — exits; Ctrl-D or `/quit` exits too. The prompt
//! is reedline's: the line can be edited, and the lines typed are kept in a history file
//! (`--history`, by default `mull/chat-history.txt` in the user's data directory, so it
//! follows the person across databases) and recalled with the arrow keys. When
//! standard input is not a terminal, each input line is one user turn and only the answers go
//! to standard output (reasoning, tool activity and errors go to standard error), so scripts can
//! drive it; a turn that fails then stops the chat with a non-zero exit, naming the input line.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use mull::core::{ErrorStage, IdSource, RandomIds, UIMessage};
use mull::engine::{Agent, Budget, OutcomeStatus, Session, ToolSource, TurnOptions};
use mull_store::Log;
use tokio::sync::mpsc;

use super::agent::{choose_agent_streaming, SCRIPTED_DEMO};
use super::budget::{with_budget, BudgetArgs};
use super::chat_view::TurnView;
use super::mcp::{with_servers, McpArgs};

/// Arguments of `mull chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The database every event is written to.
    #[arg(long, default_value = "mull.db")]
    pub db: PathBuf,
    /// The model: a spec such as `openai:gpt-4o-mini`, `anthropic:claude-sonnet-4-5` or
    /// `openai-compatible:http://127.0.0.1:8080/v1#model`, or `scripted-demo` to chat offline
    /// with the demo's scripted travel desk. Default: MULL_MODEL.
    #[arg(long)]
    pub model: Option<String>,
    /// Offer the model two harmless built-in tools: `time_now` (a clock) and `calculate`.
    #[arg(long)]
    pub tools: bool,
    /// Continue this session instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
    /// Whether the model's answers stream: `auto` (stream; when the server sends an empty
    /// stream, use its answer without streaming from then on), `on` or `off`. Default: the
    /// model spec's `?stream=`, else `auto`.
    #[arg(long, value_name = "auto|on|off")]
    pub stream: Option<mull::providers::openai::Streaming>,
    /// The file the lines typed at the prompt are kept in. Default: `mull/chat-history.txt`
    /// in the user's data directory (`~/.local/share` on Linux).
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    #[command(flatten)]
    pub mcp: McpArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

/// Runs the chat until input ends, `/quit`, or Ctrl-C at the prompt.
pub fn run(args: ChatArgs) -> Result<()> {
    let agent = choose_agent_streaming(args.model.as_deref(), args.stream, args.tools)?;
    let servers = args.mcp.servers()?;
    let budget = args.budget.budget()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the chat's runtime")?;
    let log =
        super::open_log(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    let result = runtime.block_on(chat(&log, agent, &servers, budget.as_ref(), &args));
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    result
}

/// What the chat reacts to: a line of input, the end of input, or Ctrl-C.
enum Signal {
    Line(String),
    End,
    Interrupt,
}

async fn chat(
    log: &Log,
    agent: Arc<dyn Agent>,
    servers: &[Arc<dyn ToolSource>],
    budget: Option<&Budget>,
    args: &ChatArgs,
) -> Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let session_id = args
        .session
        .clone()
        .unwrap_or_else(|| RandomIds.next_id("chat"));
    let model = agent.model();
    let options = with_budget(
        with_servers(crate::telemetry::session_options(&session_id), servers),
        budget,
    );
    let session = Session::open(log, agent, options)
        .await
        .with_context(|| format!("opening session {session_id}"))?;
    if interactive {
        eprintln!(
            "mull chat · {}/{} · session {session_id} · log {}\n\
             Ctrl-C cancels a turn, twice exits; Ctrl-D or /quit exits.",
            model.provider(),
            model.model_id(),
            args.db.display()
        );
    }
    let (mut signals, editor) = listen(interactive, history_file(args.history.as_deref()));
    let mut typed_ahead = VecDeque::new();
    let mut line_number = 0u64;
    loop {
        let line = match typed_ahead.pop_front() {
            Some(line) => line,
            None => {
                // The editor reads only when asked: never over an answer that is streaming.
                if let Some(editor) = &editor {
                    if editor.send(()).is_err() {
                        break;
                    }
                }
                match signals.recv().await {
                    Some(Signal::Line(line)) => line,
                    Some(Signal::End | Signal::Interrupt) | None => break,
                }
            }
        };
        line_number += 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text == "/quit" {
            break;
        }
        let message = UIMessage::user(RandomIds.next_id("msg"), text);
        if !turn(
            log,
            &session,
            message,
            &mut signals,
            &mut typed_ahead,
            interactive,
        )
        .await
        .map_err(|err| explain_failure(err, args, line_number, text))?
        {
            break;
        }
    }
    if interactive {
        eprintln!("session {session_id} is in {}", args.db.display());
    }
    Ok(())
}

/// Where the prompt's history is kept: `flag`, else `mull/chat-history.txt` in the user's data
/// directory; none when there is no data directory (the history then lasts one chat).
fn history_file(flag: Option<&Path>) -> Option<PathBuf> {
    match flag {
        Some(path) => Some(path.to_owned()),
        None => dirs::data_dir().map(|dir| dir.join("mull").join("chat-history.txt")),
    }
}

/// Input lines and Ctrl-C, on one channel. Piped, a thread reads standard input line by line;
/// at a terminal, a thread runs the line editor each time the chat sends on the returned
/// sender (the prompt is drawn only when the chat wants a line), and tokio reports Ctrl-C
/// during a turn.
fn listen(
    interactive: bool,
    history: Option<PathBuf>,
) -> (
    mpsc::UnboundedReceiver<Signal>,
    Option<std::sync::mpsc::Sender<()>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let lines = tx.clone();
    let mut editor = None;
    if interactive {
        let (ready, asked) = std::sync::mpsc::channel();
        editor = Some(ready);
        std::thread::spawn(move || {
            super::chat_prompt::edit_lines(asked, history, |line| {
                let signal = match line {
                    super::chat_prompt::Input::Line(line) => Signal::Line(line),
                    super::chat_prompt::Input::Interrupt => Signal::Interrupt,
                    super::chat_prompt::Input::End => Signal::End,
                };
                lines.send(signal).is_ok()
            })
        });
    } else {
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if lines.send(Signal::Line(line)).is_err() {
                    return;
                }
            }
            let _ = lines.send(Signal::End);
        });
    }
    if interactive {
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if tx.send(Signal::Interrupt).is_err() {
                    return;
                }
            }
        });
    }
    (rx, editor)
}

/// Runs one turn, printing its answer as it streams. Returns false when the user asked to exit.
async fn turn(
    log: &Log,
    session: &Session,
    message: UIMessage,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
    typed_ahead: &mut VecDeque<String>,
    interactive: bool,
) -> Result<bool> {
    let mut stream = session.chat(vec![message], TurnOptions::default())?;
    let request_id = stream.request_id.clone();
    let mut cancelled = false;
    let mut view = TurnView::new(
        std::io::stdout(),
        std::io::stderr(),
        std::io::stderr().is_terminal(),
    );
    loop {
        tokio::select! {
            part = stream.next() => match part {
                Some(part) => view.part(&part)?,
                None => break,
            },
            signal = signals.recv(), if interactive => match signal {
                Some(Signal::Interrupt) if !cancelled => {
                    cancelled = true;
                    session.cancel_chat(&request_id)?;
                }
                Some(Signal::Interrupt) | None => return Ok(false),
                // Typed ahead while the answer streams: the next turns, in order.
                Some(Signal::Line(line)) => typed_ahead.push_back(line),
                Some(Signal::End) => typed_ahead.push_back("/quit".to_owned()),
            },
        }
    }
    let outcome = stream.finish().await?;
    // The turn's end is durable; committed now, it is also what any other process reading the
    // log sees by the time the prompt returns.
    log.flush().await?;
    view.finish()?;
    if outcome.status == OutcomeStatus::Completed && !view.answered() {
        // Silence would look like a hang or a lost answer: say what happened.
        eprintln!("[the model's answer was empty: it finished without any text]");
    }
    match outcome.status {
        OutcomeStatus::Aborted => eprintln!("[cancelled: the partial answer is kept]"),
        OutcomeStatus::Error => {
            let budget = outcome
                .error
                .as_ref()
                .is_some_and(|e| e.stage == ErrorStage::Budget);
            let message = outcome
                .error
                .map(|e| e.message)
                .unwrap_or_else(|| "the turn failed".to_owned());
            if !interactive {
                // A script must not take a failed turn for an answer.
                return Err(TurnFailed { message, budget }.into());
            }
            eprintln!("[error: {message}]");
        }
        OutcomeStatus::Completed | OutcomeStatus::Skipped => {}
    }
    Ok(true)
}

/// Names the input line whose turn failed, and when the demo's scripted model ran past its
/// script, says so.
fn explain_failure(err: anyhow::Error, args: &ChatArgs, line: u64, text: &str) -> anyhow::Error {
    let Some(TurnFailed { message, budget }) = err.downcast_ref::<TurnFailed>() else {
        return err;
    };
    let mut explained = format!("input line {line} ({text:?}): the turn failed: {message}");
    if *budget {
        explained.push_str("\nraise the --budget-… limit it names to let such turns finish");
    } else if args.model.as_deref() == Some(SCRIPTED_DEMO) {
        explained.push_str(&format!(
            "\nthe {SCRIPTED_DEMO} model answers only the demo's own questions, in order, and \
             this input went past its script; chat with a real model with --model SPEC or \
             MULL_MODEL"
        ));
    }
    anyhow::anyhow!(explained)
}

/// A turn of a scripted (piped) chat failed: the chat stops and exits non-zero.
#[derive(Debug)]
pub struct TurnFailed {
    /// The turn's error.
    pub message: String,
    /// Whether a budget stopped it (a limit was reached, nothing went wrong).
    pub budget: bool,
}

impl std::fmt::Display for TurnFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the turn failed: {}", self.message)
    }
}

impl std::error::Error for TurnFailed {}
