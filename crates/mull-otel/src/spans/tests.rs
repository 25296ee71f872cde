use super::*;
use chrono::TimeZone;
use mull_core::{ChatErrorClassification, DecisionAction, EntryPath, ErrorStage};

fn env(seq: u64, turn: Option<&str>, ms: i64, event: Event) -> Envelope {
    Envelope {
        seq,
        session_id: "s".into(),
        turn_id: turn.map(str::to_owned),
        at: Utc.timestamp_millis_opt(1_700_000_000_000 + ms).unwrap(),
        v: 1,
        event,
    }
}

fn started(seq: u64, turn: &str, ms: i64) -> Envelope {
    env(
        seq,
        Some(turn),
        ms,
        Event::TurnStarted {
            request_id: "r".into(),
            message_id: "m".into(),
            entry: EntryPath::Chat,
            continuation: false,
            attempt: 0,
            body: Value::Null,
        },
    )
}

fn tool_started(seq: u64, turn: &str, ms: i64) -> Envelope {
    env(
        seq,
        Some(turn),
        ms,
        Event::ToolCallStarted {
            step: 0,
            call_id: "c1".into(),
            tool: "add".into(),
            input: json!({"a": 1}),
            client: false,
            dynamic: false,
        },
    )
}

fn fold(events: &[Envelope]) -> Vec<LogSpan> {
    let mut spans = SessionSpans::new("s", SpanOptions::default());
    for e in events {
        spans.apply(e);
    }
    spans.finish()
}

#[test]
fn a_turn_the_log_never_finished_ends_at_its_last_event_marked_unfinished() {
    let spans = fold(&[
        started(1, "t1", 0),
        env(2, Some("t1"), 5, Event::StepStarted { step: 0 }),
        tool_started(3, "t1", 40),
    ]);
    assert_eq!(spans.len(), 3);
    let turn = &spans[0];
    assert_eq!(turn.name, "invoke_agent agent");
    assert_eq!(
        turn.attribute("mull.turn.status"),
        Some(&AttrValue::from("unfinished"))
    );
    assert!(turn.error.is_some());
    let last = Utc.timestamp_millis_opt(1_700_000_000_040).unwrap();
    assert!(spans.iter().all(|s| s.end == last));
    assert_eq!(spans[1].parent_id, Some(turn.span_id));
    assert_eq!(spans[2].parent_id, Some(spans[1].span_id));
}

#[test]
fn a_failed_tool_and_an_overflowed_turn_are_errors_with_their_type() {
    let spans = fold(&[
        env(
            1,
            None,
            0,
            Event::SessionOpened {
                agent: "travel".into(),
                metadata: Value::Null,
            },
        ),
        started(2, "t1", 0),
        env(3, Some("t1"), 1, Event::StepStarted { step: 0 }),
        tool_started(4, "t1", 2),
        env(
            5,
            Some("t1"),
            9,
            Event::ToolCallFinished {
                step: 0,
                call_id: "c1".into(),
                tool: "add".into(),
                success: false,
                output: None,
                error: Some("no such city".into()),
                duration_ms: 7,
            },
        ),
        env(
            6,
            Some("t1"),
            12,
            Event::TurnFailed {
                request_id: Some("r".into()),
                stage: ErrorStage::Stream,
                messages_persisted: true,
                classification: Some(ChatErrorClassification::ContextOverflow),
                error: "too long".into(),
                model_error: None,
            },
        ),
        env(
            7,
            Some("t1"),
            13,
            Event::TurnFinished {
                request_id: "r".into(),
                status: TurnStatus::Error,
                error: Some("too long".into()),
                steps: 0,
                usage: Usage::default(),
                response_owed: false,
            },
        ),
    ]);
    let by = |name: &str| spans.iter().find(|s| s.name == name).expect(name);
    let tool = by("execute_tool add");
    assert_eq!(tool.error.as_deref(), Some("no such city"));
    assert_eq!(
        tool.attribute("error.type"),
        Some(&AttrValue::from("tool_error"))
    );
    let turn = by("invoke_agent travel");
    assert_eq!(turn.error.as_deref(), Some("too long"));
    assert_eq!(
        turn.attribute("error.type"),
        Some(&AttrValue::from("context_overflow"))
    );
    // No usage was reported, so none is claimed.
    assert_eq!(turn.attribute("gen_ai.usage.input_tokens"), None);
    // The step the failure cut is closed with the turn and carries the error too.
    let chat = by("chat");
    assert_eq!(chat.end, turn.end);
    assert_eq!(chat.error.as_deref(), Some("too long"));
}
#[test]
fn a_sub_agents_turn_is_a_child_of_the_parents_tool_call_in_the_parents_trace() {
    let parent = fold(&[
        started(1, "t1", 0),
        env(2, Some("t1"), 1, Event::StepStarted { step: 0 }),
        tool_started(3, "t1", 2),
    ]);
    let parent_turn = &parent[0];
    let call = parent
        .iter()
        .find(|s| s.name == "execute_tool add")
        .expect("the call's span");

    let child_env = |seq: u64, turn: Option<&str>, ms: i64, event: Event| Envelope {
        session_id: "s.agent_1".into(),
        ..env(seq, turn, ms, event)
    };
    let mut child = SessionSpans::new("s.agent_1", SpanOptions::default());
    let linked = child_env(
        10,
        None,
        3,
        Event::SubagentLinked {
            parent_session_id: "s".into(),
            parent_turn_id: "t1".into(),
            parent_call_id: "c1".into(),
            depth: 1,
            budget: None,
        },
    );
    let mut turn = started(11, "t9", 4);
    turn.session_id = "s.agent_1".into();
    for e in [
        linked,
        turn,
        child_env(12, Some("t9"), 5, Event::StepStarted { step: 0 }),
    ] {
        child.apply(&e);
    }
    let child = child.finish();
    assert_eq!(child[0].name, "invoke_agent agent");
    assert_eq!(child[0].trace_id, parent_turn.trace_id);
    assert_eq!(child[0].parent_id, Some(call.span_id));
    assert_eq!(child[1].trace_id, parent_turn.trace_id);
    assert_eq!(child[1].parent_id, Some(child[0].span_id));
    // Its own spans keep ids of their own.
    assert!(parent
        .iter()
        .all(|p| child.iter().all(|c| c.span_id != p.span_id)));
}

/// What a live export sends as events are appended: each span once it closed, and the spans
/// of a turn that ended in error only after the `turn_failed` the engine writes next.
#[test]
fn closed_spans_are_taken_as_they_close_and_a_failed_turns_wait_for_its_failure() {
    let mut fold = SessionSpans::new("s", SpanOptions::default());
    let mut apply = |e: Envelope| {
        fold.apply(&e);
        fold.take_closed()
    };
    assert!(apply(started(1, "t1", 0)).is_empty());
    assert!(apply(tool_started(2, "t1", 1)).is_empty());
    let finished = Event::ToolCallFinished {
        step: 0,
        call_id: "c1".into(),
        tool: "add".into(),
        success: true,
        output: None,
        error: None,
        duration_ms: 1,
    };
    let tool = apply(env(3, Some("t1"), 2, finished));
    assert_eq!(tool.len(), 1);
    assert_eq!(tool[0].name, "execute_tool add");
    let ended = Event::TurnFinished {
        request_id: "r".into(),
        status: TurnStatus::Error,
        error: Some("the model broke".into()),
        steps: 1,
        usage: Usage::default(),
        response_owed: false,
    };
    assert!(apply(env(4, Some("t1"), 3, ended)).is_empty());
    let failed = Event::TurnFailed {
        request_id: Some("r".into()),
        stage: ErrorStage::Stream,
        messages_persisted: true,
        classification: None,
        error: "the model broke".into(),
        model_error: None,
    };
    let turn = apply(env(5, Some("t1"), 4, failed));
    assert_eq!(turn.len(), 1);
    assert_eq!(
        turn[0].attribute("error.type"),
        Some(&AttrValue::from("stream"))
    );
    assert!(fold.finish().is_empty(), "every span was taken");
}

#[test]
fn a_model_calls_span_names_the_server_its_step_record_went_to() {
    let configured = Event::StepConfigured {
        step: 0,
        model_id: "gpt-4o-mini".into(),
        active_tools: None,
        tool_choice: mull_core::ToolChoice::Auto,
        system: None,
        message_count: 1,
        overrides: Vec::new(),
        request_hash: None,
    };
    let record = |response: Value| Event::StepFinished {
        record: Box::new(mull_core::StepReport {
            model_id: "gpt-4o-mini".into(),
            response,
            ..mull_core::StepReport::default()
        }),
    };
    let call = |response: Value| {
        let spans = fold(&[
            started(1, "t1", 0),
            env(2, Some("t1"), 1, Event::StepStarted { step: 0 }),
            env(3, Some("t1"), 2, configured.clone()),
            env(4, Some("t1"), 9, record(response)),
        ]);
        spans
            .into_iter()
            .find(|s| s.name.starts_with("chat"))
            .expect("the model call's span")
    };
    let remote = call(json!({"server_address": "api.openai.com", "server_port": 443}));
    assert_eq!(
        remote.attribute("server.address"),
        Some(&AttrValue::from("api.openai.com"))
    );
    assert_eq!(
        remote.attribute("server.port"),
        Some(&AttrValue::from(443u64))
    );
    // A model reached over no network (a scripted one) names no server.
    let local = call(json!({"model_id": "gpt-4o-mini"}));
    assert_eq!(local.attribute("server.address"), None);
    assert_eq!(local.attribute("server.port"), None);
}

#[test]
fn a_call_denied_when_its_approval_expired_is_a_span_of_the_turn_that_acted_on_it() {
    let finished = |seq, turn: &str, ms| {
        env(
            seq,
            Some(turn),
            ms,
            Event::TurnFinished {
                request_id: "r".into(),
                status: TurnStatus::Completed,
                error: None,
                steps: 1,
                usage: Usage::default(),
                response_owed: false,
            },
        )
    };
    let spans = fold(&[
        started(1, "t1", 0),
        env(2, Some("t1"), 5, Event::StepStarted { step: 0 }),
        tool_started(3, "t1", 10),
        env(
            4,
            Some("t1"),
            15,
            Event::ToolApprovalRequested {
                step: 0,
                call_id: "c1".into(),
                tool: "add".into(),
                approval_id: "ap_1".into(),
                input: json!({"a": 1}),
                reason: Some("costs money".into()),
                expires_at: None,
            },
        ),
        finished(5, "t1", 20),
        // Nobody answered in time: the session denies it, and the next turn acts on that.
        env(
            6,
            None,
            1_000,
            Event::ToolApprovalAnswered {
                approval_id: "ap_1".into(),
                call_id: "c1".into(),
                tool: "add".into(),
                approved: false,
                reason: None,
                expired: true,
                by: None,
            },
        ),
        started(7, "t2", 1_010),
        env(
            8,
            Some("t2"),
            1_020,
            Event::ToolDecided {
                step: 0,
                call_id: "c1".into(),
                tool: "add".into(),
                action: DecisionAction::Denied,
                model_input: json!({"a": 1}),
                effective_input: json!({"a": 1}),
                reason: Some("the approval request expired".into()),
                output: None,
            },
        ),
        finished(9, "t2", 1_030),
    ]);
    let tools: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "execute_tool add")
        .collect();
    assert_eq!(
        tools.len(),
        2,
        "the asking turn's span and the deciding turn's"
    );
    let asked = tools[0];
    assert_eq!(
        asked.attribute("mull.tool.decision"),
        Some(&AttrValue::from("approval_requested"))
    );
    let decided = tools[1];
    let t2 = spans
        .iter()
        .find(|s| s.attribute("mull.turn_id") == Some(&AttrValue::from("t2")))
        .expect("the second turn's span");
    assert_eq!(decided.parent_id, Some(t2.span_id));
    assert_eq!(
        decided.attribute("mull.approval.answered_by"),
        Some(&AttrValue::from("expiry"))
    );
    assert_eq!(
        decided.attribute("mull.approval.approved"),
        Some(&AttrValue::from(false))
    );
    assert_eq!(
        decided.attribute("error.type"),
        Some(&AttrValue::from("tool_denied"))
    );
}
