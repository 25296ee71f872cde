use chrono::{Duration, TimeZone, Utc};
use mull_core::{
    DecisionAction, EntryPath, Envelope, ErrorStage, Event, StepReport, StreamPart, ToolPartState,
    TurnStatus, Usage,
};
use serde_json::{json, Value};

use super::*;

/// The envelopes of a session, numbered in order from seq 1, each 10 ms after the last.
struct Log(Vec<Envelope>);

impl Log {
    fn push(&mut self, turn: Option<&str>, event: Event) {
        let seq = self.0.len() as u64 + 1;
        self.0.push(Envelope {
            seq,
            session_id: "s".into(),
            turn_id: turn.map(str::to_owned),
            at: at(seq),
            v: 1,
            event,
        });
    }

    fn fold(&self) -> (Facts, Vec<Option<FactChange>>) {
        let mut facts = Facts::new();
        let changes = self.0.iter().map(|e| facts.push(e)).collect();
        (facts, changes)
    }
}

fn at(seq: u64) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap() + Duration::milliseconds(10 * seq as i64)
}

fn stamp(seq: u64) -> Stamp {
    Stamp { seq, at: at(seq) }
}

fn started(request: &str, message: &str, continuation: bool) -> Event {
    Event::TurnStarted {
        request_id: request.into(),
        message_id: message.into(),
        entry: EntryPath::Chat,
        continuation,
        attempt: 0,
        body: Value::Null,
    }
}

fn chunk(step: u32, part: StreamPart) -> Event {
    Event::Chunk {
        step,
        part,
        original: None,
    }
}

fn call_started(call: &str) -> Event {
    Event::ToolCallStarted {
        step: 0,
        call_id: call.into(),
        tool: "search".into(),
        input: json!({"q": call}),
        client: false,
        dynamic: false,
    }
}

fn decided(call: &str, action: DecisionAction) -> Event {
    Event::ToolDecided {
        step: 0,
        call_id: call.into(),
        tool: "search".into(),
        action,
        model_input: json!({}),
        effective_input: json!({"q": call}),
        reason: None,
        output: None,
    }
}

fn finished(call: &str, success: bool, duration_ms: u64) -> Event {
    Event::ToolCallFinished {
        step: 0,
        call_id: call.into(),
        tool: "search".into(),
        success,
        output: success.then(|| json!("found")),
        error: (!success).then(|| "failed".to_owned()),
        duration_ms,
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

fn step_finished(step: u32, input: u64, output: u64) -> Event {
    Event::StepFinished {
        record: Box::new(StepReport {
            step,
            model_id: "m-1".into(),
            usage: usage(input, output),
            ..StepReport::default()
        }),
    }
}

fn turn_finished(status: TurnStatus, input: u64, output: u64) -> Event {
    Event::TurnFinished {
        request_id: "r1".into(),
        status,
        error: None,
        steps: 1,
        usage: usage(input, output),
        response_owed: false,
    }
}

/// A turn that streams text, calls a streaming tool that reports progress, and finishes.
fn one_turn() -> Log {
    let t = Some("t1");
    let mut log = Log(Vec::new());
    log.push(t, started("r1", "m1", false)); // 1
    log.push(t, Event::StepStarted { step: 0 }); // 2
    log.push(
        t,
        Event::StepConfigured {
            step: 0,
            model_id: "m-1".into(),
            active_tools: None,
            tool_choice: Default::default(),
            system: None,
            message_count: 1,
            overrides: Vec::new(),
            request_hash: None,
        },
    ); // 3
    log.push(t, chunk(0, StreamPart::TextStart { id: "x".into() })); // 4
    for text in ["Look", "ing"] {
        log.push(
            t,
            chunk(
                0,
                StreamPart::TextDelta {
                    id: "x".into(),
                    text: text.into(),
                },
            ),
        ); // 5, 6
    }
    log.push(t, call_started("c1")); // 7
    log.push(t, decided("c1", DecisionAction::Allow)); // 8
    log.push(
        t,
        chunk(
            0,
            StreamPart::ToolResult {
                call_id: "c1".into(),
                tool_name: "search".into(),
                output: json!({"progress": 1}),
                preliminary: true,
            },
        ),
    ); // 9
    log.push(t, finished("c1", true, 40)); // 10
    log.push(t, step_finished(0, 100, 20)); // 11
    log.push(t, turn_finished(TurnStatus::Completed, 100, 20)); // 12
    log
}

#[test]
fn a_turn_its_step_and_its_call_carry_the_seq_and_time_of_every_stage() {
    let (facts, changes) = one_turn().fold();
    let [turn] = facts.turns() else {
        panic!("one turn: {:?}", facts.turns())
    };
    assert_eq!(turn.turn_id.as_deref(), Some("t1"));
    let start = turn.start.as_ref().expect("started");
    assert_eq!(
        (start.request_id.as_str(), start.message_id.as_str()),
        ("r1", "m1")
    );
    assert_eq!(start.at, stamp(1));
    assert_eq!(turn.status(), TurnStatus::Completed);
    assert_eq!(turn.end.as_ref().map(|e| e.at), Some(stamp(12)));
    assert_eq!(turn.usage, usage(100, 20));
    let [step] = turn.steps.as_slice() else {
        panic!("one step: {:?}", turn.steps)
    };
    assert_eq!(step.started, Some(stamp(2)));
    assert_eq!(step.configured, Some(stamp(3)));
    assert_eq!(step.model_id.as_deref(), Some("m-1"));
    assert_eq!(
        (step.chunks, step.first_chunk, step.last_chunk),
        (4, Some(stamp(4)), Some(stamp(9)))
    );
    assert_eq!(step.text, "Looking");
    assert_eq!(
        step.end.as_ref().map(|e| (e.at, e.usage.clone())),
        Some((stamp(11), usage(100, 20)))
    );
    assert_eq!(turn.unfinished_call(), None);

    let call = facts.call("c1").expect("the call");
    assert_eq!(call.started, Some(stamp(7)));
    assert_eq!(call.step, Some(0));
    assert_eq!(call.input, Some(json!({"q": "c1"})));
    assert_eq!(
        call.decision.as_ref().map(|d| (d.at, d.action)),
        Some((stamp(8), DecisionAction::Allow))
    );
    assert_eq!(
        call.preliminary,
        vec![PreliminaryFact {
            at: stamp(9),
            output: json!({"progress": 1})
        }]
    );
    assert_eq!(call.outcome.as_ref().map(CallOutcome::at), Some(stamp(10)));
    assert_eq!(
        call.outcome.as_ref().and_then(CallOutcome::duration_ms),
        Some(40)
    );
    assert_eq!(call.success(), Some(true));
    assert_eq!(facts.calls_of_turn("t1").count(), 1);

    let call = |stage| Some(FactChange::Call { call: 0, stage });
    let step = |stage| {
        Some(FactChange::Step {
            turn: 0,
            step: 0,
            stage,
        })
    };
    let text = Some(FactChange::Chunk {
        turn: 0,
        step: 0,
        preliminary: None,
    });
    assert_eq!(
        changes,
        vec![
            Some(FactChange::Turn {
                turn: 0,
                stage: TurnStage::Started
            }),
            step(StepStage::Started),
            step(StepStage::Configured),
            text,
            text,
            text,
            call(CallStage::Started),
            call(CallStage::Decided),
            Some(FactChange::Chunk {
                turn: 0,
                step: 0,
                preliminary: Some(0)
            }),
            call(CallStage::Finished),
            step(StepStage::Finished),
            Some(FactChange::Turn {
                turn: 0,
                stage: TurnStage::Finished
            }),
        ]
    );
}

#[test]
fn facts_are_a_pure_function_of_the_envelopes_pushed() {
    let log = one_turn();
    let (whole, _) = log.fold();
    // Pushed in two sittings (a page, then a tail) the fold is the same.
    let mut live = Facts::new();
    let (page, tail) = log.0.split_at(5);
    for env in page.iter().chain(tail) {
        live.push(env);
    }
    assert_eq!(live, whole);
    // Cut short, it shows the turn running and its call open.
    let mut cut = Facts::new();
    for env in &log.0[..8] {
        cut.push(env);
    }
    assert_eq!(cut.turns()[0].status(), TurnStatus::Running);
    assert_eq!(cut.turns()[0].unfinished_call(), Some("m-1"));
    assert_eq!(cut.call("c1").and_then(ToolCallFact::success), None);
}

#[test]
fn an_approval_is_asked_answered_by_a_person_decided_by_the_next_turn_and_closed() {
    let mut log = Log(Vec::new());
    log.push(Some("t1"), started("r1", "m1", false)); // 1
    log.push(Some("t1"), call_started("c1")); // 2
    log.push(
        Some("t1"),
        Event::ToolApprovalRequested {
            step: 0,
            call_id: "c1".into(),
            tool: "search".into(),
            approval_id: "a1".into(),
            input: json!({"q": "c1"}),
            reason: Some("costly".into()),
            expires_at: None,
        },
    ); // 3
    log.push(Some("t1"), turn_finished(TurnStatus::Completed, 0, 0)); // 4
    let answer = |approved: bool, expired: bool| Event::ToolApprovalAnswered {
        approval_id: "a1".into(),
        call_id: "c1".into(),
        tool: "search".into(),
        approved,
        reason: None,
        expired,
        by: (!expired).then(|| "mull dash".to_owned()),
    };
    log.push(None, answer(true, false)); // 5
    log.push(None, answer(false, true)); // 6: a late expiry does not count
    log.push(Some("t2"), started("r2", "m2", true)); // 7
    log.push(Some("t2"), decided("c1", DecisionAction::Allow)); // 8
    log.push(Some("t2"), finished("c1", true, 5)); // 9
    let (facts, changes) = log.fold();
    let call = facts.approval("a1").expect("the call that asked");
    assert_eq!(
        call.turn_id.as_deref(),
        Some("t1"),
        "the call stays the asking turn's"
    );
    let approval = call.approval.as_ref().expect("asked");
    let request = approval.request.as_ref().expect("the request was pushed");
    assert_eq!(request.at, stamp(3));
    assert_eq!(request.reason.as_deref(), Some("costly"));
    let answer = approval.answer.as_ref().expect("answered");
    assert_eq!(
        (answer.at, answer.approved, answer.by),
        (stamp(5), true, AnsweredBy::Person)
    );
    assert_eq!(
        answer.through.as_deref(),
        Some("mull dash"),
        "the surface the person answered through is kept"
    );
    assert!(approval.decided && approval.closed);
    assert_eq!(call.open_approval(), None);
    assert_eq!(call.decision.as_ref().map(|d| d.at), Some(stamp(8)));
    assert_eq!(
        changes[4],
        Some(FactChange::Call {
            call: 0,
            stage: CallStage::ApprovalAnswered
        })
    );
    assert_eq!(changes[5], None, "the second answer changes nothing");
    assert_eq!(facts.calls().len(), 1);
}

#[test]
fn an_answer_to_a_request_the_fold_never_saw_is_kept_on_its_call() {
    // The events of the turn acting on an answer alone, as a single turn's timeline folds
    // them: the request was made by an earlier turn.
    let answer = |approval_id: &str, call_id: &str| Event::ToolApprovalAnswered {
        approval_id: approval_id.into(),
        call_id: call_id.into(),
        tool: "search".into(),
        approved: true,
        reason: Some("fine".into()),
        expired: false,
        by: Some("mull approve".into()),
    };
    let mut log = Log(Vec::new());
    log.push(None, answer("a1", "c1")); // 1
    log.push(None, answer("a1", "c1")); // 2: a second answer does not count
    log.push(Some("t2"), started("r2", "m2", true)); // 3
    log.push(Some("t2"), decided("c1", DecisionAction::Allow)); // 4
    log.push(Some("t2"), finished("c1", true, 5)); // 5
    log.push(None, answer("a9", "c1")); // 6: another approval for a call that holds one
    let (facts, changes) = log.fold();
    assert_eq!(
        facts.calls().len(),
        1,
        "the answer, decision and end are one call"
    );
    let call = facts.approval("a1").expect("the call the answer names");
    assert_eq!(call.call_id, "c1");
    let approval = call.approval.as_ref().expect("answered");
    assert_eq!(approval.request, None, "the request is not in these events");
    let answer = approval.answer.as_ref().expect("the answer is kept");
    assert_eq!(
        (
            answer.at,
            answer.approved,
            answer.by,
            answer.through.as_deref()
        ),
        (stamp(1), true, AnsweredBy::Person, Some("mull approve"))
    );
    assert!(approval.decided && approval.closed);
    assert_eq!(
        changes[0],
        Some(FactChange::Call {
            call: 0,
            stage: CallStage::ApprovalAnswered
        })
    );
    assert_eq!(changes[1], None, "the second answer changes nothing");
    assert_eq!(changes[5], None, "a call keeps the approval it has");
    assert_eq!(facts.approval("a9"), None);
}

#[test]
fn an_expired_request_is_answered_by_its_expiry_and_a_repair_closes_a_call() {
    let mut log = Log(Vec::new());
    log.push(Some("t1"), started("r1", "m1", false));
    log.push(Some("t1"), call_started("c1"));
    log.push(
        Some("t1"),
        Event::ToolApprovalRequested {
            step: 0,
            call_id: "c1".into(),
            tool: "search".into(),
            approval_id: "a1".into(),
            input: json!({}),
            reason: None,
            expires_at: None,
        },
    );
    log.push(
        None,
        Event::ToolApprovalAnswered {
            approval_id: "a1".into(),
            call_id: "c1".into(),
            tool: "search".into(),
            approved: false,
            reason: None,
            expired: true,
            by: None,
        },
    );
    // A decision before any answer does not mark an approval decided.
    log.push(Some("t1"), call_started("c2"));
    log.push(Some("t1"), decided("c2", DecisionAction::Allow));
    log.push(
        Some("t1"),
        Event::ToolCallRepaired {
            message_id: "m1".into(),
            call_id: "c2".into(),
            tool: "search".into(),
            error_text: "interrupted".into(),
        },
    );
    log.push(
        None,
        Event::ClientToolResult {
            call_id: "c9".into(),
            tool: "ask".into(),
            state: ToolPartState::OutputAvailable,
            output: Some(json!("yes")),
            error: None,
        },
    );
    let (facts, _) = log.fold();
    let c1 = facts.call("c1").expect("c1");
    let approval = c1.open_approval().expect("waits on the next turn");
    assert_eq!(
        approval.answer.as_ref().map(|a| a.by),
        Some(AnsweredBy::Expiry)
    );
    assert!(!approval.decided);
    let c2 = facts.call("c2").expect("c2");
    assert_eq!(c2.success(), Some(false));
    assert_eq!(
        c2.outcome
            .as_ref()
            .and_then(CallOutcome::error)
            .map(String::as_str),
        Some("interrupted")
    );
    // A result for a call never started begins it, under the turn the event names.
    let c9 = facts.call("c9").expect("c9");
    assert_eq!(
        (c9.started, c9.turn_id.as_deref(), c9.success()),
        (None, None, Some(true))
    );
}

#[test]
fn failures_retries_hooks_and_sub_agents_are_the_turn_s() {
    let mut log = Log(Vec::new());
    let t = Some("t1");
    log.push(t, started("r1", "m1", false));
    log.push(t, Event::StepStarted { step: 0 });
    log.push(
        t,
        Event::ModelRetried {
            step: 0,
            attempt: 1,
            error: "busy".into(),
            delay_ms: 10,
        },
    );
    log.push(
        t,
        Event::SubagentFinished {
            call_id: "c1".into(),
            child_session_id: "child".into(),
            status: TurnStatus::Completed,
            usage: usage(7, 3),
            spend: None,
        },
    );
    log.push(
        t,
        Event::TurnFailed {
            request_id: Some("r1".into()),
            stage: ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
            error: "gave up".into(),
            model_error: None,
        },
    );
    // Outside any turn, a step is no fact; inside a turn never started (a tail opened
    // mid-turn) it begins the turn's facts, with its start unknown.
    let mut loose = Facts::new();
    let mut outside = log.0[1].clone();
    outside.turn_id = None;
    assert_eq!(loose.push(&outside), None);
    assert_eq!(
        loose.push(&log.0[1]),
        Some(FactChange::Step {
            turn: 0,
            step: 0,
            stage: StepStage::Started
        })
    );
    assert_eq!(loose.turns()[0].start, None);
    assert_eq!(loose.turns()[0].turn_id.as_deref(), Some("t1"));
    let (facts, _) = log.fold();
    let turn = &facts.turns()[0];
    assert_eq!(turn.steps[0].retries, 1);
    assert_eq!(turn.subagent_usage, usage(7, 3));
    let failure = turn.failure.as_ref().expect("failed");
    assert_eq!(
        (failure.at, failure.stage, failure.model_error),
        (stamp(5), ErrorStage::Stream, false)
    );
    assert_eq!(
        turn.status(),
        TurnStatus::Running,
        "until its turn_finished"
    );
}
