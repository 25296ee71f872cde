//! `mull gen-bench-log DB --events N` (hidden): writes a large, realistic log through the store
//! for the dashboard's benchmarks: sessions of turns with streamed text, reasoning, tool calls
//! with every decision, stalls, failures and aborts, at a fixed clock so runs are repeatable.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use mull_core::{
    Clock, DecisionAction, EntryPath, Event, FinishReason, FixedClock, IdSource, Role,
    SequentialIds, StepReport, StreamPart, TurnConfigRecord, TurnStatus, UIMessage, Usage,
};
use mull_store::Log;
use serde_json::json;

/// Arguments of `mull gen-bench-log`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// The database to write (created if missing).
    pub db: PathBuf,
    /// How many events to write (at least; the last turn is completed).
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Turns per session.
    #[arg(long, default_value_t = 25)]
    pub turns_per_session: u64,
    /// Text deltas per step (default: 10 to 70, at random); a large value makes huge turns.
    #[arg(long)]
    pub deltas_per_step: Option<u64>,
    /// Instead: this many recorded demo sessions (`demo-00001` …), a quarter of them under
    /// `no-weather` and a quarter under `guides-only` — a log to backtest a policy over.
    #[arg(long, value_name = "N")]
    pub demo_sessions: Option<usize>,
}

/// A tiny deterministic generator (xorshift) so the log is the same every run.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

const WORDS: &[&str] = &[
    "the ",
    "log ",
    "is ",
    "the ",
    "source ",
    "of ",
    "truth ",
    "for ",
    "every ",
    "turn; ",
    "events ",
    "fold ",
    "into ",
    "state ",
    "and ",
    "replay ",
    "exactly. ",
];
const TOOLS: &[&str] = &[
    "search",
    "read_file",
    "run_tests",
    "fetch_url",
    "delete_all",
];

struct Writer<'a> {
    log: &'a Log,
    clock: FixedClock,
    written: u64,
    progress: indicatif::ProgressBar,
}

impl Writer<'_> {
    fn put(
        &mut self,
        session: &str,
        turn: Option<&str>,
        advance_ms: u64,
        event: Event,
    ) -> Result<()> {
        self.clock.advance(Duration::from_millis(advance_ms));
        self.log.append(session, turn, self.clock.now(), event)?;
        self.written += 1;
        self.progress.set_position(self.written);
        Ok(())
    }
}

/// Writes the log and reports its size and speed.
pub fn run(args: GenArgs) -> Result<()> {
    let log = Log::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    if log.last_seq() > 0 {
        anyhow::bail!(
            "{} already holds {} events; give the benchmark log a new path",
            args.db.display(),
            log.last_seq()
        );
    }
    let started = Instant::now();
    if let Some(count) = args.demo_sessions {
        return demo_sessions(log, &args, count, started);
    }
    let ids = SequentialIds::new();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut w = Writer {
        log: &log,
        clock: FixedClock::at_fixture_epoch(),
        written: 0,
        progress: super::progress::bar(
            args.events,
            super::progress::Unit::Events,
            &format!("writing {}", args.db.display()),
        ),
    };
    while w.written < args.events {
        let session = ids.next_id("sess");
        w.put(
            &session,
            None,
            1000,
            Event::SessionOpened {
                agent: "bench".into(),
                metadata: json!({}),
            },
        )?;
        for _ in 0..args.turns_per_session {
            if w.written >= args.events {
                break;
            }
            write_turn(&mut w, &ids, &mut dice, &session, args.deltas_per_step)?;
        }
        if w.written % 100_000 < 2_000 {
            log.flush_blocking()?;
        }
    }
    let written = w.written;
    w.progress.finish_and_clear();
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "wrote {} events to {} in {secs:.1} s ({:.0} events/s)",
        written,
        args.db.display(),
        written as f64 / secs
    );
    Ok(())
}

/// Records `count` demo sessions (see `mull::demo::record_sessions`).
fn demo_sessions(log: Log, args: &GenArgs, count: usize, started: Instant) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let progress = super::progress::spinner(&format!("recording {count} demo sessions"));
    let events = runtime.block_on(mull::demo::record_sessions(&log, count));
    progress.finish_and_clear();
    log.close()
        .with_context(|| format!("committing {}", args.db.display()))?;
    let events = events?;
    println!(
        "wrote {count} demo sessions ({events} events) to {} in {:.1} s",
        args.db.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes one generated turn, event by event, in the order the engine writes them: long
/// because it reads as the log it writes.
fn write_turn(
    w: &mut Writer,
    ids: &SequentialIds,
    dice: &mut Dice,
    session: &str,
    deltas_per_step: Option<u64>,
) -> Result<()> {
    let request = ids.next_id("req");
    let turn_id = ids.next_id("turn");
    let turn = Some(turn_id.as_str());
    w.put(
        session,
        None,
        2000 + dice.roll(20_000),
        Event::UserMessagesSaved {
            request_id: Some(request.clone()),
            messages: vec![UIMessage::user(
                ids.next_id("msg"),
                "Summarise the design, please.",
            )],
        },
    )?;
    w.put(
        session,
        turn,
        1,
        Event::TurnStarted {
            request_id: request.clone(),
            message_id: ids.next_id("msg"),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: json!({}),
        },
    )?;
    w.put(
        session,
        turn,
        2,
        Event::TurnConfigured {
            config: Box::new(TurnConfigRecord {
                provider: "scripted".into(),
                model_id: "scripted-1".into(),
                tool_names: TOOLS.iter().map(|t| (*t).to_owned()).collect(),
                max_steps: 4,
                ..TurnConfigRecord::default()
            }),
        },
    )?;
    let steps = 1 + dice.roll(3) as u32;
    let mut total = Usage::default();
    let mut status = TurnStatus::Completed;
    let mut error = None;
    for step in 0..steps {
        w.put(session, turn, 3, Event::StepStarted { step })?;
        let chunk = |part| Event::Chunk {
            step,
            part,
            original: None,
        };
        if dice.roll(4) == 0 {
            let id = format!("r{step}");
            w.put(
                session,
                turn,
                150,
                chunk(StreamPart::ReasoningStart { id: id.clone() }),
            )?;
            for _ in 0..(5 + dice.roll(20)) {
                let text = WORDS[dice.roll(WORDS.len() as u64) as usize].to_owned();
                w.put(
                    session,
                    turn,
                    15,
                    chunk(StreamPart::ReasoningDelta {
                        id: id.clone(),
                        text,
                    }),
                )?;
            }
            w.put(session, turn, 1, chunk(StreamPart::ReasoningEnd { id }))?;
        }
        let id = format!("t{step}");
        w.put(
            session,
            turn,
            200,
            chunk(StreamPart::TextStart { id: id.clone() }),
        )?;
        let deltas = deltas_per_step.unwrap_or_else(|| 10 + dice.roll(60));
        for _ in 0..deltas {
            let text = WORDS[dice.roll(WORDS.len() as u64) as usize].to_owned();
            // Now and then the stream stalls.
            let gap = if dice.roll(200) == 0 {
                1500 + dice.roll(3000)
            } else {
                10 + dice.roll(30)
            };
            w.put(
                session,
                turn,
                gap,
                chunk(StreamPart::TextDelta {
                    id: id.clone(),
                    text,
                }),
            )?;
        }
        w.put(session, turn, 1, chunk(StreamPart::TextEnd { id }))?;
        let last = step + 1 == steps;
        if !last {
            let call_id = ids.next_id("call");
            let tool = TOOLS[dice.roll(TOOLS.len() as u64) as usize];
            let input = json!({"q": "design", "limit": 5});
            w.put(
                session,
                turn,
                5,
                chunk(StreamPart::ToolCall {
                    call_id: call_id.clone(),
                    tool_name: tool.into(),
                    input: input.to_string(),
                }),
            )?;
            w.put(
                session,
                turn,
                1,
                Event::ToolCallStarted {
                    step,
                    call_id: call_id.clone(),
                    tool: tool.into(),
                    input: input.clone(),
                    client: false,
                    dynamic: false,
                },
            )?;
            let action = match (tool, dice.roll(20)) {
                ("delete_all", _) => DecisionAction::Block,
                (_, 0) => DecisionAction::Rewrite,
                (_, 1) => DecisionAction::Substitute,
                (_, 2) => DecisionAction::Invalid,
                _ => DecisionAction::Allow,
            };
            w.put(
                session,
                turn,
                1,
                Event::ToolDecided {
                    step,
                    call_id: call_id.clone(),
                    tool: tool.into(),
                    action,
                    model_input: input.clone(),
                    effective_input: input,
                    reason: (!action.executes()).then(|| format!("{} by policy", action.as_str())),
                    output: None,
                },
            )?;
            let duration_ms = if action.executes() {
                20 + dice.roll(900)
            } else {
                0
            };
            let success = action.executes() && dice.roll(10) != 0;
            w.put(
                session,
                turn,
                duration_ms,
                Event::ToolCallFinished {
                    step,
                    call_id,
                    tool: tool.into(),
                    success,
                    output: success
                        .then(|| json!({"hits": dice.roll(40), "first": "DESIGN.md §4"})),
                    error: (!success).then(|| "tool failed: timeout".to_owned()),
                    duration_ms,
                },
            )?;
        }
        let usage = Usage {
            input_tokens: Some(800 + dice.roll(4000)),
            output_tokens: Some(20 + dice.roll(400)),
            total_tokens: None,
            reasoning_tokens: None,
            cached_input_tokens: Some(dice.roll(600)),
        };
        let finish_reason = if last {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        if last && dice.roll(40) == 0 {
            w.put(
                session,
                turn,
                3,
                chunk(StreamPart::Error {
                    message: "upstream 529: overloaded".into(),
                }),
            )?;
            status = TurnStatus::Error;
            error = Some("upstream 529: overloaded".to_owned());
            break;
        }
        w.put(
            session,
            turn,
            2,
            chunk(StreamPart::Finish {
                finish_reason,
                raw_finish_reason: None,
                usage: usage.clone(),
                provider_metadata: None,
            }),
        )?;
        total.add(&usage);
        w.put(
            session,
            turn,
            1,
            Event::StepFinished {
                record: Box::new(StepReport {
                    step,
                    model_id: "scripted-1".into(),
                    finish_reason,
                    usage,
                    ..StepReport::default()
                }),
            },
        )?;
    }
    if status == TurnStatus::Completed {
        w.put(
            session,
            turn,
            2,
            Event::AssistantMessageSaved {
                request_id: request.clone(),
                message: UIMessage::text(
                    ids.next_id("msg"),
                    Role::Assistant,
                    "The log is the source of truth.",
                ),
            },
        )?;
    }
    w.put(
        session,
        turn,
        1,
        Event::TurnFinished {
            request_id: request,
            status,
            error,
            steps,
            usage: total,
            response_owed: false,
        },
    )?;
    Ok(())
}
