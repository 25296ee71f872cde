//! The same scripted session run twice writes byte-identical logs: every timestamp comes from
//! the injected clock and every id from the injected id source.

use std::time::Duration;

use mull::demo::DemoOptions;
use mull::store::{export_jsonl, Log, LogReader};

async fn demo_log_bytes() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.db");
    let log = Log::open(&path).unwrap();
    let report = mull::demo::run(
        &log,
        DemoOptions {
            deterministic: true,
            session_id: "det".into(),
            part_delay: Duration::from_millis(50),
            ..DemoOptions::default()
        },
    )
    .await
    .unwrap();
    log.flush().await.unwrap();
    let logged = LogReader::open(&path).unwrap().turns("det").unwrap().len();
    assert_eq!(report.turns.len(), logged, "the report lists every turn");
    let mut out = Vec::new();
    // Every session: the demo's and its research sub-agent's.
    export_jsonl(&LogReader::open(&path).unwrap(), None, &mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_scripted_session_writes_the_same_bytes() {
    let first = demo_log_bytes().await;
    let second = demo_log_bytes().await;
    let text = String::from_utf8(first.clone()).unwrap();
    // A real session: tools ran, one call was blocked, a streaming tool reported progress, a
    // sub-agent answered a question in a session of its own.
    assert!(text.contains(r#""action":"block""#));
    assert!(text.contains(r#""type":"subagent_linked""#));
    assert!(text.contains(r#""preliminary":true"#));
    assert!(text.lines().count() > 80, "{} lines", text.lines().count());
    assert_eq!(first, second, "two deterministic runs wrote different logs");
}
