//! Sessions on the PostgreSQL log, against a real server the test harness starts: the engine
//! writes the same events as on SQLite, a session moves between nodes, and a node that died
//! mid-turn is recovered by another once its lease expired.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{Event, LanguageModel, SequentialIds, TurnStatus, UIMessage};
use mull::engine::{Agent, OutcomeStatus, Session, SessionOptions, ToolSet, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::{EventLog, StoreError};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, Reads};
use serde_json::json;
use support::test_log::TestLog;

async fn node(url: &str, name: &str, lease_ttl: Duration) -> Arc<PgLog> {
    let mut options = PgOptions::new(name);
    options.lease_ttl = lease_ttl;
    Arc::new(PgLog::connect(url, options).await.unwrap())
}

const QUESTIONS: [&str; 3] = [
    "What's Lisbon like, in one breath?",
    "Weather, and a walk from the guides?",
    "Actually, cancel my booking LIS-2291.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_moving_between_nodes_writes_what_sqlite_writes() {
    let Some(pg) = TestPg::start("a_conversation_moving_between_nodes_writes_what_sqlite_writes")
    else {
        return;
    };
    // The demo conversation on SQLite, a fresh session for each turn.
    let sqlite = TestLog::new();
    let ids = Arc::new(SequentialIds::new());
    for (i, text) in QUESTIONS.iter().enumerate() {
        let options = sqlite.options().with_ids(ids.clone());
        let session = Session::open(&sqlite.log, mull::demo::agent(), options)
            .await
            .unwrap();
        let outcome = session
            .save_messages(
                vec![UIMessage::user(format!("u_{i}"), *text)],
                TurnOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(outcome.status, OutcomeStatus::Completed);
    }
    sqlite.log.flush().await.unwrap();
    let mut expected = Vec::new();
    mull::store::export_jsonl(&sqlite.log.reader().unwrap(), None, &mut expected).unwrap();

    // The same on PostgreSQL, each turn on the next node, each node giving the session back.
    let url = pg.database();
    let nodes = [
        node(&url, "a", Duration::from_secs(10)).await,
        node(&url, "b", Duration::from_secs(10)).await,
        node(&url, "c", Duration::from_secs(10)).await,
    ];
    let ids = Arc::new(SequentialIds::new());
    for (i, text) in QUESTIONS.iter().enumerate() {
        let log = &nodes[i];
        let options = sqlite.options().with_ids(ids.clone());
        let session = Session::open_on(log.clone(), mull::demo::agent(), options)
            .await
            .unwrap();
        let outcome = session
            .save_messages(
                vec![UIMessage::user(format!("u_{i}"), *text)],
                TurnOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(outcome.status, OutcomeStatus::Completed);
        drop(session);
        log.release_session("s1").await.unwrap();
    }
    let reads = Reads::open(&url).await.unwrap();
    let mut actual = Vec::new();
    reads.export_jsonl(None, &mut actual).await.unwrap();
    assert_eq!(
        String::from_utf8(actual).unwrap(),
        String::from_utf8(expected).unwrap(),
        "the PostgreSQL log holds the SQLite log's events, byte for byte"
    );
    let epochs: Vec<i64> = reads
        .epochs("s1")
        .await
        .unwrap()
        .iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(epochs.first(), Some(&1));
    assert_eq!(epochs.last(), Some(&3), "each node wrote under a new epoch");
    assert!(
        epochs.windows(2).all(|w| w[0] <= w[1]),
        "no turn interleaves: {epochs:?}"
    );
}

/// An agent whose one tool never finishes on its first call: the node dies while it runs.
struct Stuck {
    model: ScriptedModel,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Agent for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn system_prompt(&self) -> String {
        "Look things up.".into()
    }
    fn tools(&self) -> ToolSet {
        let runs = Arc::clone(&self.runs);
        ToolSet::new().with(
            mull::engine::FnTool::new("lookup", "Looks up.", move |_: serde_json::Value, _| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    futures::future::pending::<()>().await;
                    Ok(json!({}))
                }
            })
            .with_schema(json!({"type": "object"}))
            .shared(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_died_mid_turn_is_recovered_by_another_after_its_lease_expired() {
    let Some(pg) = TestPg::start("a_node_that_died_mid_turn_is_recovered_by_another") else {
        return;
    };
    let url = pg.database();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(Stuck {
        model: ScriptedModel::builder("scripted-1")
            .step(|s| s.tool_call("c1", "lookup", json!({"q": "x"})))
            .build(),
        runs: Arc::clone(&runs),
    });

    // Node a runs on a runtime of its own, dropped mid-turn: its tasks (the turn, the writer,
    // the lease renewal) stop where they are, as in a killed process.
    let node_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url_a, agent_a) = (url.clone(), agent.clone());
    node_a.spawn(async move {
        let log = node(&url_a, "a", Duration::from_millis(900)).await;
        let session = Session::open_on(log, agent_a, SessionOptions::deterministic("s1"))
            .await
            .unwrap();
        let _ = session
            .save_messages(vec![UIMessage::user("u1", "look")], TurnOptions::default())
            .await;
    });
    let started = std::time::Instant::now();
    while runs.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the tool never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    node_a.shutdown_background();

    // Node b cannot take the session while a's lease lives, and can once it expired.
    let b = node(&url, "b", Duration::from_secs(10)).await;
    let options = SessionOptions::deterministic("s1").with_ids(Arc::new(SequentialIds::new()));
    let held = Session::open_on(b.clone(), agent.clone(), options.clone()).await;
    assert!(
        matches!(
            &held,
            Err(mull::engine::EngineError::Store {
                source: StoreError::LeaseHeld { .. },
                ..
            })
        ),
        "{:?}",
        held.err()
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let session = Session::open_on(b.clone(), agent.clone(), options)
        .await
        .unwrap();
    let state = session.state();
    assert_eq!(state.turns.len(), 1);
    assert_eq!(
        state.turns[0].status,
        TurnStatus::Error,
        "the interrupted turn is resolved"
    );
    EventLog::flush(&*b, "s1").await.unwrap();

    let reads = Reads::open(&url).await.unwrap();
    let events = reads.session_page("s1", 0, 1000).await.unwrap();
    let epochs = reads.epochs("s1").await.unwrap();
    let decided = events
        .iter()
        .position(|e| matches!(e.event, Event::ToolDecided { .. }))
        .expect("the decision was committed before the tool ran");
    assert_eq!(epochs[decided].1, 1, "decided on node a");
    let resolved = events
        .iter()
        .position(|e| {
            matches!(
                &e.event,
                Event::TurnFinished {
                    status: TurnStatus::Error,
                    ..
                }
            )
        })
        .expect("the turn was resolved");
    assert_eq!(epochs[resolved].1, 2, "resolved on node b");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool did not run again");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "nothing lost or doubled"
    );
}
