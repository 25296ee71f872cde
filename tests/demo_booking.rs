//! The demo's booking turn: `book_hotel` waits for approval, the demo approves it itself through
//! the log's inbox, the booking runs once, and the deterministic run still writes the same bytes
//! every time.

use mull::demo::DemoOptions;
use mull::store::{export_jsonl, Log, LogReader};

async fn booking_run() -> (Vec<u8>, mull::store::SessionState, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.db");
    let log = Log::open(&path).unwrap();
    let report = mull::demo::run(
        &log,
        DemoOptions {
            deterministic: true,
            session_id: "book".into(),
            ..DemoOptions::default()
        },
    )
    .await
    .unwrap();
    log.flush().await.unwrap();
    let reader = LogReader::open(&path).unwrap();
    // The approval went through the log's inbox, and the demo took it.
    let inbox = mull::store::Inbox::open(&path).unwrap();
    assert!(inbox.waiting(None).unwrap().is_empty());
    let row = inbox
        .get(1)
        .unwrap()
        .expect("the demo's approval was posted");
    assert_eq!(row.outcome.as_deref(), Some("answered"));
    let mut out = Vec::new();
    export_jsonl(&reader, Some("book"), &mut out).unwrap();
    (
        out,
        reader.load_session("book").unwrap(),
        report.turns.len(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_booking_waits_for_approval_runs_once_and_stays_deterministic() {
    let (first, state, turns) = booking_run().await;
    // Six turns, the booking's turn that parked, and the continuation after the approval.
    assert_eq!(turns, 8);
    assert_eq!(
        state.turns.len(),
        8,
        "the report lists every turn the log holds"
    );
    let text = String::from_utf8(first.clone()).unwrap();
    let count = |needle: &str| text.matches(needle).count();
    assert_eq!(count(r#""type":"tool_approval_requested""#), 1);
    assert_eq!(count(r#""type":"tool_approval_answered""#), 1);
    assert_eq!(count(r#""approved":true"#), 1);
    let booked = text
        .lines()
        .filter(|l| l.contains(r#""type":"tool_call_finished""#) && l.contains("book_hotel"))
        .count();
    assert_eq!(booked, 1, "the booking ran once");
    assert!(state.pending_approvals.is_empty());
    let last = state.messages.last().unwrap();
    assert_eq!(
        last.plain_text(),
        "Booked: Casa do Largo for two nights, reference LIS-3107."
    );
    let (second, _, _) = booking_run().await;
    assert_eq!(first, second, "two deterministic runs wrote different logs");
}
