//! `mull chat`: a terminal chat with the model `MULL_MODEL` names (or the demo's scripted
//! model, offline), streaming each answer as it arrives while every event goes to the log.
//!
//! At a terminal, Ctrl-C cancels the running turn (it ends `aborted`, its partial answer kept)
//! and a second Ctrl-C — or one at the prompt — exits; Ctrl-D or `/quit` exits too. When
//! standard input is not a terminal, each input line is one user turn and only the answers go
//! to standard output (tool activity and errors go to standard error), so scripts can drive it.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use async_trait::async_trait;
use clap::Args;
use futures::StreamExt;
use mull::core::{Clock, IdSource, LanguageModel, RandomIds, StreamPart, SystemClock, UIMessage};
use mull::engine::{
    Agent, OutcomeStatus, Session, SessionOptions, Tool, ToolError, ToolExecution, ToolOutput,
    ToolSet, TurnOptions,
};
use mull::providers::config::{model_from_env, ConfigError, MODEL_VARIABLE};
use mull_store::Log;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The `--model` value that chats with the demo's scripted agent, no network or key needed.
pub const SCRIPTED_DEMO: &str = "scripted-demo";

/// Arguments of `mull chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The database every event is written to.
    #[arg(long, default_value = "mull.db")]
    pub db: PathBuf,
    /// `scripted-demo` to chat offline with the demo's scripted travel desk; otherwise the model
    /// comes from MULL_MODEL.
    #[arg(long)]
    pub model: Option<String>,
    /// Continue this session instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
}

/// Runs the chat until input ends, `/quit`, or Ctrl-C at the prompt.
pub fn run(args: ChatArgs) -> Result<()> {
    let agent = choose_agent(args.model.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the chat's runtime")?;
    let log = Log::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    let result = runtime.block_on(chat(&log, agent, &args));
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    result
}

pub(crate) fn choose_agent(model: Option<&str>) -> Result<Arc<dyn Agent>> {
    match model {
        Some(SCRIPTED_DEMO) => Ok(mull::demo::agent()),
        Some(other) => anyhow::bail!(
            "unknown --model {other:?}: use `--model {SCRIPTED_DEMO}`, or set {MODEL_VARIABLE} \
             to a model spec and leave --model out"
        ),
        None => match model_from_env() {
            Ok(model) => Ok(Arc::new(ChatAgent::new(model, Arc::new(SystemClock)))),
            Err(ConfigError::MissingSpec) => anyhow::bail!(
                "{}\nor chat offline with the demo's scripted model: mull chat --model {SCRIPTED_DEMO}",
                ConfigError::MissingSpec
            ),
            Err(e) => Err(e.into()),
        },
    }
}

/// What the chat reacts to: a line of input, the end of input, or Ctrl-C.
enum Signal {
    Line(String),
    End,
    Interrupt,
}

async fn chat(log: &Log, agent: Arc<dyn Agent>, args: &ChatArgs) -> Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let session_id = args
        .session
        .clone()
        .unwrap_or_else(|| RandomIds.next_id("chat"));
    let model = agent.model();
    let session = Session::open(log, agent, SessionOptions::new(session_id.clone()))
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
    let mut signals = listen(interactive);
    let mut typed_ahead = VecDeque::new();
    loop {
        if interactive {
            eprint!("> ");
        }
        let line = match typed_ahead.pop_front() {
            Some(line) => line,
            None => match signals.recv().await {
                Some(Signal::Line(line)) => line,
                Some(Signal::End | Signal::Interrupt) | None => break,
            },
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text == "/quit" {
            break;
        }
        let message = UIMessage::user(RandomIds.next_id("msg"), text);
        if !turn(
            &session,
            message,
            &mut signals,
            &mut typed_ahead,
            interactive,
        )
        .await?
        {
            break;
        }
    }
    if interactive {
        eprintln!("session {session_id} is in {}", args.db.display());
    }
    Ok(())
}

/// Input lines from a reader thread and Ctrl-C from tokio, on one channel.
fn listen(interactive: bool) -> mpsc::UnboundedReceiver<Signal> {
    let (tx, rx) = mpsc::unbounded_channel();
    let lines = tx.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(Signal::Line(line)).is_err() {
                return;
            }
        }
        let _ = lines.send(Signal::End);
    });
    if interactive {
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if tx.send(Signal::Interrupt).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// Runs one turn, printing its answer as it streams. Returns false when the user asked to exit.
async fn turn(
    session: &Session,
    message: UIMessage,
    signals: &mut mpsc::UnboundedReceiver<Signal>,
    typed_ahead: &mut VecDeque<String>,
    interactive: bool,
) -> Result<bool> {
    let mut stream = session.chat(vec![message], TurnOptions::default())?;
    let request_id = stream.request_id.clone();
    let mut cancelled = false;
    let mut wrote_text = false;
    let mut out = std::io::stdout();
    loop {
        tokio::select! {
            part = stream.next() => match part {
                Some(part) => show(&part, &mut out, &mut wrote_text, interactive)?,
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
    writeln!(out)?;
    match outcome.status {
        OutcomeStatus::Aborted => eprintln!("[cancelled: the partial answer is kept]"),
        OutcomeStatus::Error => eprintln!(
            "[error: {}]",
            outcome
                .error
                .map(|e| e.message)
                .unwrap_or_else(|| "the turn failed".to_owned())
        ),
        OutcomeStatus::Completed | OutcomeStatus::Skipped => {}
    }
    out.flush()?;
    Ok(true)
}

/// Prints a part: text to standard output as it arrives, tool activity to standard error.
fn show(
    part: &StreamPart,
    out: &mut impl Write,
    wrote_text: &mut bool,
    interactive: bool,
) -> Result<()> {
    match part {
        // A later text block (after a tool call, say) starts on a line of its own.
        StreamPart::TextStart { .. } if *wrote_text => writeln!(out)?,
        StreamPart::TextStart { .. } => *wrote_text = true,
        StreamPart::TextDelta { text, .. } => {
            write!(out, "{text}")?;
            out.flush()?;
        }
        StreamPart::ToolCall {
            tool_name, input, ..
        } => eprintln!("\n[tool {tool_name} {input}]"),
        StreamPart::ToolResult {
            output,
            preliminary: false,
            ..
        } => eprintln!("[→ {output}]"),
        StreamPart::ToolError { error, .. } => eprintln!("[tool error: {error}]"),
        StreamPart::ReasoningDelta { text, .. } if interactive => eprint!("{text}"),
        StreamPart::Error { message } => eprintln!("\n[model error: {message}]"),
        _ => {}
    }
    Ok(())
}

/// The chat's agent: the configured model and two example tools.
struct ChatAgent {
    model: Arc<dyn LanguageModel>,
    clock: Arc<dyn Clock>,
}

impl ChatAgent {
    fn new(model: Arc<dyn LanguageModel>, clock: Arc<dyn Clock>) -> ChatAgent {
        ChatAgent { model, clock }
    }
}

#[async_trait]
impl Agent for ChatAgent {
    fn name(&self) -> &str {
        "mull-chat"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }

    fn system_prompt(&self) -> String {
        "You are a helpful assistant in a terminal. Answer briefly. Use time_now for the current \
         date and time and calculate for arithmetic."
            .to_owned()
    }

    fn tools(&self) -> ToolSet {
        ToolSet::new()
            .with(Arc::new(TimeNow {
                clock: Arc::clone(&self.clock),
            }))
            .with(Arc::new(Calculate))
    }
}

/// `time_now`: the current time in UTC, from the session's kind of clock.
struct TimeNow {
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl Tool for TimeNow {
    fn name(&self) -> &str {
        "time_now"
    }

    fn description(&self) -> &str {
        "The current date and time in UTC (RFC 3339)."
    }

    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {}, "additionalProperties": false}))
    }

    async fn execute(&self, _input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Value(
            json!({"utc": self.clock.now().to_rfc3339()}),
        ))
    }
}

/// `calculate`: evaluates an arithmetic expression.
struct Calculate;

#[async_trait]
impl Tool for Calculate {
    fn name(&self) -> &str {
        "calculate"
    }

    fn description(&self) -> &str {
        "Evaluates an arithmetic expression such as `(2 + 3) * 4.5 / 2` or `2^10 % 7`."
    }

    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The expression."}},
            "required": ["expression"],
            "additionalProperties": false
        }))
    }

    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let expression = input["expression"].as_str().unwrap_or_default();
        let value = evaluate(expression)?;
        Ok(ToolOutput::Value(
            json!({"expression": expression, "value": value}),
        ))
    }
}

/// Evaluates arithmetic only: numbers, operators and parentheses (no variables or functions).
fn evaluate(expression: &str) -> Result<Value, ToolError> {
    let value =
        evalexpr::eval(expression).map_err(|e| format!("cannot evaluate {expression:?}: {e}"))?;
    match value {
        evalexpr::Value::Int(n) => Ok(json!(n)),
        evalexpr::Value::Float(x) => Ok(json!(x)),
        other => Err(format!("{expression:?} is not arithmetic (it gives {other})").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calculate_does_arithmetic_and_refuses_the_rest() {
        assert_eq!(evaluate("(2 + 3) * 4").unwrap(), json!(20));
        assert_eq!(evaluate("7 / 2.0").unwrap(), json!(3.5));
        assert!(evaluate("\"text\"").is_err());
        assert!(evaluate("2 +").is_err());
    }
}
