//! `mull approve`: a person answers a parked tool call from the terminal. The log is prepared
//! through the library (a travel-desk call to `find_hotels` whose `before_tool_call` asks for
//! approval); the binary then denies it, the continuation runs with the demo's scripted agent,
//! and a second answer or an unknown id is refused without writing anything.

mod support;

use mull_store::{Log, LogReader};
use serde_json::json;
use support::parked::{deny_from_terminal, mull, park, parked};

fn events(db: &std::path::Path) -> Vec<mull::core::Envelope> {
    LogReader::open(db)
        .expect("reader")
        .session_events("s", 0)
        .expect("events")
}

#[test]
fn a_denial_from_the_terminal_is_an_event_and_the_conversation_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("approve.db");
    parked(&db);
    let path = db.to_str().expect("utf-8 path");
    let args = deny_from_terminal(path);
    let log = events(&db);
    assert!(log.iter().any(|e| matches!(
        &e.event,
        mull::core::Event::ToolApprovalAnswered { approved: false, reason: Some(r), .. }
            if r == "Not today."
    )));
    assert!(log.iter().any(|e| matches!(
        &e.event,
        mull::core::Event::ToolCallFinished { call_id, output: Some(o), .. }
            if call_id == "call_1" && o == &json!("Not today.")
    )));

    // Again, and an id that was never asked: refused, nothing written.
    let before = events(&db).len();
    let again = mull(&args);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already answered"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let unknown = mull(&[
        "approve",
        path,
        "--session",
        "s",
        "approval_9",
        "--model",
        "scripted-demo",
    ]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no approval request approval_9"));
    // Each refused run opened the session (one `session_opened`) and answered nothing.
    let after = events(&db);
    assert_eq!(
        after
            .iter()
            .skip(before)
            .map(|e| e.kind().to_owned())
            .collect::<Vec<_>>(),
        ["session_opened", "session_opened"]
    );
}

#[test]
fn while_another_process_writes_the_log_the_answer_goes_to_its_inbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("busy.db");
    let path = db.to_str().expect("utf-8 path").to_owned();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        // This process is the writer: it parks a call and keeps the log open.
        let log = Log::open(&db).expect("log");
        let session = park(&log, Some("Casa do Largo has a room.")).await;
        log.flush().await.expect("flush");

        let out = mull(&["approve", &path, "--session", "s", "approval_1"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("is in its inbox"), "{stdout}");
        assert_eq!(session.pending_approvals().len(), 1, "nothing written yet");

        // The writer takes it: the answer is an input event, the tool runs.
        let inbox = mull_store::Inbox::open(&db).expect("inbox");
        let replies = session
            .take_inbox(&inbox, mull::engine::CommandOptions::default())
            .await
            .expect("takes");
        assert_eq!(replies.len(), 1);
        assert!(session.pending_approvals().is_empty());
        log.flush().await.expect("flush");
        let answered = events(&db)
            .iter()
            .filter(|e| {
                matches!(
                    &e.event,
                    mull::core::Event::ToolApprovalAnswered { approved: true, .. }
                )
            })
            .count();
        assert_eq!(answered, 1);
        drop(session);
        log.close().expect("close");
    });
}
