//! The log on PostgreSQL beside SQLite, and several server nodes on one database:
//! `cargo run --release -p mull-bench -- nodes`. Starts a throwaway PostgreSQL (the tests'
//! harness; `MULL_TEST_PG` to use a running server). Nodes run in this process, each with its
//! own connections, leases and server on a loopback port, sharing this machine's cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mull_core::{EntryPath, Event, LanguageModel, StreamPart};
use mull_engine::Agent;
use mull_providers::scripted::ScriptedModel;
use mull_server::{AgentSource, ServerConfig, ServerState};
use mull_store::{EventLog, Log};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::report::{print, Measurement};
use crate::runtime::{run_as_task, RuntimeKind};

/// Arguments of the nodes bench.
#[derive(Debug, Clone, clap::Args)]
pub struct NodesArgs {
    /// Chunk events appended (one turn of one session) per backend.
    #[arg(long, default_value_t = 50_000)]
    pub append_events: usize,
    /// Chats at once per node-count run.
    #[arg(long, default_value_t = 200)]
    pub chats: usize,
    /// Failover trials (each kills a node mid-turn and waits out its lease).
    #[arg(long, default_value_t = 5)]
    pub failover_trials: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the bench and prints the table.
pub fn run(args: &NodesArgs) -> anyhow::Result<()> {
    let Some(pg) = TestPg::start("the nodes bench") else {
        anyhow::bail!("no PostgreSQL: see the printed reason, or set MULL_TEST_PG");
    };
    // Nodes serve on a worker per core, as `mull serve` does; the bench's own work runs as a
    // task among them.
    let runtime = RuntimeKind::MultiThread.build()?;
    let dir = tempfile::tempdir().context("creating a scratch folder")?;
    let (pg, folder, args) = (Arc::new(pg), dir.path().to_owned(), args.clone());
    let results = run_as_task(&runtime, async move {
        let mut results = Vec::new();
        results.extend(append(&pg, &folder, args.append_events).await?);
        for nodes in 1..=3 {
            results.push(chats(&pg, nodes, args.chats).await?);
        }
        results.push(resume_latency(&pg).await?);
        results.extend(shapes(&pg, &folder).await?);
        results.extend(failover(&pg, args.failover_trials).await?);
        Ok(results)
    })?;
    print(&results, args.json)
}

fn at(i: usize) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_700_000_000_000_000 + i as i64).unwrap_or_default()
}

fn chunk(i: usize) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t".into(),
            text: format!("word{i} "),
        },
        original: None,
    }
}

fn started() -> Event {
    Event::TurnStarted {
        request_id: "req_1".into(),
        message_id: "msg_1".into(),
        entry: EntryPath::Chat,
        continuation: false,
        attempt: 0,
        body: json!({}),
    }
}

/// The same turn of `n` chunks appended then flushed, on SQLite and on PostgreSQL.
async fn append(pg: &TestPg, dir: &std::path::Path, n: usize) -> anyhow::Result<Vec<Measurement>> {
    let sqlite = Log::open(dir.join("append.db"))?;
    let postgres = PgLog::connect(&pg.database(), PgOptions::new("bench")).await?;
    let mut out = Vec::new();
    for (name, log) in [
        ("sqlite", Arc::new(sqlite) as Arc<dyn EventLog>),
        ("postgres", Arc::new(postgres) as Arc<dyn EventLog>),
    ] {
        log.open_session("s1").await?;
        log.append_event("s1", Some("turn_1"), at(0), started())?;
        log.flush("s1").await?;
        let start = Instant::now();
        for i in 0..n {
            log.append_event("s1", Some("turn_1"), at(i + 1), chunk(i))?;
        }
        log.flush("s1").await?;
        let rate = n as f64 / start.elapsed().as_secs_f64();
        out.push(Measurement {
            bench: "nodes",
            metric: format!("append_{name}"),
            value: rate,
            unit: "events/s",
            goal: None,
            met: None,
            note: format!("{n} chunks of one turn appended then flushed; group commit 512/5ms"),
        });
    }
    Ok(out)
}

/// An agent answering every chat with a short text, a few words a step.
struct Answer;

#[async_trait]
impl Agent for Answer {
    fn name(&self) -> &str {
        "bench"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        let words: Vec<String> = (0..20).map(|i| format!("w{i} ")).collect();
        Arc::new(
            ScriptedModel::builder("scripted-bench")
                .step(|s| s.text_deltas(words).usage(10, 20))
                .build(),
        )
    }
    fn system_prompt(&self) -> String {
        "Answer.".into()
    }
}

/// A node: its log, its server on a loopback port, and the task serving it.
struct Node {
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn start(url: &str, name: &str, agent: AgentSource) -> anyhow::Result<Node> {
        Node::start_with(url, PgOptions::new(name), agent).await
    }

    async fn start_with(url: &str, options: PgOptions, agent: AgentSource) -> anyhow::Result<Node> {
        let log = PgLog::connect(url, options).await?;
        let state = ServerState::on(Arc::new(log), agent);
        // Every client of the bench is 127.0.0.1: no per-client share.
        let mut config = ServerConfig {
            addr: "127.0.0.1:0".parse()?,
            token: None,
            max_turns_per_client: usize::MAX,
            max_bytes_per_client: usize::MAX,
            ..ServerConfig::from_env()
        };
        config.limits.max_per_client = config.limits.max_connections;
        let bound = mull_server::bind(&config, state).await?;
        let addr = bound.local_addr().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = bound
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Node {
            addr,
            stop: Some(stop),
            task,
        })
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

/// Sends one request and reads the answer to its end; returns the answer and when its first
/// byte arrived.
async fn exchange(addr: &str, head: String) -> anyhow::Result<(String, Duration)> {
    let start = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(head.as_bytes()).await?;
    let mut first = [0u8; 1];
    stream.read_exact(&mut first).await?;
    let first_at = start.elapsed();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await?;
    Ok((String::from_utf8_lossy(&rest).into_owned(), first_at))
}

async fn post(addr: &str, chat: &str) -> anyhow::Result<String> {
    let body = json!({
        "id": chat, "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}]
    })
    .to_string();
    let head = format!(
        "POST /api/chat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Ok(exchange(addr, head).await?.0)
}

/// `chats` one-turn chats at once, spread over `nodes` nodes on one database.
async fn chats(pg: &TestPg, nodes: usize, chats: usize) -> anyhow::Result<Measurement> {
    let url = pg.database();
    let agent: AgentSource = Arc::new(|_: &str| Arc::new(Answer) as Arc<dyn Agent>);
    let mut running = Vec::new();
    for i in 0..nodes {
        running.push(Node::start(&url, &format!("n{i}"), Arc::clone(&agent)).await?);
    }
    let start = Instant::now();
    let mut clients = Vec::new();
    for i in 0..chats {
        let addr = running[i % nodes].addr.clone();
        clients.push(tokio::spawn(async move {
            post(&addr, &format!("chat-{i}")).await
        }));
    }
    for client in clients {
        let answer = client.await??;
        anyhow::ensure!(
            answer.contains(r#""type":"finish""#),
            "a chat did not finish: {answer}"
        );
    }
    let rate = chats as f64 / start.elapsed().as_secs_f64();
    for node in running {
        node.stop().await;
    }
    Ok(Measurement {
        bench: "nodes",
        metric: format!("chats_{nodes}_node{}", if nodes == 1 { "" } else { "s" }),
        value: rate,
        unit: "chats/s",
        goal: None,
        met: None,
        note: format!(
            "{chats} one-turn chats at once (20 deltas each) over {nodes} in-process node(s)"
        ),
    })
}

/// An agent whose answer takes a second: a turn is running when the resume arrives.
struct Slow;

#[async_trait]
impl Agent for Slow {
    fn name(&self) -> &str {
        "bench-slow"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        let words: Vec<String> = (0..20).map(|i| format!("w{i} ")).collect();
        Arc::new(
            ScriptedModel::builder("scripted-slow")
                .part_delay(Duration::from_millis(50))
                .step(|s| s.text_deltas(words).usage(10, 20))
                .build(),
        )
    }
    fn system_prompt(&self) -> String {
        "Answer slowly.".into()
    }
}

/// A chat running on node A, resumed on node B (which follows it from the log): the time to
/// the first byte of the resumed stream, median of a few.
async fn resume_latency(pg: &TestPg) -> anyhow::Result<Measurement> {
    let url = pg.database();
    let agent: AgentSource = Arc::new(|_: &str| Arc::new(Slow) as Arc<dyn Agent>);
    let a = Node::start(&url, "a", Arc::clone(&agent)).await?;
    let b = Node::start(&url, "b", agent).await?;
    let mut samples = Vec::new();
    for i in 0..9 {
        let chat = format!("resume-{i}");
        let owner = a.addr.clone();
        let posted = {
            let chat = chat.clone();
            tokio::spawn(async move { post(&owner, &chat).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let head = format!(
            "GET /api/chat/{chat}/stream HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            b.addr
        );
        let (answer, first) = exchange(&b.addr, head).await?;
        anyhow::ensure!(
            answer.contains(r#""type":"finish""#),
            "a resume did not finish: {answer}"
        );
        samples.push(first);
        posted.await??;
    }
    samples.sort();
    a.stop().await;
    b.stop().await;
    Ok(Measurement {
        bench: "nodes",
        metric: "resume_on_non_owner".into(),
        value: samples[samples.len() / 2].as_secs_f64() * 1000.0,
        unit: "ms",
        goal: None,
        met: None,
        note: "GET /stream on node B while node A runs the turn: to the first byte (median of 9); B reads the log every 50 ms".into(),
    })
}

/// The turn bench's shapes (a), (b), (c) on SQLite and on PostgreSQL, one after the other in
/// this process: the engine's cost per streamed text chunk with every chunk logged.
async fn shapes(pg: &TestPg, dir: &std::path::Path) -> anyhow::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for shape in crate::turns::SHAPES {
        for backend in ["sqlite", "postgres"] {
            let log: Arc<dyn EventLog> = match backend {
                "sqlite" => Arc::new(Log::open(dir.join(format!("shape-{}.db", shape.name)))?),
                _ => Arc::new(PgLog::connect(&pg.database(), PgOptions::new("bench")).await?),
            };
            let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let texts = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let start = Instant::now();
            crate::turns::run_shape(&log, &shape, &calls, &texts).await?;
            let wall = start.elapsed();
            let chunks = shape.text_chunks();
            anyhow::ensure!(
                texts.load(std::sync::atomic::Ordering::Relaxed) as usize == chunks,
                "shape {} on {backend}: not every text chunk was seen",
                shape.name
            );
            out.push(Measurement {
                bench: "nodes",
                metric: format!("turn_{}_{backend}", shape.name),
                value: wall.as_secs_f64() * 1e6 / chunks as f64,
                unit: "us/chunk",
                goal: None,
                met: None,
                note: format!(
                    "shape ({}) {}; every chunk logged",
                    shape.name,
                    shape.describe()
                ),
            });
        }
    }
    Ok(out)
}

/// Reads an answer until `needle` arrives; returns the status line's code and when.
async fn first(addr: &str, head: String, needle: &str) -> anyhow::Result<(u16, Option<Instant>)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(head.as_bytes()).await?;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&text).contains(needle) {
            let status = status_of(&text);
            return Ok((status, Some(Instant::now())));
        }
    }
    Ok((status_of(&text), None))
}

fn status_of(text: &[u8]) -> u16 {
    String::from_utf8_lossy(text)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// The lease time to live of the failover trials.
const FAILOVER_TTL: Duration = Duration::from_secs(2);

/// A node killed mid-turn (its runtime shut down: no lease given back, nothing more written),
/// and a client posting to the chat on another node until that node serves it: the time from
/// the kill to the first text chunk of the new answer, over `trials`: median and max.
async fn failover(pg: &TestPg, trials: usize) -> anyhow::Result<Vec<Measurement>> {
    let url = pg.database();
    let agent: AgentSource = Arc::new(|_: &str| Arc::new(Slow) as Arc<dyn Agent>);
    let mut options = PgOptions::new("survivor");
    options.lease_ttl = FAILOVER_TTL;
    let survivor = Node::start_with(&url, options, Arc::clone(&agent)).await?;
    let mut samples = Vec::new();
    for trial in 0..trials.max(1) {
        let victim_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let mut options = PgOptions::new(format!("victim-{trial}"));
        options.lease_ttl = FAILOVER_TTL;
        let victim = {
            let (url, agent) = (url.clone(), Arc::clone(&agent));
            victim_runtime
                .spawn(async move { Node::start_with(&url, options, agent).await })
                .await??
        };
        let chat = format!("failover-{trial}");
        let (addr, posted_chat) = (victim.addr.clone(), chat.clone());
        let posted = tokio::spawn(async move { post(&addr, &posted_chat).await });
        // Mid-turn: the slow answer takes a second.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed = Instant::now();
        victim_runtime.shutdown_background();
        drop(victim);
        let _ = posted.await;
        let body = json!({
            "id": chat, "trigger": "submit-message",
            "messages": [{"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Again"}]}]
        })
        .to_string();
        let served = loop {
            anyhow::ensure!(
                killed.elapsed() < FAILOVER_TTL * 10,
                "trial {trial}: the chat was never served again"
            );
            let head = format!(
                "POST /api/chat HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                survivor.addr,
                body.len()
            );
            match first(&survivor.addr, head, "text-delta").await? {
                (200, Some(at)) => break at,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        samples.push(served - killed);
    }
    survivor.stop().await;
    samples.sort();
    let median = samples[samples.len() / 2];
    let max = samples[samples.len() - 1];
    let note = format!(
        "node killed mid-turn, {} s leases: lease expiry + take-over + first text chunk on the \
         other node ({} trials)",
        FAILOVER_TTL.as_secs(),
        samples.len()
    );
    Ok(vec![
        Measurement {
            bench: "nodes",
            metric: "failover_median".into(),
            value: median.as_secs_f64() * 1000.0,
            unit: "ms",
            goal: None,
            met: None,
            note: note.clone(),
        },
        Measurement {
            bench: "nodes",
            metric: "failover_max".into(),
            value: max.as_secs_f64() * 1000.0,
            unit: "ms",
            goal: None,
            met: None,
            note,
        },
    ])
}
