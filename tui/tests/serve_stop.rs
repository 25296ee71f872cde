//! `mull serve` stops cleanly on SIGTERM (how service managers stop it) and Ctrl-C: a turn that
//! ends within `--grace` finishes; one that does not is cancelled, ends `aborted` in the log,
//! and its client still gets the turn's end and `[DONE]`; the process exits 0 and leaves only
//! the database file (no lock, WAL or record file). `/readyz` turns 503 as soon as it drains.

mod support;

use std::time::Duration;

use mull_core::TurnStatus;
use mull_store::LogReader;
use support::model::{ModelServer, Pace};
use support::nodes::{post_message, request, Node, Reply};

/// Starts a SQLite `mull serve` in `dir/db/` on `model`, with `--grace grace`.
fn serve(dir: &std::path::Path, model: &ModelServer, grace: &str) -> Node {
    std::fs::create_dir_all(dir.join("db")).expect("db dir");
    let db = dir.join("db/serve.db");
    Node::start(
        db.to_str().expect("utf-8 path"),
        "stop",
        dir,
        &["--model", &model.spec, "--tools", "--grace", grace],
    )
}

/// Waits (bounded) until the model streams an answer: the turn is in its last step.
async fn wait_answering(model: &ModelServer) {
    let started = std::time::Instant::now();
    while model.answering() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the turn never reached its answer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) for the process to exit after the signal.
fn exit_status(node: &mut Node) -> std::process::ExitStatus {
    node.wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("mull serve did not exit: {}", node.stderr_text()))
}

fn files_left(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("db"))
        .expect("reads the db dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn turn_statuses(dir: &std::path::Path, chat: &str) -> Vec<TurnStatus> {
    let reader = LogReader::open(dir.join("db/serve.db")).expect("opens the log");
    reader
        .turns(chat)
        .expect("reads turns")
        .into_iter()
        .map(|t| t.status)
        .collect()
}

/// The data events of a UI message stream, in order.
fn events(reply: &Reply) -> Vec<String> {
    reply
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn sigterm_lets_a_running_turn_finish_within_the_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = support::nodes::runtime();
    let model = runtime.block_on(ModelServer::start(Pace {
        words: 20,
        word_delay: Duration::from_millis(40),
    }));
    let mut node = serve(dir.path(), &model, "30s");
    let addr = node.addr.clone();
    let ready = runtime.block_on(request(
        &addr,
        "GET",
        "/readyz",
        None,
        Duration::from_secs(10),
    ));
    assert_eq!(ready.status, 200, "{}", ready.body);

    let client = runtime.spawn({
        let addr = addr.clone();
        async move { post_message(&addr, "c1", "m1", Duration::from_secs(60)).await }
    });
    runtime.block_on(wait_answering(&model));
    node.signal("TERM");
    let reply = runtime.block_on(client).expect("client task");
    let status = exit_status(&mut node);

    assert!(reply.finished_stream(), "{}", reply.body);
    let events = events(&reply);
    assert!(
        events.iter().any(|e| e.contains(r#""type":"finish""#)),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e.contains(r#""type":"error""#)));
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(status.success(), "exit {status}: {}", node.stderr_text());
    assert_eq!(files_left(dir.path()), ["serve.db"]);
    let statuses = turn_statuses(dir.path(), "c1");
    assert!(
        !statuses.is_empty() && statuses.iter().all(|s| *s == TurnStatus::Completed),
        "{statuses:?}"
    );
}

#[test]
fn past_the_grace_a_turn_is_aborted_durably_and_its_client_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = support::nodes::runtime();
    let model = runtime.block_on(ModelServer::start(Pace {
        words: 600,
        word_delay: Duration::from_millis(100),
    }));
    let mut node = serve(dir.path(), &model, "200ms");
    let addr = node.addr.clone();
    let client = runtime.spawn({
        let addr = addr.clone();
        async move { post_message(&addr, "c2", "m1", Duration::from_secs(60)).await }
    });
    runtime.block_on(wait_answering(&model));
    node.signal("TERM");
    // Draining: not ready any more (while the turn still runs, the process still answers).
    // The server handles the signal on its own time, so the probe asks until the drain shows
    // (or the process is gone), for at most 30 s.
    let asked = std::time::Instant::now();
    let probe = loop {
        let probe = runtime.block_on(request(
            &addr,
            "GET",
            "/readyz",
            None,
            Duration::from_secs(5),
        ));
        if probe.status != 200 || asked.elapsed() > Duration::from_secs(30) {
            break probe;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        probe.status == 503 || probe.status == 0,
        "a draining server is not ready: {}",
        probe.body
    );
    let reply = runtime.block_on(client).expect("client task");
    let status = exit_status(&mut node);

    assert!(reply.finished_stream(), "{}", reply.body);
    let events = events(&reply);
    assert!(
        events.iter().any(|e| e.contains(r#""type":"abort""#)),
        "the client gets the turn's end: {events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(status.success(), "exit {status}: {}", node.stderr_text());
    assert_eq!(files_left(dir.path()), ["serve.db"]);
    let statuses = turn_statuses(dir.path(), "c2");
    assert_eq!(statuses.last(), Some(&TurnStatus::Aborted), "{statuses:?}");
}

#[test]
fn ctrl_c_stops_the_same_way() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = support::nodes::runtime();
    let model = runtime.block_on(ModelServer::start(Pace {
        words: 600,
        word_delay: Duration::from_millis(100),
    }));
    let mut node = serve(dir.path(), &model, "100ms");
    let addr = node.addr.clone();
    let client = runtime.spawn({
        let addr = addr.clone();
        async move { post_message(&addr, "c3", "m1", Duration::from_secs(60)).await }
    });
    runtime.block_on(wait_answering(&model));
    node.signal("INT");
    let reply = runtime.block_on(client).expect("client task");
    let status = exit_status(&mut node);
    assert!(reply.finished_stream(), "{}", reply.body);
    assert!(status.success(), "exit {status}: {}", node.stderr_text());
    assert_eq!(files_left(dir.path()), ["serve.db"]);
    let statuses = turn_statuses(dir.path(), "c3");
    assert_eq!(statuses.last(), Some(&TurnStatus::Aborted), "{statuses:?}");
}
