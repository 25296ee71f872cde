//! Tool approvals: a call that waits for a person parks its turn in the log; the answer is an
//! input event; approved calls run exactly once in the turn that follows, denied ones answer
//! the model like a block. Each test runs a scripted agent on a fresh log with a fixed clock
//! and counting ids and asserts what a user sees: the events, the projected state, the hooks'
//! order and contexts, what the model was sent, and how often a tool really ran.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{
    DecisionAction, Event, LanguageModel, ModelContent, ModelRequest, ToolPartState, UIMessage,
    UIPart,
};
use mull::engine::{
    Agent, Approval, ChatResponseResult, EngineError, FnTool, HookResult, OutcomeStatus, Session,
    StepContext, ToolCallContext, ToolCallDecision, ToolCallResultContext, ToolSet, TurnConfig,
    TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::{json, Value};
use support::gates::{GateLog, Journal};
use support::hook_calls::HookCalls;
use support::test_log::TestLog;

mod support;

/// A travel desk: `book` always needs approval (its rule), `transfer` needs it because
/// `before_tool_call` asks, `lookup` runs at once. Every hook call is recorded.
struct Desk {
    model: Arc<dyn LanguageModel>,
    calls: HookCalls,
    booked: Arc<AtomicUsize>,
    transferred: Arc<AtomicUsize>,
}

impl Desk {
    fn new(model: &ScriptedModel) -> Arc<Desk> {
        Arc::new(Desk {
            model: Arc::new(model.clone()),
            calls: HookCalls::default(),
            booked: Arc::new(AtomicUsize::new(0)),
            transferred: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn booked(&self) -> usize {
        self.booked.load(Ordering::SeqCst)
    }

    fn transferred(&self) -> usize {
        self.transferred.load(Ordering::SeqCst)
    }
}

fn counting(name: &str, count: &Arc<AtomicUsize>) -> FnTool {
    let count = Arc::clone(count);
    let label = name.to_owned();
    FnTool::new(name, "Does it.", move |input: Value, _| {
        let count = Arc::clone(&count);
        let label = label.clone();
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(json!({ "done": label, "input": input }))
        }
    })
    .with_schema(json!({"type": "object"}))
}

#[async_trait]
impl Agent for Desk {
    fn name(&self) -> &str {
        "desk"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new()
            .with(counting("book", &self.booked).needs_approval(true).shared())
            .with(counting("transfer", &self.transferred).shared())
            .with(
                FnTool::new("lookup", "Looks up.", |_: Value, _| async {
                    Ok(json!("found"))
                })
                .with_schema(json!({"type": "object"}))
                .shared(),
            )
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.calls
            .record(format!("before_turn(continuation={})", ctx.continuation));
        Ok(None)
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.calls.record(format!(
            "before_tool_call({}, {}, step={})",
            ctx.tool_name, ctx.tool_call_id, ctx.step_number
        ));
        Ok(
            (ctx.tool_name == "transfer").then(|| ToolCallDecision::RequireApproval {
                reason: Some("Moves money.".into()),
            }),
        )
    }
    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.calls.record(format!(
            "after_tool_call({}, {}, step={}, decision={}, success={}, output={})",
            ctx.tool_name,
            ctx.tool_call_id,
            ctx.step_number,
            ctx.decision.as_str(),
            ctx.success,
            ctx.output.clone().unwrap_or(Value::Null)
        ));
        Ok(())
    }
    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.calls
            .record(format!("on_step_finish(step={})", ctx.step_number));
        Ok(())
    }
    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.calls.record(format!(
            "on_chat_response(continuation={}, status={:?})",
            result.continuation, result.status
        ));
        Ok(())
    }
}

fn user(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

/// A model that books (and, with `transfer`, moves money) in its first step, then answers.
fn booking_model(transfer: bool) -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| {
            let s = s
                .text("Booking.")
                .tool_call("c1", "book", json!({"hotel": "Ritz"}));
            if transfer {
                s.tool_call("c2", "transfer", json!({"amount": 300}))
            } else {
                s
            }
        })
        .step(|s| s.text("All set."))
        .build()
}

/// The tool results the model was sent in `request`, as (call id, output, is_error).
fn tool_results(request: &ModelRequest) -> Vec<(String, Value, bool)> {
    request
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|c| match c {
            ModelContent::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => Some((call_id.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// The tool part of `call_id` in the session's conversation.
fn part(session: &Session, call_id: &str) -> mull::core::ToolPart {
    session.read_state(|s| {
        s.messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .find_map(|p| match p {
                UIPart::Tool(t) if t.call_id == call_id => Some(t.clone()),
                _ => None,
            })
            .expect("the call's tool part")
    })
}

/// Asks for a booking and returns the session, parked on the approval it asked for.
async fn parked(log: &TestLog, agent: &Arc<Desk>) -> (Session, String) {
    let session = log.open(agent).await;
    let out = session
        .save_messages(user("u1", "Book the Ritz."), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let pending = session.pending_approvals();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].call_id, "c1");
    assert_eq!(pending[0].input, json!({"hotel": "Ritz"}));
    assert_eq!(part(&session, "c1").state, ToolPartState::ApprovalRequested);
    assert_eq!(agent.booked(), 0, "nothing runs before the answer");
    let id = pending[0].approval_id.clone();
    (session, id)
}

#[tokio::test]
async fn an_approved_call_runs_once_in_the_continuation_and_the_model_sees_its_output() {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let (session, id) = parked(&log, &agent).await;
    assert_eq!(
        model.requests().len(),
        1,
        "the turn parked after one model call"
    );

    let out = session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap()
        .expect("the answer completes the step: a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(agent.booked(), 1);
    let message = out.message.unwrap();
    assert_eq!(message.plain_text(), "All set.");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        tool_results(&requests[1]),
        vec![(
            "c1".to_owned(),
            json!({"done": "book", "input": {"hotel": "Ritz"}}),
            false
        )]
    );
    let booked = part(&session, "c1");
    assert_eq!(booked.state, ToolPartState::OutputAvailable);
    assert!(session.pending_approvals().is_empty());
    assert!(session.read_state(|s| s.pending_approvals.is_empty()));

    // The hooks, in the seed's order around the wait: the call is decided before the park,
    // its outcome is observed once, in the continuation, before that turn's context is read.
    assert_eq!(
        agent.calls.lines(),
        [
            "before_turn(continuation=false)",
            "before_tool_call(book, c1, step=0)",
            "on_step_finish(step=0)",
            "on_chat_response(continuation=false, status=Completed)",
            "after_tool_call(book, c1, step=0, decision=allow, success=true, \
             output={\"done\":\"book\",\"input\":{\"hotel\":\"Ritz\"}})",
            "before_turn(continuation=true)",
            "on_step_finish(step=0)",
            "on_chat_response(continuation=true, status=Completed)",
        ]
    );

    // The log tells it: the request, the answer (an input event, before anything acts), then
    // the continuation's decision and outcome.
    let kinds: Vec<String> = log
        .kinds()
        .await
        .into_iter()
        .filter(|k| k.starts_with("tool_") || k.starts_with("turn_started"))
        .collect();
    assert_eq!(
        kinds,
        [
            "turn_started",
            "tool_call_started",
            "tool_approval_requested",
            "tool_approval_answered",
            "turn_started",
            "tool_decided",
            "tool_call_finished",
        ]
    );
    // The log alone folds to the same state.
    assert_eq!(log.replayed().await.messages, session.state().messages);
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_sees_the_reason_as_a_block() {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let (session, id) = parked(&log, &agent).await;
    let out = session
        .answer_approval(&id, Approval::deny(Some("Too pricey.".into())))
        .await
        .unwrap()
        .expect("a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(agent.booked(), 0);
    assert_eq!(
        tool_results(&model.requests()[1]),
        vec![("c1".to_owned(), json!("Too pricey."), false)]
    );
    let denied = part(&session, "c1");
    assert_eq!(denied.state, ToolPartState::OutputDenied);
    assert!(agent.calls.lines().contains(
        &"after_tool_call(book, c1, step=0, decision=denied, success=true, output=\"Too pricey.\")"
            .to_owned()
    ));
    let events = log.bare_events().await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ToolApprovalAnswered { approved: false, reason: Some(r), expired: false, .. }
            if r == "Too pricey."
    )));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ToolDecided {
            action: DecisionAction::Denied,
            ..
        }
    )));
    assert_eq!(session.state().turns.last().unwrap().tools.denied, 1);
}

#[tokio::test]
async fn an_unanswered_request_expires_into_a_denial_event() {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let session = log
        .open_with(
            &agent,
            log.options().with_approval_expiry(Duration::from_secs(60)),
        )
        .await;
    session
        .save_messages(user("u1", "Book the Ritz."), TurnOptions::default())
        .await
        .unwrap();
    let pending = session.pending_approvals();
    let id = pending[0].approval_id.clone();
    assert_eq!(
        pending[0].expires_at,
        Some(pending[0].requested_at + chrono::Duration::seconds(60))
    );
    // Not yet due: the sweep writes nothing.
    log.clock.advance(Duration::from_secs(30));
    assert!(session.expire_approvals().await.unwrap().is_none());
    assert_eq!(session.pending_approvals().len(), 1);

    log.clock.advance(Duration::from_secs(31));
    let out = session
        .expire_approvals()
        .await
        .unwrap()
        .expect("the expiry completed the step: a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(agent.booked(), 0);
    let (_, output, is_error) = tool_results(&model.requests()[1]).remove(0);
    assert!(!is_error);
    assert!(output.as_str().unwrap().contains("expired"), "{output}");
    assert!(log.bare_events().await.iter().any(|e| matches!(
        e,
        Event::ToolApprovalAnswered {
            approved: false,
            expired: true,
            ..
        }
    )));
    // A late answer is refused, naming the expiry; nothing is written.
    let before = log.events().await.len();
    let err = session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::ApprovalAlreadyAnswered {
                answer: "expired",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(log.events().await.len(), before);
    assert_eq!(agent.booked(), 0);
}

#[tokio::test]
async fn expiry_is_checked_when_the_session_is_next_touched() {
    let model = booking_model(false);
    model.push_step(|s| s.text("Noted."));
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let session = log
        .open_with(
            &agent,
            log.options().with_approval_expiry(Duration::from_secs(60)),
        )
        .await;
    session
        .save_messages(user("u1", "Book the Ritz."), TurnOptions::default())
        .await
        .unwrap();
    log.clock.advance(Duration::from_secs(120));
    // A new message, no sweep: its turn expires the request and shows the model the denial.
    session
        .save_messages(user("u2", "Never mind."), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(part(&session, "c1").state, ToolPartState::OutputDenied);
    assert_eq!(agent.booked(), 0);
    assert!(tool_results(&model.requests()[1])
        .iter()
        .any(|(call, _, error)| call == "c1" && !error));
}

#[tokio::test]
async fn a_second_answer_and_an_unknown_id_are_refused_and_change_nothing() {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let (session, id) = parked(&log, &agent).await;

    let before = log.events().await.len();
    let err = session
        .answer_approval("approval_nope", Approval::approve())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::UnknownApproval { .. }), "{err}");
    assert!(err.to_string().contains("approval_nope"), "{err}");
    assert_eq!(log.events().await.len(), before, "nothing written");

    session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap()
        .expect("a continuation runs");
    let after = log.events().await.len();
    for again in [Approval::approve(), Approval::deny(None)] {
        let err = session.answer_approval(&id, again).await.unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::ApprovalAlreadyAnswered {
                    answer: "approved",
                    ..
                }
            ),
            "{err}"
        );
    }
    assert_eq!(log.events().await.len(), after, "nothing written");
    assert_eq!(agent.booked(), 1, "the tool ran once");
    assert_eq!(model.requests().len(), 2, "no second continuation");
}

#[tokio::test]
async fn two_approvals_of_one_step_are_answered_separately_and_continue_once() {
    let model = booking_model(true);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let session = log.open(&agent).await;
    session
        .save_messages(user("u1", "Book and pay."), TurnOptions::default())
        .await
        .unwrap();
    let pending = session.pending_approvals();
    assert_eq!(
        pending
            .iter()
            .map(|p| (p.call_id.as_str(), p.reason.as_deref()))
            .collect::<Vec<_>>(),
        [("c1", None), ("c2", Some("Moves money."))]
    );
    let first = session
        .answer_approval(&pending[1].approval_id, Approval::deny(None))
        .await
        .unwrap();
    assert!(first.is_none(), "c1 still waits: no continuation yet");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(session.pending_approvals().len(), 1);
    assert_eq!(part(&session, "c2").state, ToolPartState::ApprovalResponded);

    let out = session
        .answer_approval(&pending[0].approval_id, Approval::approve())
        .await
        .unwrap()
        .expect("the step is complete: a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!((agent.booked(), agent.transferred()), (1, 0));
    let results = tool_results(&model.requests()[1]);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[1].0, "c2");
    assert_eq!(
        results[1].1,
        json!("Tool \"transfer\" was denied by the user.")
    );
}

#[tokio::test]
async fn an_answer_after_a_restart_runs_the_tool_once() {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let (session, id) = parked(&log, &agent).await;
    drop(session);
    // A new process: the file opened by a new writer, the session opened again.
    let log = log.reopened();
    let again = Desk {
        model: Arc::new(model.clone()),
        calls: HookCalls::default(),
        booked: Arc::clone(&agent.booked),
        transferred: Arc::clone(&agent.transferred),
    };
    let session = log
        .open_with(&Arc::new(again), log.second_process_options())
        .await;
    assert_eq!(session.pending_approvals().len(), 1, "the wait survived");
    let out = session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap()
        .expect("a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(agent.booked(), 1);
    assert_eq!(out.message.unwrap().plain_text(), "All set.");
    assert_eq!(part(&session, "c1").state, ToolPartState::OutputAvailable);
}

/// A booking parked, approved and continued in one log; then a second log holding it only up
/// to (and including) the first event `last` picks (`what` names it), as a process killed
/// right after writing that event leaves it, opened by the next process.
async fn approved_then_killed_after(last: impl Fn(&Event) -> bool, what: &str) -> TestLog {
    let model = booking_model(false);
    let agent = Desk::new(&model);
    let full = TestLog::new();
    let (session, id) = parked(&full, &agent).await;
    session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap();
    drop(session);
    let events = full.events().await;
    let cut = events
        .iter()
        .position(|e| last(&e.event))
        .unwrap_or_else(|| panic!("no {what} in the log"))
        + 1;
    TestLog::crashed_after(&events[..cut]).await
}

#[tokio::test]
async fn a_crash_after_the_decision_repairs_the_call_and_never_runs_it_again() {
    // The whole flow in one log; then a second log holding it only up to the continuation's
    // decision, as a process killed right after that barrier leaves it.
    let crashed =
        approved_then_killed_after(|e| matches!(e, Event::ToolDecided { .. }), "tool_decided")
            .await;

    let second = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Sorry, the booking was interrupted."))
        .build();
    let agent = Desk::new(&second);
    let session = crashed
        .open_with(&agent, crashed.second_process_options())
        .await;
    let repaired = part(&session, "c1");
    assert_eq!(repaired.state, ToolPartState::OutputError);
    assert_eq!(
        repaired.error_text.as_deref(),
        Some(mull::engine::INTERRUPTED_TOOL_CALL)
    );
    assert!(session.read_state(|s| s.pending_approvals.is_empty()));
    let out = session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(agent.booked(), 0, "a decided call is never run again");
}

#[tokio::test]
async fn a_crash_between_the_answer_and_the_decision_runs_the_call_in_the_next_turn() {
    let crashed = approved_then_killed_after(
        |e| matches!(e, Event::ToolApprovalAnswered { .. }),
        "tool_approval_answered",
    )
    .await;
    let second = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("All set."))
        .build();
    let agent = Desk::new(&second);
    let session = crashed
        .open_with(&agent, crashed.second_process_options())
        .await;
    // Answered, never decided: it never ran, so the next turn runs it — once.
    assert_eq!(part(&session, "c1").state, ToolPartState::ApprovalResponded);
    session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(agent.booked(), 1);
    assert_eq!(part(&session, "c1").state, ToolPartState::OutputAvailable);
}

#[tokio::test]
async fn a_session_with_approvals_re_executes_without_divergence() {
    let model = booking_model(true);
    let agent = Desk::new(&model);
    let log = TestLog::new();
    let session = log.open(&agent).await;
    session
        .save_messages(user("u1", "Book and pay."), TurnOptions::default())
        .await
        .unwrap();
    let pending = session.pending_approvals();
    session
        .answer_approval(&pending[0].approval_id, Approval::approve())
        .await
        .unwrap();
    session
        .answer_approval(&pending[1].approval_id, Approval::deny(Some("No.".into())))
        .await
        .unwrap();
    drop(session);
    log.log.flush().await.unwrap();
    let recording = support::replay::recording_of(&log.path, "s1");
    let again = Desk::new(&booking_model(true));
    let report = support::replay::reexecute_ok(&recording, again.clone()).await;
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    assert!(report.is_identical());
    // The answers were re-issued as inputs; the booking's output was served from the log.
    assert_eq!((again.booked(), again.transferred()), (0, 0));
}

/// An agent whose `lookup` runs at once and whose `book` waits for a person; each tool notes
/// its run in `journal`, beside the gates the session's log notes there.
struct Gatekeeper {
    model: Arc<dyn LanguageModel>,
    journal: Journal,
}

fn noting(name: &str, journal: &Journal) -> FnTool {
    let journal = journal.clone();
    let line = format!("run {name}");
    FnTool::new(name, "Does it.", move |_: Value, _| {
        journal.note(line.clone());
        async { Ok(json!("done")) }
    })
    .with_schema(json!({"type": "object"}))
}

#[async_trait]
impl Agent for Gatekeeper {
    fn name(&self) -> &str {
        "gatekeeper"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new()
            .with(noting("lookup", &self.journal).shared())
            .with(noting("book", &self.journal).needs_approval(true).shared())
    }
}

#[tokio::test]
async fn an_approved_call_waits_at_the_same_gate_as_a_live_one() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call("c0", "lookup", json!({}))
                .tool_call("c1", "book", json!({"hotel": "Ritz"}))
        })
        .step(|s| s.text("All set."))
        .build();
    let journal = Journal::default();
    let agent: Arc<dyn Agent> = Arc::new(Gatekeeper {
        model: Arc::new(model),
        journal: journal.clone(),
    });
    let log = TestLog::new();
    let gated = GateLog::new(&log.log, &journal);
    let session = Session::open_on(gated, agent, log.options()).await.unwrap();
    session
        .save_messages(user("u1", "Book the Ritz."), TurnOptions::default())
        .await
        .unwrap();
    let id = session.pending_approvals()[0].approval_id.clone();
    let out = session
        .answer_approval(&id, Approval::approve())
        .await
        .unwrap()
        .expect("a continuation runs");
    assert_eq!(out.status, OutcomeStatus::Completed);

    let events = log.events().await;
    let decided = |call: &str| {
        let seq = events
            .iter()
            .find(|e| matches!(&e.event, Event::ToolDecided { call_id, .. } if call_id == call))
            .map(|e| e.seq)
            .expect("the call was decided");
        format!("durable {seq}")
    };
    // Each tool runs right behind the output gate on its own decision: the live call in its
    // step, the approved one in the continuation.
    assert_eq!(journal.before("run lookup"), Some(decided("c0")));
    assert_eq!(journal.before("run book"), Some(decided("c1")));
}
