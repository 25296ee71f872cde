//! The OTLP export bench: what sending the engine's spans live costs a turn. Each turn shape
//! runs with no subscriber (export off: the engine's spans go nowhere, as in any run without
//! `--otlp`) and with the OTLP layer sending to a loopback sink in this process (export on),
//! interleaved, each run a fresh process. The sink answers every OTLP/HTTP request 200 and
//! counts the bytes, so a run that exported nothing is an error rather than a fast number.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{ensure, Context};
use clap::Args;

use crate::report::{print, Measurement};
use crate::turns::{median, run_cell, CellResult, Shape};

/// Options of `mull-bench otlp`.
#[derive(Args)]
pub struct OtlpArgs {
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    json: bool,
    /// Runs per shape and setting (each a fresh process); medians are reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Which shapes to run, comma-separated.
    #[arg(long, default_value = "a,b,c", value_delimiter = ',')]
    scenarios: Vec<String>,
}

/// A loopback HTTP endpoint that reads each request and answers 200 with an empty body.
struct Sink {
    url: String,
    bytes: Arc<AtomicU64>,
}

impl Sink {
    fn start() -> anyhow::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the OTLP sink")?;
        let url = format!("http://{}", listener.local_addr()?);
        let bytes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&bytes);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counted = Arc::clone(&counted);
                std::thread::spawn(move || {
                    let _ = answer(stream, &counted);
                });
            }
        });
        Ok(Sink { url, bytes })
    }
}

/// Serves one keep-alive connection: each request's body is read and counted.
fn answer(stream: TcpStream, bytes: &AtomicU64) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            first = false;
        }
        if first {
            return Ok(());
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        bytes.fetch_add(length as u64, Ordering::Relaxed);
        writer.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        )?;
    }
}

/// Runs every chosen shape with export off and on, interleaved, and prints the medians.
pub fn run(args: &OtlpArgs) -> anyhow::Result<()> {
    let shapes = args
        .scenarios
        .iter()
        .map(|s| Shape::named(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    ensure!(args.reps > 0, "--reps must be at least 1");
    let sink = Sink::start()?;
    let mut rows: Vec<CellResult> = Vec::new();
    for rep in 0..args.reps {
        for shape in &shapes {
            for otlp in [None, Some(sink.url.as_str())] {
                let before = sink.bytes.load(Ordering::Relaxed);
                let row = run_cell(
                    shape,
                    rep,
                    otlp,
                    mull_store::Durability::Process,
                    crate::runtime::RuntimeKind::CurrentThread,
                )?;
                let sent = sink.bytes.load(Ordering::Relaxed) - before;
                ensure!(
                    otlp.is_none() || sent > 0,
                    "scenario {} exported no spans",
                    shape.name
                );
                if !args.json {
                    eprintln!(
                        "rep {rep} {} export {}: {:.1} ms, {:.2} us/chunk, {sent} bytes sent",
                        shape.name,
                        if row.otlp { "on" } else { "off" },
                        row.wall_ms,
                        row.us_per_text_chunk,
                    );
                }
                rows.push(row);
            }
        }
    }
    let mut results = Vec::new();
    for shape in &shapes {
        let pick = |on: bool, f: fn(&CellResult) -> f64| {
            median(
                rows.iter()
                    .filter(|r| r.scenario == shape.name && r.otlp == on)
                    .map(f)
                    .collect(),
            )
        };
        let (off, on) = (pick(false, |r| r.wall_ms), pick(true, |r| r.wall_ms));
        let (cpu_off, cpu_on) = (pick(false, |r| r.cpu_ms), pick(true, |r| r.cpu_ms));
        let flush = pick(true, |r| r.otlp_flush_ms);
        let per_chunk = |ms: f64| ms * 1000.0 / shape.text_chunks() as f64;
        let metric = |name: &str| format!("{}_{name}", shape.name);
        let wall_overhead = 100.0 * (on - off) / off;
        let cpu_overhead = 100.0 * (cpu_on - cpu_off) / cpu_off;
        let goal = shape.name == "a";
        let mut push = |name: &str, value: f64, unit: &'static str, note: String| {
            results.push(Measurement {
                bench: "otlp",
                metric: metric(name),
                value,
                unit,
                goal: None,
                met: None,
                note,
            })
        };
        push(
            "wall_off",
            per_chunk(off),
            "us/chunk",
            format!(
                "{}; no subscriber; median of {}",
                shape.describe(),
                args.reps
            ),
        );
        push(
            "wall_on",
            per_chunk(on),
            "us/chunk",
            "OTLP layer on, spans batched to a loopback endpoint".into(),
        );
        push(
            "wall_overhead",
            wall_overhead,
            "%",
            format!("wall {off:.1} ms off, {on:.1} ms on"),
        );
        push(
            "cpu_off",
            cpu_off,
            "ms",
            "user + system of the run, all threads".into(),
        );
        push(
            "cpu_on",
            cpu_on,
            "ms",
            "the same with the OTLP layer and its batch thread".into(),
        );
        results.push(Measurement {
            bench: "otlp",
            metric: metric("cpu_overhead"),
            value: cpu_overhead,
            unit: "%",
            goal: goal.then(|| "< 5 %".to_owned()),
            met: goal.then_some(cpu_overhead < 5.0),
            note: "CPU, which other processes on a shared machine disturb less than wall time"
                .into(),
        });
        results.push(Measurement {
            bench: "otlp",
            metric: metric("export_flush"),
            value: flush,
            unit: "ms",
            goal: None,
            met: None,
            note: "sending the queued spans at exit, after the turns".into(),
        });
    }
    print(&results, args.json)
}
