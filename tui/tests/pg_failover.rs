//! Three `mull serve` nodes on one PostgreSQL (started by the test harness), 200 chats at once
//! spread over them. Mid-turn one node is killed (`kill -9`) and another paused (`SIGSTOP`)
//! past its lease, then resumed: its late writes must be refused by the fencing epoch. Clients
//! cut off resume on a node still alive; every chat then runs a second turn on another node.
//! Checked from the log: no event lost or doubled, no two turns of a chat interleaved, epochs
//! never going back, no tool call decided or run twice, every interrupted turn resolved under
//! a newer lease, every second turn completed.
//!
//! Bounded: 200 chats, a 5 s lease (room for renewals on a busy two-core machine), some
//! thirty seconds in all.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mull_core::{Envelope, Event, StreamPart, TurnStatus};
use mull_store::SessionState;
use mull_store_pg::Reads;
use support::model::{ModelServer, Pace};
use support::nodes::{post_message, resume, Node, PgGround, Reply, Told};

const CHATS: usize = 200;

/// How long any one request may take before the test gives up on it.
const REQUEST_LIMIT: Duration = Duration::from_secs(60);

fn chat_id(i: usize) -> String {
    format!("chat-{i:03}")
}

/// What the log says about one chat, or what is wrong with it.
#[derive(Debug, Default)]
struct Audit {
    turns: usize,
    completed: usize,
    /// Interrupted turns, each resolved under a newer epoch than it started under.
    interrupted: usize,
    tools_run: usize,
}

/// Checks one chat's events (with the epoch each was written under) for everything the test
/// promises; an error names the chat and what broke.
fn audit(chat: &str, events: &[Envelope], epochs: &[(u64, i64)]) -> Result<Audit, String> {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    if seqs != (1..=events.len() as u64).collect::<Vec<_>>() {
        return Err(format!("{chat}: seqs not contiguous from 1: {seqs:?}"));
    }
    if epochs.iter().map(|e| e.0).collect::<Vec<_>>() != seqs {
        return Err(format!("{chat}: epochs do not cover the events"));
    }
    let epoch = |i: usize| epochs[i].1;
    if let Some(w) = epochs.windows(2).find(|w| w[1].1 < w[0].1) {
        return Err(format!("{chat}: epoch went back at seq {}: {w:?}", w[1].0));
    }
    // Each turn's events form one stretch: from its start to its last event, nothing of
    // another turn in between.
    let mut spans: Vec<(String, usize, usize)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let Some(turn) = &e.turn_id else { continue };
        match spans.iter_mut().find(|s| &s.0 == turn) {
            Some(span) => span.2 = i,
            None => spans.push((turn.clone(), i, i)),
        }
    }
    for w in spans.windows(2) {
        if w[1].1 <= w[0].2 {
            return Err(format!(
                "{chat}: turns {} and {} interleave",
                w[0].0, w[1].0
            ));
        }
    }
    let mut audit = Audit::default();
    let mut decided: HashMap<&str, usize> = HashMap::new();
    let mut finished: HashMap<&str, usize> = HashMap::new();
    let mut started_at: HashMap<&str, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match &e.event {
            Event::TurnStarted { .. } => {
                audit.turns += 1;
                if let Some(t) = &e.turn_id {
                    started_at.insert(t, i);
                }
            }
            Event::TurnFinished { status, error, .. } => {
                if *status == TurnStatus::Completed {
                    audit.completed += 1;
                }
                let interrupted = error.as_deref().is_some_and(|e| e.contains("interrupted"));
                if interrupted {
                    let start = e
                        .turn_id
                        .as_deref()
                        .and_then(|t| started_at.get(t))
                        .copied()
                        .ok_or_else(|| format!("{chat}: an interrupted turn never started"))?;
                    if epoch(i) <= epoch(start) {
                        return Err(format!(
                            "{chat}: turn {:?} resolved under its own epoch {}",
                            e.turn_id,
                            epoch(i)
                        ));
                    }
                    audit.interrupted += 1;
                }
            }
            Event::ToolDecided { call_id, .. } => *decided.entry(call_id).or_default() += 1,
            Event::ToolCallFinished { call_id, .. } => {
                *finished.entry(call_id).or_default() += 1;
                audit.tools_run += 1;
            }
            _ => {}
        }
    }
    if let Some((call, n)) = decided.iter().find(|(_, n)| **n > 1) {
        return Err(format!("{chat}: call {call} decided {n} times"));
    }
    if let Some((call, n)) = finished.iter().find(|(_, n)| **n > 1) {
        return Err(format!("{chat}: call {call} ran {n} times"));
    }
    if let Some(call) = finished.keys().find(|c| !decided.contains_key(*c)) {
        return Err(format!("{chat}: call {call} ran without a decision"));
    }
    let mut state = SessionState::new(chat);
    for e in events {
        state.apply(e);
    }
    if let Some(t) = state.turns.iter().find(|t| t.status == TurnStatus::Running) {
        return Err(format!("{chat}: turn {:?} was never resolved", t.turn_id));
    }
    Ok(audit)
}

/// Waits until no lease of `node` is left unreleased (every chat it held was taken over); a
/// failure shows the leases left and what the nodes wrote.
async fn taken_over(url: &str, node: &str, limit: Duration, nodes: &[Arc<Node>]) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connects to the test database");
    tokio::spawn(conn);
    let started = Instant::now();
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM mull_leases WHERE owner = $1 AND NOT released",
                &[&node],
            )
            .await
            .expect("counts leases");
        if row.get::<_, i64>(0) == 0 {
            return;
        }
        if started.elapsed() >= limit {
            let left = client
                .query(
                    "SELECT session_id, owner, epoch, released,
                            (extract(epoch FROM expires_at - now()) * 1000)::int8
                     FROM mull_leases WHERE NOT released ORDER BY expires_at",
                    &[],
                )
                .await
                .expect("reads leases");
            let left: Vec<String> = left
                .iter()
                .map(|r| {
                    format!(
                        "{} {} epoch {} expires in {} ms",
                        r.get::<_, String>(0),
                        r.get::<_, String>(1),
                        r.get::<_, i64>(2),
                        r.get::<_, i64>(4)
                    )
                })
                .collect();
            panic!(
                "the chats of node {node} were not taken over within {limit:?}; leases left:\n{}\n{}",
                left.join("\n"),
                stderr_of(nodes)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the nodes wrote to standard error, for a failure's message.
fn stderr_of(nodes: &[Arc<Node>]) -> String {
    nodes
        .iter()
        .map(|n| {
            let text = n.stderr_text();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            format!(
                "--- {} ---\n{}",
                n.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn three_nodes_lose_nothing_when_one_is_killed_and_one_paused_mid_turn() {
    let _one_at_a_time = support::nodes::one_cluster_at_a_time();
    let Some(ground) =
        PgGround::start("three_nodes_lose_nothing_when_one_is_killed_and_one_paused")
    else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 12,
            word_delay: Duration::from_millis(80),
        })
        .await;
        let extra = ["--model", &model.spec, "--tools", "--lease-ttl", "5s"];
        let nodes: Vec<Arc<Node>> = ["n0", "n1", "n2"]
            .iter()
            .map(|name| Arc::new(Node::start(url, name, dir.path(), &extra)))
            .collect();

        // Wave 1: 200 chats at once, chat i on node i % 3; their answers wait after the
        // first word until the nodes are killed and paused.
        model.hold();
        let mut first = Vec::new();
        for i in 0..CHATS {
            let addr = nodes[i % 3].addr.clone();
            first.push(tokio::spawn(async move {
                post_message(&addr, &chat_id(i), "u1", REQUEST_LIMIT).await
            }));
        }
        // Mid-turn: every chat is streaming its answer (held after the first word).
        let started = Instant::now();
        while model.answering() < CHATS {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "only {} answers streaming ({} first steps asked for)\n{}",
                model.answering(),
                model.tool_steps(),
                stderr_of(&nodes)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        nodes[0].signal("KILL");
        nodes[1].signal("STOP");
        model.release();
        taken_over(url, "n0", Duration::from_secs(60), &nodes).await;
        taken_over(url, "n1", Duration::from_secs(60), &nodes).await;
        // n1 wakes up with writes queued under leases it lost.
        nodes[1].signal("CONT");

        let mut replies: Vec<Reply> = Vec::new();
        for handle in first {
            replies.push(handle.await.expect("the client task"));
        }
        // Every client cut off resumes on a live node: the turn from the log, to its end.
        let mut resumed = 0;
        for (i, reply) in replies.iter().enumerate() {
            if reply.finished_stream() {
                continue;
            }
            assert_eq!(
                i % 3,
                0,
                "{}: only n0's clients were cut off: {reply:?}",
                chat_id(i)
            );
            let again = resume(&nodes[2].addr, &chat_id(i), REQUEST_LIMIT).await;
            assert!(
                again.finished_stream() || again.status == 204 || again.status == 404,
                "{}: resume on n2 answered {again:?}",
                chat_id(i)
            );
            resumed += 1;
        }
        assert!(resumed > 0, "the kill cut no stream");

        // Wave 2: every chat's next turn on another live node, n1 included.
        let mut second = Vec::new();
        for i in 0..CHATS {
            let addr = nodes[1 + (i + 1) % 2].addr.clone();
            second.push(tokio::spawn(async move {
                post_message(&addr, &chat_id(i), "u2", REQUEST_LIMIT).await
            }));
        }
        for (i, handle) in second.into_iter().enumerate() {
            let reply = handle.await.expect("the client task");
            assert!(
                reply.finished_stream() && reply.body.contains(r#""type":"finish""#),
                "{}: second turn: {reply:?}\n{}",
                chat_id(i),
                stderr_of(&nodes)
            );
            assert!(
                !reply.body.contains(r#""type":"error""#),
                "{}: {reply:?}",
                chat_id(i)
            );
        }

        // The log.
        let reads = Reads::open(url).await.expect("opens the log");
        let mut totals = Audit::default();
        for i in 0..CHATS {
            let chat = chat_id(i);
            let events = reads.session_page(&chat, 0, 100_000).await.expect("reads");
            let epochs = reads.epochs(&chat).await.expect("reads epochs");
            let audit = audit(&chat, &events, &epochs).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                audit.completed >= 1,
                "{chat}: its second turn completed: {audit:?}"
            );
            if i % 3 == 2 {
                assert_eq!(
                    audit.interrupted, 0,
                    "{chat}: n2 was never stopped: {audit:?}"
                );
            }
            totals.turns += audit.turns;
            totals.completed += audit.completed;
            totals.interrupted += audit.interrupted;
            totals.tools_run += audit.tools_run;
        }
        assert!(
            totals.interrupted >= CHATS / 3,
            "the kill and the pause left turns to recover: {totals:?}"
        );
        // n1 came back to find its chats taken over: what it still had to write was refused.
        let n1 = nodes[1].stderr_text();
        assert!(n1.contains("fenced"), "n1 saw its writes refused:\n{n1}");
        eprintln!("{totals:?}");
    });
}

/// What the log holds as the outcome of a chat's first request: the text of its turns'
/// deltas, the error of its failure, whether a turn of it completed.
fn first_verdict(events: &[Envelope]) -> Told {
    let mut told = Told::default();
    let Some(request) = events.iter().find_map(|e| match &e.event {
        Event::TurnStarted { request_id, .. } => Some(request_id.clone()),
        _ => None,
    }) else {
        return told;
    };
    let mut turns: Vec<String> = Vec::new();
    for e in events {
        match &e.event {
            Event::TurnStarted { request_id, .. } if *request_id == request => {
                turns.extend(e.turn_id.clone());
            }
            Event::Chunk {
                part: StreamPart::TextDelta { text, .. },
                ..
            } if e.turn_id.as_ref().is_some_and(|t| turns.contains(t)) => told.text.push_str(text),
            Event::TurnFailed {
                request_id: Some(r),
                error,
                ..
            } if *r == request => told.error = Some(error.clone()),
            Event::TurnFinished {
                request_id,
                status: TurnStatus::Completed,
                ..
            } if *request_id == request => told.finished = true,
            _ => {}
        }
    }
    told
}

/// Waits until the log holds no running turn of any of `chats`; hands back each chat's events.
async fn all_resolved(reads: &Reads, chats: &[String], limit: Duration) -> Vec<Vec<Envelope>> {
    let started = Instant::now();
    loop {
        let mut all = Vec::new();
        let mut running = Vec::new();
        for chat in chats {
            let events = reads.session_page(chat, 0, 100_000).await.expect("reads");
            let mut state = SessionState::new(chat);
            for e in &events {
                state.apply(e);
            }
            if state.turns.iter().any(|t| t.status == TurnStatus::Running) {
                running.push(chat.clone());
            }
            all.push(events);
        }
        if running.is_empty() {
            return all;
        }
        assert!(
            started.elapsed() < limit,
            "turns still running after {limit:?}: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until each chat's log holds at least `deltas` text deltas.
async fn streaming(reads: &Reads, chats: &[String], deltas: usize, limit: Duration) {
    let started = Instant::now();
    for chat in chats {
        loop {
            let events = reads.session_page(chat, 0, 100_000).await.expect("reads");
            let n = events
                .iter()
                .filter(|e| {
                    matches!(
                        e.event,
                        Event::Chunk {
                            part: StreamPart::TextDelta { .. },
                            ..
                        }
                    )
                })
                .count();
            if n >= deltas {
                break;
            }
            assert!(
                started.elapsed() < limit,
                "{chat}: only {n} text deltas in the log after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[test]
fn a_paused_nodes_clients_are_told_what_the_log_holds_not_what_it_generated() {
    let _one_at_a_time = support::nodes::one_cluster_at_a_time();
    let Some(ground) = PgGround::start("a_paused_nodes_clients_are_told_what_the_log_holds") else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 40,
            word_delay: Duration::from_millis(100),
        })
        .await;
        let extra = ["--model", &model.spec, "--tools", "--lease-ttl", "2s"];
        let mut nodes: Vec<Node> = ["n0", "n1", "n2"]
            .iter()
            .map(|name| Node::start(url, name, dir.path(), &extra))
            .collect();
        let chats: Vec<String> = (0..9).map(|i| format!("paused-{i}")).collect();
        let mut clients = Vec::new();
        for chat in &chats {
            let (addr, chat) = (nodes[1].addr.clone(), chat.clone());
            clients.push(tokio::spawn(async move {
                post_message(&addr, &chat, "u1", REQUEST_LIMIT).await
            }));
        }
        // Every answer is streaming, part of it committed and so already told to the client.
        let reads = Reads::open(url).await.expect("opens the log");
        streaming(&reads, &chats, 3, Duration::from_secs(60)).await;
        nodes[1].signal("STOP");
        let all: Vec<Arc<Node>> = Vec::new();
        taken_over(url, "n1", Duration::from_secs(60), &all).await;
        all_resolved(&reads, &chats, Duration::from_secs(60)).await;
        // The chats go on elsewhere while n1 sleeps.
        for (i, chat) in chats.iter().enumerate() {
            let addr = &nodes[if i % 2 == 0 { 0 } else { 2 }].addr;
            let reply = post_message(addr, chat, "u2", REQUEST_LIMIT).await;
            assert!(
                reply.finished_stream() && reply.told().finished,
                "{chat}: the next turn on another node: {reply:?}"
            );
        }
        nodes[1].signal("CONT");
        for (chat, client) in chats.iter().zip(clients) {
            let reply = client.await.expect("the client task");
            assert!(reply.finished_stream(), "{chat}: {reply:?}");
            let events = reads.session_page(chat, 0, 100_000).await.expect("reads");
            let verdict = first_verdict(&events);
            assert!(
                verdict.error.is_some() && !verdict.finished,
                "{chat}: the log holds the paused turn as interrupted: {verdict:?}"
            );
            assert_eq!(
                reply.told(),
                verdict,
                "{chat}: the client was told what the log holds"
            );
        }
        assert!(nodes[1].is_running(), "n1 carries on after its pause");
        let n1 = nodes[1].stderr_text();
        assert!(n1.contains("fenced"), "n1 learned it lost its chats:\n{n1}");
    });
}

#[test]
fn three_nodes_ride_out_a_database_restart_under_load() {
    let _one_at_a_time = support::nodes::one_cluster_at_a_time();
    let Some(ground) = PgGround::start("three_nodes_ride_out_a_database_restart_under_load") else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 30,
            word_delay: Duration::from_millis(100),
        })
        .await;
        let extra = ["--model", &model.spec, "--tools", "--lease-ttl", "5s"];
        let mut nodes: Vec<Node> = ["n0", "n1", "n2"]
            .iter()
            .map(|name| Node::start(url, name, dir.path(), &extra))
            .collect();
        let chats: Vec<String> = (0..60).map(|i| format!("restart-{i:02}")).collect();
        // Their answers wait after the first word until the database is stopped.
        model.hold();
        let mut clients = Vec::new();
        for (i, chat) in chats.iter().enumerate() {
            let (addr, chat) = (nodes[i % 3].addr.clone(), chat.clone());
            clients.push(tokio::spawn(async move {
                post_message(&addr, &chat, "u1", REQUEST_LIMIT).await
            }));
        }
        let started = Instant::now();
        while model.answering() < chats.len() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "only {} answers streaming",
                model.answering()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        ground.pg.stop_now();
        model.release();
        // Every node refuses new turns, naming why, while the database is away.
        for (n, node) in nodes.iter().enumerate() {
            let started = Instant::now();
            loop {
                let probe = format!("probe-{n}-{}", started.elapsed().as_millis());
                // A refusal is at once; a turn that starts is no use here.
                let reply = post_message(&node.addr, &probe, "p1", Duration::from_secs(2)).await;
                if reply.status == 503 {
                    assert!(
                        reply.body.contains(r#""code":"log_unavailable""#),
                        "{reply:?}"
                    );
                    assert!(
                        reply.body.contains("/mull_test_"),
                        "names the database: {reply:?}"
                    );
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{} still takes new turns with the database down: {reply:?}",
                    node.name
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // The outage outlasts the leases (5 s): each chat is taken back by its node or taken
        // over by another, its turn going on or resolved as interrupted.
        tokio::time::sleep(Duration::from_secs(6)).await;
        ground.pg.start_again();

        // Every node takes new turns again once the database is back.
        for (n, node) in nodes.iter().enumerate() {
            let started = Instant::now();
            loop {
                let chat = format!("after-{n}-{}", started.elapsed().as_millis());
                let reply = post_message(&node.addr, &chat, "a1", REQUEST_LIMIT).await;
                if reply.status == 200 {
                    assert!(reply.told().finished, "{chat}: {reply:?}");
                    break;
                }
                // 503 while its log reconnects; 409 if another node took the new chat's lease
                // while this one was slow to open it (nothing was written here).
                assert!(
                    reply.status == 503
                        || (reply.status == 409 && reply.body.contains(r#""code":"busy""#)),
                    "{chat}: {reply:?}"
                );
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{} refuses new turns after the restart: {reply:?}",
                    node.name
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let reads = Reads::open(url).await.expect("opens the log");
        let logs = all_resolved(&reads, &chats, Duration::from_secs(90)).await;
        // Each client was told its turn's outcome as the log holds it, nothing more or less.
        let mut interrupted = 0;
        for ((chat, client), events) in chats.iter().zip(clients).zip(&logs) {
            let reply = client.await.expect("the client task");
            assert!(reply.finished_stream(), "{chat}: {reply:?}");
            let verdict = first_verdict(events);
            assert_eq!(reply.told(), verdict, "{chat}: told what the log holds");
            interrupted += usize::from(verdict.error.is_some());
        }
        for node in &mut nodes {
            assert!(
                node.is_running(),
                "{} exited:\n{}",
                node.name,
                node.stderr_text()
            );
        }
        // Every chat goes on, on another node, and the log is whole.
        for (i, chat) in chats.iter().enumerate() {
            let reply = post_message(&nodes[(i + 1) % 3].addr, chat, "u2", REQUEST_LIMIT).await;
            assert!(reply.told().finished, "{chat}: second turn: {reply:?}");
        }
        for chat in &chats {
            let events = reads.session_page(chat, 0, 100_000).await.expect("reads");
            let epochs = reads.epochs(chat).await.expect("reads epochs");
            let audit = audit(chat, &events, &epochs).unwrap_or_else(|e| panic!("{e}"));
            assert!(audit.completed >= 1, "{chat}: {audit:?}");
        }
        eprintln!(
            "{interrupted} of {} turns interrupted by the restart",
            chats.len()
        );
    });
}

/// Waits until the lease of `chat` is held by `node`.
async fn lease_owner_is(reads: &Reads, chat: &str, node: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        let lease = reads.lease(chat).await.expect("reads the lease");
        if lease.as_ref().is_some_and(|(owner, _, _)| owner == node) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{chat}: not taken over by {node} within {limit:?}: {lease:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node that nothing tells it lost a chat — its renewals of it are stuck (its lease row is
/// locked `FOR KEY SHARE` by a transaction left open: a renewal, which locks the row
/// `FOR UPDATE`, skips it and then waits and gives up, while a take-over, an update of non-key
/// columns, goes through) and its turn is quiet (the model holds its answer after the first word, so no commit of
/// it is refused) — still learns it by its own clock once the lease is past its expiry: its
/// client's stream stops waiting for the node's own output, follows the log, and ends with the
/// verdict the node that took the chat over wrote there, while the model still holds the answer.
#[test]
fn a_node_whose_lease_ran_out_by_its_own_clock_tells_its_client_the_logs_verdict() {
    let _one_at_a_time = support::nodes::one_cluster_at_a_time();
    let Some(ground) = PgGround::start("a_node_whose_lease_ran_out_by_its_own_clock") else {
        return;
    };
    let PgGround {
        url, dir, runtime, ..
    } = &ground;
    runtime.block_on(async {
        let model = ModelServer::start(Pace {
            words: 5,
            word_delay: Duration::from_millis(50),
        })
        .await;
        model.hold();
        let extra = ["--model", &model.spec, "--tools", "--lease-ttl", "2s"];
        let nodes: Vec<Node> = ["n0", "n1"]
            .iter()
            .map(|name| Node::start(url, name, dir.path(), &extra))
            .collect();
        // The other chat's lease is renewed all along: only the quiet chat's runs out.
        let (other, chat) = ("a-other", "b-quiet");
        let mut clients = Vec::new();
        for id in [other, chat] {
            let addr = nodes[1].addr.clone();
            clients.push(tokio::spawn(async move {
                post_message(&addr, id, "u1", REQUEST_LIMIT).await
            }));
        }
        let reads = Reads::open(url).await.expect("opens the log");
        let both = [other.to_owned(), chat.to_owned()];
        // Both answers are held after their first word, which the clients were told.
        streaming(&reads, &both, 1, Duration::from_secs(60)).await;

        let (holder, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connects to the test database");
        tokio::spawn(conn);
        holder
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM mull_leases WHERE session_id = '{chat}' FOR KEY SHARE"
            ))
            .await
            .expect("locks the quiet chat's lease row");

        // n1 cannot renew the quiet chat's lease now; it runs out and n0 takes it over,
        // resolving its turn as interrupted.
        lease_owner_is(&reads, chat, "n0", Duration::from_secs(60)).await;
        let logs = all_resolved(&reads, &[chat.to_owned()], Duration::from_secs(60)).await;
        let verdict = first_verdict(&logs[0]);
        assert!(
            verdict.error.is_some() && !verdict.finished,
            "the log holds the quiet turn as interrupted: {verdict:?}"
        );

        let quiet = clients.pop().expect("the quiet chat's client");
        let reply = quiet.await.expect("the client task");
        assert!(
            reply.finished_stream(),
            "{reply:?}\n--- n1 ---\n{}",
            nodes[1].stderr_text()
        );
        assert_eq!(
            reply.told(),
            verdict,
            "the client was told what the log holds"
        );
        assert_eq!(
            model.answering(),
            2,
            "both answers are still held: the verdict came from the log, not the model"
        );
        // Its next renewal that fails says so.
        let started = Instant::now();
        while !nodes[1]
            .stderr_text()
            .contains("past their expiry by this node's clock")
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "n1 says its lease ran out by its own clock:\n{}",
                nodes[1].stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        holder.batch_execute("ROLLBACK").await.expect("unlocks");
        model.release();
    });
}
