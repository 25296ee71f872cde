//! Durable submissions, and the recovery of what an earlier process left unfinished when a
//! session is reopened.

use std::sync::Arc;

use mull_core::{EntryPath, Event, Input, SubmissionStatus, TurnStatus, UIMessage};
use mull_store::SubmissionPhase;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::EngineError;
use crate::turn::parts::TurnParts;
use crate::turn::{self};

use super::command::{CommandOptions, Reply};
use super::handle::Session;
use crate::runtime::{OutcomeStatus, SubmissionResult, SubmitOptions, SubmitReceipt};

impl Session {
    /// Accepts a durable submission: `submission_accepted` is appended and flushed before
    /// anything runs, then the turn runs in the background, queued behind others. A second
    /// submission with the same id or idempotency key is a duplicate and accepts nothing.
    pub async fn submit_messages(
        &self,
        messages: Vec<UIMessage>,
        opts: SubmitOptions,
    ) -> Result<SubmitReceipt, EngineError> {
        if let Some(submission_id) = self.find_submission(
            opts.submission_id.as_deref(),
            opts.idempotency_key.as_deref(),
        ) {
            return Ok(SubmitReceipt {
                submission_id,
                duplicate: true,
            });
        }
        let input = Input::Submit {
            submission_id: opts
                .submission_id
                .unwrap_or_else(|| self.inner.options().ids.next_id("sub")),
            idempotency_key: opts.idempotency_key,
            messages,
            body: opts.body,
        };
        match self.command(input, CommandOptions::default()).await? {
            Reply::Submitted(receipt) => Ok(receipt),
            other => Err(EngineError::InvalidInput {
                session_id: self.inner.session_id().to_owned(),
                reason: format!("a submission was answered with {other:?}"),
            }),
        }
    }

    pub(super) fn spawn_submission(
        &self,
        submission_id: String,
        messages: Vec<UIMessage>,
        body: Value,
    ) {
        let (tx, _rx) = watch::channel(None);
        self.inner.await_submission(submission_id.clone(), tx);
        let mut spec = self.spec_for(
            EntryPath::SubmitMessages,
            self.next_request_id(),
            messages,
            body,
            None,
            Vec::new(),
            crate::tool::ToolSet::default(),
        );
        spec.submission_id = Some(submission_id.clone());
        let inner = Arc::clone(&self.inner);
        self.inner.spawn_turn(async move {
            let request_id = spec.request_id.clone();
            let outcome = turn::run_entry(&inner, spec, None).await;
            let (status, error) = match &outcome {
                Ok(o) => (
                    match o.status {
                        OutcomeStatus::Completed | OutcomeStatus::Skipped => {
                            SubmissionStatus::Completed
                        }
                        OutcomeStatus::Error => SubmissionStatus::Error,
                        OutcomeStatus::Aborted => SubmissionStatus::Aborted,
                    },
                    o.error.as_ref().map(|e| e.message.clone()),
                ),
                Err(e) => (SubmissionStatus::Error, Some(e.to_string())),
            };
            let result = SubmissionResult {
                submission_id: submission_id.clone(),
                request_id: Some(request_id.clone()),
                status,
                error: error.clone(),
            };
            let appended = inner.recorder().append(
                None,
                Event::SubmissionFinished {
                    submission_id: submission_id.clone(),
                    request_id: Some(request_id),
                    status,
                    error,
                },
            );
            if appended.is_ok() {
                let _ = inner.recorder().flush().await;
            }
            if let Some(tx) = inner.take_waiter(&submission_id) {
                let _ = tx.send(Some(result));
            }
        });
    }

    /// Waits until a submission has finished and says how.
    pub async fn wait_submission(
        &self,
        submission_id: &str,
    ) -> Result<SubmissionResult, EngineError> {
        let rx = self.inner.watch_submission(submission_id);
        if let Some(mut rx) = rx {
            if let Ok(result) = rx.wait_for(Option::is_some).await {
                if let Some(result) = result.clone() {
                    return Ok(result);
                }
            }
        }
        self.read_state(|s| {
            s.submissions
                .iter()
                .find(|sub| {
                    sub.submission_id == submission_id && sub.phase == SubmissionPhase::Finished
                })
                .map(|sub| SubmissionResult {
                    submission_id: sub.submission_id.clone(),
                    request_id: sub.request_id.clone(),
                    status: sub.status.unwrap_or(SubmissionStatus::Error),
                    error: sub.error.clone(),
                })
        })
        .ok_or_else(|| EngineError::UnknownSubmission {
            session_id: self.inner.session_id().to_owned(),
            submission_id: submission_id.to_owned(),
        })
    }

    /// Recovers what an earlier process left unfinished (see [`Session::open`]).
    pub(super) async fn recover(&self) -> Result<(), EngineError> {
        let (submissions, running) = self.read_state(|s| {
            let subs: Vec<_> = s
                .submissions
                .iter()
                .filter(|sub| sub.phase != SubmissionPhase::Finished)
                .cloned()
                .collect();
            let running: Vec<_> = s
                .turns
                .iter()
                .filter(|t| t.status == TurnStatus::Running)
                .cloned()
                .collect();
            (subs, running)
        });
        if submissions.is_empty() && running.is_empty() {
            return Ok(());
        }
        for turn_summary in &running {
            turn::finish_interrupted(&TurnParts::of(&self.inner), turn_summary, true).await?;
        }
        for sub in submissions {
            match sub.phase {
                SubmissionPhase::Accepted => {
                    let body = self.submission_body(&sub.submission_id).await?;
                    self.spawn_submission(sub.submission_id, sub.messages, body);
                }
                _ => {
                    let turn_state = self.read_state(|s| {
                        s.turns
                            .iter()
                            .rev()
                            .find(|t| Some(&t.request_id) == sub.request_id.as_ref())
                            .map(|t| (t.status, t.error.clone()))
                    });
                    let (status, error) = match turn_state {
                        Some((TurnStatus::Completed, _)) => (SubmissionStatus::Completed, None),
                        Some((TurnStatus::Aborted, e)) => (SubmissionStatus::Aborted, e),
                        Some((_, e)) => (
                            SubmissionStatus::Error,
                            e.or_else(|| Some("interrupted before its turn started".to_owned())),
                        ),
                        None => (
                            SubmissionStatus::Error,
                            Some("interrupted before its turn started".to_owned()),
                        ),
                    };
                    self.inner.recorder().append(
                        None,
                        Event::SubmissionFinished {
                            submission_id: sub.submission_id,
                            request_id: sub.request_id,
                            status,
                            error,
                        },
                    )?;
                }
            }
        }
        self.inner.recorder().flush().await
    }

    /// The body a submission was accepted with, read from the log.
    pub(super) async fn submission_body(&self, submission_id: &str) -> Result<Value, EngineError> {
        let store_err = |source| EngineError::Store {
            session_id: self.inner.session_id().to_owned(),
            source,
        };
        let log = self.inner.recorder().log();
        let mut after = 0;
        loop {
            let page = log
                .session_page(self.inner.session_id(), after, 1000)
                .await
                .map_err(store_err)?;
            let Some(last) = page.last() else {
                return Ok(Value::Null);
            };
            after = last.seq;
            for env in page {
                if let Event::SubmissionAccepted {
                    submission_id: id,
                    body,
                    ..
                } = env.event
                {
                    if id == submission_id {
                        return Ok(body);
                    }
                }
            }
        }
    }
}
