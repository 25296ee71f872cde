//! Crash trials: a real process runs a scripted agent whose tool writes a side effect to a
//! file; it is killed with SIGKILL at a seeded random moment; then the log is reopened and
//! checked.
//!
//! The child ([`child_main`]) runs turns forever, alternating `save_messages` and durable
//! `submit_messages`. Each turn streams text, calls the `effect` tool (which appends
//! `<call_id>` to the effects file) and answers. It prints what left it — `ACKED <submission>`
//! once a submission is acknowledged, `REPORTED <request>` once a turn's end is reported to it —
//! with no barrier of its own: the output gate alone must have made those durable. Every
//! fourth turn it also takes a flush barrier and prints `BARRIER <seq>`: every event up to that
//! seq is committed.
//!
//! The checker ([`check_trial`]) reopens the log after the kill and asserts:
//! - the log opens, every event decodes, seqs are contiguous, and every event up to the last
//!   barrier the child printed is present;
//! - every submission the child saw acknowledged is in the log, and every turn whose end was
//!   reported to it has its `turn_finished` there (the output gate);
//! - every side effect has a committed `tool_decided` that allowed it (durability before side
//!   effects);
//! - reopening through the engine resolves what was in flight (G.34): no turn stays running,
//!   every submission ends up finished, a tool call left open is repaired by the next turn;
//! - no duplicate message ids in the conversation;
//! - no tool whose execution was recorded as finished ran again, and no tool ran twice at all:
//!   a tool that started but did not finish is reported (`tool_call_repaired`), not re-run.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use async_trait::async_trait;
use futures::StreamExt;
use mull_core::{
    Event, FinishReason, LanguageModel, ModelError, ModelRequest, ModelRole, ModelStream,
    StreamPart, SubmissionStatus, ToolPartState, TurnStatus, UIMessage, UIPart, Usage,
};
use mull_engine::{Agent, FnTool, Session, SessionOptions, SubmitOptions, ToolSet, TurnOptions};
use mull_store::{Log, LogReader, SubmissionPhase};

/// The one session of a crash trial.
pub const SESSION: &str = "sess_crash";
/// What the child prints after each completed barrier.
pub const BARRIER: &str = "BARRIER ";
/// What the child prints once a submission is acknowledged to it: `ACKED <submission_id>`.
pub const ACKED: &str = "ACKED ";
/// What the child prints once a turn's end is reported to it: `REPORTED <request_id>`.
pub const REPORTED: &str = "REPORTED ";
/// What the child prints once its first turn can start.
pub const READY: &str = "READY";

/// A model that calls the `effect` tool once per turn, then answers: it reads the request, so
/// any process (the child, or the checker re-running a submission) gets a sensible step.
pub struct EffectModel {
    /// Prefix of call ids, unique per process so a re-run could never reuse an id.
    prefix: String,
    calls: AtomicU64,
    /// Pause between two stream parts, so a kill lands inside streams too.
    part_delay: Duration,
}

impl EffectModel {
    /// A model naming its calls `<prefix>_<n>`.
    pub fn new(prefix: impl Into<String>, part_delay: Duration) -> EffectModel {
        EffectModel {
            prefix: prefix.into(),
            calls: AtomicU64::new(0),
            part_delay,
        }
    }

    fn parts(&self, request: &ModelRequest) -> Vec<StreamPart> {
        let answered = request
            .messages
            .last()
            .is_some_and(|m| m.role == ModelRole::Tool);
        let mut parts = vec![StreamPart::TextStart { id: "t0".into() }];
        for i in 0..8 {
            parts.push(StreamPart::TextDelta {
                id: "t0".into(),
                text: format!("word {i} "),
            });
        }
        parts.push(StreamPart::TextEnd { id: "t0".into() });
        let finish_reason = if answered {
            FinishReason::Stop
        } else {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let call_id = format!("{}_{n}", self.prefix);
            parts.push(StreamPart::ToolInputStart {
                call_id: call_id.clone(),
                tool_name: "effect".into(),
            });
            parts.push(StreamPart::ToolInputDelta {
                call_id: call_id.clone(),
                delta: format!("{{\"n\":{n}}}"),
            });
            parts.push(StreamPart::ToolCall {
                call_id,
                tool_name: "effect".into(),
                input: format!("{{\"n\":{n}}}"),
            });
            FinishReason::ToolCalls
        };
        parts.push(StreamPart::Finish {
            finish_reason,
            raw_finish_reason: None,
            usage: Usage::default(),
            provider_metadata: None,
        });
        parts
    }
}

#[async_trait]
impl LanguageModel for EffectModel {
    fn provider(&self) -> &str {
        "effect"
    }
    fn model_id(&self) -> &str {
        "effect-1"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let delay = self.part_delay;
        let parts = self.parts(&request);
        Ok(futures::stream::iter(parts)
            .then(move |part| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(part)
            })
            .boxed())
    }
}

/// The agent of a crash trial: the effect model and the `effect` tool.
pub struct EffectAgent {
    model: Arc<EffectModel>,
    effects: PathBuf,
    tool_delay: Duration,
}

impl EffectAgent {
    /// An agent whose tool appends to `effects`.
    pub fn new(model: EffectModel, effects: PathBuf, tool_delay: Duration) -> EffectAgent {
        EffectAgent {
            model: Arc::new(model),
            effects,
            tool_delay,
        }
    }
}

#[async_trait]
impl Agent for EffectAgent {
    fn name(&self) -> &str {
        "crash-trial"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone()
    }
    fn tools(&self) -> ToolSet {
        let effects = self.effects.clone();
        let delay = self.tool_delay;
        ToolSet::new().with(
            FnTool::new(
                "effect",
                "Writes one side effect.",
                move |input: serde_json::Value, call| {
                    let effects = effects.clone();
                    async move {
                        // The effect: one line naming the call, appended before the tool returns.
                        let mut file = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&effects)?;
                        // One write of the whole line: with O_APPEND it lands whole or not at
                        // all, so a kill cannot leave half a line for the next writer to join.
                        file.write_all(format!("{}\n", call.call_id).as_bytes())?;
                        drop(file);
                        tokio::time::sleep(delay).await;
                        Ok(serde_json::json!({"wrote": input}))
                    }
                },
            )
            .with_schema(serde_json::json!({"type": "object"}))
            .shared(),
        )
    }
}

/// How fast the child's turns go.
fn child_agent(effects: &Path) -> Arc<EffectAgent> {
    Arc::new(EffectAgent::new(
        EffectModel::new(
            format!("call_{}", std::process::id()),
            Duration::from_millis(1),
        ),
        effects.to_owned(),
        Duration::from_millis(3),
    ))
}

/// The child process: runs turns until killed, printing a barrier after each.
pub fn child_main(db: &Path, effects: &Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let log = Log::open(db)?;
        let session =
            Session::open(&log, child_agent(effects), SessionOptions::new(SESSION)).await?;
        println!("{READY}");
        for turn in 0u64.. {
            let message = UIMessage::user(format!("u_{}_{turn}", std::process::id()), "go on");
            if turn % 2 == 0 {
                let outcome = session
                    .save_messages(vec![message], TurnOptions::default())
                    .await?;
                println!("{REPORTED}{}", outcome.request_id);
            } else {
                let receipt = session
                    .submit_messages(vec![message], SubmitOptions::default())
                    .await?;
                println!("{ACKED}{}", receipt.submission_id);
                let result = session.wait_submission(&receipt.submission_id).await?;
                if let Some(request_id) = result.request_id {
                    println!("{REPORTED}{request_id}");
                }
            }
            if turn % 4 == 3 {
                let seq = log.last_seq();
                log.flush().await?;
                println!("{BARRIER}{seq}");
            }
        }
        Ok(())
    })
}

/// What one trial saw.
#[derive(Debug, Default, Clone)]
pub struct TrialReport {
    pub seed: u64,
    pub kill_after_ms: u64,
    pub last_barrier: u64,
    /// Turn ends reported to the child and submissions acknowledged to it, all found durable.
    pub reports: u64,
    pub max_seq: u64,
    /// Events between the last barrier and the end of the log (committed without a barrier).
    pub unbarriered_events: u64,
    pub turns_interrupted: u64,
    pub calls_repaired: u64,
    pub effects: u64,
    /// Effects whose `tool_call_finished` was not committed: started, not finished, reported.
    pub effects_unfinished: u64,
    pub submissions_resolved: u64,
}

/// Spawns the child, kills it after a seeded delay, checks the log.
pub fn run_trial(
    spawn: &dyn Fn(&Path, &Path) -> Command,
    dir: &Path,
    seed: u64,
    max_kill_ms: u64,
) -> anyhow::Result<TrialReport> {
    let db = dir.join("log.db");
    let effects = dir.join("effects.txt");
    let kill_after_ms = 5 + splitmix64(seed) % max_kill_ms.max(1);
    let mut child = spawn(&db, &effects)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawning the child")?;
    let lines = read_lines(&mut child)?;
    wait_ready(&lines, Duration::from_secs(30))?;
    std::thread::sleep(Duration::from_millis(kill_after_ms));
    child.kill().context("SIGKILL")?;
    child.wait().context("reaping the child")?;
    let printed = lines.recv_all();
    let after = |tag: &str| -> Vec<String> {
        printed
            .iter()
            .filter_map(|l| Some(l[l.find(tag)? + tag.len()..].trim().to_owned()))
            .collect()
    };
    let last_barrier = after(BARRIER)
        .iter()
        .filter_map(|s| s.parse().ok())
        .max()
        .unwrap_or(0);
    let left = Left {
        last_barrier,
        reported: after(REPORTED),
        acked: after(ACKED),
    };
    let mut report = check_trial(&db, &effects, &left)
        .with_context(|| format!("trial seed {seed} killed after {kill_after_ms} ms"))?;
    report.seed = seed;
    report.kill_after_ms = kill_after_ms;
    Ok(report)
}

/// SplitMix64: spreads consecutive seeds over the whole range, so neighbouring trials are
/// killed at unrelated moments.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The child's stdout lines, collected by a thread.
struct Lines {
    receiver: std::sync::mpsc::Receiver<String>,
    seen: std::cell::RefCell<Vec<String>>,
}

impl Lines {
    fn recv_all(&self) -> Vec<String> {
        let mut seen = self.seen.borrow_mut();
        seen.extend(self.receiver.try_iter());
        seen.clone()
    }
}

fn read_lines(child: &mut Child) -> anyhow::Result<Lines> {
    let stdout = child.stdout.take().context("the child's stdout")?;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    Ok(Lines {
        receiver,
        seen: std::cell::RefCell::new(Vec::new()),
    })
}

fn wait_ready(lines: &Lines, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        match lines.receiver.recv_timeout(wait) {
            Ok(line) => {
                // A test harness may print its own text on the same line first.
                let ready = line.ends_with(READY);
                lines.seen.borrow_mut().push(line);
                if ready {
                    return Ok(());
                }
            }
            Err(_) => bail!("the child never became ready"),
        }
    }
}

/// What the child printed before it was killed: what left it, so must be in the log.
#[derive(Debug, Default, Clone)]
pub struct Left {
    /// The last seq a flush barrier covered.
    pub last_barrier: u64,
    /// Request ids of turns whose end was reported.
    pub reported: Vec<String>,
    /// Submission ids acknowledged.
    pub acked: Vec<String>,
}

/// Reopens the log after a kill and checks every promise (see the module docs).
///
/// Long because it is the module docs' list of checks, in their order, one block each.
pub fn check_trial(db: &Path, effects: &Path, left: &Left) -> anyhow::Result<TrialReport> {
    let last_barrier = left.last_barrier;
    let mut report = TrialReport {
        last_barrier,
        ..TrialReport::default()
    };
    // 1. The log opens; everything decodes; seqs are contiguous; nothing barriered is lost.
    let reader = LogReader::open(db).context("the log must open after the kill")?;
    let max = reader.max_seq()?;
    report.max_seq = max;
    ensure!(
        max >= last_barrier,
        "lost flushed events: the last barrier was seq {last_barrier} but the log ends at {max}"
    );
    report.unbarriered_events = max - last_barrier;
    let before = reader.range(1, max).context("every event must decode")?;
    ensure!(
        before.len() as u64 == max,
        "seqs are not contiguous: {} rows up to {max}",
        before.len()
    );
    // The output gate: what left the child is durable, with no barrier of the child's own.
    let finished_requests: BTreeSet<&str> = before
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnFinished { request_id, .. } => Some(request_id.as_str()),
            _ => None,
        })
        .collect();
    for request_id in &left.reported {
        ensure!(
            finished_requests.contains(request_id.as_str()),
            "the end of turn {request_id} was reported but its turn_finished is not in the log"
        );
    }
    let accepted: BTreeSet<&str> = before
        .iter()
        .filter_map(|e| match &e.event {
            Event::SubmissionAccepted { submission_id, .. } => Some(submission_id.as_str()),
            _ => None,
        })
        .collect();
    for submission_id in &left.acked {
        ensure!(
            accepted.contains(submission_id.as_str()),
            "submission {submission_id} was acknowledged but is not in the log"
        );
    }
    report.reports = (left.reported.len() + left.acked.len()) as u64;
    let effects_before = read_effects(effects)?;
    report.effects = effects_before.values().sum();
    let allowed: BTreeSet<&str> = before
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolDecided {
                call_id, action, ..
            } if action.executes() => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    for call_id in effects_before.keys() {
        ensure!(
            allowed.contains(call_id.as_str()),
            "tool call {call_id} ran but its decision was never committed"
        );
    }
    let finished: BTreeSet<String> = before
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallFinished { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    let unfinished: Vec<String> = effects_before
        .keys()
        .filter(|c| !finished.contains(*c))
        .cloned()
        .collect();
    report.effects_unfinished = unfinished.len() as u64;
    report.turns_interrupted = reader
        .turns(SESSION)?
        .iter()
        // A reader shows a turn whose writer is gone as interrupted before any writer reopens
        // the log: either way it was cut by the kill.
        .filter(|t| matches!(t.status, TurnStatus::Running | TurnStatus::Interrupted))
        .count() as u64;

    // 2. Reopen through the engine (a new process would do the same) and run one more turn.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let log = Log::open(db).context("the log must take a writer after the kill")?;
        let agent = Arc::new(EffectAgent::new(
            EffectModel::new("call_checker", Duration::ZERO),
            effects.to_owned(),
            Duration::ZERO,
        ));
        let session = Session::open(&log, agent, SessionOptions::new(SESSION))
            .await
            .context("reopening the session")?;
        let pending: Vec<String> = session.read_state(|s| {
            s.submissions
                .iter()
                .filter(|s| s.phase != SubmissionPhase::Finished)
                .map(|s| s.submission_id.clone())
                .collect()
        });
        for id in &pending {
            let result = tokio::time::timeout(Duration::from_secs(30), session.wait_submission(id))
                .await
                .with_context(|| format!("submission {id} was never resolved"))??;
            ensure!(
                result.status != SubmissionStatus::Duplicate,
                "submission {id} became a duplicate"
            );
        }
        let outcome = session
            .save_messages(
                vec![UIMessage::user("u_after_crash", "after the crash")],
                TurnOptions::default(),
            )
            .await?;
        ensure!(
            outcome.error.is_none(),
            "the first turn after reopening failed: {:?}",
            outcome.error
        );
        log.flush().await?;
        anyhow::Ok(())
    })?;

    // 3. The projection is consistent and nothing ran twice.
    let reader = LogReader::open(db)?;
    let state = reader.load_session(SESSION)?;
    ensure!(
        state.turns.iter().all(|t| t.status != TurnStatus::Running),
        "a turn is still running after recovery"
    );
    ensure!(
        state
            .submissions
            .iter()
            .all(|s| s.phase == SubmissionPhase::Finished),
        "a submission is unresolved after recovery"
    );
    report.submissions_resolved = finished_submissions(&reader)?;
    let mut ids = BTreeSet::new();
    for message in &state.messages {
        ensure!(
            ids.insert(message.id.clone()),
            "duplicate message {}",
            message.id
        );
        for part in &message.parts {
            if let UIPart::Tool(tool) = part {
                ensure!(
                    !matches!(
                        tool.state,
                        ToolPartState::InputStreaming | ToolPartState::InputAvailable
                    ),
                    "tool call {} is still open after reopening",
                    tool.call_id
                );
            }
        }
    }
    let after = reader.range(1, reader.max_seq()?)?;
    let repaired: BTreeSet<String> = after
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallRepaired { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    report.calls_repaired = repaired.len() as u64;
    for call_id in &unfinished {
        ensure!(
            repaired.contains(call_id),
            "tool call {call_id} started but did not finish, and was not reported as repaired"
        );
    }
    let effects_after = read_effects(effects)?;
    for (call_id, count) in &effects_after {
        ensure!(*count == 1, "tool call {call_id} ran {count} times");
        if !call_id.starts_with("call_checker") {
            ensure!(
                effects_before.contains_key(call_id),
                "tool call {call_id} of the killed process ran again after reopening"
            );
        }
    }
    let executed_again = after.iter().any(|e| {
        matches!(&e.event, Event::ToolDecided { call_id, action, .. }
            if e.seq > max && action.executes() && effects_before.contains_key(call_id))
    });
    ensure!(
        !executed_again,
        "a decision after reopening re-ran a call of the killed process"
    );
    Ok(report)
}

/// Submissions the log shows as finished.
fn finished_submissions(reader: &LogReader) -> anyhow::Result<u64> {
    Ok(reader
        .load_session(SESSION)?
        .submissions
        .iter()
        .filter(|s| s.phase == SubmissionPhase::Finished)
        .count() as u64)
}

/// Lines of the effects file, counted per call id.
fn read_effects(path: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(counts),
        Err(e) => return Err(e).context("reading the effects file"),
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        *counts.entry(line.to_owned()).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Totals over many trials.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub trials: u64,
    pub passed: u64,
    pub failures: Vec<String>,
    pub killed_mid_turn: u64,
    pub unbarriered_events: u64,
    /// Turn ends reported and submissions acknowledged before the kills, all found durable.
    pub reports: u64,
    pub calls_repaired: u64,
    pub effects: u64,
    pub effects_unfinished: u64,
    pub elapsed: Duration,
}

/// Runs `trials` trials with seeds `seed..seed + trials`, each in a fresh directory.
pub fn run_trials(
    spawn: &dyn Fn(&Path, &Path) -> Command,
    trials: u64,
    seed: u64,
    max_kill_ms: u64,
    mut progress: impl FnMut(&TrialReport),
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let mut summary = Summary::default();
    for seed in seed..seed + trials {
        let dir = tempfile::tempdir()?;
        summary.trials += 1;
        match run_trial(spawn, dir.path(), seed, max_kill_ms) {
            Ok(report) => {
                summary.passed += 1;
                summary.killed_mid_turn += u64::from(report.turns_interrupted > 0);
                summary.unbarriered_events += report.unbarriered_events;
                summary.reports += report.reports;
                summary.calls_repaired += report.calls_repaired;
                summary.effects += report.effects;
                summary.effects_unfinished += report.effects_unfinished;
                progress(&report);
            }
            Err(err) => summary.failures.push(format!("seed {seed}: {err:#}")),
        }
    }
    summary.elapsed = started.elapsed();
    Ok(summary)
}
