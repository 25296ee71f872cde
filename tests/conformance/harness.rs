//! What every section shares: the temp log with fast retries, the one-line-per-event trace the
//! snapshots hold, and the lookup tools and scripted models the scenarios run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mull::core::{Envelope, Event, StepRecord, StreamPart, UIMessage, UIPart};
use mull::engine::{FnTool, ToolError};
use mull::providers::scripted::ScriptedModel;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::support::test_log::TestLog as Env;
use crate::support::trace;

pub(crate) fn new_env() -> Env {
    Env::new().with_fast_retries()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..80])
    } else {
        s
    }
}

fn part_line(part: &StreamPart) -> String {
    match part {
        StreamPart::TextStart { id }
        | StreamPart::TextEnd { id }
        | StreamPart::ReasoningStart { id }
        | StreamPart::ReasoningEnd { id } => format!("{} {id}", part.kind()),
        StreamPart::TextDelta { text, .. } | StreamPart::ReasoningDelta { text, .. } => {
            format!("{} {text:?}", part.kind())
        }
        StreamPart::ToolInputStart { call_id, tool_name } => {
            format!("tool-input-start {call_id} {tool_name}")
        }
        StreamPart::ToolInputDelta { call_id, delta } => {
            format!("tool-input-delta {call_id} {delta:?}")
        }
        StreamPart::ToolInputEnd { call_id } => format!("tool-input-end {call_id}"),
        StreamPart::ToolCall {
            call_id,
            tool_name,
            input,
        } => format!("tool-call {call_id} {tool_name} {input}"),
        StreamPart::ToolResult {
            call_id,
            output,
            preliminary,
            ..
        } => format!(
            "tool-result {call_id}{} {}",
            if *preliminary { " preliminary" } else { "" },
            short(output)
        ),
        StreamPart::ToolError { call_id, error, .. } => format!("tool-error {call_id} {error:?}"),
        StreamPart::Finish {
            finish_reason,
            usage,
            ..
        } => format!(
            "finish {} in={:?} out={:?}",
            finish_reason.as_str(),
            usage.input_tokens,
            usage.output_tokens
        ),
        StreamPart::Error { message } => format!("error {message:?}"),
        StreamPart::Source { source } => format!("source {}", short(&json!(source))),
        other => format!("{} {}", other.kind(), short(&json!(other))),
    }
}

fn parts_summary(message: &UIMessage) -> String {
    message
        .parts
        .iter()
        .map(|p| match p {
            UIPart::Text { text, .. } => format!("text:{text:?}"),
            UIPart::Reasoning { .. } => "reasoning".into(),
            UIPart::StepStart => "step".into(),
            UIPart::Tool(t) => format!("tool:{}:{:?}", t.tool_name, t.state),
            UIPart::SourceUrl { .. } => "source-url".into(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One line per event: seq, kind, key fields.
pub(crate) fn render(env: &Envelope, step: Option<&StepRecord>) -> String {
    let body = match &env.event {
        Event::SessionOpened { agent, .. } => format!("agent={agent}"),
        Event::TurnRequested {
            request_id,
            entry,
            messages,
            body,
            target,
            ..
        } => format!(
            "{request_id} entry={entry:?} n={} body={body} target={target:?}",
            messages.len()
        ),
        Event::UserMessagesSaved {
            request_id,
            messages,
        } => format!("{} n={}", request_id.clone().unwrap_or_default(), messages.len()),
        Event::TurnStarted {
            request_id,
            message_id,
            entry,
            continuation,
            attempt,
            body,
        } => format!(
            "{request_id} msg={message_id} entry={entry:?} continuation={continuation} attempt={attempt} body={body}"
        ),
        Event::TurnConfigured { config } => format!(
            "model={} max_steps={} stop_when={:?} tools={:?} active={:?} choice={:?} send_reasoning={} stall={} retries={} overrides={:?}",
            config.model_id,
            config.max_steps,
            config.stop_when,
            config.tool_names,
            config.active_tools,
            config.tool_choice,
            config.send_reasoning,
            config.stall_timeout_ms,
            config.max_retries,
            config.overrides
        ),
        Event::StepStarted { step } => format!("{step}"),
        Event::StepConfigured {
            step,
            model_id,
            active_tools,
            tool_choice,
            overrides,
            ..
        } => format!("{step} model={model_id} active={active_tools:?} choice={tool_choice:?} overrides={overrides:?}"),
        Event::ModelRetried {
            step,
            attempt,
            error,
            delay_ms,
        } => format!("{step} attempt={attempt} delay_ms={delay_ms} {error:?}"),
        Event::Chunk {
            step,
            part,
            original,
        } => match original {
            Some(o) => format!("{step} {} (original: {})", part_line(part), part_line(o)),
            None => format!("{step} {}", part_line(part)),
        },
        Event::PartTransformed {
            step,
            original,
            shown,
        } => format!("{step} {} -> {shown} part(s)", part_line(original)),
        Event::ToolCallStarted {
            step,
            call_id,
            tool,
            input,
            client,
            ..
        } => format!(
            "{step} {call_id} {tool} {}{}",
            short(input),
            if *client { " client" } else { "" }
        ),
        Event::ToolDecided {
            call_id,
            action,
            model_input,
            effective_input,
            reason,
            output,
            ..
        } => format!(
            "{call_id} {} model_input={} effective_input={} reason={reason:?} output={}",
            action.as_str(),
            short(model_input),
            short(effective_input),
            output.as_ref().map(short).unwrap_or_default()
        ),
        Event::ToolCallFinished {
            call_id,
            success,
            output,
            error,
            duration_ms,
            ..
        } => format!(
            "{call_id} success={success} duration_ms={duration_ms} {}",
            match (output, error) {
                (_, Some(e)) => format!("error={e:?}"),
                (Some(o), None) => format!("output={}", short(o)),
                _ => String::new(),
            }
        ),
        Event::ClientToolResult {
            call_id,
            state,
            output,
            error,
            ..
        } => format!("{call_id} {state:?} output={output:?} error={error:?}"),
        Event::ToolCallRepaired {
            message_id,
            call_id,
            error_text,
            ..
        } => format!("{message_id} {call_id} {error_text:?}"),
        Event::StepFinished { record } => {
            let content = step.map_or(String::from("no record"), |step| {
                format!(
                    "text={:?} tool_calls={} tool_results={}",
                    step.text,
                    step.tool_calls.len(),
                    step.tool_results.len(),
                )
            });
            format!(
                "{} {} {content} in={:?} out={:?}",
                record.step,
                record.finish_reason.as_str(),
                record.usage.input_tokens,
                record.usage.output_tokens
            )
        }
        Event::AssistantMessageSaved {
            request_id,
            message,
        } => format!("{request_id} {} [{}]", message.id, parts_summary(message)),
        Event::TurnFinished {
            request_id,
            status,
            error,
            steps,
            response_owed,
            ..
        } => format!(
            "{request_id} {} steps={steps} error={error:?}{}",
            status.as_str(),
            if *response_owed { " owed" } else { "" }
        ),
        Event::ChatResponseDelivered {
            request_id,
            recovered,
        } => format!("{request_id}{}", if *recovered { " recovered" } else { "" }),
        Event::TurnFailed {
            request_id,
            stage,
            messages_persisted,
            classification,
            error,
            model_error,
        } => format!(
            "{} stage={stage:?} persisted={messages_persisted} classification={classification:?} {error:?}{}",
            request_id.clone().unwrap_or_default(),
            model_error
                .as_ref()
                .map(|m| format!(" model_error={:?}/{}", m.kind, m.status.map_or("-".to_owned(), |s| s.to_string())))
                .unwrap_or_default()
        ),
        Event::CompactionApplied {
            reason,
            attempt,
            shortened,
            replaced_ids,
            ..
        } => format!("{reason:?} attempt={attempt} shortened={shortened} replaced={replaced_ids:?}"),
        Event::SubmissionAccepted {
            submission_id,
            idempotency_key,
            messages,
            ..
        } => format!("{submission_id} key={idempotency_key:?} n={}", messages.len()),
        Event::SubmissionApplied {
            submission_id,
            request_id,
        } => format!("{submission_id} {request_id}"),
        Event::SubmissionFinished {
            submission_id,
            request_id,
            status,
            error,
        } => format!("{submission_id} {request_id:?} {status:?} error={error:?}"),
        Event::HookFailed {
            hook,
            error,
            panicked,
            ..
        } => format!("{hook:?} panicked={panicked} {error:?}"),
        Event::RecoveryScheduled {
            request_id,
            attempt,
            max_attempts,
            classification,
            error,
            delay_ms,
        } => format!(
            "{request_id} attempt={attempt}/{max_attempts} {classification:?} delay_ms={delay_ms} {error:?}"
        ),
        Event::CancellationRequested { request_id, reason } => {
            format!("{request_id:?} {reason}")
        }
        other => short(&json!(other)),
    };
    trace::line(env, &body)
}

pub(crate) fn user(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct LookupInput {
    pub(crate) q: String,
}

/// A tool that looks a word up and records every input it ran with.
pub(crate) fn lookup_tool(ran: Arc<Mutex<Vec<Value>>>) -> Arc<dyn mull::engine::Tool> {
    FnTool::new(
        "lookup",
        "Looks a word up.",
        move |input: LookupInput, _call| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(json!({"q": input.q}));
                Ok::<Value, ToolError>(json!({"word": input.q, "hits": 3}))
            }
        },
    )
    .shared()
}

pub(crate) fn ran() -> Arc<Mutex<Vec<Value>>> {
    Arc::new(Mutex::new(Vec::new()))
}

/// Two steps: a lookup call, then an answer.
pub(crate) fn lookup_then_answer() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text("Checking.")
                .tool_call("call_1", "lookup", json!({"q": "mull"}))
                .usage(20, 5)
        })
        .step(|s| s.text("Mull means to ponder.").usage(40, 6))
        .build()
}

pub(crate) fn tool_result_sent(model: &ScriptedModel) -> Value {
    model.requests()[1]
        .messages
        .iter()
        .flat_map(|m| m.content.clone())
        .find_map(|c| match c {
            mull::core::ModelContent::ToolResult { output, .. } => Some(output),
            _ => None,
        })
        .unwrap()
}

pub(crate) fn slow_writer() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text_deltas(["Once", " upon"])
                .pause(Duration::from_secs(30))
                .text("never")
        })
        .step(|s| s.text("Fresh turn works."))
        .build()
}

/// A tool that answers only after `wait`, or never when `wait` is `None`.
pub(crate) fn slow_tool(wait: Option<Duration>) -> Arc<dyn mull::engine::Tool> {
    FnTool::new(
        "lookup",
        "Looks a word up, slowly.",
        move |input: LookupInput, _call| async move {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending::<()>().await,
            }
            Ok::<Value, ToolError>(json!({"word": input.q}))
        },
    )
    .shared()
}

pub(crate) fn calls_lookup_then_answers() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"q": "rust"})))
        .step(|s| s.text("Found it."))
        .build()
}
