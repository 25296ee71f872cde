//! The inbox of a PostgreSQL log: an approval's answer posted by a process that does not hold
//! the chat (`mull approve URL`, the dashboard) is taken by the node that holds it — never by
//! another node — and runs the tool once; with no node holding the chat, `mull approve` takes
//! it itself, as it does on a SQLite log no process writes.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mull_core::{Envelope, Event};
use mull_store::{EventLog, InboxStore};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgInbox, PgLog, PgOptions, Reads};
use support::nodes::{runtime, Node};
use support::parked::{deny_from_terminal, mull, park_on};

/// Parks session `s` (approval `approval_1` waits) on the log at `url`, then gives it back.
async fn parked(url: &str) {
    let log = PgLog::connect(url, PgOptions::new("parker"))
        .await
        .expect("opens the log");
    let session = park_on(Arc::new(log.clone()), Some("Casa do Largo has a room.")).await;
    drop(session);
    log.release_session("s").await.expect("gives s back");
    log.flush_all().await.expect("flushes");
}

async fn events(url: &str) -> Vec<Envelope> {
    let reads = Reads::open(url).await.expect("reads");
    reads.session_page("s", 0, 10_000).await.expect("events")
}

/// (approvals answered, `call_1` runs) in the session's events.
fn answered_and_ran(events: &[Envelope]) -> (usize, usize) {
    let answered = events
        .iter()
        .filter(|e| matches!(e.event, Event::ToolApprovalAnswered { .. }))
        .count();
    let ran = events
        .iter()
        .filter(
            |e| matches!(&e.event, Event::ToolCallFinished { call_id, .. } if call_id == "call_1"),
        )
        .count();
    (answered, ran)
}

#[test]
fn an_answer_waits_while_another_node_holds_the_chat_then_one_node_takes_it() {
    let Some(pg) = TestPg::start("an_answer_waits_while_another_node_holds_the_chat") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = runtime();
    // This process parks the approval and keeps holding the chat (its lease stays live).
    let log = runtime.block_on(async {
        PgLog::connect(&url, PgOptions::new("holder"))
            .await
            .expect("opens the log")
    });
    let session = runtime.block_on(park_on(Arc::new(log.clone()), None));
    let mut n1 = Node::start(&url, "n1", dir.path(), &["--model", "scripted-demo"]);
    let mut n2 = Node::start(&url, "n2", dir.path(), &["--model", "scripted-demo"]);

    let out = mull(&["approve", &url, "--session", "s", "approval_1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("node holder holds session s"), "{stdout}");
    // Both nodes sweep several times: neither takes a message for a chat another node holds.
    std::thread::sleep(Duration::from_millis(1500));
    let inbox = runtime.block_on(async { PgInbox::open(&url).await.expect("inbox") });
    let waiting = runtime.block_on(inbox.waiting(Some("s"))).expect("reads");
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(session.pending_approvals().len(), 1);
    assert_eq!(answered_and_ran(&runtime.block_on(events(&url))), (0, 0));

    // The holder gives the chat back: a node opens it (taking its lease) and takes the answer.
    drop(session);
    runtime.block_on(async {
        log.release_session("s").await.expect("gives s back");
        log.flush_all().await.expect("flushes");
    });
    let id = waiting[0].id;
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let row = runtime
            .block_on(inbox.get(id))
            .expect("reads")
            .expect("row");
        let events = runtime.block_on(events(&url));
        if row.outcome.is_some() && answered_and_ran(&events).1 > 0 {
            assert_eq!(row.outcome.as_deref(), Some("answered"));
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "no node acted on the answer\n{}\n{}",
            n1.stderr_text(),
            n2.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Both nodes swept several times more: still one answer, one run.
    std::thread::sleep(Duration::from_millis(1500));
    let later = runtime.block_on(events(&url));
    assert_eq!(answered_and_ran(&later), (1, 1), "{:?}", kinds(&later));
    assert!(first.iter().all(|e| later.contains(e)));
    assert!(n1.interrupt_or_exit(Duration::ZERO).success());
    assert!(n2.interrupt_or_exit(Duration::ZERO).success());
    let takers = [&n1, &n2]
        .iter()
        .filter(|n| n.stderr_text().contains("inbox answers taken"))
        .count();
    assert_eq!(takers, 1, "{}\n{}", n1.stderr_text(), n2.stderr_text());
}

fn kinds(events: &[Envelope]) -> Vec<&str> {
    events.iter().map(|e| e.kind()).collect()
}

#[test]
fn with_no_node_holding_the_chat_mull_approve_takes_the_answer_itself() {
    let Some(pg) = TestPg::start("with_no_node_holding_the_chat_mull_approve_takes") else {
        return;
    };
    let url = pg.database();
    let runtime = runtime();
    runtime.block_on(parked(&url));
    let args = deny_from_terminal(&url);
    let log = runtime.block_on(events(&url));
    assert!(log.iter().any(|e| matches!(
        &e.event,
        Event::ToolApprovalAnswered { approved: false, reason: Some(r), .. } if r == "Not today."
    )));
    assert_eq!(answered_and_ran(&log), (1, 1), "{:?}", kinds(&log));
    // It gave the session back: a node opens it at once.
    let lease = runtime.block_on(async {
        let reads = Reads::open(&url).await.expect("reads");
        reads.lease("s").await.expect("lease")
    });
    assert!(matches!(&lease, Some((_, _, false))), "{lease:?}");

    // Again: refused with the reason, and the log holds no second answer.
    let again = mull(&args);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("already answered"), "{stderr}");
    assert_eq!(answered_and_ran(&runtime.block_on(events(&url))), (1, 1));
    // A session the log does not hold: refused before anything is posted.
    let unknown = mull(&["approve", &url, "--session", "nope", "approval_1"]);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no session nope"), "{stderr}");
    let waiting = runtime.block_on(async {
        let inbox = PgInbox::open(&url).await.expect("inbox");
        inbox.waiting(None).await.expect("reads")
    });
    assert!(waiting.is_empty(), "{waiting:?}");
}
