use mull_core::ModelRole;

use super::*;

fn result(output: Value) -> ModelMessage {
    ModelMessage {
        role: ModelRole::Tool,
        content: vec![ModelContent::ToolResult {
            call_id: "call_book_1".into(),
            tool_name: "book_hotel".into(),
            output,
            is_error: false,
        }],
    }
}

#[test]
fn only_a_booking_that_came_back_without_a_reference_reads_as_declined() {
    let denied = result(json!("Tool \"book_hotel\" was denied by the user."));
    let booked = result(json!({"hotel": "Casa do Largo", "reference": "LIS-3107"}));
    assert!(booking_declined(std::slice::from_ref(&denied)));
    assert!(!booking_declined(std::slice::from_ref(&booked)));
    // Once the conversation moved on, an old denial changes nothing.
    let later = ModelMessage::text(ModelRole::User, "And a restaurant?");
    assert!(!booking_declined(&[denied, later]));
    assert!(!booking_declined(&[]));
}

/// Runs the unpaced demo on the real clock with `wait` for the booking's approval, returning
/// the report, the plans announced, and the session's `tool_approval_answered` events.
async fn run_with_wait(
    wait: Duration,
    stop_when_asked: bool,
) -> (DemoReport, Vec<SelfApproval>, Vec<mull_core::Event>) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("demo.db")).unwrap();
    let plans = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&plans);
    let stop = Arc::new(AtomicBool::new(false));
    let raise = Arc::clone(&stop);
    let options = DemoOptions {
        fast: true,
        approval_wait: wait,
        on_approval_wait: Some(ApprovalNotice(Arc::new(move |_, plan| {
            seen.lock().unwrap().push(plan.clone());
            if stop_when_asked {
                raise.store(true, Ordering::SeqCst);
            }
        }))),
        stop: Some(stop),
        ..DemoOptions::default()
    };
    let report = run(&log, options).await.unwrap();
    log.flush().await.unwrap();
    let answers = log
        .reader()
        .unwrap()
        .session_events(&report.session_id, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .filter(|e| matches!(e, mull_core::Event::ToolApprovalAnswered { .. }))
        .collect();
    let plans = plans.lock().unwrap().clone();
    (report, plans, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_the_demo_approves_itself_when_it_said_and_the_log_says_it_did() {
    let before = Utc::now();
    let (report, plans, answers) = run_with_wait(Duration::from_secs(1), false).await;
    assert!(!report.stopped);
    assert_eq!(report.turns.len(), 8, "the continuation ran");
    // Told once, before waiting: when (a second from the request, on the session's clock).
    let [plan] = plans.as_slice() else {
        panic!("one announcement: {plans:?}")
    };
    assert_eq!(plan.wait, Duration::from_secs(1));
    assert!(plan.at > before + chrono::Duration::seconds(1) - chrono::Duration::milliseconds(1));
    assert!(
        plan.at <= Utc::now(),
        "the approval came after the announced time"
    );
    assert_eq!(plan.by, "mull demo itself, unanswered for 1 s");
    // The log names the demo as the answerer.
    let [mull_core::Event::ToolApprovalAnswered { approved, by, .. }] = answers.as_slice() else {
        panic!("one answer: {answers:?}")
    };
    assert!(approved);
    assert_eq!(by.as_deref(), Some("mull demo itself, unanswered for 1 s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_demo_leaves_the_booking_waiting_instead_of_approving_it() {
    let (report, plans, answers) = run_with_wait(Duration::from_secs(30), true).await;
    assert!(report.stopped);
    assert_eq!(plans.len(), 1);
    assert_eq!(report.turns.len(), 7, "no continuation");
    assert!(answers.is_empty(), "nobody answered: {answers:?}");
}
