//! What an out-of-process `on_chunk` subscriber costs per chunk: the same turns (one step of
//! N text deltas, through the engine and the SQLite log) with no extension, with an unbatched
//! subscriber (one JSON-RPC round trip per chunk, as in Think), and with batched ones.
//!
//! `cargo run --release -p mull-extensions --example chunk_cost [-- CHUNKS TURNS]`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use mull_core::{LanguageModel, UIMessage};
use mull_engine::{Extension, Session, SessionOptions, TurnOptions};
use mull_extensions::{Manifest, ProcessExtension};
use mull_providers::scripted::ScriptedModel;
use mull_store::Log;

struct Bench {
    model: ScriptedModel,
}

#[async_trait]
impl mull_engine::Agent for Bench {
    fn name(&self) -> &str {
        "bench"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
}

fn sink(batch: &str) -> anyhow::Result<Manifest> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/extensions");
    let text = format!(
        "name = \"sink\"\ncommand = \"python3\"\nargs = [\"chunk_sink.py\"]\nhooks = [\"on_chunk\"]\n\
         [on_chunk]\nbatch = {batch}\n"
    );
    Ok(Manifest::from_toml(&text, dir, "chunk_sink (bench)")?)
}

/// Runs `turns` turns of `chunks` text deltas each; returns the median wall time of a turn.
async fn measure(
    extension: Option<Manifest>,
    chunks: usize,
    turns: usize,
) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir()?;
    let log = Log::open(dir.path().join("bench.db"))?;
    let model = ScriptedModel::builder("bench-model").build();
    let mut options = SessionOptions::deterministic("bench");
    if let Some(manifest) = extension {
        let ext = ProcessExtension::start(manifest).await?;
        options = options.with_extensions([Arc::new(ext) as Arc<dyn Extension>]);
    }
    let session = Session::open(
        &log,
        Arc::new(Bench {
            model: model.clone(),
        }),
        options,
    )
    .await?;
    let deltas: Vec<String> = (0..chunks).map(|i| format!("w{i} ")).collect();
    let mut times = Vec::with_capacity(turns);
    for turn in 0..=turns {
        model.push_step(|s| {
            s.text_deltas(deltas.iter().cloned())
                .usage(1, chunks as u64)
        });
        let started = Instant::now();
        let outcome = session
            .save_messages(
                vec![UIMessage::user(format!("u{turn}"), "go")],
                TurnOptions::default(),
            )
            .await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(
            outcome.error.is_none(),
            "turn {turn} failed: {:?}",
            outcome.error
        );
        // The first turn warms the process and the log up.
        if turn > 0 {
            times.push(elapsed);
        }
    }
    times.sort();
    times
        .get(times.len() / 2)
        .copied()
        .context("no turns were measured")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let chunks: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);
    let turns: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let modes: Vec<(&str, Option<Manifest>)> = vec![
        ("no subscriber", None),
        ("out-of-process, unbatched", Some(sink("\"none\"")?)),
        ("out-of-process, batch = 64", Some(sink("64")?)),
        ("out-of-process, batch = \"step\"", Some(sink("\"step\"")?)),
    ];
    println!("{chunks} text chunks per turn, median of {turns} turns");
    println!(
        "{:<34} {:>10} {:>12} {:>14}",
        "on_chunk subscriber", "turn ms", "µs/chunk", "added µs/chunk"
    );
    let mut baseline = None;
    for (label, manifest) in modes {
        let median = measure(manifest, chunks, turns).await?;
        let per_chunk = median.as_secs_f64() * 1e6 / chunks as f64;
        let base = *baseline.get_or_insert(per_chunk);
        println!(
            "{label:<34} {:>10.1} {:>12.2} {:>14.2}",
            median.as_secs_f64() * 1e3,
            per_chunk,
            per_chunk - base
        );
    }
    Ok(())
}
