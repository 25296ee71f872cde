//! OpenTelemetry export against a real OTLP/HTTP receiver (the official protobuf definitions
//! decode what mull sends): a past session re-exported from the log keeps the log's times,
//! and the engine's live spans arrive with the same names, tree and GenAI attributes.

mod support;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, StreamPart};
use mull_otel::{export_log, Conventions, LiveExport, OtelError, OtlpConfig, SpanOptions};
use mull_store::LogReader;
use serde_json::{json, Value};
use support::{
    attr, attr_bool, attr_f64, attr_int, attr_str, named, nanos, one_test_at_a_time, run_agent,
    run_budgeted, run_manager, run_turn, Calculator, ExportTest, Receiver,
};
use tracing_subscriber::layer::SubscriberExt;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn ns(at: DateTime<Utc>) -> i64 {
    at.timestamp_nanos_opt().expect("in range")
}

/// Runs `run` with the engine's spans exported live to `receiver`, and sends what is queued.
fn export_live(receiver: &Receiver, run: impl FnOnce()) {
    let live = LiveExport::start(&OtlpConfig::to(&receiver.url)).expect("live export");
    let subscriber = tracing_subscriber::registry().with(live.layer());
    tracing::subscriber::with_default(subscriber, run);
    live.shutdown().expect("the queued spans are sent");
}

/// The time of the first event of the log that `pick` accepts.
fn at(events: &[Envelope], pick: impl Fn(&Event) -> bool) -> i64 {
    ns(events
        .iter()
        .find(|e| pick(&e.event))
        .expect("the event is in the log")
        .at)
}

#[test]
fn a_past_session_is_re_exported_with_the_logs_times_names_tree_and_attributes() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    runtime().block_on(run_turn(db, "s1", false));
    let reader = LogReader::open(db).expect("reader");
    let events = reader.session_events("s1", 0).expect("events");

    let report = export_log(
        &reader,
        Some("s1"),
        &OtlpConfig::to(&receiver.url),
        SpanOptions::default(),
    )
    .expect("export");
    assert_eq!((report.sessions, report.spans), (1, 4));
    let spans = receiver.wait_for(4);
    assert_eq!(spans.len(), 4, "{spans:#?}");

    let turn = named(&spans, "invoke_agent calculator");
    let chat0 = spans
        .iter()
        .find(|s| s["name"] == "chat claude-test" && attr_int(s, "mull.step") == Some(0))
        .expect("step 0");
    let chat1 = spans
        .iter()
        .find(|s| s["name"] == "chat claude-test" && attr_int(s, "mull.step") == Some(1))
        .expect("step 1");
    let tool = named(&spans, "execute_tool add");

    // The tree: one trace, the turn at its root, steps under it, the tool under its step.
    for span in [chat0, chat1, tool] {
        assert_eq!(span["trace_id"], turn["trace_id"]);
    }
    assert_eq!(turn["parent_span_id"], "");
    assert_eq!(chat0["parent_span_id"], turn["span_id"]);
    assert_eq!(chat1["parent_span_id"], turn["span_id"]);
    assert_eq!(tool["parent_span_id"], chat0["span_id"]);
    assert_eq!(chat0["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(turn["kind"], "SPAN_KIND_INTERNAL");
    assert_eq!(attr_str(&turn["resource"], "service.name"), Some("mull"));
    assert_eq!(turn["scope"]["name"], "mull");

    // The times are the log's, to the microsecond the log keeps.
    let turn_id = events
        .iter()
        .find_map(|e| e.turn_id.clone())
        .expect("a turn");
    assert_eq!(
        nanos(turn, "start_time_unix_nano"),
        at(&events, |e| matches!(e, Event::TurnStarted { .. }))
    );
    assert_eq!(
        nanos(turn, "end_time_unix_nano"),
        at(&events, |e| matches!(e, Event::TurnFinished { .. }))
    );
    assert_eq!(
        nanos(chat1, "start_time_unix_nano"),
        at(&events, |e| matches!(e, Event::StepStarted { step: 1 }))
    );
    assert_eq!(
        nanos(chat0, "end_time_unix_nano"),
        at(
            &events,
            |e| matches!(e, Event::StepFinished { record } if record.step == 0)
        )
    );
    assert_eq!(
        nanos(tool, "start_time_unix_nano"),
        at(&events, |e| matches!(e, Event::ToolCallStarted { .. }))
    );
    assert_eq!(
        nanos(tool, "end_time_unix_nano"),
        at(&events, |e| matches!(e, Event::ToolCallFinished { .. }))
    );

    // The GenAI attributes.
    assert_eq!(
        attr_str(turn, "gen_ai.operation.name"),
        Some("invoke_agent")
    );
    assert_eq!(attr_str(turn, "gen_ai.agent.name"), Some("calculator"));
    assert_eq!(attr_str(turn, "gen_ai.conversation.id"), Some("s1"));
    assert_eq!(attr_str(turn, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(attr_str(turn, "gen_ai.request.model"), Some("claude-test"));
    assert_eq!(attr_str(turn, "mull.turn_id"), Some(turn_id.as_str()));
    assert_eq!(attr_int(turn, "gen_ai.usage.input_tokens"), Some(260));
    assert_eq!(attr_int(turn, "gen_ai.usage.output_tokens"), Some(16));
    assert_eq!(attr_str(chat0, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(attr_str(chat0, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(attr_str(chat0, "gen_ai.request.model"), Some("claude-test"));
    assert_eq!(attr_str(chat0, "gen_ai.conversation.id"), Some("s1"));
    assert_eq!(attr_int(chat0, "gen_ai.usage.input_tokens"), Some(120));
    assert_eq!(attr_int(chat0, "gen_ai.usage.output_tokens"), Some(9));
    assert_eq!(
        attr_int(chat0, "gen_ai.usage.cache_write.input_tokens"),
        Some(100)
    );
    assert_eq!(attr(chat1, "gen_ai.usage.cache_write.input_tokens"), None);
    // The v0.1.0 names: a streaming request, the model that answered, the time to the first
    // chunk (from the request's `step_configured` to the first output chunk, in seconds).
    assert_eq!(attr_bool(chat0, "gen_ai.request.stream"), Some(true));
    assert_eq!(
        attr_str(chat0, "gen_ai.response.model"),
        Some("claude-test")
    );
    let configured = at(&events, |e| {
        matches!(e, Event::StepConfigured { step: 1, .. })
    });
    let first_chunk = at(&events, |e| {
        matches!(
            e,
            Event::Chunk {
                step: 1,
                part: StreamPart::TextDelta { .. },
                ..
            }
        )
    });
    assert_eq!(
        attr_f64(chat1, "gen_ai.response.time_to_first_chunk"),
        Some((first_chunk - configured) as f64 / 1e9)
    );
    assert_eq!(attr(chat0, "gen_ai.conversation.compacted"), None);
    assert!(spans.iter().all(|s| attr(s, "target").is_none()));
    assert_eq!(
        attr(chat0, "gen_ai.response.finish_reasons"),
        Some(&json!({"array_value": {"values": [{"string_value": "tool-calls"}]}}))
    );
    assert_eq!(
        attr(chat1, "gen_ai.response.finish_reasons"),
        Some(&json!({"array_value": {"values": [{"string_value": "stop"}]}}))
    );
    assert_eq!(
        attr_str(tool, "gen_ai.operation.name"),
        Some("execute_tool")
    );
    assert_eq!(attr_str(tool, "gen_ai.tool.name"), Some("add"));
    assert_eq!(attr_str(tool, "gen_ai.tool.call.id"), Some("call_1"));
    assert_eq!(attr_str(tool, "mull.tool.decision"), Some("allow"));
    // Content stays out unless asked for.
    assert_eq!(attr(tool, "gen_ai.tool.call.arguments"), None);
    assert_eq!(attr(chat1, "gen_ai.output.messages"), None);
    assert!(spans.iter().all(|s| s["status"].get("code").is_none()));
}

#[test]
fn content_is_exported_when_asked_for_and_a_second_export_sends_the_same_ids() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    runtime().block_on(run_turn(db, "s1", false));
    let reader = LogReader::open(db).expect("reader");
    let config = OtlpConfig::to(&format!("{}/v1/traces", receiver.url));
    let content = SpanOptions::new(true, Conventions::Current);
    export_log(&reader, None, &config, content).expect("export");
    export_log(&reader, None, &config, content).expect("export again");
    let spans = receiver.wait_for(8);
    assert_eq!(spans.len(), 8);
    let ids = |half: &[Value]| {
        let mut ids: Vec<String> = half.iter().map(|s| s["span_id"].to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&spans[..4]), ids(&spans[4..]));
    let tool = named(&spans, "execute_tool add");
    assert_eq!(
        attr_str(tool, "gen_ai.tool.call.arguments").map(|a| serde_json::from_str::<Value>(a).ok()),
        Some(Some(json!({"a": 2, "b": 3})))
    );
    assert_eq!(
        attr_str(tool, "gen_ai.tool.call.result").map(|a| serde_json::from_str::<Value>(a).ok()),
        Some(Some(json!({"sum": 5})))
    );
    let answer = spans
        .iter()
        .find_map(|s| attr_str(s, "gen_ai.output.messages").filter(|m| m.contains("= 5")))
        .expect("the answer's step carries its output message");
    let answer: Value = serde_json::from_str(answer).expect("JSON");
    assert_eq!(answer[0]["parts"][0]["content"], "2 + 3 = 5.");
}

#[test]
fn the_engines_live_spans_arrive_with_the_same_names_tree_and_attributes() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    export_live(receiver, || {
        runtime().block_on(run_turn(db, "live-1", true))
    });
    let spans = receiver.wait_for(4);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let turn = named(&spans, "invoke_agent calculator");
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "chat claude-test")
        .collect();
    let tool = named(&spans, "execute_tool add");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in &chats {
        assert_eq!(chat["parent_span_id"], turn["span_id"]);
        assert_eq!(chat["trace_id"], turn["trace_id"]);
        assert_eq!(attr_str(chat, "gen_ai.operation.name"), Some("chat"));
        assert_eq!(attr_str(chat, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(attr_str(chat, "gen_ai.request.model"), Some("claude-test"));
        assert_eq!(attr_str(chat, "gen_ai.conversation.id"), Some("live-1"));
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
    }
    let step0 = chats
        .iter()
        .find(|c| attr_int(c, "mull.step") == Some(0))
        .unwrap_or_else(|| panic!("step 0 in {chats:#?}"));
    assert_eq!(tool["parent_span_id"], step0["span_id"]);
    assert_eq!(attr_int(step0, "gen_ai.usage.input_tokens"), Some(120));
    assert_eq!(attr_int(step0, "gen_ai.usage.output_tokens"), Some(9));
    assert_eq!(
        attr_int(step0, "gen_ai.usage.cache_write.input_tokens"),
        Some(100)
    );
    assert_eq!(attr_bool(step0, "gen_ai.request.stream"), Some(true));
    assert_eq!(
        attr_str(step0, "gen_ai.response.model"),
        Some("claude-test")
    );
    assert!(
        attr_f64(step0, "gen_ai.response.time_to_first_chunk").is_some_and(|s| s >= 0.0),
        "{step0:#}"
    );
    // Like a re-exported turn, a live one carries the usage of its model calls.
    assert_eq!(attr_int(turn, "gen_ai.usage.input_tokens"), Some(260));
    assert_eq!(attr_int(turn, "gen_ai.usage.output_tokens"), Some(16));
    // Only the engine's own attributes: no `target`, code location or thread.
    for span in &spans {
        assert!(attr(span, "target").is_none(), "{span:#}");
        assert!(attr(span, "code.filepath").is_none(), "{span:#}");
    }
    // As the conventions define it (and as a re-export sends it): a list of strings.
    assert_eq!(
        attr(step0, "gen_ai.response.finish_reasons"),
        Some(&json!({"array_value": {"values": [{"string_value": "tool-calls"}]}}))
    );
    assert_eq!(
        attr_str(turn, "gen_ai.operation.name"),
        Some("invoke_agent")
    );
    assert_eq!(attr_str(turn, "gen_ai.agent.name"), Some("calculator"));
    assert_eq!(attr_str(turn, "gen_ai.conversation.id"), Some("live-1"));
    assert_eq!(attr_str(turn, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(attr_str(turn, "gen_ai.request.model"), Some("claude-test"));
    assert_eq!(attr_str(tool, "gen_ai.tool.name"), Some("add"));
    assert_eq!(attr_str(tool, "gen_ai.tool.call.id"), Some("call_1"));
    // The session asked for content, so the tool's arguments and result are on its span.
    assert_eq!(
        attr_str(tool, "gen_ai.tool.call.arguments").map(|a| serde_json::from_str::<Value>(a).ok()),
        Some(Some(json!({"a": 2, "b": 3})))
    );
    assert!(attr_str(tool, "gen_ai.tool.call.result").is_some());
    // Live spans nest in time the way the log does.
    assert!(nanos(turn, "start_time_unix_nano") <= nanos(step0, "start_time_unix_nano"));
    assert!(nanos(tool, "end_time_unix_nano") <= nanos(step0, "end_time_unix_nano"));
    assert!(nanos(step0, "end_time_unix_nano") <= nanos(turn, "end_time_unix_nano"));
}

#[test]
fn an_unreachable_collector_and_a_missing_session_are_named() {
    let _turn = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    runtime().block_on(run_turn(&db, "s1", false));
    let reader = LogReader::open(&db).expect("reader");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let err = export_log(&reader, None, &OtlpConfig::to(&url), SpanOptions::default())
        .expect_err("nothing listens there");
    assert!(matches!(err, OtelError::Send { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("{url}/v1/traces")),
        "{err}"
    );

    let err = export_log(
        &reader,
        Some("nope"),
        &OtlpConfig::to(&url),
        SpanOptions::default(),
    )
    .expect_err("no such session");
    assert_eq!(err.to_string(), "the log has no session \"nope\"");
}

#[test]
fn a_failed_turn_is_an_error_span_live_and_from_the_log() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    export_live(receiver, || {
        runtime().block_on(run_agent(db, "bad-1", Calculator::failing(), false))
    });
    let live_spans = receiver.wait_for(2);
    let reader = LogReader::open(db).expect("reader");
    export_log(
        &reader,
        Some("bad-1"),
        &OtlpConfig::to(&receiver.url),
        SpanOptions::default(),
    )
    .expect("export");
    let all = receiver.wait_for(4);
    let (live_spans, logged) = all.split_at(live_spans.len());
    for spans in [live_spans, logged] {
        let turn = named(spans, "invoke_agent calculator");
        assert_eq!(turn["status"]["code"], "STATUS_CODE_ERROR", "{turn:#}");
        assert!(
            turn["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the model broke")),
            "{turn:#}"
        );
        assert_eq!(attr_str(turn, "error.type"), Some("stream"));
    }
    // Both know which model call the failure cut.
    for spans in [live_spans, logged] {
        let chat = named(spans, "chat claude-test");
        assert_eq!(chat["status"]["code"], "STATUS_CODE_ERROR", "{chat:#}");
        assert_eq!(attr(chat, "gen_ai.response.finish_reasons"), None);
    }
}

/// A turn a budget stopped says so on its span, live and from the log: the limit reached (its
/// scope, measure, size and what was spent) as attributes, the stop as an event on the
/// timeline, and an error of type `budget`.
#[test]
fn a_budget_stop_is_on_the_turns_span_live_and_from_the_log() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    // One model call a turn: the calculator's tool step runs, its answer's call is refused.
    let budget = mull_engine::Budget::new().turn_calls(1);
    export_live(receiver, || {
        runtime().block_on(run_budgeted(db, "capped-1", Calculator::new(), budget))
    });
    let live = receiver.wait_for(3);
    let reader = LogReader::open(db).expect("reader");
    let report = export_log(
        &reader,
        Some("capped-1"),
        &OtlpConfig::to(&receiver.url),
        SpanOptions::default(),
    )
    .expect("export");
    let all = receiver.wait_for(live.len() + report.spans);
    let (live, logged) = all.split_at(live.len());
    for spans in [live, logged] {
        let turn = named(spans, "invoke_agent calculator");
        assert_eq!(turn["status"]["code"], "STATUS_CODE_ERROR", "{turn:#}");
        assert_eq!(attr_str(turn, "error.type"), Some("budget"), "{turn:#}");
        assert_eq!(
            attr_str(turn, "mull.budget.scope"),
            Some("turn"),
            "{turn:#}"
        );
        assert_eq!(attr_str(turn, "mull.budget.measure"), Some("calls"));
        assert_eq!(attr_f64(turn, "mull.budget.limit"), Some(1.0));
        assert_eq!(attr_f64(turn, "mull.budget.spent"), Some(1.0));
        let stop = turn["events"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["name"] == "mull.budget.exceeded"))
            .unwrap_or_else(|| panic!("the stop is an event on the turn's span: {turn:#}"));
        assert_eq!(attr_str(stop, "mull.budget.call"), Some("step"));
        assert_eq!(attr_int(stop, "mull.step"), Some(1));
        assert_eq!(attr_int(stop, "mull.budget.remaining.calls"), Some(0));
        // The tool step's call was made and its tool ran before the stop.
        assert!(named(spans, "execute_tool add")["status"]
            .get("code")
            .is_none());
    }
}

/// Exporting the demo's session sends its sub-agent's spans too, inside the parent's trace and
/// under the `execute_tool` span of the call that ran it.
#[test]
fn a_sessions_export_carries_its_sub_agents_spans_in_the_same_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("demo.db");
    let log = mull_store::Log::open(&db).expect("log");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/demo.jsonl");
    let file = std::fs::File::open(fixture).expect("the demo fixture");
    mull_store::import_jsonl(std::io::BufReader::new(file), "demo.jsonl", &log).expect("imports");
    log.close().expect("closes");
    let reader = LogReader::open(&db).expect("reader");

    let (sessions, spans) =
        mull_otel::log_spans(&reader, Some("sess_1"), SpanOptions::default()).expect("folds");
    assert_eq!(sessions, 2, "the session and the sub-agent it ran");
    let call = spans
        .iter()
        .find(|s| s.attribute("gen_ai.tool.call.id") == Some(&"call_research_1".into()))
        .expect("the parent's research call");
    let child_turns: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent travel-research")
        .collect();
    assert!(!child_turns.is_empty(), "the sub-agent's turn is exported");
    for turn in &child_turns {
        assert_eq!(turn.trace_id, call.trace_id);
        assert_eq!(turn.parent_id, Some(call.span_id));
    }
    let child_chat = spans
        .iter()
        .find(|s| Some(s.parent_id.unwrap_or_default()) == child_turns.first().map(|t| t.span_id))
        .expect("the sub-agent's model call");
    assert_eq!(child_chat.trace_id, call.trace_id);
}

/// Live, a sub-agent's turn is traced under the parent's `execute_tool` span (its turn runs on
/// a task of its own, which would otherwise start a trace of its own).
#[test]
fn a_sub_agents_live_spans_hang_under_the_parents_tool_call() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    export_live(receiver, || runtime().block_on(run_manager(db, "live-sub")));
    // The manager: a turn, two chats, the `ask` call; the calculator: a turn, two chats, `add`.
    let spans = receiver.wait_for(8);
    assert_eq!(spans.len(), 8, "{spans:#?}");
    let parent = named(&spans, "invoke_agent manager");
    let call = named(&spans, "execute_tool ask");
    let child = named(&spans, "invoke_agent calculator");
    assert_eq!(child["parent_span_id"], call["span_id"]);
    let add = named(&spans, "execute_tool add");
    for span in [call, child, add] {
        assert_eq!(span["trace_id"], parent["trace_id"], "{span:#?}");
    }
    assert!(nanos(call, "start_time_unix_nano") <= nanos(child, "start_time_unix_nano"));
    assert!(nanos(child, "end_time_unix_nano") <= nanos(call, "end_time_unix_nano"));
}

/// The demo's log holds a call its policy blocked and a call a person approved: the blocked
/// call's span is an error saying so, and the approved call's span (in the turn that ran it)
/// says who answered, with the request and the answer as events on the timeline.
#[test]
fn decisions_and_approvals_are_on_the_tool_spans() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    let log = mull_store::Log::open(db).expect("log");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/demo.jsonl");
    let file = std::fs::File::open(fixture).expect("the demo fixture");
    mull_store::import_jsonl(std::io::BufReader::new(file), "demo.jsonl", &log).expect("imports");
    log.close().expect("closes");
    let reader = LogReader::open(db).expect("reader");
    let report = export_log(
        &reader,
        Some("sess_1"),
        &OtlpConfig::to(&receiver.url),
        SpanOptions::default(),
    )
    .expect("export");
    let spans = receiver.wait_for(report.spans);

    let blocked = named(&spans, "execute_tool cancel_booking");
    assert_eq!(
        blocked["status"]["code"], "STATUS_CODE_ERROR",
        "{blocked:#}"
    );
    let message = blocked["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("blocked: Cancelling bookings needs a human"),
        "{message}"
    );
    assert_eq!(attr_str(blocked, "error.type"), Some("tool_blocked"));
    assert_eq!(attr_str(blocked, "mull.tool.decision"), Some("block"));
    let decided = blocked["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "mull.tool.decided"))
        .expect("the decision is an event on the span");
    assert_eq!(attr_str(decided, "mull.tool.decision"), Some("block"));

    let booking: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "execute_tool book_hotel")
        .collect();
    assert_eq!(
        booking.len(),
        2,
        "the asking turn's span and the running turn's span"
    );
    let asked = booking
        .iter()
        .find(|s| attr_str(s, "mull.tool.decision") == Some("approval_requested"))
        .expect("the call that waited");
    assert!(asked["events"]
        .as_array()
        .is_some_and(|e| e.iter().any(|e| e["name"] == "mull.approval.requested")));
    let ran = booking
        .iter()
        .find(|s| attr_str(s, "mull.tool.decision") == Some("allow"))
        .expect("the call that ran once approved");
    assert_eq!(attr_bool(ran, "mull.approval.approved"), Some(true));
    assert_eq!(attr_str(ran, "mull.approval.answered_by"), Some("person"));
    assert_eq!(attr_str(ran, "mull.approval.id"), Some("approval_1"));
    assert!(ran["events"]
        .as_array()
        .is_some_and(|e| e.iter().any(|e| e["name"] == "mull.approval.answered")));
    assert_ne!(
        ran["trace_id"], asked["trace_id"],
        "each turn is a trace of its own"
    );
    // Every other call ran unattended, and says so.
    let unattended = spans
        .iter()
        .filter(|s| attr_str(s, "gen_ai.operation.name") == Some("execute_tool"))
        .filter(|s| attr(s, "mull.approval.answered_by").is_none())
        .count();
    assert_eq!(
        unattended,
        spans
            .iter()
            .filter(|s| attr_str(s, "gen_ai.operation.name") == Some("execute_tool"))
            .count()
            - 1
    );
}

/// A call `before_tool_call` blocks is an error span live too, with the reason.
#[test]
fn a_blocked_call_is_an_error_span_live() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    export_live(receiver, || {
        runtime().block_on(run_agent(
            db,
            "blocked-1",
            Calculator::blocking("sums need a person today"),
            false,
        ))
    });
    let spans = receiver.wait_for(4);
    let tool = named(&spans, "execute_tool add");
    assert_eq!(tool["status"]["code"], "STATUS_CODE_ERROR", "{tool:#}");
    assert_eq!(
        tool["status"]["message"], "blocked: sums need a person today",
        "{tool:#}"
    );
    assert_eq!(attr_str(tool, "error.type"), Some("tool_blocked"));
    assert_eq!(attr_str(tool, "mull.tool.decision"), Some("block"));
    assert_eq!(
        attr_str(tool, "mull.tool.decision_reason"),
        Some("sums need a person today")
    );
    // The turn itself went on: the model saw the reason and answered.
    let turn = named(&spans, "invoke_agent calculator");
    assert!(turn["status"].get("code").is_none(), "{turn:#}");
}

/// The `gen_ai.client.*` metrics of a re-exported session, measured from the log's own
/// timestamps: one duration per model call (request to step end), its time to first chunk,
/// the gaps between its output chunks, and its tokens; with the older names on request.
#[test]
fn a_re_export_sends_the_genai_client_metrics_from_the_logs_timestamps() {
    let Some(test) = ExportTest::start() else {
        return;
    };
    let (receiver, db) = (&test.receiver, &test.db);
    runtime().block_on(run_turn(db, "m1", false));
    let reader = LogReader::open(db).expect("reader");
    let events = reader.session_events("m1", 0).expect("events");
    let report = export_log(
        &reader,
        Some("m1"),
        &OtlpConfig::to(&receiver.url),
        SpanOptions::default(),
    )
    .expect("export");
    assert_eq!(report.model_calls, 2);
    let metrics = receiver.wait_for_metric("gen_ai.client.operation.duration");
    let metric = |name: &str| {
        metrics
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no metric {name} in {metrics:#?}"))
    };
    let points = |name: &str| -> Vec<Value> {
        metric(name)["histogram"]["data_points"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let count = |name: &str| -> i64 {
        points(name)
            .iter()
            .map(|p| {
                p["count"]
                    .as_str()
                    .and_then(|c| c.parse().ok())
                    .or(p["count"].as_i64())
                    .unwrap_or(0)
            })
            .sum()
    };
    let sum = |name: &str| -> f64 { points(name).iter().filter_map(|p| p["sum"].as_f64()).sum() };

    // Durations: step_configured → step_finished of each step, as the log dates them.
    let configured: Vec<i64> = events
        .iter()
        .filter(|e| matches!(e.event, Event::StepConfigured { .. }))
        .map(|e| ns(e.at))
        .collect();
    let finished: Vec<i64> = events
        .iter()
        .filter(|e| matches!(e.event, Event::StepFinished { .. }))
        .map(|e| ns(e.at))
        .collect();
    let expected: f64 = configured
        .iter()
        .zip(&finished)
        .map(|(c, f)| (f - c) as f64 / 1e9)
        .sum();
    assert_eq!(count("gen_ai.client.operation.duration"), 2);
    assert!((sum("gen_ai.client.operation.duration") - expected).abs() < 1e-9);
    assert_eq!(metric("gen_ai.client.operation.duration")["unit"], "s");
    assert_eq!(count("gen_ai.client.operation.time_to_first_chunk"), 2);
    // Tokens: per direction, as the usage the log holds.
    assert_eq!(count("gen_ai.client.inference.operation.input_tokens"), 2);
    assert_eq!(sum("gen_ai.client.inference.operation.input_tokens"), 260.0);
    assert_eq!(sum("gen_ai.client.inference.operation.output_tokens"), 16.0);
    let point = &points("gen_ai.client.operation.duration")[0];
    assert_eq!(attr_str(point, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(attr_str(point, "gen_ai.request.model"), Some("claude-test"));
    assert_eq!(attr_str(point, "gen_ai.operation.name"), Some("chat"));

    // The older names, asked for: one token histogram split by type, and the cache writes
    // under their older name on the spans.
    let legacy = SpanOptions::new(false, Conventions::Legacy);
    export_log(&reader, Some("m1"), &OtlpConfig::to(&receiver.url), legacy).expect("export");
    let metrics = receiver.wait_for_metric("gen_ai.client.token.usage");
    let usage = metrics
        .iter()
        .find(|m| m["name"] == "gen_ai.client.token.usage")
        .expect("the older token histogram");
    let types: Vec<&str> = usage["histogram"]["data_points"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| attr_str(p, "gen_ai.token.type"))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        types.contains(&"input") && types.contains(&"output"),
        "{usage:#}"
    );
    let spans = receiver.wait_for(8);
    let old = spans
        .iter()
        .filter(|s| attr(s, "gen_ai.usage.cache_creation.input_tokens").is_some())
        .count();
    let new = spans
        .iter()
        .filter(|s| attr(s, "gen_ai.usage.cache_write.input_tokens").is_some())
        .count();
    assert_eq!(
        (old, new),
        (1, 1),
        "one step under each name, one export each"
    );
}
