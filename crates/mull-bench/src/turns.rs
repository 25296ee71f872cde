//! The turn bench: what mull's engine costs per streamed text chunk, with every chunk logged.
//!
//! Three shapes, the same as the AI SDK peer's (peer-bench): (a) 1 turn × 1 step × 10,000 text
//! chunks, (b) 1 turn × 10 steps (9 calls to one server tool) × 1,000 chunks each, (c) 1,000
//! turns × 1 step × 20 chunks, each turn an independent conversation. The model is a scripted
//! one with no delay, so only the engine and the log are timed. Every run of a shape is a fresh
//! process (this binary re-invoked as `turns-cell`), so peak RSS is that shape's alone.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use async_trait::async_trait;
use clap::Args;
use futures::StreamExt;
use mull_core::{LanguageModel, StreamPart, UIMessage};
use mull_engine::{
    Agent, ChunkContext, FnTool, HookResult, OutcomeStatus, Session, SessionOptions, ToolError,
    ToolSet, TurnOptions,
};
use mull_providers::scripted::{ScriptedModel, StepScript};
use mull_store::{Durability, EventLog, Log, LogOptions};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::report::{print, Measurement};
use crate::runtime::{run_as_task, RuntimeKind};

/// Options of `mull-bench turns`.
#[derive(Args)]
pub struct TurnsArgs {
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    json: bool,
    /// Runs per shape (each a fresh process); the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Which shapes to run, comma-separated.
    #[arg(long, default_value = "a,b,c", value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Also append every run's raw row (JSON) to this file.
    #[arg(long)]
    raw: Option<PathBuf>,
    /// What the log's gates wait for: `process` (the default) or `power` (fsync per gate).
    #[arg(long, default_value = "process")]
    durability: Durability,
    /// The runtime each cell runs its turns on.
    #[arg(long, value_enum, default_value_t)]
    runtime: RuntimeKind,
}

/// Options of one measured run, in its own process.
#[derive(Args)]
pub struct CellArgs {
    #[arg(long)]
    pub(crate) scenario: String,
    /// Export the engine's spans live over OTLP to this URL while the turns run.
    #[arg(long)]
    pub(crate) otlp: Option<String>,
    /// The log's durability (see `turns --durability`).
    #[arg(long, default_value = "process")]
    pub(crate) durability: Durability,
    /// The runtime the turns run on (see `turns --runtime`).
    #[arg(long, value_enum, default_value_t)]
    pub(crate) runtime: RuntimeKind,
}

/// A turn shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) name: &'static str,
    turns: usize,
    steps: usize,
    chunks_per_step: usize,
}

pub(crate) const SHAPES: [Shape; 3] = [
    Shape {
        name: "a",
        turns: 1,
        steps: 1,
        chunks_per_step: 10_000,
    },
    Shape {
        name: "b",
        turns: 1,
        steps: 10,
        chunks_per_step: 1_000,
    },
    Shape {
        name: "c",
        turns: 1_000,
        steps: 1,
        chunks_per_step: 20,
    },
];

impl Shape {
    pub(crate) fn named(name: &str) -> anyhow::Result<Shape> {
        SHAPES
            .iter()
            .copied()
            .find(|s| s.name == name)
            .with_context(|| format!("unknown scenario {name:?} (known: a, b, c)"))
    }

    /// The same shape with `turns` turns.
    pub(crate) fn with_turns(self, turns: usize) -> Shape {
        Shape { turns, ..self }
    }

    /// Text chunks of one turn.
    pub(crate) fn chunks_per_turn(&self) -> usize {
        self.steps * self.chunks_per_step
    }

    pub(crate) fn text_chunks(&self) -> usize {
        self.turns * self.steps * self.chunks_per_step
    }

    fn tool_calls(&self) -> usize {
        self.turns * (self.steps - 1)
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "{} turn(s) x {} step(s) x {} chunks, {} tool calls",
            self.turns,
            self.steps,
            self.chunks_per_step,
            self.tool_calls()
        )
    }
}

/// One measured run, as the cell process reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    pub scenario: String,
    pub turns: usize,
    pub steps: usize,
    pub chunks_per_step: usize,
    pub text_chunks: usize,
    /// `on_chunk` calls (every part, not only text).
    pub on_chunk_calls: u64,
    /// Rows in the log once the run ended, all committed.
    pub events_logged: u64,
    pub wall_ms: f64,
    pub us_per_text_chunk: f64,
    /// User + system CPU of the whole process (all threads, incl. the log writer).
    pub cpu_ms: f64,
    /// VmHWM of the process at the end of the run.
    pub peak_rss_mib: f64,
    pub load1_at_start: f64,
    /// Share of both cores other processes used during the run (filled in by the parent).
    #[serde(default)]
    pub foreign_busy_pct: f64,
    #[serde(default)]
    pub rep: usize,
    /// Whether spans were exported live during the run.
    #[serde(default)]
    pub otlp: bool,
    /// Sending the spans still queued at the end (after the timed turns, off their path).
    #[serde(default)]
    pub otlp_flush_ms: f64,
}

/// The bench agent: a scripted model, one server tool, a counting `on_chunk` that does nothing
/// else.
struct BenchAgent {
    model: Arc<dyn LanguageModel>,
    on_chunk_calls: Arc<AtomicU64>,
    text_chunks: Arc<AtomicU64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct LookupInput {
    q: String,
    i: u64,
}

#[async_trait]
impl Agent for BenchAgent {
    fn name(&self) -> &str {
        "bench"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }

    fn tools(&self) -> ToolSet {
        let lookup = FnTool::new(
            "lookup",
            "Look something up",
            |input: LookupInput, _| async move {
                Ok::<Value, ToolError>(
                    json!({"ok": true, "i": input.i, "answer": format!("result for {}", input.q)}),
                )
            },
        );
        ToolSet::new().with(lookup.shared())
    }

    fn max_steps(&self) -> u32 {
        64
    }

    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.on_chunk_calls.fetch_add(1, Ordering::Relaxed);
        if matches!(ctx.chunk, StreamPart::TextDelta { .. }) {
            self.text_chunks.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The scripted model of one turn of `shape`: text words `w0 `..`w9 ` as the peer streams them,
/// a call to `lookup` at the end of every step but the last.
fn scripted_turn(shape: &Shape) -> ScriptedModel {
    let mut builder = ScriptedModel::builder("bench");
    for step in 0..shape.steps {
        let last = step + 1 == shape.steps;
        let chunks = shape.chunks_per_step;
        builder = builder.step(move |s: StepScript| {
            let s = s
                .text_deltas((0..chunks).map(|i| format!("w{} ", i % 10)))
                .usage(10, 20);
            if last {
                s
            } else {
                s.tool_call(
                    &format!("call_{step}"),
                    "lookup",
                    json!({"q": format!("query {step}"), "i": step}),
                )
            }
        });
    }
    builder.build()
}

/// Runs every turn of `shape` on `log` (either backend) and checks each completed.
pub(crate) async fn run_shape(
    log: &Arc<dyn EventLog>,
    shape: &Shape,
    on_chunk_calls: &Arc<AtomicU64>,
    text_chunks: &Arc<AtomicU64>,
) -> anyhow::Result<()> {
    run_shape_as(log, shape, "sess", on_chunk_calls, text_chunks).await
}

/// [`run_shape`], its sessions named `<prefix>_<turn>` (so runs at once never share one).
pub(crate) async fn run_shape_as(
    log: &Arc<dyn EventLog>,
    shape: &Shape,
    prefix: &str,
    on_chunk_calls: &Arc<AtomicU64>,
    text_chunks: &Arc<AtomicU64>,
) -> anyhow::Result<()> {
    for turn in 0..shape.turns {
        let agent = Arc::new(BenchAgent {
            model: Arc::new(scripted_turn(shape)),
            on_chunk_calls: Arc::clone(on_chunk_calls),
            text_chunks: Arc::clone(text_chunks),
        });
        // Each turn is its own conversation, as in the peer (prompt = one user message).
        let options = SessionOptions::new(format!("{prefix}_{turn}"));
        let session = Session::open_on(Arc::clone(log), agent, options)
            .await
            .with_context(|| format!("opening session {turn}"))?;
        let mut chat = session.chat(
            vec![UIMessage::user(format!("u_{turn}"), "Please do the thing.")],
            TurnOptions::default(),
        )?;
        // Drain what the client sees, as a UI forwarding the stream would.
        while let Some(part) = chat.next().await {
            if let StreamPart::Error { message } = part {
                bail!("turn {turn} streamed an error: {message}");
            }
        }
        let outcome = chat.finish().await?;
        if outcome.status != OutcomeStatus::Completed {
            bail!(
                "turn {turn} ended {:?}: {:?}",
                outcome.status,
                outcome.error
            );
        }
    }
    Ok(())
}

/// CPU time (user + system) of this process so far, in ms.
pub(crate) fn process_cpu_ms() -> f64 {
    // SAFETY: getrusage only writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return f64::NAN;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// The process's peak resident set size (VmHWM), in MiB.
fn peak_rss_mib() -> anyhow::Result<f64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("/proc/self/status has no VmHWM line")?;
    let kib: f64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("parsing {line:?} in /proc/self/status"))?;
    Ok(kib / 1024.0)
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// One measured run of one shape, printed as one JSON line.
pub fn cell(args: &CellArgs) -> anyhow::Result<()> {
    let shape = Shape::named(&args.scenario)?;
    let dir = tempfile::tempdir().context("creating a scratch folder")?;
    let path = dir.path().join("turns.db");
    let runtime = args.runtime.build()?;
    let log = Log::open_with(
        &path,
        LogOptions {
            durability: args.durability,
            ..LogOptions::default()
        },
    )?;
    let on_chunk_calls = Arc::new(AtomicU64::new(0));
    let text_chunks = Arc::new(AtomicU64::new(0));

    let live = match &args.otlp {
        Some(url) => Some(mull_otel::LiveExport::start(&mull_otel::OtlpConfig::to(
            url,
        ))?),
        None => None,
    };
    // A thread-local subscriber sees every engine span only on a single-threaded runtime.
    anyhow::ensure!(
        live.is_none() || args.runtime == RuntimeKind::CurrentThread,
        "--otlp needs --runtime current-thread"
    );
    let subscriber = live.as_ref().map(|live| {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(live.layer()))
    });
    let load = load1();
    let cpu_start = process_cpu_ms();
    let start = Instant::now();
    let shared: Arc<dyn EventLog> = Arc::new(log.clone());
    let (calls, texts) = (Arc::clone(&on_chunk_calls), Arc::clone(&text_chunks));
    run_as_task(&runtime, async move {
        run_shape(&shared, &shape, &calls, &texts).await
    })?;
    let wall = start.elapsed();
    let cpu_ms = process_cpu_ms() - cpu_start;
    drop(subscriber);
    let flush = Instant::now();
    let otlp = live.is_some();
    if let Some(live) = live {
        live.shutdown()?;
    }
    let otlp_flush_ms = flush.elapsed().as_secs_f64() * 1000.0;
    let peak = peak_rss_mib()?;
    log.close()?;

    let events_logged = count_rows(&path, shape.text_chunks())?;
    let seen = text_chunks.load(Ordering::Relaxed) as usize;
    ensure!(
        seen == shape.text_chunks(),
        "expected {} text chunks, on_chunk saw {seen}",
        shape.text_chunks()
    );
    let wall_ms = wall.as_secs_f64() * 1000.0;
    let result = CellResult {
        scenario: shape.name.to_owned(),
        turns: shape.turns,
        steps: shape.steps,
        chunks_per_step: shape.chunks_per_step,
        text_chunks: shape.text_chunks(),
        on_chunk_calls: on_chunk_calls.load(Ordering::Relaxed),
        events_logged,
        wall_ms,
        us_per_text_chunk: wall_ms * 1000.0 / shape.text_chunks() as f64,
        cpu_ms,
        peak_rss_mib: peak,
        load1_at_start: load,
        foreign_busy_pct: 0.0,
        rep: 0,
        otlp,
        otlp_flush_ms: if otlp { otlp_flush_ms } else { 0.0 },
    };
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// Rows in the log, and a check that every text chunk is among them.
fn count_rows(path: &Path, text_chunks: usize) -> anyhow::Result<u64> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let rows: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    let deltas: i64 = conn.query_row(
        "SELECT count(*) FROM events WHERE kind = 'chunk' AND payload LIKE '%\"text-delta\"%'",
        [],
        |r| r.get(0),
    )?;
    ensure!(
        deltas as usize == text_chunks,
        "expected {text_chunks} text-delta rows in the log, found {deltas}"
    );
    Ok(rows as u64)
}

/// Busy and total jiffies of all cores, from /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    let [user, nice, system, idle, iowait, irq, softirq, steal] = fields[..] else {
        return None;
    };
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy, busy + idle + iowait))
}

/// Runs one shape in a fresh process and measures what else the machine did meanwhile.
pub(crate) fn run_cell(
    shape: &Shape,
    rep: usize,
    otlp: Option<&str>,
    durability: Durability,
    runtime: RuntimeKind,
) -> anyhow::Result<CellResult> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let before = cpu_jiffies();
    let mut command = Command::new(exe);
    command.args(["turns-cell", "--scenario", shape.name]);
    if let Some(url) = otlp {
        command.args(["--otlp", url]);
    }
    if durability == Durability::Power {
        command.args(["--durability", "power"]);
    }
    command.args(["--runtime", runtime.label()]);
    let output = command.output().context("running a turns cell")?;
    let after = cpu_jiffies();
    if !output.status.success() {
        bail!(
            "scenario {} failed: {}",
            shape.name,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .with_context(|| format!("scenario {} printed nothing", shape.name))?;
    let mut result: CellResult = serde_json::from_str(line)
        .with_context(|| format!("scenario {} printed {line:?}", shape.name))?;
    result.rep = rep;
    if let (Some((b0, t0)), Some((b1, t1))) = (before, after) {
        // 100 jiffies per second; the cell's own CPU is not foreign. This counts the cell's
        // start-up too, so it is an upper bound.
        let busy_s = (b1 - b0) as f64 / 100.0 - result.cpu_ms / 1000.0;
        let total_s = (t1 - t0) as f64 / 100.0;
        if total_s > 0.0 {
            result.foreign_busy_pct = (100.0 * busy_s / total_s).max(0.0);
        }
    }
    Ok(result)
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Runs every chosen shape `reps` times, interleaved, and prints medians.
pub fn run(args: &TurnsArgs) -> anyhow::Result<()> {
    let shapes = args
        .scenarios
        .iter()
        .map(|s| Shape::named(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    ensure!(args.reps > 0, "--reps must be at least 1");
    let mut raw = match &args.raw {
        Some(path) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => None,
    };
    let mut rows: Vec<CellResult> = Vec::new();
    for rep in 0..args.reps {
        for shape in &shapes {
            let row = run_cell(shape, rep, None, args.durability, args.runtime)?;
            if !args.json {
                eprintln!(
                    "rep {rep} {}: {:.1} ms, {:.2} us/chunk, {:.1} MiB, foreign busy {:.0}%",
                    shape.name,
                    row.wall_ms,
                    row.us_per_text_chunk,
                    row.peak_rss_mib,
                    row.foreign_busy_pct
                );
            }
            if let Some(file) = raw.as_mut() {
                writeln!(file, "{}", serde_json::to_string(&row)?)?;
            }
            rows.push(row);
        }
    }
    let mut results = Vec::new();
    for shape in &shapes {
        let cells: Vec<&CellResult> = rows.iter().filter(|r| r.scenario == shape.name).collect();
        let pick = |f: fn(&CellResult) -> f64| median(cells.iter().map(|r| f(r)).collect());
        let wall: Vec<f64> = cells.iter().map(|r| r.wall_ms).collect();
        let (lo, hi) = wall
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), w| (lo.min(*w), hi.max(*w)));
        let wall_ms = pick(|r| r.wall_ms);
        let events = cells.first().map_or(0, |r| r.events_logged);
        let context = format!(
            "{}; {} events logged; {} runtime; median of {}, load1 {:.1}, foreign busy {:.0}%",
            shape.describe(),
            events,
            args.runtime.label(),
            cells.len(),
            pick(|r| r.load1_at_start),
            pick(|r| r.foreign_busy_pct)
        );
        let metric = |name: &str| format!("{}_{name}", shape.name);
        results.push(Measurement {
            bench: "turns",
            metric: metric("us_per_text_chunk"),
            value: wall_ms * 1000.0 / shape.text_chunks() as f64,
            unit: "us",
            goal: None,
            met: None,
            note: context,
        });
        results.push(Measurement {
            bench: "turns",
            metric: metric("wall"),
            value: wall_ms,
            unit: "ms",
            goal: None,
            met: None,
            note: format!("min {lo:.1}, max {hi:.1}"),
        });
        results.push(Measurement {
            bench: "turns",
            metric: metric("cpu"),
            value: pick(|r| r.cpu_ms),
            unit: "ms",
            goal: None,
            met: None,
            note: "user + system, all threads incl. the log writer".into(),
        });
        results.push(Measurement {
            bench: "turns",
            metric: metric("peak_rss"),
            value: pick(|r| r.peak_rss_mib),
            unit: "MiB",
            goal: None,
            met: None,
            note: "VmHWM of the run's process".into(),
        });
    }
    print(&results, args.json)
}
