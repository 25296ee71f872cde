//! The log → spans mapping: a session's events folded, one at a time, into the spans the engine
//! emits live — `invoke_agent {agent}` per turn attempt, `chat {model}` per step under it,
//! `execute_tool {tool}` per tool call under its step — with the OpenTelemetry GenAI attributes,
//! and start and end times taken from the events themselves (`turn_started` → `turn_finished`,
//! `step_started` → `step_finished`, `tool_call_started` → `tool_call_finished`). Ids are derived
//! from the session, turn, step and call ids, so exporting the same log twice sends the same
//! spans (a backend that dedupes keeps one copy).
//!
//! Pure data: no OpenTelemetry type appears here, so the mapping is tested on its own and the
//! exporter ([`crate::export`]) only converts.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use mull_core::price::cache_write_tokens;
use mull_core::{wire_name, Envelope, Event, StepReport, StreamPart, TurnStatus, Usage};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use mull_store::facts::{CallOutcome, CallStage, FactChange, Facts, ToolCallFact};

use crate::conventions::Conventions;
use decisions::{answer_attributes, budget_attributes, decision_attributes, BudgetStop};

mod decisions;
mod span;

pub use span::{AttrValue, Kind, LogSpan, SpanEvent};

/// What the mapping includes beyond the default attributes, and the names it goes out under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpanOptions {
    /// Message content: tool arguments and results, and each step's answer text. Off by
    /// default, as the GenAI conventions ask, since content may be sensitive.
    pub capture_content: bool,
    /// The attribute and metric names (the fold itself always writes the current ones; the
    /// exporter renames).
    pub conventions: Conventions,
}

impl SpanOptions {
    /// Content as `capture_content` says, names as `conventions` says.
    pub fn new(capture_content: bool, conventions: Conventions) -> SpanOptions {
        SpanOptions {
            capture_content,
            conventions,
        }
    }

    /// What the standard variables ask for: content when
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true, the older names when
    /// `MULL_OTEL_GENAI_CONVENTIONS=legacy`.
    pub fn from_env() -> SpanOptions {
        SpanOptions::new(crate::config::content_requested(), Conventions::from_env())
    }
}

/// One model call as the metrics see it: what the `gen_ai.client.*` instruments record,
/// measured from the log's timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    /// The `chat` span of the call.
    pub span_id: [u8; 8],
    pub provider: Option<String>,
    pub request_model: Option<String>,
    pub response_model: Option<String>,
    pub server_address: Option<String>,
    /// `step_configured` (the request sent) to `step_finished`, or to where the call was cut.
    pub duration_s: f64,
    /// The request to its first output chunk; `None` when none arrived.
    pub time_to_first_chunk_s: Option<f64>,
    /// Each output chunk after the first: the time since the one before it.
    pub time_per_output_chunk_s: Vec<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Set when the call failed.
    pub error_type: Option<String>,
}

/// A `chat` span being built, with what its call's metrics need.
struct OpenStep {
    span: LogSpan,
    /// When the request was sent (`step_configured`).
    opened_at: Option<DateTime<Utc>>,
    /// When each output chunk was logged.
    chunks: Vec<DateTime<Utc>>,
    /// With content captured: the text the call streamed, and the tool calls it made (as
    /// output message parts), for the span's output message.
    text: String,
    calls: Vec<Value>,
}

/// A turn attempt whose `turn_finished` has not been applied yet.
struct OpenTurn {
    span: LogSpan,
    request_id: String,
    provider: Option<String>,
    /// Open `chat` spans by step.
    steps: BTreeMap<u32, OpenStep>,
    /// Open `execute_tool` spans by call id, with their step.
    tools: HashMap<String, (u32, LogSpan)>,
    last_at: DateTime<Utc>,
}

/// Where a sub-agent's session hangs in its parent's trace: the parent turn's trace and the
/// `execute_tool` span of the call that ran it (from the child's `subagent_linked`).
#[derive(Debug, Clone, Copy)]
struct ParentCall {
    trace_id: [u8; 16],
    span_id: [u8; 8],
}

/// The fold: apply a session's events in log order, then [`SessionSpans::finish`].
pub struct SessionSpans {
    session_id: String,
    agent: String,
    options: SpanOptions,
    /// Set for a sub-agent's session: its turns are children of the parent's tool call.
    parent_call: Option<ParentCall>,
    /// The sessions this one's tool calls ran as sub-agents, in the order they started.
    children: Vec<String>,
    open: HashMap<String, OpenTurn>,
    done: Vec<LogSpan>,
    /// The model calls closed so far, for the metrics.
    inferences: Vec<Inference>,
    /// What the session's events say happened to its tool calls: each call's span reads its
    /// start, approval, decision and outcome from here.
    facts: Facts,
    /// Requests whose history was compacted: their later model calls saw the compacted
    /// conversation.
    compacted: std::collections::HashSet<String>,
    /// Set while the last event applied ended a turn that did not complete: the engine writes
    /// that turn's `turn_failed` next, which still marks its spans.
    settling: bool,
}

impl SessionSpans {
    /// Nothing applied yet.
    pub fn new(session_id: &str, options: SpanOptions) -> SessionSpans {
        SessionSpans {
            session_id: session_id.to_owned(),
            agent: String::from("agent"),
            options,
            parent_call: None,
            children: Vec::new(),
            open: HashMap::new(),
            done: Vec::new(),
            inferences: Vec::new(),
            facts: Facts::new(),
            compacted: std::collections::HashSet::new(),
            settling: false,
        }
    }

    /// Folds one event of the session in.
    pub fn apply(&mut self, env: &Envelope) {
        self.settling = false;
        let change = self.facts.push(env);
        match &env.event {
            Event::SessionOpened { agent, .. } => {
                self.agent = agent.clone();
                return;
            }
            Event::SubagentLinked {
                parent_session_id,
                parent_turn_id,
                parent_call_id,
                ..
            } => {
                let (trace_id, span_id) = derived_ids(
                    parent_session_id,
                    parent_turn_id,
                    &format!("tool/{parent_call_id}"),
                );
                self.parent_call = Some(ParentCall { trace_id, span_id });
                return;
            }
            Event::SubagentStarted {
                child_session_id, ..
            } => self.children.push(child_session_id.clone()),
            _ => {}
        }
        let Some(turn_id) = env.turn_id.as_deref() else {
            return;
        };
        if let Event::TurnStarted {
            request_id,
            attempt,
            entry,
            ..
        } = &env.event
        {
            if let Some(stale) = self.open.remove(turn_id) {
                self.abandon(stale);
            }
            let parent = self.parent_call.map(|call| call.span_id);
            let mut span = self.span(turn_id, "invoke", env.at, parent);
            span.name = format!("invoke_agent {}", self.agent);
            span.set("gen_ai.operation.name", "invoke_agent");
            span.set("gen_ai.agent.name", self.agent.as_str());
            span.set("gen_ai.conversation.id", self.session_id.as_str());
            span.set("mull.request_id", request_id.as_str());
            span.set("mull.attempt", *attempt);
            span.set("mull.turn_id", turn_id);
            span.set("mull.entry", wire_name(entry));
            let open = OpenTurn {
                span,
                request_id: request_id.clone(),
                provider: None,
                steps: BTreeMap::new(),
                tools: HashMap::new(),
                last_at: env.at,
            };
            self.open.insert(turn_id.to_owned(), open);
            return;
        }
        let Some(mut turn) = self.open.remove(turn_id) else {
            // The engine writes `turn_failed` after the turn's `turn_finished`.
            if let Event::TurnFailed {
                stage,
                classification,
                error,
                ..
            } = &env.event
            {
                self.late_failure(turn_id, &failure_type(stage, classification), error);
            }
            return;
        };
        turn.last_at = turn.last_at.max(env.at);
        if let Some(FactChange::Call { call, stage }) = change {
            let call = self.facts.calls()[call].clone();
            self.call_changed(&mut turn, turn_id, &call, stage, env.at);
            self.open.insert(turn_id.to_owned(), turn);
            return;
        }
        if self.apply_to_turn(&mut turn, turn_id, env) {
            turn.span.close(env.at, &mut self.done);
        } else {
            self.open.insert(turn_id.to_owned(), turn);
        }
    }

    /// Applies a turn's event; true when it ended the turn (the caller then closes its span).
    /// One arm per kind of event a turn writes, in the order it writes them, each a few
    /// attributes: split, the kinds would be read in several places.
    fn apply_to_turn(&mut self, turn: &mut OpenTurn, turn_id: &str, env: &Envelope) -> bool {
        let content = self.options.capture_content;
        match &env.event {
            Event::TurnConfigured { config } => {
                turn.provider = Some(config.provider.clone());
                turn.span
                    .set("gen_ai.provider.name", config.provider.as_str());
                turn.span
                    .set("gen_ai.request.model", config.model_id.as_str());
                if let Some(n) = config.settings.max_output_tokens {
                    turn.span.set("gen_ai.request.max_tokens", n);
                }
                if let Some(seed) = config.settings.seed {
                    turn.span.set("gen_ai.request.seed", seed);
                }
            }
            Event::StepStarted { step } => {
                let parent = turn.span.span_id;
                let mut span = self.span(turn_id, &format!("step/{step}"), env.at, Some(parent));
                span.name = "chat".into();
                span.kind = Kind::Client;
                span.set("gen_ai.operation.name", "chat");
                span.set("gen_ai.conversation.id", self.session_id.as_str());
                // Every model call mull makes is a streaming one.
                span.set("gen_ai.request.stream", true);
                if let Some(provider) = &turn.provider {
                    span.set("gen_ai.provider.name", provider.as_str());
                }
                if self.compacted.contains(&turn.request_id) {
                    span.set("gen_ai.conversation.compacted", true);
                }
                span.set("mull.step", *step);
                let open = OpenStep {
                    span,
                    opened_at: None,
                    chunks: Vec::new(),
                    text: String::new(),
                    calls: Vec::new(),
                };
                turn.steps.insert(*step, open);
            }
            Event::StepConfigured { step, model_id, .. } => {
                if let Some(open) = turn.steps.get_mut(step) {
                    open.span.name = format!("chat {model_id}");
                    open.span.set("gen_ai.request.model", model_id.as_str());
                    open.opened_at = Some(env.at);
                }
            }
            Event::Chunk { step, part, .. } if part.is_model_output() => {
                if let Some(open) = turn.steps.get_mut(step) {
                    if open.chunks.is_empty() {
                        if let Some(opened) = open.opened_at {
                            open.span.set(
                                "gen_ai.response.time_to_first_chunk",
                                seconds(opened, env.at),
                            );
                        }
                    }
                    open.chunks.push(env.at);
                    if let (true, StreamPart::TextDelta { text, .. }) = (content, part) {
                        open.text.push_str(text);
                    }
                }
            }
            Event::ModelRetried {
                step,
                attempt,
                error,
                delay_ms,
            } => {
                if let Some(open) = turn.steps.get_mut(step) {
                    open.span.events.push(SpanEvent {
                        name: "mull.model_retried",
                        at: env.at,
                        attributes: vec![
                            ("mull.retry.attempt", (*attempt).into()),
                            ("mull.retry.delay_ms", (*delay_ms).into()),
                            ("error.message", error.as_str().into()),
                        ],
                    });
                }
            }
            Event::StepFinished { record } => {
                self.close_tools(turn, Some(record.step), env.at);
                if let Some(mut open) = turn.steps.remove(&record.step) {
                    let output = content.then(|| output_parts(&mut open));
                    step_attributes(&mut open.span, record, output);
                    self.close_step(open, env.at);
                }
            }
            Event::CompactionApplied {
                reason,
                tokens_before,
                tokens_after,
                shortened,
                ..
            } => {
                if *shortened {
                    self.compacted.insert(turn.request_id.clone());
                }
                let reason = wire_name(reason);
                turn.span.events.push(SpanEvent {
                    name: "mull.compaction",
                    at: env.at,
                    attributes: vec![
                        ("mull.compaction.reason", reason.into()),
                        ("mull.compaction.tokens_before", (*tokens_before).into()),
                        ("mull.compaction.tokens_after", (*tokens_after).into()),
                    ],
                });
            }
            Event::BudgetExceeded {
                scope,
                measure,
                limit,
                spent,
                remaining,
                call,
                step,
                ..
            } => {
                let stop = BudgetStop {
                    scope: *scope,
                    measure: *measure,
                    limit: *limit,
                    spent: *spent,
                    remaining,
                    call: *call,
                    step: *step,
                };
                let step_span = step
                    .and_then(|step| turn.steps.get_mut(&step))
                    .map(|open| &mut open.span);
                budget_attributes(&mut turn.span, step_span, &stop, env.at);
            }
            Event::TurnFailed {
                stage,
                classification,
                error,
                ..
            } => {
                let error_type = failure_type(stage, classification);
                for span in turn
                    .steps
                    .values_mut()
                    .map(|o| &mut o.span)
                    .chain([&mut turn.span])
                {
                    span.set("error.type", error_type.as_str());
                    span.error = Some(error.clone());
                }
            }
            Event::TurnFinished {
                status,
                error,
                steps,
                usage,
                ..
            } => {
                self.close_tools(turn, None, env.at);
                for (_, open) in std::mem::take(&mut turn.steps) {
                    self.close_step(open, env.at);
                }
                turn.span.set("mull.turn.status", status.as_str());
                turn.span.set("mull.turn.steps", *steps);
                usage_attributes(&mut turn.span, usage, None);
                if *status == TurnStatus::Error && turn.span.error.is_none() {
                    turn.span.error = Some(error.clone().unwrap_or_else(|| "turn failed".into()));
                }
                self.settling = *status != TurnStatus::Completed;
                return true;
            }
            _ => {}
        }
        false
    }

    /// A tool call of `turn` reached `stage`: its `execute_tool` span opens, takes its
    /// approval request, its decision (with the answer it acted on) or its outcome — each read
    /// from the call's facts.
    fn call_changed(
        &mut self,
        turn: &mut OpenTurn,
        turn_id: &str,
        call: &ToolCallFact,
        stage: CallStage,
        at: DateTime<Utc>,
    ) {
        let content = self.options.capture_content;
        let id = call.call_id.as_str();
        match stage {
            CallStage::Started => {
                let step = call.step.unwrap_or(0);
                let input = call.input.as_ref().unwrap_or(&Value::Null);
                if let (true, Some(open)) = (content, turn.steps.get_mut(&step)) {
                    open.calls.push(json!({
                        "type": "tool_call",
                        "id": id,
                        "name": call.tool,
                        "arguments": input,
                    }));
                }
                let mut span = self.tool_span(turn, turn_id, step, id, &call.tool, at);
                if call.client {
                    span.set("mull.tool.client", true);
                }
                if content {
                    span.set("gen_ai.tool.call.arguments", json_text(input));
                }
                turn.tools.insert(id.to_owned(), (step, span));
            }
            CallStage::ApprovalRequested => {
                let Some(approval) = &call.approval else {
                    return;
                };
                let (Some(request), Some((_, span))) = (&approval.request, turn.tools.get_mut(id))
                else {
                    return;
                };
                let approval_id = approval.approval_id.as_str();
                span.set("mull.tool.decision", "approval_requested");
                span.set("mull.approval.id", approval_id);
                let mut attributes = vec![("mull.approval.id", approval_id.into())];
                if let Some(reason) = &request.reason {
                    attributes.push(("mull.approval.reason", reason.as_str().into()));
                }
                if let Some(expires) = request.expires_at {
                    attributes.push(("mull.approval.expires_at", expires.to_rfc3339().into()));
                }
                span.events.push(SpanEvent {
                    name: "mull.approval.requested",
                    at,
                    attributes,
                });
            }
            CallStage::Decided => {
                let Some(decision) = &call.decision else {
                    return;
                };
                if !turn.tools.contains_key(id) {
                    // A call approved (or denied) in an earlier turn runs in this one: its
                    // span starts with the decision.
                    let mut span = self.tool_span(turn, turn_id, decision.step, id, &call.tool, at);
                    if content {
                        span.set(
                            "gen_ai.tool.call.arguments",
                            json_text(&decision.effective_input),
                        );
                    }
                    turn.tools.insert(id.to_owned(), (decision.step, span));
                }
                if let Some((_, span)) = turn.tools.get_mut(id) {
                    decision_attributes(span, decision.action, decision.reason.as_deref(), at);
                    if let Some(approval) = &call.approval {
                        if let Some(answer) = &approval.answer {
                            answer_attributes(span, &approval.approval_id, answer);
                        }
                    }
                }
            }
            CallStage::Finished => {
                let Some(CallOutcome::Finished {
                    success,
                    output,
                    error,
                    ..
                }) = &call.outcome
                else {
                    return;
                };
                if let Some((_, mut span)) = turn.tools.remove(id) {
                    if !success && span.error.is_none() {
                        span.set("error.type", "tool_error");
                        span.error = Some(error.clone().unwrap_or_else(|| "tool failed".into()));
                    }
                    if let (true, Some(output)) = (content, output) {
                        span.set("gen_ai.tool.call.result", json_text(output));
                    }
                    span.close(at, &mut self.done);
                }
            }
            // An answer waits for the decision that acts on it; a client's answer or a repair
            // comes after the call's span ended with its step or turn.
            _ => {}
        }
    }

    /// A new `execute_tool` span for `call_id`, under its step's `chat` span when that is open
    /// (else under the turn's).
    fn tool_span(
        &self,
        turn: &OpenTurn,
        turn_id: &str,
        step: u32,
        call_id: &str,
        tool: &str,
        at: DateTime<Utc>,
    ) -> LogSpan {
        let parent = turn
            .steps
            .get(&step)
            .map_or(turn.span.span_id, |s| s.span.span_id);
        let mut span = self.span(turn_id, &format!("tool/{call_id}"), at, Some(parent));
        span.name = format!("execute_tool {tool}");
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("gen_ai.tool.name", tool);
        span.set("gen_ai.tool.call.id", call_id);
        span.set("gen_ai.tool.type", "function");
        span
    }

    /// Ends a `chat` span at `at` and notes its model call for the metrics.
    fn close_step(&mut self, open: OpenStep, at: DateTime<Utc>) {
        let span = &open.span;
        let text = |key: &str| match span.attribute(key) {
            Some(AttrValue::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let count = |key: &str| match span.attribute(key) {
            Some(AttrValue::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        let start = open.opened_at.unwrap_or(span.start);
        let end = at.max(start);
        let first = open.chunks.first().copied();
        let inference = Inference {
            span_id: span.span_id,
            provider: text("gen_ai.provider.name"),
            request_model: text("gen_ai.request.model"),
            response_model: text("gen_ai.response.model"),
            server_address: text("server.address"),
            duration_s: seconds(start, end),
            time_to_first_chunk_s: first.map(|f| seconds(start, f)),
            time_per_output_chunk_s: open
                .chunks
                .windows(2)
                .map(|w| seconds(w[0], w[1]))
                .collect(),
            input_tokens: count("gen_ai.usage.input_tokens"),
            output_tokens: count("gen_ai.usage.output_tokens"),
            error_type: text("error.type").or_else(|| {
                span.attribute("gen_ai.response.finish_reasons")
                    .is_none()
                    .then(|| "unfinished".to_owned())
            }),
        };
        self.inferences.push(inference);
        open.span.close(at, &mut self.done);
    }

    /// Ends the open tool spans of `step` (all steps when `None`) at `at`: a client tool's call
    /// is answered outside the turn, so its span ends with the step.
    fn close_tools(&mut self, turn: &mut OpenTurn, step: Option<u32>, at: DateTime<Utc>) {
        let ids: Vec<String> = turn
            .tools
            .iter()
            .filter(|(_, (s, _))| step.is_none_or(|step| *s == step))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some((_, span)) = turn.tools.remove(&id) {
                span.close(at, &mut self.done);
            }
        }
    }

    /// Marks a finished turn failed: its `invoke_agent` span, and the model call it cut (a `chat`
    /// span closed without a finish reason).
    fn late_failure(&mut self, turn_id: &str, error_type: &str, error: &str) {
        let (_, invoke) = self.ids(turn_id, "invoke");
        let mut cut = std::collections::HashSet::new();
        for span in &mut self.done {
            let cut_step = span.parent_id == Some(invoke)
                && span.kind == Kind::Client
                && span.attribute("gen_ai.response.finish_reasons").is_none();
            if span.span_id == invoke || cut_step {
                span.set("error.type", error_type);
                span.error = Some(error.to_owned());
            }
            if cut_step {
                cut.insert(span.span_id);
            }
        }
        // The metrics of the cut call carry the failure's type too.
        for inference in self.inferences.iter_mut() {
            if cut.contains(&inference.span_id) {
                inference.error_type = Some(error_type.to_owned());
            }
        }
    }

    /// Ends a turn that has no `turn_finished` (the process died, or the log was cut) at its
    /// last event, marked as such.
    fn abandon(&mut self, mut turn: OpenTurn) {
        let at = turn.last_at;
        self.close_tools(&mut turn, None, at);
        for (_, open) in std::mem::take(&mut turn.steps) {
            self.close_step(open, at);
        }
        turn.span.set("mull.turn.status", "unfinished");
        turn.span.error = Some("the turn has no turn_finished in the log".into());
        turn.span.close(at, &mut self.done);
    }

    /// The sessions this session's tool calls ran as sub-agents (their spans join this
    /// session's traces when they are folded too).
    pub fn children(&self) -> &[String] {
        &self.children
    }

    /// The spans closed so far that no later event can change, taken out of the fold: what a
    /// live export sends as the events are appended. Spans of a turn that just ended without
    /// completing wait for the next event (its `turn_failed` marks them). The model calls
    /// measured so far are dropped: their metrics are sent by a re-export.
    pub fn take_closed(&mut self) -> Vec<LogSpan> {
        self.inferences.clear();
        if self.settling {
            return Vec::new();
        }
        std::mem::take(&mut self.done)
    }

    /// Every span, turns that never finished included, ordered by start time (a parent before
    /// its children when they start together).
    pub fn finish(self) -> Vec<LogSpan> {
        self.finish_with_inferences().0
    }

    /// [`SessionSpans::finish`], and every model call for the metrics.
    pub fn finish_with_inferences(mut self) -> (Vec<LogSpan>, Vec<Inference>) {
        let mut open: Vec<OpenTurn> = self.open.drain().map(|(_, t)| t).collect();
        open.sort_by_key(|t| t.span.start);
        for turn in open {
            self.abandon(turn);
        }
        let mut spans = self.done;
        spans.sort_by_key(|s| (s.start, s.parent_id.is_some()));
        (spans, self.inferences)
    }
    /// The trace id of `turn_id` and the span id of its `part`, derived from the log's ids; a
    /// sub-agent's turns join the trace of the parent turn that called them.
    fn ids(&self, turn_id: &str, part: &str) -> ([u8; 16], [u8; 8]) {
        let (trace_id, span_id) = derived_ids(&self.session_id, turn_id, part);
        match self.parent_call {
            Some(call) => (call.trace_id, span_id),
            None => (trace_id, span_id),
        }
    }

    fn span(
        &self,
        turn_id: &str,
        part: &str,
        at: DateTime<Utc>,
        parent_id: Option<[u8; 8]>,
    ) -> LogSpan {
        let (trace_id, span_id) = self.ids(turn_id, part);
        LogSpan {
            trace_id,
            span_id,
            parent_id,
            name: String::new(),
            kind: Kind::Internal,
            start: at,
            end: at,
            attributes: Vec::new(),
            events: Vec::new(),
            error: None,
        }
    }
}

/// The trace id of a session's turn and the span id of one of its parts, as hashes of the
/// log's ids: the same log always gives the same ids, and a child can name its parent's.
fn derived_ids(session_id: &str, turn_id: &str, part: &str) -> ([u8; 16], [u8; 8]) {
    let trace = hash(&["trace", session_id, turn_id]);
    let span = hash(&["span", session_id, turn_id, part]);
    let mut trace_id = [0u8; 16];
    trace_id.copy_from_slice(&trace[..16]);
    let mut span_id = [0u8; 8];
    span_id.copy_from_slice(&span[..8]);
    // An all-zero id is invalid in OpenTelemetry.
    trace_id[15] |= 1;
    span_id[7] |= 1;
    (trace_id, span_id)
}

/// A failure's `error.type`: its classification (`context_overflow` …) or else its stage.
fn failure_type(
    stage: &mull_core::ErrorStage,
    classification: &Option<mull_core::ChatErrorClassification>,
) -> String {
    let name = match classification {
        Some(c) => wire_name(c),
        None => wire_name(stage),
    };
    if name.is_empty() {
        "error".into()
    } else {
        name
    }
}

fn hash(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"mull-otel");
    for p in parts {
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The GenAI usage attributes; a count the provider did not send is left out, never 0.
fn usage_attributes(span: &mut LogSpan, usage: &Usage, cache_write: Option<u64>) {
    if let Some(n) = usage.input_tokens {
        span.set("gen_ai.usage.input_tokens", n);
    }
    if let Some(n) = usage.output_tokens {
        span.set("gen_ai.usage.output_tokens", n);
    }
    if let Some(n) = usage.cached_input_tokens {
        span.set("gen_ai.usage.cache_read.input_tokens", n);
    }
    if let Some(n) = cache_write {
        span.set("gen_ai.usage.cache_write.input_tokens", n);
    }
    if let Some(n) = usage.reasoning_tokens {
        span.set("gen_ai.usage.reasoning.output_tokens", n);
    }
}

/// `to - from` in seconds (0 when the log's clock went backwards).
fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    let micros = (to - from).num_microseconds().unwrap_or(i64::MAX).max(0);
    micros as f64 / 1_000_000.0
}

/// A `chat` span's attributes from its step's report; `output`, when content is captured,
/// the parts of its output message.
fn step_attributes(span: &mut LogSpan, record: &StepReport, output: Option<Vec<Value>>) {
    span.set(
        "gen_ai.response.finish_reasons",
        AttrValue::StrList(vec![record.finish_reason.as_str().to_owned()]),
    );
    // The model that answered, as the provider named it (else the one asked).
    let response_model = record
        .response
        .get("model_id")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(record.model_id.as_str());
    if !response_model.is_empty() {
        span.set("gen_ai.response.model", response_model);
    }
    if let Some(id) = record.response.get("id").and_then(Value::as_str) {
        span.set("gen_ai.response.id", id);
    }
    if let Some(address) = record
        .response
        .get("server_address")
        .and_then(Value::as_str)
    {
        span.set("server.address", address);
    }
    if let Some(port) = record.response.get("server_port").and_then(Value::as_u64) {
        span.set("server.port", port);
    }
    usage_attributes(
        span,
        &record.usage,
        cache_write_tokens(record.provider_metadata.as_ref()),
    );
    if let Some(parts) = output {
        let message = json!([{
            "role": "assistant",
            "parts": parts,
            "finish_reason": record.finish_reason.as_str(),
        }]);
        span.set("gen_ai.output.messages", message.to_string());
    }
}

/// A call's output message parts: its text, then its tool calls.
fn output_parts(open: &mut OpenStep) -> Vec<Value> {
    let mut parts = Vec::with_capacity(open.calls.len() + 1);
    if !open.text.is_empty() {
        parts.push(json!({"type": "text", "content": std::mem::take(&mut open.text)}));
    }
    parts.append(&mut open.calls);
    parts
}

#[cfg(test)]
mod tests;
