//! One attempt of a turn: the user's messages persisted, `turn_started`, the configured
//! steps, and how the attempt ends (completed, aborted, failed, or retried after overflow
//! recovery compacted the history).

use mull_core::{
    ChatErrorClassification, CompactionReason, ErrorStage, Event, HookName, Role, TurnStatus,
    UIMessage, UIPart, Usage,
};
use serde_json::Value;

use super::failure::fail;
use super::parts::TurnParts;
use super::recovery::{closed, repair_transcript};
use super::run::{outcome, Attempt, Ended, StepsEnd, TurnRun, TurnSpec};
use crate::context::ChatErrorContext;
use crate::error::{ChatError, EngineError};
use crate::hooks::Observed;
use crate::runtime::{record_signal, OutcomeStatus};

/// Appends the incoming messages (and, for a submission, marks it applied). A failure here is
/// stage `persist`.
pub(super) async fn persist_messages(
    parts: &TurnParts<'_>,
    spec: &TurnSpec,
) -> Result<Option<Ended>, EngineError> {
    if spec.messages.is_empty() {
        return Ok(None);
    }
    let problem = spec.messages.iter().enumerate().find_map(|(i, m)| {
        m.id.trim()
            .is_empty()
            .then(|| format!("message {i} has an empty id; messages are stored by id"))
    });
    let stored = match problem {
        Some(problem) => Err(problem),
        None => persist_events(parts, spec).map_err(|e| e.to_string()),
    };
    match stored {
        Ok(()) => Ok(None),
        Err(message) => {
            let error = ChatError {
                request_id: Some(spec.request_id.clone()),
                ..ChatError::new(
                    ErrorStage::Persist,
                    format!("saving the user's messages failed: {message}"),
                )
            };
            let shown = fail(parts, None, error, false).await;
            Ok(Some(Ended {
                outcome: outcome(spec, OutcomeStatus::Error, Some(shown), None),
                response: None,
            }))
        }
    }
}

pub(super) fn persist_events(parts: &TurnParts<'_>, spec: &TurnSpec) -> Result<(), EngineError> {
    parts.recorder.append(
        None,
        Event::UserMessagesSaved {
            request_id: Some(spec.request_id.clone()),
            messages: spec.messages.clone(),
        },
    )?;
    if let Some(submission_id) = &spec.submission_id {
        parts.recorder.append(
            None,
            Event::SubmissionApplied {
                submission_id: submission_id.clone(),
                request_id: spec.request_id.clone(),
            },
        )?;
    }
    // Nothing waits for these here: the turn's first gate (a tool about to run, the turn's end
    // reported) makes them durable, since commits are in seq order.
    Ok(())
}

pub(super) async fn run_attempt(
    parts: &TurnParts<'_>,
    spec: &TurnSpec,
    attempt: u32,
    recoveries: u32,
) -> Result<Attempt, EngineError> {
    if attempt == 0 {
        if let Err(error) = repair_transcript(parts, spec).await? {
            let shown = fail(parts, None, error, true).await;
            return Ok(Attempt::Done(Box::new(Ended {
                outcome: outcome(spec, OutcomeStatus::Error, Some(shown), None),
                response: None,
            })));
        }
    }
    let turn_id = parts.options.ids.next_id("turn");
    let message_id = parts.options.ids.next_id("msg");
    parts.recorder.append(
        Some(&turn_id),
        Event::TurnStarted {
            request_id: spec.request_id.clone(),
            message_id: message_id.clone(),
            entry: spec.entry,
            continuation: spec.continuation,
            attempt,
            body: spec.body.clone(),
        },
    )?;
    // No gate here: a model call leaves nothing behind that a lost turn start would contradict,
    // so it overlaps the commit (the batch's deadline or the turn's first gate commits it).
    let mut run = TurnRun {
        parts,
        spec,
        turn_id,
        message_id,
        steps: Vec::new(),
        usage: Usage::default(),
        tool_context: Value::Null,
        summaries: mull_core::SummaryCache::new(),
    };
    if spec.signal.is_cancelled() {
        return run
            .finish(TurnStatus::Aborted, None)
            .await
            .map(|e| Attempt::Done(Box::new(e)));
    }
    let (tools, tool_problems) = run.tools().await;
    // Calls parked on a person's answer run (or are denied) before the context is read.
    run.act_on_approvals(&tools).await?;
    let resolved = match run.configure(tools, tool_problems).await? {
        Ok(resolved) => resolved,
        // A setup hook cut off by the abort: the turn ends as aborted, not failed.
        Err(_) if spec.signal.is_cancelled() => {
            return run
                .finish(TurnStatus::Aborted, None)
                .await
                .map(|e| Attempt::Done(Box::new(e)))
        }
        Err(error) => {
            return run
                .fail_setup(error)
                .await
                .map(|e| Attempt::Done(Box::new(e)))
        }
    };
    let ended = match resolved.total_timeout {
        Some(limit) => match tokio::time::timeout(limit, run.run_steps(&resolved)).await {
            Ok(ended) => ended?,
            Err(_) => StepsEnd::Failed(run.error(
                ErrorStage::Stream,
                format!("the turn timed out after {} ms", limit.as_millis()),
            )),
        },
        None => run.run_steps(&resolved).await?,
    };
    match ended {
        StepsEnd::Completed => run
            .finish(TurnStatus::Completed, None)
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        // A failure while the turn was being aborted (a `before_step` cut off) is the abort.
        StepsEnd::Aborted => run
            .finish(TurnStatus::Aborted, None)
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        // A used-up budget ends the turn: no recovery, no overflow retry (each a model call).
        StepsEnd::Failed(error) if error.stage == ErrorStage::Budget => run
            .finish(TurnStatus::Error, Some(error))
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        StepsEnd::Failed(_) if spec.signal.is_cancelled() => run
            .finish(TurnStatus::Aborted, None)
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        StepsEnd::Failed(error) => run.stream_failed(error, attempt, recoveries).await,
    }
}

impl TurnRun<'_> {
    /// A turn that failed before its first step (`before_turn`, an unknown model) ends like
    /// any other: one rule for `on_chat_response` — it fires for every turn that started and
    /// reached its end (completed, aborted or error, with the message as persisted, possibly
    /// without parts); it does not fire when no turn started (the user's messages could not be
    /// saved, the transcript could not be repaired) or when overflow recovery discarded the
    /// attempt.
    pub(super) async fn fail_setup(&mut self, error: ChatError) -> Result<Ended, EngineError> {
        self.finish(TurnStatus::Error, Some(error)).await
    }

    /// Persists the assistant message (when it has parts), ends the turn, and reports a
    /// failure when there was one.
    pub(super) async fn finish(
        &mut self,
        status: TurnStatus,
        error: Option<ChatError>,
    ) -> Result<Ended, EngineError> {
        let draft = self.parts.recorder.read(|s| {
            s.draft
                .clone()
                .filter(|d| d.id == self.message_id)
                .map(closed)
        });
        let mut message = draft.unwrap_or_else(|| UIMessage {
            id: self.message_id.clone(),
            role: Role::Assistant,
            metadata: None,
            parts: Vec::new(),
        });
        // Step boundaries alone are not content: an empty stream persists nothing.
        if message.parts.iter().all(|p| matches!(p, UIPart::StepStart)) {
            message.parts.clear();
        }
        // An abort by the caller's signal is recorded before the turn's end, if its watcher
        // has not yet.
        if let (TurnStatus::Aborted, Some(watch)) = (status, &self.spec._watch) {
            if watch.signal.is_cancelled() {
                record_signal(self.parts.recorder, &self.spec.request_id, &watch.recorded);
            }
        }
        let persisted = !message.parts.is_empty();
        if persisted {
            self.append(Event::AssistantMessageSaved {
                request_id: self.spec.request_id.clone(),
                message: message.clone(),
            })?;
        }
        let finished = self.parts.recorder.append(
            self.tid(),
            Event::TurnFinished {
                request_id: self.spec.request_id.clone(),
                status,
                error: error.as_ref().map(|e| e.message.clone()),
                steps: u32::try_from(self.steps.len()).unwrap_or(u32::MAX),
                usage: self.usage.clone(),
                // Owed with the end itself: a crash before the hook returns leaves it owed.
                response_owed: self.parts.config.redelivers_chat_response(),
            },
        )?;
        // The attempt's `invoke_agent` span carries its usage, as a re-exported one does.
        crate::otel_fields::record_usage(&tracing::Span::current(), &self.usage, None);
        // The gate: the turn's end is reported (outcome, hooks) only once it is durable.
        self.parts.recorder.durable(finished.seq).await?;
        let shown = match error {
            Some(error) => Some(fail(self.parts, self.tid(), error, true).await),
            None => None,
        };
        // What `on_chat_response` sees once the lock is released: the turn's end, as logged.
        let response =
            Observed::chat_response(&finished.event, message.clone(), self.spec.continuation);
        Ok(Ended {
            outcome: outcome(
                self.spec,
                status.into(),
                shown,
                persisted.then_some(message),
            ),
            response,
        })
    }

    /// A stream-stage failure: overflow recovery or recovery from a transient or rate-limit
    /// error when it applies, else the usual ending.
    pub(super) async fn stream_failed(
        &mut self,
        error: ChatError,
        attempt: u32,
        recoveries: u32,
    ) -> Result<Attempt, EngineError> {
        let overflow = self.parts.config.overflow();
        let recovery = self.parts.config.recovery();
        if !overflow.reactive && !recovery.is_on() {
            return self
                .finish(TurnStatus::Error, Some(error))
                .await
                .map(|e| Attempt::Done(Box::new(e)));
        }
        let ctx = ChatErrorContext {
            request_id: Some(self.spec.request_id.clone()),
            stage: ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
        };
        let classification = self
            .parts
            .hooks
            .catching(self.tid(), HookName::ClassifyChatError, |agent| {
                agent.classify_chat_error(&error, &ctx)
            })
            .flatten();
        match classification {
            Some(c @ (ChatErrorClassification::Transient | ChatErrorClassification::RateLimit))
                if recovery.is_on() =>
            {
                return self.recover(error, c, recoveries).await
            }
            Some(ChatErrorClassification::ContextOverflow) if overflow.reactive => {}
            _ => {
                return self
                    .finish(TurnStatus::Error, Some(error))
                    .await
                    .map(|e| Attempt::Done(Box::new(e)))
            }
        }
        // The partial of an overflowed attempt is discarded: the retry starts afresh.
        let finished = self.append(Event::TurnFinished {
            request_id: self.spec.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(error.message.clone()),
            steps: u32::try_from(self.steps.len()).unwrap_or(u32::MAX),
            usage: self.usage.clone(),
            // A retry follows, or the turn ends here without `on_chat_response` (an attempt
            // overflow discarded gets none): never owed.
            response_owed: false,
        })?;
        crate::otel_fields::record_usage(&tracing::Span::current(), &self.usage, None);
        // The gate: a retry or the failure's report follows.
        self.parts.recorder.durable(finished).await?;
        // Recovery attempts of the same request do not use up overflow rounds.
        let rounds = attempt.saturating_sub(recoveries);
        if !self.spec.signal.is_cancelled()
            && rounds < overflow.max_retries
            && self.compact(rounds + 1).await?
        {
            return Ok(Attempt::Retry);
        }
        // The compaction a used-up budget refused ends the turn with the budget's error.
        let error = match crate::budget::stopped(self.parts.recorder, self.tid()) {
            Some(budget) => budget,
            None => ChatError {
                classification: Some(ChatErrorClassification::ContextOverflow),
                ..error
            },
        };
        let shown = fail(self.parts, self.tid(), error, true).await;
        Ok(Attempt::Done(Box::new(Ended {
            outcome: outcome(self.spec, OutcomeStatus::Error, Some(shown), None),
            response: None,
        })))
    }

    /// Runs the compaction callback; returns whether the history got shorter.
    pub(super) async fn compact(&mut self, attempt: u32) -> Result<bool, EngineError> {
        self.parts
            .compactor()
            .apply(self.tid(), CompactionReason::Reactive, attempt)
            .await
    }
}
