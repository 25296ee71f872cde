//! `mull serve --db postgres://…` given bad input: a URL nothing answers at, a database of
//! another program, a schema newer than the binary, and a connection lost mid-turn. Each bad
//! database is an error naming it (never its password); a lost connection is made again and
//! the turn goes on.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use mull_core::{Event, TurnStatus};
use mull_store_pg::testing::TestPg;
use mull_store_pg::Reads;
use support::model::{ModelServer, Pace};
use support::nodes::{post_message, Node, PgGround};

/// Runs `mull serve` on `db` expecting it to refuse to start; returns its standard error.
fn refused(db: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--model",
            "scripted-demo",
            "--db",
            db,
        ])
        .env_remove("MULL_TOKEN")
        .output()
        .expect("runs mull serve");
    assert!(!output.status.success(), "mull serve started on {db}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn sql(url: &str, statement: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connects to the test database");
    tokio::spawn(conn);
    client.batch_execute(statement).await.expect("runs the SQL");
}

#[test]
fn a_url_nothing_answers_at_is_named_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let stderr = refused(&format!("postgres://mull:secret@127.0.0.1:{port}/chats"));
    assert!(
        stderr.contains(&format!(
            "postgres://127.0.0.1:{port}/chats: cannot connect"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
}

#[test]
fn another_programs_database_and_a_newer_schema_are_refused() {
    let Some(pg) = TestPg::start("another_programs_database_and_a_newer_schema_are_refused") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let foreign = pg.database();
    runtime.block_on(sql(&foreign, "CREATE TABLE invoices (id int)"));
    let stderr = refused(&foreign);
    assert!(
        stderr.contains("a PostgreSQL database of another program"),
        "{stderr}"
    );
    assert!(
        stderr.contains("/mull_test_"),
        "names the database: {stderr}"
    );

    let newer = pg.database();
    runtime.block_on(async {
        sql(&newer, "SELECT 1").await;
        mull_store_pg::PgLog::connect(&newer, mull_store_pg::PgOptions::new("setup"))
            .await
            .expect("makes a mull database");
        sql(
            &newer,
            "UPDATE mull_meta SET value = '99' WHERE key = 'schema_version'",
        )
        .await;
    });
    let stderr = refused(&newer);
    assert!(stderr.contains("99"), "names the schema found: {stderr}");
    assert!(stderr.contains("newer"), "{stderr}");
}

#[test]
fn a_connection_lost_mid_turn_is_made_again_and_the_turn_completes() {
    let Some(ground) = PgGround::start("a_connection_lost_mid_turn_is_made_again") else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 40,
            word_delay: Duration::from_millis(50),
        })
        .await;
        let extra = ["--model", &model.spec, "--tools", "--lease-ttl", "10s"];
        let mut n0 = Node::start(url, "n0", dir.path(), &extra);
        let addr = n0.addr.clone();
        let client = tokio::spawn(async move {
            post_message(&addr, "chat-1", "u1", Duration::from_secs(60)).await
        });
        // Mid-answer: the tool has run and its result is in the log.
        let reads = Reads::open(url).await.expect("opens the log");
        let started = Instant::now();
        loop {
            let events = reads
                .session_page("chat-1", 0, 10_000)
                .await
                .expect("reads");
            let ran = events
                .iter()
                .any(|e| matches!(e.event, Event::ToolCallFinished { .. }));
            if ran && model.answering() > 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the answer never started: {}",
                n0.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The database drops every connection of n0 mid-answer.
        sql(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name LIKE 'mull % n0'",
        )
        .await;
        let reply = client.await.expect("the client task");
        assert!(
            reply.finished_stream() && reply.told().finished,
            "the turn completes on n0: {reply:?}\n{}",
            n0.stderr_text()
        );
        assert!(n0.is_running(), "n0 carries on: {}", n0.stderr_text());
        let stderr = n0.stderr_text();
        assert!(stderr.contains("connecting again"), "{stderr}");

        let events = reads
            .session_page("chat-1", 0, 10_000)
            .await
            .expect("reads");
        let epochs = reads.epochs("chat-1").await.expect("reads epochs");
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
        assert!(
            epochs.iter().all(|e| e.1 == epochs[0].1),
            "one lease throughout: {epochs:?}"
        );
        let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(&e.event)).count();
        assert_eq!(count(|e| matches!(e, Event::ToolDecided { .. })), 1);
        assert_eq!(count(|e| matches!(e, Event::ToolCallFinished { .. })), 1);
        let completed = count(|e| {
            matches!(
                e,
                Event::TurnFinished {
                    status: TurnStatus::Completed,
                    ..
                }
            )
        });
        assert_eq!(completed, 1, "the turn completed once");
        // What the client was told is what the log holds.
        let text: String = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Chunk {
                    part: mull_core::StreamPart::TextDelta { text, .. },
                    ..
                } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reply.told().text, text);
    });
}

#[test]
fn a_cancel_asked_on_another_node_cancels_the_turn_where_it_runs() {
    let Some(ground) = PgGround::start("a_cancel_asked_on_another_node_cancels_the_turn") else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 200,
            word_delay: Duration::from_millis(50),
        })
        .await;
        let extra = ["--model", &model.spec];
        let n0 = Node::start(url, "n0", dir.path(), &extra);
        let n1 = Node::start(url, "n1", dir.path(), &extra);
        let addr = n0.addr.clone();
        let client = tokio::spawn(async move {
            post_message(&addr, "chat-1", "u1", Duration::from_secs(30)).await
        });
        let started = Instant::now();
        while model.answering() == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no answer started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // n1 does not run the chat: it records the request and says so.
        let asked = Instant::now();
        let reply = support::nodes::request(
            &n1.addr,
            "POST",
            "/api/chat/chat-1/cancel",
            None,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(reply.status, 202, "{reply:?}");
        assert!(reply.body.contains(r#""requested":true"#), "{reply:?}");
        assert!(reply.body.contains(r#""owner":"n0""#), "{reply:?}");

        // n0 cancels the turn: the stream it serves ends aborted, long before the answer's
        // 10 s, and the log says so.
        let streamed = client.await.expect("the client task");
        assert!(
            streamed.body.contains(r#""type":"abort""#),
            "the stream ends aborted: {streamed:?}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "cancelled after {:?}",
            asked.elapsed()
        );
        let reads = Reads::open(url).await.expect("opens the log");
        let events = reads
            .session_page("chat-1", 0, 10_000)
            .await
            .expect("reads");
        let finished: Vec<TurnStatus> = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::TurnFinished { status, .. } => Some(*status),
                _ => None,
            })
            .collect();
        assert_eq!(finished, vec![TurnStatus::Aborted]);
        drop((n0, n1));
    });
}

/// Runs the binary with `args`; returns its standard output, failing on a non-zero exit.
fn mull(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(args)
        .output()
        .expect("runs mull");
    assert!(
        output.status.success(),
        "mull {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn export_and_stats_read_a_postgres_log_as_they_read_a_sqlite_file() {
    let Some(pg) = TestPg::start("export_and_stats_read_a_postgres_log") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut node = Node::start(&url, "n0", dir.path(), &["--model", "scripted-demo"]);
    let reply = runtime.block_on(post_message(
        &node.addr,
        "chat-1",
        "u1",
        Duration::from_secs(30),
    ));
    assert!(reply.finished_stream(), "{reply:?}");
    node.interrupt_or_exit(Duration::ZERO);

    let exported = mull(&["export", &url]);
    let mut expected = Vec::new();
    runtime.block_on(async {
        let reads = Reads::open(&url).await.expect("opens the log");
        reads
            .export_jsonl(None, &mut expected)
            .await
            .expect("exports");
    });
    assert_eq!(exported, String::from_utf8_lossy(&expected));
    assert!(exported.contains(r#""type":"turn_finished""#), "{exported}");

    // The same events in a SQLite file count the same.
    let jsonl = dir.path().join("chat.jsonl");
    std::fs::write(&jsonl, &exported).expect("writes the export");
    let db = dir.path().join("chat.db");
    mull(&[
        "import",
        jsonl.to_str().expect("a UTF-8 path"),
        db.to_str().expect("a UTF-8 path"),
    ]);
    let on_sqlite = mull(&["stats", db.to_str().expect("a UTF-8 path")]);
    let on_postgres = mull(&["stats", &url]);
    assert_eq!(on_postgres, on_sqlite);
    assert!(
        on_postgres.starts_with("sessions  1\nturns     1 (1 completed)"),
        "{on_postgres}"
    );
}
