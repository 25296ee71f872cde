//! Compaction: shortening the conversation the model is sent while the log keeps everything.
//!
//! A compaction is one `compaction_applied` event naming the exact message ids it replaced, the
//! summary shown in their place, and the conversation's tokens before and after. The projection
//! removes the replaced messages and puts the summary where the first of them stood; the
//! original messages stay in the log (export, replay and the dashboard still see them).
//!
//! [`compact_function`] is a ready compaction callback: it keeps the first `keep_head` and the
//! last `keep_tail` messages and replaces the middle with a summary written by a caller-supplied
//! async summarizer (typically a model call). A message whose tool call is still waiting for
//! its result is never summarized, nor anything after it, so a call and its result always stay
//! together (a finished call and its result live in the same assistant message and are
//! summarized as one).

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use mull_core::{
    to_model_messages, truncate_for_context, CompactionReason, Event, HookName, IdSource,
    LanguageModel, ModelCallKind, ModelMessage, ModelRequest, ModelRole, Role, StepRecord,
    StreamPart, ToolPartState, UIMessage, UIPart, Usage,
};
use serde_json::json;

use crate::error::{EngineError, HookError};
use crate::guard::Caller;
use crate::hooks::Hooks;
use crate::recorder::Recorder;
use crate::session_config::{Compaction, CompactionRequest, SessionConfig};

/// Longest text or tool output (in bytes) kept whole in older messages given to the model.
pub const CONTEXT_TRUNCATE_CHARS: usize = 8_000;

/// How many of the last messages are never truncated.
pub const CONTEXT_KEEP_LAST: usize = 4;

/// Writes a summary of a transcript: typically a model call with the prompt it is given.
pub type Summarizer =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<String, HookError>> + Send + Sync>;

/// A [`Summarizer`] from an async closure.
pub fn summarizer<F, Fut>(f: F) -> Summarizer
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, HookError>> + Send + 'static,
{
    Arc::new(move |prompt| f(prompt).boxed())
}

/// A model call a summarizer made while the engine ran a compaction: what the
/// `compaction_call` event records.
#[derive(Debug, Clone)]
struct SummaryCall {
    provider: String,
    model_id: String,
    /// Set when the provider reported usage (the call finished).
    usage: Option<Usage>,
}

type SummaryCalls = Arc<std::sync::Mutex<Vec<SummaryCall>>>;

tokio::task_local! {
    /// The calls the running compaction callback's summarizers made (only while the engine
    /// runs one): a call is noted when it starts, its usage when the provider reports it, so a
    /// call that fails or is cut off first stays of unknown cost.
    static SUMMARY_CALLS: SummaryCalls;
}

fn note_call(f: impl FnOnce(&mut Vec<SummaryCall>)) {
    let _ = SUMMARY_CALLS.try_with(|calls| {
        let mut calls = calls.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut calls);
    });
}

/// A [`Summarizer`] that asks `model`: the prompt as one user message, the streamed text as
/// the summary. An error from the model (refused request, in-band error part, cut stream)
/// fails the compaction, which then shortens nothing. Each call is recorded (a
/// `compaction_call` event with the usage the provider reported), so compaction is priced.
pub fn model_summarizer(model: Arc<dyn LanguageModel>) -> Summarizer {
    summarizer(move |prompt| {
        let model = Arc::clone(&model);
        async move {
            let request = ModelRequest {
                messages: vec![ModelMessage::text(ModelRole::User, prompt)],
                ..ModelRequest::default()
            };
            let mut index = None;
            note_call(|calls| {
                index = Some(calls.len());
                calls.push(SummaryCall {
                    provider: model.provider().to_owned(),
                    model_id: model.model_id().to_owned(),
                    usage: None,
                });
            });
            let mut stream = model.stream(request).await?;
            let mut text = String::new();
            while let Some(part) = stream.next().await {
                match part? {
                    StreamPart::TextDelta { text: delta, .. } => text.push_str(&delta),
                    StreamPart::Error { message } => return Err(message.into()),
                    StreamPart::Finish { usage, .. } => {
                        if let Some(i) = index {
                            note_call(|calls| {
                                if let Some(call) = calls.get_mut(i) {
                                    call.usage = Some(usage);
                                }
                            });
                        }
                    }
                    _ => {}
                }
            }
            Ok(text)
        }
    })
}

/// How [`compact_function`] compacts.
#[derive(Clone)]
pub struct CompactOptions {
    /// Messages kept at the start (the task as first stated).
    pub keep_head: usize,
    /// Messages kept at the end (the current exchange).
    pub keep_tail: usize,
    /// Writes the summary of the middle.
    pub summarize: Summarizer,
}

impl CompactOptions {
    /// Keeps the first 2 and the last 6 messages and summarizes the rest with `summarize`.
    pub fn new(summarize: Summarizer) -> CompactOptions {
        CompactOptions {
            keep_head: 2,
            keep_tail: 6,
            summarize,
        }
    }
}

impl std::fmt::Debug for CompactOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactOptions")
            .field("keep_head", &self.keep_head)
            .field("keep_tail", &self.keep_tail)
            .finish()
    }
}

/// The instruction the summarizer is given, before the transcript.
pub const SUMMARY_INSTRUCTION: &str = "Summarize the conversation below so the summary can \
replace it in the history. Keep facts, decisions, names, numbers, open questions and what tool \
calls returned; leave out pleasantries. Answer with the summary only.";

/// The text a summary message starts with.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// A compaction callback for `SessionConfig::on_compaction` (see the module docs).
pub fn compact_function(
    options: CompactOptions,
) -> impl Fn(CompactionRequest) -> BoxFuture<'static, Result<Compaction, HookError>>
       + Send
       + Sync
       + 'static {
    move |request: CompactionRequest| {
        let options = options.clone();
        async move {
            let Some(range) = middle_range(&request.messages, options.keep_head, options.keep_tail)
            else {
                return Ok(Compaction::default());
            };
            let middle = &request.messages[range.clone()];
            let prompt = format!("{SUMMARY_INSTRUCTION}\n\n{}", transcript(middle));
            let summary = (options.summarize)(prompt).await?;
            let summary = summary.trim();
            if summary.is_empty() {
                return Err("the summarizer returned an empty summary".into());
            }
            let message = UIMessage {
                id: request.summary_id.clone(),
                role: Role::User,
                metadata: Some(json!({"compaction": {"replaced": middle.len()}})),
                parts: vec![UIPart::Text {
                    text: format!("{SUMMARY_PREFIX}\n{summary}"),
                    streaming: false,
                }],
            };
            let mut after: Vec<UIMessage> = request.messages[..range.start].to_vec();
            after.push(message.clone());
            after.extend_from_slice(&request.messages[range.end..]);
            Ok(Compaction {
                replaced_ids: middle.iter().map(|m| m.id.clone()).collect(),
                summary: Some(message),
                tokens_before: request.counter.count_conversation(&request.messages),
                tokens_after: request.counter.count_conversation(&after),
            })
        }
        .boxed()
    }
}

/// Whether a message holds a tool call still waiting for its result.
fn has_open_tool_call(message: &UIMessage) -> bool {
    message.parts.iter().any(|p| {
        matches!(p, UIPart::Tool(t) if matches!(
            t.state,
            ToolPartState::InputStreaming | ToolPartState::InputAvailable
        ))
    })
}

/// The messages to summarize: everything between the head and the tail, ending before the
/// first message with an open tool call. `None` when fewer than two would be replaced (a
/// summary of one message does not shorten anything).
pub fn middle_range(
    messages: &[UIMessage],
    keep_head: usize,
    keep_tail: usize,
) -> Option<Range<usize>> {
    let start = keep_head;
    let mut end = messages.len().checked_sub(keep_tail)?;
    if end <= start {
        return None;
    }
    if let Some(open) = messages[start..end].iter().position(has_open_tool_call) {
        end = start + open;
    }
    (end >= start + 2).then_some(start..end)
}

/// The messages as plain lines for the summarizer: who said what, and every tool call with
/// what it returned.
pub fn transcript(messages: &[UIMessage]) -> String {
    let mut lines = Vec::new();
    for message in messages {
        let who = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        for part in &message.parts {
            match part {
                UIPart::Text { text, .. } if !text.trim().is_empty() => {
                    lines.push(format!("{who}: {}", text.trim()))
                }
                UIPart::Tool(tool) => {
                    let outcome = match (&tool.output, &tool.error_text) {
                        (_, Some(error)) => format!("failed: {error}"),
                        (Some(output), None) => output.to_string(),
                        (None, None) => "no result".to_owned(),
                    };
                    lines.push(format!(
                        "{who} called {}({}) -> {outcome}",
                        tool.tool_name, tool.input
                    ));
                }
                _ => {}
            }
        }
    }
    lines.join("\n")
}

/// What a compaction runs on: the log it reads the conversation from and records to, the
/// guard the callback runs under, the session's configuration (callback, token counter,
/// thresholds, budget) and the source of a summary's id.
pub(crate) struct Compactor<'a> {
    pub recorder: &'a Recorder,
    pub hooks: &'a Hooks,
    pub config: &'a SessionConfig,
    pub ids: &'a dyn IdSource,
}

impl Compactor<'_> {
    /// Runs the session's compaction callback over the conversation and records the result as a
    /// `compaction_applied` event linked to `turn_id`; returns whether the conversation got
    /// shorter. Replaced ids the conversation does not hold (or repeats) are dropped. A failing
    /// callback is a `hook_failed` event and shortens nothing; with no callback nothing shortens.
    pub(crate) async fn apply(
        &self,
        turn_id: Option<&str>,
        reason: CompactionReason,
        attempt: u32,
    ) -> Result<bool, EngineError> {
        let Compactor {
            recorder,
            hooks,
            config,
            ids,
        } = *self;
        let messages = recorder.read(|s| s.messages.clone());
        let counter = Arc::clone(&config.counter);
        let result = match &config.compaction {
            // A summary is a model call: a used-up budget (its `budget_exceeded` written) refuses
            // it, and the conversation stays as it is.
            Some(_)
                if crate::budget::before_call(
                    recorder,
                    config,
                    turn_id,
                    ModelCallKind::Compaction,
                    None,
                )?
                .is_some() =>
            {
                return Ok(false)
            }
            Some(callback) => {
                let request = CompactionRequest {
                    messages: messages.clone(),
                    reason,
                    attempt,
                    counter: Arc::clone(&counter),
                    summary_id: ids.next_id("summary"),
                };
                let caller = Caller::agent(HookName::OnCompaction);
                let calls = SummaryCalls::default();
                let ran = SUMMARY_CALLS
                    .scope(
                        Arc::clone(&calls),
                        hooks.guard(turn_id, caller, callback(request)),
                    )
                    .await;
                // Every call made is recorded, whether the callback succeeded or not.
                let made = std::mem::take(&mut *calls.lock().unwrap_or_else(|p| p.into_inner()));
                for call in made {
                    recorder.append(
                        turn_id,
                        Event::CompactionCall {
                            provider: call.provider,
                            model_id: call.model_id,
                            finished: call.usage.is_some(),
                            usage: call.usage.unwrap_or_default(),
                        },
                    )?;
                }
                ran?.unwrap_or_default()
            }
            None => Compaction::default(),
        };
        let mut replaced: Vec<String> = Vec::new();
        for id in result.replaced_ids {
            if messages.iter().any(|m| m.id == id) && !replaced.contains(&id) {
                replaced.push(id);
            }
        }
        let after =
            messages.len().saturating_sub(replaced.len()) + usize::from(result.summary.is_some());
        let shortened = !replaced.is_empty() && after < messages.len();
        let summary = if shortened { result.summary } else { None };
        let (tokens_before, tokens_after) = match (result.tokens_before, result.tokens_after) {
            (0, 0) => {
                let before = counter.count_conversation(&messages);
                let mut kept: Vec<UIMessage> = Vec::new();
                let mut placed = false;
                for message in &messages {
                    if shortened && replaced.contains(&message.id) {
                        if let (false, Some(s)) = (placed, &summary) {
                            kept.push(s.clone());
                            placed = true;
                        }
                    } else {
                        kept.push(message.clone());
                    }
                }
                (before, counter.count_conversation(&kept))
            }
            counts => counts,
        };
        recorder.append(
            turn_id,
            Event::CompactionApplied {
                reason,
                attempt,
                shortened,
                replaced_ids: if shortened { replaced } else { Vec::new() },
                summary,
                tokens_before,
                tokens_after,
            },
        )?;
        recorder.flush().await?;
        Ok(shortened)
    }

    /// Compacts before a turn (reason `threshold`) when the conversation holds more tokens than
    /// `compact_after` allows and a compaction callback is registered.
    pub(crate) async fn compact_if_over_threshold(
        &self,
        turn_id: Option<&str>,
    ) -> Result<(), EngineError> {
        let Some(limit) = self.config.compact_after else {
            return Ok(());
        };
        if self.config.compaction.is_none() {
            return Ok(());
        }
        let tokens = self
            .recorder
            .read(|s| self.config.counter.count_conversation(&s.messages));
        if tokens > limit {
            self.apply(turn_id, CompactionReason::Threshold, 1).await?;
        }
        Ok(())
    }

    /// The proactive guard, between two steps: when the step that just finished was sent at least
    /// `max_input_tokens × headroom` input tokens and the turn has compactions left, compacts
    /// (reason `proactive`, linked to the turn) and returns the shortened history as the next
    /// step's model messages. `None` when nothing ran, nothing got shorter, or `before_turn`
    /// replaced the messages (the turn then keeps its own; the compaction still shows in the
    /// projection from the next turn on). The running turn's own message is never compacted, so
    /// its tool calls and their results stay together.
    pub(crate) async fn proactive(
        &self,
        turn_id: Option<&str>,
        last_step: Option<&StepRecord>,
        compactions: &mut u32,
        messages_overridden: bool,
    ) -> Result<Option<Vec<ModelMessage>>, EngineError> {
        let Some(guard) = self.config.proactive else {
            return Ok(None);
        };
        let input = last_step.and_then(|s| s.usage.input_tokens).unwrap_or(0);
        if input < guard.threshold() || *compactions >= guard.max_compactions {
            return Ok(None);
        }
        *compactions += 1;
        let shortened = (self.apply(turn_id, CompactionReason::Proactive, *compactions)).await?;
        if !shortened || messages_overridden {
            return Ok(None);
        }
        let mut messages = self.recorder.read(|s| to_model_messages(&s.messages));
        truncate_for_context(&mut messages, CONTEXT_TRUNCATE_CHARS, CONTEXT_KEEP_LAST);
        Ok(Some(messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_config::tokens::CharEstimator;
    use mull_core::ToolPart;

    fn conversation(n: usize) -> Vec<UIMessage> {
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                UIMessage::text(
                    format!("m{i}"),
                    role,
                    format!("message number {i}, which goes on for a while"),
                )
            })
            .collect()
    }

    fn with_tool(id: &str, state: ToolPartState) -> UIMessage {
        UIMessage {
            id: id.into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![UIPart::Tool(ToolPart {
                call_id: format!("call_{id}"),
                tool_name: "lookup".into(),
                state,
                input: json!({"q": "x"}),
                output: (state == ToolPartState::OutputAvailable).then(|| json!({"hits": 1})),
                error_text: None,
                preliminary: false,
            })],
        }
    }

    #[test]
    fn the_middle_is_between_head_and_tail_and_must_hold_two_messages() {
        assert_eq!(middle_range(&conversation(10), 2, 3), Some(2..7));
        assert_eq!(middle_range(&conversation(6), 2, 3), None);
        assert_eq!(middle_range(&conversation(4), 2, 3), None);
        assert_eq!(middle_range(&conversation(3), 0, 0), Some(0..3));
    }

    #[test]
    fn a_tool_call_waiting_for_its_result_is_never_summarized() {
        let mut messages = conversation(10);
        messages[4] = with_tool("m4", ToolPartState::InputAvailable);
        assert_eq!(middle_range(&messages, 1, 2), Some(1..4));
        messages[4] = with_tool("m4", ToolPartState::OutputAvailable);
        assert_eq!(middle_range(&messages, 1, 2), Some(1..8));
        messages[2] = with_tool("m2", ToolPartState::InputAvailable);
        assert_eq!(middle_range(&messages, 1, 2), None);
    }

    #[test]
    fn the_transcript_shows_texts_and_tool_calls_with_their_results() {
        let mut messages = conversation(1);
        messages.push(with_tool("t", ToolPartState::OutputAvailable));
        assert_eq!(
            transcript(&messages),
            "user: message number 0, which goes on for a while\nassistant called lookup({\"q\":\"x\"}) -> {\"hits\":1}"
        );
    }

    #[tokio::test]
    async fn the_compact_function_summarizes_the_middle_and_counts_tokens() {
        let prompts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = prompts.clone();
        let compact = compact_function(CompactOptions {
            keep_head: 1,
            keep_tail: 2,
            summarize: summarizer(move |prompt| {
                seen.lock().map(|mut p| p.push(prompt)).ok();
                async { Ok("They counted messages.".to_owned()) }
            }),
        });
        let messages = conversation(6);
        let result = compact(CompactionRequest {
            messages: messages.clone(),
            reason: CompactionReason::Manual,
            attempt: 1,
            counter: Arc::new(CharEstimator),
            summary_id: "summary_1".into(),
        })
        .await
        .expect("compacts");
        assert_eq!(result.replaced_ids, ["m1", "m2", "m3"]);
        let summary = result.summary.expect("a summary");
        assert_eq!(summary.id, "summary_1");
        assert_eq!(
            summary.plain_text(),
            format!("{SUMMARY_PREFIX}\nThey counted messages.")
        );
        assert_eq!(
            summary.metadata,
            Some(json!({"compaction": {"replaced": 3}}))
        );
        assert!(result.tokens_after < result.tokens_before);
        let prompt = prompts.lock().expect("lock")[0].clone();
        assert!(prompt.starts_with(SUMMARY_INSTRUCTION));
        assert!(prompt.contains("assistant: message number 1"));
        assert!(prompt.contains("user: message number 2"));
        assert!(!prompt.contains("message number 0"));
        assert!(!prompt.contains("message number 4"));

        let short = compact(CompactionRequest {
            messages: conversation(3),
            reason: CompactionReason::Manual,
            attempt: 1,
            counter: Arc::new(CharEstimator),
            summary_id: "summary_2".into(),
        })
        .await
        .expect("nothing to do is not an error");
        assert!(short.replaced_ids.is_empty() && short.summary.is_none());
    }
}
