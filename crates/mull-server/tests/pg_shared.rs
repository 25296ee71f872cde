//! The server on a shared log (PostgreSQL, started by the test harness): a chat's session is
//! kept on its node between turns — its next turn takes no lease and reads no history — and
//! given back once idle for the shared idle TTL, so another node takes it at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mull_core::LanguageModel;
use mull_engine::Agent;
use mull_providers::scripted::ScriptedModel;
use mull_server::{AgentSource, ServerState};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, Reads};

struct Quiet;

#[async_trait]
impl Agent for Quiet {
    fn name(&self) -> &str {
        "quiet"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(
            ScriptedModel::builder("scripted")
                .step(|s| s.text("ok"))
                .build(),
        )
    }
}

async fn node(url: &str, name: &str) -> (Arc<PgLog>, ServerState) {
    let log = Arc::new(PgLog::connect(url, PgOptions::new(name)).await.unwrap());
    let agents: AgentSource = Arc::new(|_: &str| Arc::new(Quiet) as Arc<dyn Agent>);
    let state = ServerState::on(Arc::clone(&log) as _, agents);
    (log, state)
}

/// Polls `done` until it holds, failing after a generous bound.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let limit = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < limit, "{what}: not within a minute");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_chat_takes_no_lease_and_reads_no_history_when_used_again() {
    let Some(pg) = TestPg::start("a_kept_chat_takes_no_lease_and_reads_no_history_when_used_again")
    else {
        return;
    };
    let url = pg.database();
    let (log, state) = node(&url, "a").await;
    let state = state.with_shared_idle_ttl(Duration::from_secs(600));
    let first = state.session("c1").await.unwrap();
    drop(first);
    // The sweep finds it idle, but not for the shared idle TTL: kept.
    assert_eq!(state.evict_idle(), 0);
    assert!(state.is_open("c1"));
    let before = log.traffic();
    let again = state.session("c1").await.unwrap();
    assert_eq!(
        log.traffic().opening,
        before.opening,
        "no lease taken, no history read"
    );
    drop(again);
    let reads = Reads::open(&url).await.unwrap();
    let (owner, epoch, live) = reads.lease("c1").await.unwrap().unwrap();
    assert_eq!((owner.as_str(), epoch, live), ("a", 1, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_chat_is_given_back_and_another_node_takes_it_without_waiting() {
    let Some(pg) =
        TestPg::start("an_idle_chat_is_given_back_and_another_node_takes_it_without_waiting")
    else {
        return;
    };
    let url = pg.database();
    let (_a_log, a) = node(&url, "a").await;
    let a = a.with_shared_idle_ttl(Duration::from_millis(50));
    drop(a.session("c1").await.unwrap());
    until("the idle chat evicted", || {
        let a = a.clone();
        async move {
            a.evict_idle();
            !a.is_open("c1")
        }
    })
    .await;
    let reads = Reads::open(&url).await.unwrap();
    until("its lease given back", || {
        let reads = &reads;
        async move {
            reads
                .lease("c1")
                .await
                .unwrap()
                .is_some_and(|(_, _, live)| !live)
        }
    })
    .await;
    let (_b_log, b) = node(&url, "b").await;
    let b = b.with_lease_wait(Duration::ZERO);
    drop(b.session("c1").await.unwrap());
    let (owner, epoch, live) = reads.lease("c1").await.unwrap().unwrap();
    assert_eq!((owner.as_str(), epoch, live), ("b", 2, true));
}
