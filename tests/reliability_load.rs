//! A tiny version of the load run (the full one is
//! `cargo run --release -p mull-reliability -- load`): many sessions, each firing several turns
//! at once, over one log; the log must show every turn completed and no two turns of a session
//! interleaved. Nothing here is timed.

#[path = "../crates/mull-reliability/src/load.rs"]
#[allow(dead_code)] // the report fields are for the command-line run
mod load;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_over_many_sessions_never_interleave_within_a_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = load::LoadPlan {
        sessions: 40,
        turns_per_session: 3,
        chunks_per_turn: 5,
    };
    let report = load::run(&dir.path().join("load.db"), plan)
        .await
        .expect("the load run and its log checks pass");
    assert_eq!(report.turns, 120);
    assert!(report.events > 120 * 5, "{} events", report.events);
}
