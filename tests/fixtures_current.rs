//! The recorded fixtures in `fixtures/` are real engine runs: this test regenerates each one
//! from a deterministic scripted session and fails when the committed file differs. Run with
//! `MULL_UPDATE_FIXTURES=1` to rewrite them after an intended change (then review the diff).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull::core::{SequentialIds, StreamPart, UIMessage};
use mull::demo::{DemoOptions, TickingClock};
use mull::engine::{Session, SessionOptions, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::{export_jsonl, import_jsonl, Log, LogReader};
use mull::tool_desk::ToolDesk;
use serde_json::json;

const SESSION: &str = "sess_1";

fn options() -> SessionOptions {
    SessionOptions::deterministic(SESSION)
        .with_clock(Arc::new(TickingClock::from_fixture_epoch(
            Duration::from_millis(1),
        )))
        .with_ids(Arc::new(SequentialIds::new()))
}

/// Records one turn of the tool desk answering `prompt` with `model`. With `stop_after`, the
/// user presses stop once that many text deltas have arrived.
async fn record(model: ScriptedModel, prompt: &str, stop_after: Option<usize>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let log = Log::open(&path).unwrap();
    let agent = Arc::new(ToolDesk::new(Arc::new(model)));
    let session = Session::open(&log, agent, options()).await.unwrap();
    let messages = vec![UIMessage::user("u_1", prompt)];
    match stop_after {
        None => {
            session
                .save_messages(messages, TurnOptions::default())
                .await
                .unwrap();
        }
        Some(limit) => {
            let mut stream = session.chat(messages, TurnOptions::default()).unwrap();
            let mut deltas = 0;
            while let Some(part) = stream.next().await {
                if matches!(part, StreamPart::TextDelta { .. }) {
                    deltas += 1;
                    if deltas == limit {
                        assert!(session.cancel_chat(&stream.request_id).unwrap());
                    }
                }
            }
            stream.finish().await.unwrap();
        }
    }
    export(&log, &path).await
}

async fn export(log: &Log, path: &std::path::Path) -> Vec<u8> {
    log.flush().await.unwrap();
    let mut out = Vec::new();
    export_jsonl(&LogReader::open(path).unwrap(), None, &mut out).unwrap();
    out
}

async fn two_tools() -> Vec<u8> {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.reasoning("Need the museum's location, then the weather there.")
                .text_deltas(["Let me look up ", "where the Louvre is."])
                .tool_call("call_1", "search", json!({"query": "Louvre address"}))
                .usage(310, 42)
        })
        .step(|s| {
            s.tool_call(
                "call_2",
                "weather",
                json!({"city": "Paris", "when": "tomorrow"}),
            )
            .usage(402, 18)
        })
        .step(|s| {
            s.source_url(
                "src_1",
                "https://www.louvre.fr/en/visit",
                Some("Visit the Louvre"),
            )
            .text_deltas([
                "The Louvre is in Paris (Rue de Rivoli). ",
                "Tomorrow: light rain, 19 °C — bring an umbrella.",
            ])
            .usage(455, 31)
        })
        .build();
    record(
        model,
        "Where is the Louvre, and what's the weather there tomorrow?",
        None,
    )
    .await
}

async fn tool_decisions() -> Vec<u8> {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text_deltas(["I'll take care of ", "all three."])
                .tool_call("call_1", "delete_file", json!({"path": "reports/q3.xlsx"}))
                .tool_call("call_2", "weather", json!({"city": "Oslo"}))
                .tool_call("call_3", "status_page", json!({}))
                .usage(520, 64)
        })
        .step(|s| {
            s.text_deltas([
                "I couldn't delete the report (blocked by policy). ",
                "Oslo: 4 °C and snow. The status page timed out.",
            ])
            .usage(690, 27)
        })
        .build();
    record(
        model,
        "Delete reports/q3.xlsx, check Oslo's weather and the status page.",
        None,
    )
    .await
}

async fn aborted() -> Vec<u8> {
    let delta = |text: &str| StreamPart::TextDelta {
        id: "txt_0".into(),
        text: text.into(),
    };
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.part(StreamPart::TextStart { id: "txt_0".into() })
                .part(delta("The lighthouse on Skerry Point "))
                .part(delta("had not missed a night in ninety years. "))
                .part(delta("Its keeper, Ilse, "))
                .part(delta("climbed the hundred and twelve steps at dusk, "))
                // The user presses stop here; the rest never arrives.
                .pause(Duration::from_secs(60))
                .part(delta("as she always had."))
                .part(StreamPart::TextEnd { id: "txt_0".into() })
        })
        .build();
    record(model, "Tell me a long story about a lighthouse.", Some(4)).await
}

async fn demo() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.db");
    let log = Log::open(&path).unwrap();
    mull::demo::run(
        &log,
        DemoOptions {
            deterministic: true,
            session_id: SESSION.into(),
            ..DemoOptions::default()
        },
    )
    .await
    .unwrap();
    export(&log, &path).await
}

fn check(name: &str, fresh: &[u8]) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    if std::env::var("MULL_UPDATE_FIXTURES").as_deref() == Ok("1") {
        std::fs::write(&path, fresh).unwrap();
        return None;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    if committed == fresh {
        return None;
    }
    let fresh_text = String::from_utf8_lossy(fresh);
    let committed_text = String::from_utf8_lossy(&committed);
    let line = fresh_text
        .lines()
        .zip(committed_text.lines())
        .position(|(a, b)| a != b)
        .map(|i| i + 1)
        .unwrap_or_else(|| {
            fresh_text
                .lines()
                .count()
                .min(committed_text.lines().count())
                + 1
        });
    Some(format!(
        "fixtures/{name} is out of date (first difference at line {line}); \
         rerun with MULL_UPDATE_FIXTURES=1 and review the diff"
    ))
}

#[tokio::test]
async fn fixtures_are_current_engine_runs() {
    let runs = [
        ("two-tools.jsonl", two_tools().await),
        ("tool-decisions.jsonl", tool_decisions().await),
        ("aborted.jsonl", aborted().await),
        ("demo.jsonl", demo().await),
    ];
    for (name, fresh) in &runs {
        replays_through_the_store(name, fresh);
    }
    let stale: Vec<String> = runs
        .iter()
        .filter_map(|(name, fresh)| check(name, fresh))
        .collect();
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

/// A fixture imports into a fresh log, exports byte for byte, and folds into a session whose
/// every turn ended and whose every user message is answered.
fn replays_through_the_store(name: &str, fresh: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("replay.db")).unwrap();
    import_jsonl(std::io::BufReader::new(fresh), name, &log).unwrap();
    log.flush_blocking().unwrap();
    let reader = log.reader().unwrap();
    let mut again = Vec::new();
    export_jsonl(&reader, None, &mut again).unwrap();
    assert!(again == fresh, "{name}: export after import differs");
    let state = reader.load_session(SESSION).unwrap();
    assert!(state.draft.is_none(), "{name}: a turn was left running");
    assert!(
        state.turns.iter().all(|t| t.finished_at.is_some()),
        "{name}: unfinished turn"
    );
    // Every user message is answered; a continuation (after a tool's approval) adds a second
    // assistant message to the same exchange.
    let roles: Vec<_> = state.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles.first(),
        Some(&mull::core::Role::User),
        "{name}: {roles:?}"
    );
    assert_eq!(
        roles.last(),
        Some(&mull::core::Role::Assistant),
        "{name}: {roles:?}"
    );
    for pair in roles.windows(2) {
        assert!(
            !(pair[0] == mull::core::Role::User && pair[1] == mull::core::Role::User),
            "{name}: an unanswered user message: {roles:?}"
        );
    }
}
