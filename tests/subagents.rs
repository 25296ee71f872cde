//! Agents as tools: a parent's tool call runs a sub-agent's turn as a child session in the same
//! log. Hooks on the child's turn, progress reaching the parent, usage rolled up, the nesting
//! bound, cancellation, a crash of both, and re-execution.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull::core::{
    DecisionAction, EntryPath, Envelope, ErrorStage, Event, StreamPart, TurnStatus, UIMessage,
    Usage,
};
use mull::engine::subagent::{DEFAULT_MAX_DEPTH, PARENT_CANCELLED};
use mull::engine::{AgentTool, FnTool, OutcomeStatus, Session, ToolError, ToolSet, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::{LogReader, SessionState};
use serde_json::{json, Value};
use support::hook_calls::HookCalls;
use support::replay::{recording_of, reexecute_ok};
use support::subagents::{desk, research_tool, researcher, Recorded};
use support::test_log::TestLog;

mod support;

const CHILD: &str = "s1.agent_1";

fn ask(text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user("u1", text)]
}

/// Runs the desk asking the researcher once, to the end.
async fn desk_run(log: &TestLog, calls: &HookCalls, lookups: &Arc<AtomicUsize>) -> Session {
    let parent = Arc::new(desk(calls, research_tool(researcher(calls, lookups))));
    let session = log.open(&parent).await;
    let outcome = session
        .save_messages(ask("Hills?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Completed, "{outcome:?}");
    session
}

/// Every event of every session, in log order.
async fn all_events(log: &TestLog) -> Vec<Envelope> {
    log.log.flush().await.unwrap();
    let reader = LogReader::open(&log.path).unwrap();
    reader.range(0, reader.max_seq().unwrap()).unwrap()
}

fn of_session<'a>(events: &'a [Envelope], session: &str) -> Vec<&'a Envelope> {
    events.iter().filter(|e| e.session_id == session).collect()
}

fn load(log: &TestLog, session: &str) -> SessionState {
    LogReader::open(&log.path)
        .unwrap()
        .load_session(session)
        .unwrap()
}

#[tokio::test]
async fn a_child_turn_fires_every_hook_in_order_under_its_own_entry_path() {
    let log = TestLog::new();
    let calls = HookCalls::default();
    let lookups = Arc::new(AtomicUsize::new(0));
    desk_run(&log, &calls, &lookups).await;
    let child: Vec<String> = calls
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("researcher:"))
        .collect();
    assert_eq!(
        support::hook_calls::fold(&child).join("\n"),
        "researcher: before_turn entry=SubAgent
researcher: before_step 0
researcher: on_chunk text
researcher: on_chunk other x3
researcher: before_tool_call lookup
researcher: after_tool_call lookup success=true
researcher: on_chunk tool-call
researcher: on_chunk tool-result
researcher: on_step_finish 0
researcher: before_step 1
researcher: on_chunk text
researcher: on_step_finish 1
researcher: on_chat_response Completed"
    );
    // The child's hooks all ran inside the parent's tool call.
    let lines = calls.lines();
    let at = |line: &str| lines.iter().position(|l| l == line).unwrap();
    assert!(at("desk: before_tool_call research") < at("researcher: before_turn entry=SubAgent"));
    assert!(
        at("researcher: on_chat_response Completed")
            < at("desk: after_tool_call research success=true")
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn parent_and_child_name_each_other_in_the_log() {
    let log = TestLog::new();
    let session = desk_run(&log, &HookCalls::default(), &Arc::new(AtomicUsize::new(0))).await;
    let events = all_events(&log).await;
    let parent_turn = session.state().turns[0].turn_id.clone().unwrap();
    let started = of_session(&events, "s1")
        .into_iter()
        .find(|e| matches!(e.event, Event::SubagentStarted { .. }))
        .expect("the parent's call names the child");
    assert_eq!(started.turn_id.as_deref(), Some(parent_turn.as_str()));
    assert_eq!(
        started.event,
        Event::SubagentStarted {
            step: 0,
            call_id: "call_research_1".into(),
            tool: "research".into(),
            agent: "researcher".into(),
            child_session_id: CHILD.into(),
            depth: 1,
        }
    );
    let child = of_session(&events, CHILD);
    let kinds: Vec<&str> = child.iter().take(4).map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            "session_opened",
            "subagent_linked",
            "turn_requested",
            "user_messages_saved"
        ]
    );
    assert_eq!(
        child[1].event,
        Event::SubagentLinked {
            parent_session_id: "s1".into(),
            parent_turn_id: parent_turn.clone(),
            parent_call_id: "call_research_1".into(),
            depth: 1,
            budget: None,
        }
    );
    assert!(matches!(
        child[2].event,
        Event::TurnRequested {
            entry: EntryPath::SubAgent,
            ..
        }
    ));
    assert!(child.iter().any(|e| matches!(
        e.event,
        Event::TurnStarted {
            entry: EntryPath::SubAgent,
            ..
        }
    )));
    // The child session exists only after the parent said whose it is.
    assert!(started.seq < child[0].seq);
    let state = load(&log, CHILD);
    let parent = state
        .parent
        .expect("the child's projection names its parent");
    assert_eq!(
        (
            parent.session_id.as_str(),
            parent.turn_id.as_str(),
            parent.call_id.as_str(),
            parent.depth
        ),
        ("s1", parent_turn.as_str(), "call_research_1", 1)
    );
    let runs = load(&log, "s1").subagents;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].child_session_id, CHILD);
    assert_eq!(runs[0].status, Some(TurnStatus::Completed));
}

/// The preliminary outputs and the final output of the parent's `research` call.
fn research_results(events: &[&Envelope]) -> (Vec<Value>, Option<Value>) {
    let mut preliminary = Vec::new();
    let mut last = None;
    for e in events {
        if let Event::Chunk {
            part:
                StreamPart::ToolResult {
                    call_id,
                    output,
                    preliminary: p,
                    ..
                },
            ..
        } = &e.event
        {
            if call_id == "call_research_1" {
                if *p {
                    preliminary.push(output.clone());
                } else {
                    last = Some(output.clone());
                }
            }
        }
    }
    (preliminary, last)
}

#[tokio::test]
async fn the_childs_text_and_tools_reach_the_parent_as_preliminary_results() {
    let log = TestLog::new();
    let calls = HookCalls::default();
    let lookups = Arc::new(AtomicUsize::new(0));
    let parent = Arc::new(desk(&calls, research_tool(researcher(&calls, &lookups))));
    let session = log.open(&parent).await;
    // Through `chat`, as a client sees it.
    let mut stream = session.chat(ask("Hills?"), TurnOptions::default()).unwrap();
    let mut seen = Vec::new();
    while let Some(part) = stream.next().await {
        if let StreamPart::ToolResult {
            output,
            preliminary,
            ..
        } = part
        {
            seen.push((preliminary, output));
        }
    }
    let snapshot = |text: &str, state: Option<&str>| {
        let tools = json!([{"call_id": "call_lookup_1", "tool": "lookup", "state": state}]);
        json!({"session_id": CHILD, "agent": "researcher", "status": "running", "text": text, "tools": tools})
    };
    let expected = vec![
        (true, snapshot("", Some("running"))),
        (true, snapshot("", Some("done"))),
        (true, snapshot("Looking it up.", Some("done"))),
        (true, snapshot("Lisbon has seven hills.", Some("done"))),
        (true, json!("Lisbon has seven hills.")),
        (false, json!("Lisbon has seven hills.")),
    ];
    assert_eq!(seen, expected);
    // The same parts are in the parent's log, which a resumed stream reads.
    let events = all_events(&log).await;
    let (preliminary, last) = research_results(&of_session(&events, "s1"));
    assert_eq!(preliminary.len(), 5);
    assert_eq!(preliminary[3], expected[3].1);
    assert_eq!(last, Some(json!("Lisbon has seven hills.")));
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        ..Usage::default()
    }
}

#[tokio::test]
async fn the_childs_usage_rolls_up_into_the_parents_totals() {
    let log = TestLog::new();
    let session = desk_run(&log, &HookCalls::default(), &Arc::new(AtomicUsize::new(0))).await;
    let child = load(&log, CHILD);
    assert_eq!(child.usage.input_tokens, Some(250));
    assert_eq!(child.usage.output_tokens, Some(30));
    // Folded from the log, and live in the engine: the same numbers.
    for state in [load(&log, "s1"), session.state()] {
        let turn = &state.turns[0];
        assert_eq!(turn.usage.input_tokens, Some(2200), "the turn's own calls");
        assert_eq!(turn.subagent_usage.input_tokens, Some(250));
        assert_eq!(turn.total_usage().input_tokens, Some(2450));
        assert_eq!(turn.total_usage().output_tokens, Some(100));
        assert_eq!(state.usage.input_tokens, Some(2450), "the session's total");
        assert_eq!(state.usage.output_tokens, Some(100));
    }
    let finished = all_events(&log)
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::SubagentFinished { usage, status, .. } => Some((usage, status)),
            _ => None,
        })
        .unwrap();
    assert_eq!(finished.1, TurnStatus::Completed);
    assert_eq!(finished.0.input_tokens, usage(250, 30).input_tokens);
    // The session list agrees.
    let overviews = LogReader::open(&log.path)
        .unwrap()
        .session_overviews()
        .unwrap();
    assert_eq!(overviews.get("s1").unwrap().usage.input_tokens, Some(2450));
}

/// An agent that asks a sub-agent like itself, `levels` deep, through tools bounded at
/// `max_depth`. The innermost level answers without calling anything.
fn nesting(levels: u32, max_depth: u32, calls: &HookCalls) -> Recorded {
    let name = format!("level{levels}");
    if levels == 0 {
        return Recorded {
            name,
            model: ScriptedModel::builder("scripted-leaf")
                .step(|s| s.text("Leaf answer.").usage(1, 1))
                .build(),
            tools: ToolSet::new(),
            calls: calls.clone(),
            block_lookups: false,
        };
    }
    let inner = nesting(levels - 1, max_depth, calls);
    let model = ScriptedModel::builder("scripted-nest")
        .step(|s| s.tool_call("call_deeper", "deeper", json!({"prompt": "Go deeper."})))
        .step(|s| s.text("Came back up."))
        .build();
    Recorded {
        name,
        model,
        tools: ToolSet::new().with(
            AgentTool::new("deeper", "Asks one level deeper.", Arc::new(inner))
                .with_max_depth(max_depth)
                .shared(),
        ),
        calls: calls.clone(),
        block_lookups: false,
    }
}

#[tokio::test]
async fn nesting_past_the_bound_is_the_tools_error_and_starts_nothing() {
    let log = TestLog::new();
    let calls = HookCalls::default();
    let top = Arc::new(nesting(3, 2, &calls));
    let session = log.open(&top).await;
    let outcome = session
        .save_messages(ask("Go."), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Completed);
    let events = all_events(&log).await;
    let mut sessions: Vec<&str> = events.iter().map(|e| e.session_id.as_str()).collect();
    sessions.dedup();
    sessions.sort_unstable();
    sessions.dedup();
    // s1 (depth 0) → its agent_1 (depth 1) → its agent_2 (depth 2); depth 3 is refused.
    assert_eq!(sessions, ["s1", "s1.agent_1", "s1.agent_1.agent_2"]);
    let refused = of_session(&events, "s1.agent_1.agent_2")
        .into_iter()
        .find_map(|e| match &e.event {
            Event::ToolCallFinished {
                success: false,
                error,
                ..
            } => error.clone(),
            _ => None,
        })
        .expect("the deepest call failed");
    assert_eq!(
        refused,
        "sub-agent \"level0\" not started: it would run at nesting depth 3, past the limit \
         of 2 set on tool \"deeper\""
    );
    assert!(!calls.lines().iter().any(|l| l.starts_with("level0:")));
    assert_eq!(load(&log, "s1.agent_1.agent_2").parent.unwrap().depth, 2);
    assert_eq!(DEFAULT_MAX_DEPTH, 3);
}

/// A researcher whose lookup waits until its turn is cancelled, after saying it started.
fn stuck_researcher(calls: &HookCalls, started: Arc<tokio::sync::Notify>) -> Recorded {
    let model = ScriptedModel::builder("scripted-research")
        .step(|s| s.tool_call("call_lookup_1", "lookup", json!({"word": "lisbon"})))
        .build();
    let lookup = FnTool::new("lookup", "Waits.", move |_: Value, call| {
        let started = Arc::clone(&started);
        async move {
            started.notify_one();
            call.cancel.cancelled().await;
            Err::<Value, ToolError>("cancelled".into())
        }
    })
    .with_schema(json!({"type": "object"}));
    Recorded {
        name: "researcher".to_owned(),
        model,
        tools: ToolSet::new().with(lookup.shared()),
        calls: calls.clone(),
        block_lookups: false,
    }
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let log = TestLog::new();
    let calls = HookCalls::default();
    let started = Arc::new(tokio::sync::Notify::new());
    let child = stuck_researcher(&calls, Arc::clone(&started));
    let parent = Arc::new(desk(&calls, research_tool(child)));
    let session = log.open(&parent).await;
    let stream = session.chat(ask("Hills?"), TurnOptions::default()).unwrap();
    let request_id = stream.request_id.clone();
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("the child's tool starts");
    assert!(session.cancel_chat(&request_id).unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(10), stream.finish())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Aborted);
    // The child's turn ends too, aborted, with the reason in its log.
    let ended = async {
        loop {
            let state = load(&log, CHILD);
            if state
                .turns
                .first()
                .is_some_and(|t| t.status != TurnStatus::Running)
            {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let child = tokio::time::timeout(Duration::from_secs(10), ended)
        .await
        .expect("the child's turn ends");
    assert_eq!(child.turns[0].status, TurnStatus::Aborted);
    let events = all_events(&log).await;
    let reason = of_session(&events, CHILD)
        .into_iter()
        .find_map(|e| match &e.event {
            Event::CancellationRequested { reason, .. } => Some(reason.clone()),
            _ => None,
        });
    assert_eq!(reason.as_deref(), Some(PARENT_CANCELLED));
    assert!(calls
        .lines()
        .contains(&"researcher: on_chat_response Aborted".to_owned()));
}

#[tokio::test]
async fn a_crash_with_a_child_running_recovers_both_and_reruns_no_tool() {
    // A whole run, then the log a crash leaves: everything up to the child's lookup decision.
    let full_log = TestLog::new();
    desk_run(
        &full_log,
        &HookCalls::default(),
        &Arc::new(AtomicUsize::new(0)),
    )
    .await;
    let full = all_events(&full_log).await;
    let cut = full
        .iter()
        .position(|e| e.session_id == CHILD && matches!(e.event, Event::ToolDecided { .. }))
        .unwrap()
        + 1;
    // The next process opens the log: recovery resolves both turns.
    let crashed = TestLog::crashed_after(&full[..cut]).await;
    for session in ["s1", CHILD] {
        let state = load(&crashed, session);
        assert_eq!(state.turns[0].status, TurnStatus::Error, "{session}");
        assert_eq!(
            state.turns[0].error_stage,
            Some(ErrorStage::Recovery),
            "{session}"
        );
    }
    let events = all_events(&crashed).await;
    let repaired = |session: &str| -> Vec<String> {
        of_session(&events, session)
            .into_iter()
            .filter_map(|e| match &e.event {
                Event::ToolCallRepaired { call_id, .. } => Some(call_id.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(repaired("s1"), ["call_research_1"]);
    assert_eq!(repaired(CHILD), ["call_lookup_1"]);
    // Opening both sessions again with their agents runs nothing: no lookup, no new turn.
    let calls = HookCalls::default();
    let lookups = Arc::new(AtomicUsize::new(0));
    let before = crashed.log.last_seq();
    let parent = crashed
        .open(&Arc::new(desk(
            &calls,
            research_tool(researcher(&calls, &lookups)),
        )))
        .await;
    let mut child_options = crashed.options();
    child_options.session_id = CHILD.to_owned();
    let child = crashed
        .open_with(&Arc::new(researcher(&calls, &lookups)), child_options)
        .await;
    assert!(!parent.is_busy() && !child.is_busy());
    assert_eq!(lookups.load(Ordering::SeqCst), 0);
    let after: Vec<String> = all_events(&crashed)
        .await
        .into_iter()
        .filter(|e| e.seq > before)
        .map(|e| e.kind().to_owned())
        .collect();
    // Each interrupted turn's `on_chat_response`, never called, is delivered once, recovered.
    assert_eq!(
        after,
        [
            "session_opened",
            "chat_response_delivered",
            "session_opened",
            "chat_response_delivered"
        ]
    );
    drop((parent, child));
    // Re-execution re-enacts the crash in both: the parent's call writes its link and parks
    // where the process stopped; the child's lookup parks after its decision.
    crashed.log.flush().await.unwrap();
    let desk_agent = Arc::new(desk(&calls, research_tool(researcher(&calls, &lookups))));
    let report = reexecute_ok(&recording_of(&crashed.path, "s1"), desk_agent).await;
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    let child_agent = Arc::new(researcher(&calls, &lookups));
    let report = reexecute_ok(&recording_of(&crashed.path, CHILD), child_agent).await;
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    assert_eq!(lookups.load(Ordering::SeqCst), 0, "a replay runs no tool");
}

#[tokio::test]
async fn replay_serves_the_child_in_the_parent_and_reexecutes_the_child_on_its_own() {
    let log = TestLog::new();
    desk_run(&log, &HookCalls::default(), &Arc::new(AtomicUsize::new(0))).await;
    log.log.flush().await.unwrap();
    let calls = HookCalls::default();
    let lookups = Arc::new(AtomicUsize::new(0));
    // The parent: the agent tool's progress, answer and link events are served.
    let parent = recording_of(&log.path, "s1");
    let report = reexecute_ok(
        &parent,
        Arc::new(desk(&calls, research_tool(researcher(&calls, &lookups)))),
    )
    .await;
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    assert!(report
        .actual
        .iter()
        .any(|e| matches!(e.event, Event::SubagentFinished { .. })));
    // Served: the child did not run inside the parent's replay.
    assert!(!calls.lines().iter().any(|l| l.starts_with("researcher:")));
    assert_eq!(lookups.load(Ordering::SeqCst), 0);
    // The child: re-executed from its own recording, its hooks run again.
    let child = recording_of(&log.path, CHILD);
    let report = reexecute_ok(&child, Arc::new(researcher(&calls, &lookups))).await;
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    assert!(calls
        .lines()
        .contains(&"researcher: before_turn entry=SubAgent".to_owned()));
    // A changed child policy is found in the child's session.
    let mut strict = researcher(&calls, &lookups);
    strict.block_lookups = true;
    let report = reexecute_ok(&child, Arc::new(strict)).await;
    let divergence = report
        .divergence
        .expect("blocking lookups changes the child");
    assert!(
        matches!(
            divergence.actual.map(|e| e.event),
            Some(Event::ToolDecided {
                action: DecisionAction::Block,
                ..
            })
        ),
        "the child's lookup is now blocked"
    );
}

const KILL_DB: &str = "MULL_SUBAGENT_KILL_DB";
const KILL_EFFECTS: &str = "MULL_SUBAGENT_KILL_EFFECTS";

/// A researcher whose lookup appends a line to `effects` (the side effect the world sees)
/// and then never finishes.
fn effectful_researcher(calls: &HookCalls, effects: std::path::PathBuf) -> Recorded {
    let model = ScriptedModel::builder("scripted-research")
        .step(|s| s.tool_call("call_lookup_1", "lookup", json!({"word": "lisbon"})))
        .step(|s| s.text("Never reached."))
        .build();
    let lookup = FnTool::new("lookup", "Writes, then waits.", move |_: Value, _| {
        let effects = effects.clone();
        async move {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&effects)?;
            writeln!(file, "lookup ran")?;
            file.sync_all()?;
            std::future::pending::<()>().await;
            Ok::<Value, ToolError>(Value::Null)
        }
    })
    .with_schema(json!({"type": "object"}));
    Recorded {
        name: "researcher".to_owned(),
        model,
        tools: ToolSet::new().with(lookup.shared()),
        calls: calls.clone(),
        block_lookups: false,
    }
}

/// The process the kill test starts (this test binary again): the desk asks the researcher,
/// whose lookup never ends, until the process is killed.
#[test]
fn kill_child() {
    let (Ok(db), Ok(effects)) = (std::env::var(KILL_DB), std::env::var(KILL_EFFECTS)) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let log = mull::store::Log::open(&db).unwrap();
        let calls = HookCalls::default();
        let child = effectful_researcher(&calls, effects.into());
        let parent = Arc::new(desk(&calls, research_tool(child)));
        let options = mull::engine::SessionOptions::deterministic("s1");
        let session = Session::open(&log, parent, options).await.unwrap();
        let _ = session
            .save_messages(ask("Hills?"), TurnOptions::default())
            .await;
    });
}

/// Kills the child process when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_process_killed_with_its_sub_agent_running_recovers_both_and_runs_no_tool_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("killed.db");
    let effects = dir.path().join("effects.txt");
    let process = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kill_child", "--nocapture", "--test-threads=1"])
        .env(KILL_DB, &db)
        .env(KILL_EFFECTS, &effects)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut process = Killed(process);
    // SIGKILL once the child's lookup has run (its decision was durable before it ran).
    let ran = async {
        while !std::fs::read_to_string(&effects).is_ok_and(|s| !s.is_empty()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), ran)
        .await
        .expect("the child's lookup runs");
    process.0.kill().unwrap();
    process.0.wait().unwrap();
    // The next writer: recovery resolves both turns from the log.
    let reopened = mull::store::Log::open(&db).unwrap();
    let reader = LogReader::open(&db).unwrap();
    for session in ["s1", CHILD] {
        let state = reader.load_session(session).unwrap();
        assert_eq!(state.turns.len(), 1, "{session}");
        assert_eq!(state.turns[0].status, TurnStatus::Error, "{session}");
        assert_eq!(
            state.turns[0].error_stage,
            Some(ErrorStage::Recovery),
            "{session}"
        );
    }
    // Opening both sessions again runs no tool: the lookup ran once, before the kill. Each
    // interrupted turn's `on_chat_response`, never called, runs once, with the error.
    let calls = HookCalls::default();
    let parent = Arc::new(desk(
        &calls,
        research_tool(effectful_researcher(&calls, effects.clone())),
    ));
    let session = Session::open(
        &reopened,
        parent,
        mull::engine::SessionOptions::deterministic("s1"),
    )
    .await
    .unwrap();
    let child = Session::open(
        &reopened,
        Arc::new(effectful_researcher(&calls, effects.clone())),
        mull::engine::SessionOptions::deterministic(CHILD),
    )
    .await
    .unwrap();
    assert!(!session.is_busy() && !child.is_busy());
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "lookup ran\n");
    assert_eq!(
        calls.lines(),
        [
            "desk: on_chat_response Error",
            "researcher: on_chat_response Error"
        ]
    );
}

#[tokio::test]
async fn a_failed_sub_agent_is_the_calls_error_and_the_parent_goes_on() {
    let log = TestLog::new();
    let calls = HookCalls::default();
    let broken = Recorded {
        name: "researcher".to_owned(),
        model: ScriptedModel::builder("scripted-research")
            .step(|s| s.error("the guides are down"))
            .build(),
        tools: ToolSet::new(),
        calls: calls.clone(),
        block_lookups: false,
    };
    let parent = Arc::new(desk(&calls, research_tool(broken)));
    let session = log.open(&parent).await;
    let outcome = session
        .save_messages(ask("Hills?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Completed);
    let events = all_events(&log).await;
    let (success, error) = of_session(&events, "s1")
        .into_iter()
        .find_map(|e| match &e.event {
            Event::ToolCallFinished { success, error, .. } => Some((*success, error.clone())),
            _ => None,
        })
        .unwrap();
    assert!(!success);
    let error = error.unwrap();
    assert!(
        error.starts_with(r#"sub-agent "researcher" (session s1.agent_1) ended as error: "#)
            && error.contains("the guides are down"),
        "{error}"
    );
    let runs = load(&log, "s1").subagents;
    assert_eq!(runs[0].status, Some(TurnStatus::Error));
}
