//! One request's attempts and verdict, folded from its events.
//!
//! A request (one `request_id`) is asked for once (`turn_requested`) and runs one or more turn
//! attempts: when context-overflow recovery retries, the failed attempt ends (`turn_finished`
//! with status `error`) and the next attempt starts (`turn_started`, `attempt` + 1) under the
//! same request id. An attempt that ends in error is therefore not yet the request's end: the
//! verdict is the next attempt's start (the request goes on) or the attempt's `turn_failed`
//! (final). A request that fails before any attempt could start has a `turn_failed` with no
//! turn. A request whose turn ends waiting for client tool results or approval answers is over
//! (parked); the answers start a continuation, which is a request of its own whose attempts
//! are marked `continuation`.
//!
//! [`RequestFold`] folds those rules once, so whoever follows a request — the server's client
//! streams, a library caller — asks it what the request is doing instead of encoding them.

use mull_core::{ChatErrorClassification, EntryPath, Envelope, ErrorStage, Event, TurnStatus};

use crate::facts::{CallStage, FactChange, Facts};

/// One turn attempt of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The attempt's turn.
    pub turn_id: Option<String>,
    /// 0 for the first attempt; each overflow retry adds one.
    pub number: u32,
    /// The attempt continues the previous assistant message (after client tool results or
    /// approval answers, or `continue_last_turn`).
    pub continuation: bool,
    /// The seq of its `turn_started`.
    pub first_seq: u64,
    /// How it ended (`None`: running).
    pub status: Option<TurnStatus>,
    /// The error its `turn_finished` gave, when it ended in one.
    pub error: Option<String>,
}

/// A failure recorded for the request (`turn_failed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFailure {
    pub stage: ErrorStage,
    pub classification: Option<ChatErrorClassification>,
    pub error: String,
    /// The seq of the `turn_failed`.
    pub seq: u64,
}

/// How a request ended, once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The last attempt finished with `status` (completed or aborted). `client_calls` and
    /// `approvals` name what the turn left waiting for an answer (client tool call ids and
    /// approval ids): their answers start a continuation request.
    Finished {
        status: TurnStatus,
        client_calls: Vec<String>,
        approvals: Vec<String>,
    },
    /// The request failed for good: after its last attempt, or before any could start.
    Failed(RecordedFailure),
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestPhase {
    /// No attempt has started (queued, or not asked for yet).
    NotStarted,
    /// An attempt is running.
    Running,
    /// The last attempt ended in error: a retry's `turn_started` or the final `turn_failed`
    /// comes next (a follower that sees neither asks whether the request still runs).
    AwaitingVerdict,
    /// The failure was recorded before its attempt's `turn_finished`, which comes next.
    AwaitingEnd,
    /// The request has its verdict.
    Over,
}

/// Folds the events of one request, in seq order (events of other requests, other turns and
/// other sessions may be fed too: they are not the request's and change nothing).
#[derive(Debug, Clone)]
pub struct RequestFold {
    request_id: String,
    entry: Option<EntryPath>,
    requested_seq: Option<u64>,
    attempts: Vec<Attempt>,
    /// The current attempt ended in error; its verdict is pending.
    ended_in_error: bool,
    /// A `turn_failed` of the current attempt, seen before its end.
    failure: Option<RecordedFailure>,
    client_calls: Vec<String>,
    approvals: Vec<String>,
    verdict: Option<Verdict>,
    /// The facts of the request's attempts (lifecycle events), its calls are read from.
    facts: Facts,
}

impl RequestFold {
    /// The fold of request `request_id`, before any of its events.
    pub fn new(request_id: impl Into<String>) -> RequestFold {
        RequestFold {
            request_id: request_id.into(),
            entry: None,
            requested_seq: None,
            attempts: Vec::new(),
            ended_in_error: false,
            failure: None,
            client_calls: Vec::new(),
            approvals: Vec::new(),
            verdict: None,
            facts: Facts::new(),
        }
    }

    /// Folds one event. Returns whether it is part of what the request streams: an event of
    /// one of its attempts, or its failure before any attempt started. (`turn_requested`, the
    /// request's input, is folded but is not part of the stream.)
    pub fn apply(&mut self, env: &Envelope) -> bool {
        match &env.event {
            Event::TurnRequested {
                request_id, entry, ..
            } if *request_id == self.request_id => {
                self.entry = Some(*entry);
                self.requested_seq = Some(env.seq);
                return false;
            }
            Event::TurnStarted {
                request_id,
                attempt,
                continuation,
                ..
            } if *request_id == self.request_id => {
                self.attempts.push(Attempt {
                    turn_id: env.turn_id.clone(),
                    number: *attempt,
                    continuation: *continuation,
                    first_seq: env.seq,
                    status: None,
                    error: None,
                });
                self.ended_in_error = false;
                self.failure = None;
                self.client_calls.clear();
                self.approvals.clear();
                // A retry after a verdict cannot happen; should a log say so, the request runs.
                self.verdict = None;
                return true;
            }
            Event::TurnFailed {
                request_id: Some(request_id),
                ..
            } if *request_id == self.request_id && env.turn_id.is_none() => {
                self.verdict = Some(Verdict::Failed(failure_of(env)));
                return true;
            }
            _ => {}
        }
        let current = match self.attempts.last_mut() {
            Some(attempt) if attempt.turn_id.is_some() && attempt.turn_id == env.turn_id => attempt,
            _ => return false,
        };
        match &env.event {
            Event::TurnFinished { status, error, .. } => {
                current.status = Some(*status);
                current.error.clone_from(error);
                if let Some(failure) = self.failure.take() {
                    self.verdict = Some(Verdict::Failed(failure));
                } else if *status == TurnStatus::Error {
                    self.ended_in_error = true;
                } else {
                    self.verdict = Some(Verdict::Finished {
                        status: *status,
                        client_calls: std::mem::take(&mut self.client_calls),
                        approvals: std::mem::take(&mut self.approvals),
                    });
                }
            }
            Event::TurnFailed { .. } if self.ended_in_error => {
                self.ended_in_error = false;
                self.verdict = Some(Verdict::Failed(failure_of(env)));
            }
            Event::TurnFailed { .. } => self.failure = Some(failure_of(env)),
            // The stream's parts leave nothing waiting for an answer.
            Event::Chunk { .. } => {}
            _ => self.call_changed(env),
        }
        true
    }

    /// What the attempt's tool calls leave waiting for an answer, read from their facts.
    fn call_changed(&mut self, env: &Envelope) {
        let Some(FactChange::Call { call, stage }) = self.facts.push(env) else {
            return;
        };
        let call = &self.facts.calls()[call];
        match stage {
            CallStage::Started if call.client => self.client_calls.push(call.call_id.clone()),
            CallStage::ClientAnswered => self.client_calls.retain(|c| *c != call.call_id),
            CallStage::ApprovalRequested => {
                if let Some(approval) = &call.approval {
                    self.approvals.push(approval.approval_id.clone());
                }
            }
            _ => {}
        }
    }

    /// The request folded.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// How the request was asked for, once its `turn_requested` was seen.
    pub fn entry(&self) -> Option<EntryPath> {
        self.entry
    }

    /// The seq of its `turn_requested`, once seen.
    pub fn requested_seq(&self) -> Option<u64> {
        self.requested_seq
    }

    /// Its attempts so far, first to last.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The attempt running or last run.
    pub fn current(&self) -> Option<&Attempt> {
        self.attempts.last()
    }

    /// Whether the request continues an earlier turn (its first attempt says so).
    pub fn is_continuation(&self) -> bool {
        self.attempts.first().is_some_and(|a| a.continuation)
    }

    /// How the request ended, once it has.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// Where the request stands.
    pub fn phase(&self) -> RequestPhase {
        if self.verdict.is_some() {
            RequestPhase::Over
        } else if self.ended_in_error {
            RequestPhase::AwaitingVerdict
        } else if self.failure.is_some() {
            RequestPhase::AwaitingEnd
        } else if self.attempts.is_empty() {
            RequestPhase::NotStarted
        } else {
            RequestPhase::Running
        }
    }
}

fn failure_of(env: &Envelope) -> RecordedFailure {
    match &env.event {
        Event::TurnFailed {
            stage,
            classification,
            error,
            ..
        } => RecordedFailure {
            stage: *stage,
            classification: *classification,
            error: error.clone(),
            seq: env.seq,
        },
        // Only called on a `turn_failed`.
        _ => RecordedFailure {
            stage: ErrorStage::Stream,
            classification: None,
            error: String::new(),
            seq: env.seq,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use mull_core::{StreamPart, ToolPartState, Usage};
    use serde_json::json;

    /// Builds a request's events with contiguous seqs.
    struct Script {
        events: Vec<Envelope>,
    }

    impl Script {
        fn new() -> Script {
            Script { events: Vec::new() }
        }

        fn push(&mut self, turn: Option<&str>, event: Event) -> &mut Script {
            self.events.push(Envelope {
                seq: self.events.len() as u64 + 1,
                session_id: "s".into(),
                turn_id: turn.map(str::to_owned),
                at: DateTime::from_timestamp(0, 0).unwrap_or_default(),
                v: mull_core::EVENT_VERSION,
                event,
            });
            self
        }

        fn requested(&mut self, request: &str, entry: EntryPath) -> &mut Script {
            self.push(
                None,
                Event::TurnRequested {
                    request_id: request.into(),
                    entry,
                    messages: Vec::new(),
                    body: json!({}),
                    target: None,
                    client_tools: Vec::new(),
                },
            )
        }

        fn started(&mut self, turn: &str, request: &str, attempt: u32, cont: bool) -> &mut Script {
            self.push(
                Some(turn),
                Event::TurnStarted {
                    request_id: request.into(),
                    message_id: format!("msg_{turn}"),
                    entry: EntryPath::Http,
                    continuation: cont,
                    attempt,
                    body: json!({}),
                },
            )
        }

        fn text(&mut self, turn: &str) -> &mut Script {
            self.push(
                Some(turn),
                Event::Chunk {
                    step: 0,
                    part: StreamPart::TextDelta {
                        id: "t".into(),
                        text: "hi".into(),
                    },
                    original: None,
                },
            )
        }

        fn finished(&mut self, turn: &str, request: &str, status: TurnStatus) -> &mut Script {
            self.push(
                Some(turn),
                Event::TurnFinished {
                    request_id: request.into(),
                    status,
                    error: (status == TurnStatus::Error).then(|| "prompt is too long".into()),
                    steps: 1,
                    usage: Usage::default(),
                    response_owed: false,
                },
            )
        }

        fn failed(&mut self, turn: Option<&str>, request: &str, stage: ErrorStage) -> &mut Script {
            self.push(
                turn,
                Event::TurnFailed {
                    request_id: Some(request.into()),
                    stage,
                    messages_persisted: true,
                    classification: Some(ChatErrorClassification::ContextOverflow),
                    error: "prompt is too long".into(),
                    model_error: None,
                },
            )
        }

        /// Folds every event; returns the seqs the fold counted as the request's stream.
        fn fold(&self, fold: &mut RequestFold) -> Vec<u64> {
            self.events
                .iter()
                .filter(|env| fold.apply(env))
                .map(|env| env.seq)
                .collect()
        }
    }

    #[test]
    fn an_overflow_retry_then_success_is_one_request_of_two_attempts() {
        let mut script = Script::new();
        script
            .requested("r1", EntryPath::Http)
            .started("t1", "r1", 0, false)
            .text("t1")
            .finished("t1", "r1", TurnStatus::Error);
        let mut fold = RequestFold::new("r1");
        assert_eq!(script.fold(&mut fold), vec![2, 3, 4]);
        // The failed attempt is not the end: its verdict is pending.
        assert_eq!(fold.phase(), RequestPhase::AwaitingVerdict);
        assert_eq!(fold.verdict(), None);

        script
            .started("t2", "r1", 1, false)
            .text("t2")
            .finished("t2", "r1", TurnStatus::Completed);
        let mut fold = RequestFold::new("r1");
        assert_eq!(script.fold(&mut fold), vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(fold.phase(), RequestPhase::Over);
        assert_eq!(
            fold.verdict(),
            Some(&Verdict::Finished {
                status: TurnStatus::Completed,
                client_calls: Vec::new(),
                approvals: Vec::new(),
            })
        );
        let attempts = fold.attempts();
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].status, Some(TurnStatus::Error));
        assert_eq!(attempts[0].error.as_deref(), Some("prompt is too long"));
        assert_eq!(attempts[1].number, 1);
        assert_eq!(attempts[1].turn_id.as_deref(), Some("t2"));
        assert_eq!(fold.entry(), Some(EntryPath::Http));
        assert_eq!(fold.requested_seq(), Some(1));
    }

    #[test]
    fn a_retry_that_fails_again_ends_in_the_final_failure() {
        let mut script = Script::new();
        script
            .started("t1", "r1", 0, false)
            .finished("t1", "r1", TurnStatus::Error)
            .started("t2", "r1", 1, false)
            .finished("t2", "r1", TurnStatus::Error);
        let mut fold = RequestFold::new("r1");
        script.fold(&mut fold);
        assert_eq!(fold.phase(), RequestPhase::AwaitingVerdict);
        script
            .failed(Some("t2"), "r1", ErrorStage::Stream)
            // A later request of the session is not this one's.
            .started("t3", "r2", 0, false);
        let mut fold = RequestFold::new("r1");
        assert_eq!(script.fold(&mut fold), vec![1, 2, 3, 4, 5]);
        assert_eq!(fold.phase(), RequestPhase::Over);
        match fold.verdict() {
            Some(Verdict::Failed(failure)) => {
                assert_eq!(failure.seq, 5);
                assert_eq!(
                    failure.classification,
                    Some(ChatErrorClassification::ContextOverflow)
                );
            }
            other => panic!("expected the final failure, got {other:?}"),
        }
        assert_eq!(fold.attempts().len(), 2);
    }

    #[test]
    fn a_failure_recorded_before_its_turns_end_waits_for_that_end() {
        let mut script = Script::new();
        script
            .started("t1", "r1", 0, false)
            .failed(Some("t1"), "r1", ErrorStage::Stream);
        let mut fold = RequestFold::new("r1");
        script.fold(&mut fold);
        assert_eq!(fold.phase(), RequestPhase::AwaitingEnd);
        script.finished("t1", "r1", TurnStatus::Error);
        let mut fold = RequestFold::new("r1");
        script.fold(&mut fold);
        assert!(matches!(fold.verdict(), Some(Verdict::Failed(f)) if f.seq == 2));
    }

    #[test]
    fn a_request_that_fails_before_its_turn_is_over_at_once() {
        let mut script = Script::new();
        script
            .requested("r1", EntryPath::Chat)
            .failed(None, "r1", ErrorStage::Persist);
        let mut fold = RequestFold::new("r1");
        assert_eq!(script.fold(&mut fold), vec![2]);
        assert!(fold.attempts().is_empty());
        assert!(matches!(
            fold.verdict(),
            Some(Verdict::Failed(f)) if f.stage == ErrorStage::Persist
        ));
    }

    #[test]
    fn a_parked_turn_names_what_it_waits_for_and_its_continuation_is_a_request_of_its_own() {
        let mut script = Script::new();
        script
            .started("t1", "r1", 0, false)
            .push(
                Some("t1"),
                Event::ToolCallStarted {
                    step: 0,
                    call_id: "c1".into(),
                    tool: "pick_color".into(),
                    input: json!({}),
                    client: true,
                    dynamic: false,
                },
            )
            .push(
                Some("t1"),
                Event::ToolApprovalRequested {
                    step: 0,
                    call_id: "c2".into(),
                    tool: "refund".into(),
                    approval_id: "ap1".into(),
                    input: json!({}),
                    reason: None,
                    expires_at: None,
                },
            )
            .finished("t1", "r1", TurnStatus::Completed)
            // The answers arrive as inputs, outside any turn, and start the continuation.
            .push(
                None,
                Event::ClientToolResult {
                    call_id: "c1".into(),
                    tool: "pick_color".into(),
                    state: ToolPartState::OutputAvailable,
                    output: Some(json!("red")),
                    error: None,
                },
            )
            .requested("r2", EntryPath::AutoContinue)
            .started("t2", "r2", 0, true)
            .text("t2")
            .finished("t2", "r2", TurnStatus::Completed);

        let mut first = RequestFold::new("r1");
        assert_eq!(script.fold(&mut first), vec![1, 2, 3, 4]);
        assert_eq!(
            first.verdict(),
            Some(&Verdict::Finished {
                status: TurnStatus::Completed,
                client_calls: vec!["c1".into()],
                approvals: vec!["ap1".into()],
            })
        );
        assert!(!first.is_continuation());

        let mut continuation = RequestFold::new("r2");
        assert_eq!(script.fold(&mut continuation), vec![7, 8, 9]);
        assert!(continuation.is_continuation());
        assert_eq!(continuation.entry(), Some(EntryPath::AutoContinue));
        assert_eq!(continuation.phase(), RequestPhase::Over);
    }

    #[test]
    fn a_queued_request_has_not_started() {
        let mut script = Script::new();
        script
            .requested("r2", EntryPath::Http)
            .started("t1", "r1", 0, false)
            .text("t1");
        let mut fold = RequestFold::new("r2");
        assert!(script.fold(&mut fold).is_empty());
        assert_eq!(fold.phase(), RequestPhase::NotStarted);
        assert_eq!(fold.current(), None);
    }
}
