//! Load bench (not a test): many concurrent streaming chats against one server on loopback,
//! each a Scripted-model turn of `LOAD_DELTAS` text deltas. Reports time to first part
//! (p50/p99), parts per second, peak RSS, and checks every chat's parts against the log: none
//! lost, none duplicated.
//!
//! `cargo run --release -p mull-server --example load -- --chats 200`
//! (clients run in the same process, so RSS covers server and clients together).

#[path = "common/agent.rs"]
mod agent;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use futures::StreamExt;
use mull_server::ui_stream::UiStreamMapper;
use mull_server::{bind, ServerConfig, ServerState};
use mull_store::Log;
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    /// Concurrent chats.
    #[arg(long, default_value_t = 200)]
    chats: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

struct ChatRun {
    chat_id: String,
    first_part: Duration,
    parts: Vec<Value>,
}

async fn run_chat(
    client: reqwest::Client,
    url: String,
    chat_id: String,
) -> anyhow::Result<ChatRun> {
    let body = json!({
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": format!("u-{chat_id}"), "role": "user", "parts": [{"type": "text", "text": "go"}]}],
    });
    let started = Instant::now();
    let response = client
        .post(&url)
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut parts = Vec::new();
    let mut first_part = None;
    while let Some(bytes) = stream.next().await {
        buffer.push_str(&String::from_utf8_lossy(&bytes?));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event
                .strip_prefix("data: ")
                .context("an SSE event without data")?
                .trim_end();
            if data == "[DONE]" {
                return Ok(ChatRun {
                    chat_id,
                    first_part: first_part.context("no part before [DONE]")?,
                    parts,
                });
            }
            first_part.get_or_insert_with(|| started.elapsed());
            parts.push(serde_json::from_str(data)?);
        }
    }
    bail!("chat {chat_id}: the stream ended without [DONE]")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let log = Log::open(dir.path().join("load.db"))?;
    let state = ServerState::with_agents(
        log.clone(),
        Arc::new(|chat_id: &str| agent::ScriptAgent::for_chat(chat_id)),
    );
    let config = ServerConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: None,
        ..ServerConfig::default()
    };
    let bound = bind(&config, state).await?;
    let url = format!("http://{}/api/chat", bound.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.chats)
        .build()?;
    let started = Instant::now();
    let runs = futures::future::join_all(
        (0..args.chats)
            .map(|i| tokio::spawn(run_chat(client.clone(), url.clone(), format!("load-{i}")))),
    );
    let runs = tokio::time::timeout(Duration::from_secs(args.timeout_secs), runs)
        .await
        .context("the chats did not finish in time")?;
    let wall = started.elapsed();
    let mut chats = Vec::with_capacity(runs.len());
    for run in runs {
        chats.push(run??);
    }

    // Every part exactly once: the parts each client saw are the parts its turn's events map to.
    log.flush().await?;
    let reader = log.reader()?;
    for chat in &chats {
        let mut mapper = UiStreamMapper::new();
        let mut expected = Vec::new();
        for env in reader.session_page(&chat.chat_id, 0, 1_000_000)? {
            if env.turn_id.is_some() {
                expected.extend(
                    mapper
                        .map(&env)
                        .into_iter()
                        .map(|c| serde_json::to_value(c).unwrap_or_default()),
                );
            }
        }
        if expected != chat.parts {
            bail!(
                "chat {}: {} parts streamed, {} in the log, or they differ",
                chat.chat_id,
                chat.parts.len(),
                expected.len()
            );
        }
    }
    let _ = stop.send(());
    let _ = server.await;

    let mut firsts: Vec<Duration> = chats.iter().map(|c| c.first_part).collect();
    firsts.sort();
    let parts: usize = chats.iter().map(|c| c.parts.len()).sum();
    let p50 = percentile(&firsts, 0.5);
    let p99 = percentile(&firsts, 0.99);
    let rate = parts as f64 / wall.as_secs_f64();
    let rss = peak_rss_mib();
    if args.json {
        println!(
            "{}",
            json!({"chats": args.chats, "parts": parts, "wall_ms": wall.as_millis() as u64,
                   "ttfp_p50_ms": p50.as_secs_f64() * 1e3, "ttfp_p99_ms": p99.as_secs_f64() * 1e3,
                   "parts_per_s": rate, "peak_rss_mib": rss, "lost_or_duplicated": 0})
        );
    } else {
        println!("| chats | parts | wall | TTFP p50 | TTFP p99 | parts/s | peak RSS |");
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {} | {} | {:.0} ms | {:.1} ms | {:.1} ms | {:.0} | {:.0} MiB |",
            args.chats,
            parts,
            wall.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            rate,
            rss
        );
        println!("every chat's parts match its log: none lost, none duplicated");
    }
    Ok(())
}
