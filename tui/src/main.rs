//! The `mull` binary: the dashboard plus thin wiring of the log's operations.

mod cli;
mod dash;
mod log_source;
mod telemetry;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Agent chat turns over an append-only event log.
#[derive(Debug, Parser)]
#[command(name = "mull", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Send OpenTelemetry spans to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318): live
    /// for chat, serve and demo; with `export`, the log's sessions re-exported instead of JSONL.
    /// The OTEL_EXPORTER_OTLP_* variables work too.
    #[arg(long, global = true, value_name = "URL")]
    otlp: Option<String>,
    /// How RUST_LOG output is written on standard error: `text` (coloured only on a terminal)
    /// or `json` (one object per line, for log collectors).
    #[arg(long, global = true, value_enum, default_value_t = telemetry::LogFormat::Text)]
    log_format: telemetry::LogFormat,
    /// What an event a gate let out survives, for chat, serve and demo on a SQLite log:
    /// `process` (a killed process; the default) or `power` (a power cut too: commits run with
    /// synchronous=FULL and every record-file write is fsynced).
    #[arg(
        long,
        global = true,
        value_name = "process|power",
        default_value = "process"
    )]
    durability: mull_store::Durability,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chat in the terminal with the model MULL_MODEL names; every event goes to the log.
    Chat(cli::chat::ChatArgs),
    /// Serve chats over HTTP and WebSocket (the AI SDK's protocols), every event to the log.
    Serve(cli::serve::ServeArgs),
    /// Run the demo agent into ./mull.db and watch it live in the dashboard.
    Demo(cli::demo::DemoArgs),
    /// Live dashboard over a log (read-only; another process may be writing it).
    Dash(cli::dash::DashArgs),
    /// Write a log (or one session of it) as JSONL to standard output, or with --otlp send it
    /// as OpenTelemetry spans with its original times.
    Export {
        /// The database: a SQLite file or a `postgres://` URL.
        db: PathBuf,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
    },
    /// Append the events of a JSONL file to a database (created if missing).
    Import {
        /// The JSONL file.
        file: PathBuf,
        /// The database: a SQLite file or a `postgres://` URL.
        db: PathBuf,
    },
    /// Fold JSONL logs and print each session's conversation and a per-turn summary.
    Replay {
        /// The JSONL files (each one a log of its own), or `postgres://` URLs.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Re-execute the demo agent over the log instead, and exit 1 at the first event that
        /// differs.
        #[arg(long)]
        check: bool,
    },
    /// Compare two runs of a conversation turn by turn: decisions, tool calls, text, errors,
    /// usage, timing; the first divergence named exactly. Exits 1 when they diverge.
    Diff(cli::diff::DiffArgs),
    /// Approve (or --deny) a tool call waiting for a person; the continuation runs with the
    /// agent --model names.
    Approve(cli::approve::ApproveArgs),
    /// Fork a session at a turn, a seq or a chunk into a new session that goes on with the
    /// demo agent (optionally under a stricter policy); the original is never changed.
    Fork(cli::fork::ForkArgs),
    /// Re-run recorded demo sessions against a stricter policy (built-in or an extension
    /// manifest) with the model's output and tools' results served from the log; report every
    /// tool decision that would change. Exits 1 when one would.
    Backtest(cli::backtest::BacktestArgs),
    /// Counts of a log: sessions, turns, events by kind, tokens, and cost.
    Stats {
        /// The database: a SQLite file or a `postgres://` URL.
        db: PathBuf,
        /// A price file laid over the built-in prices: {"models": {"MODEL": {"input": 0.15,
        /// "output": 0.6, "cache_read": 0.075, "cache_write": 0.15}}}, USD per million tokens.
        #[arg(long)]
        prices: Option<PathBuf>,
    },
    /// Check a log fully: every damaged stretch of seqs and the sessions it costs. Exits 1
    /// when the log is damaged.
    Check {
        /// The database: a SQLite file or a `postgres://` URL.
        db: PathBuf,
    },
    /// Copy every readable event of a damaged log into a new log, and say what was lost.
    Recover {
        /// The damaged database (only read).
        db: PathBuf,
        /// The new database (must not exist).
        out: PathBuf,
    },
    /// Write a large realistic log for benchmarks.
    #[command(hide = true)]
    GenBenchLog(cli::gen_bench_log::GenArgs),
}

fn main() -> std::process::ExitCode {
    cli::exit::run(run)
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    cli::set_durability(cli.durability);
    let live_otlp = match &cli.command {
        Command::Export { .. } => None,
        _ => cli.otlp.as_deref(),
    };
    let _telemetry = telemetry::init(live_otlp, cli.log_format)?;
    match cli.command {
        Command::Chat(args) => cli::chat::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Dash(args) => cli::dash::run(args),
        Command::Export { db, session } => match (cli.otlp.as_deref(), cli::pg::url(&db)) {
            (Some(otlp), _) => cli::otlp_export::run(&db, session.as_deref(), otlp),
            (None, Some(url)) => cli::pg::export(url, session.as_deref()),
            (None, None) => cli::export::run(&db, session.as_deref()),
        },
        Command::Import { file, db } => cli::import::run(&file, &db),
        Command::Replay {
            files,
            check: false,
        } => cli::replay::run(&files),
        Command::Replay { files, check: true } => {
            if !cli::check::run_all(&files)? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Diff(args) => {
            if cli::diff::run(args)? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Approve(args) => cli::approve::run(args),
        Command::Fork(args) => cli::fork::run(args),
        Command::Backtest(args) => {
            if cli::backtest::run(args)? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Stats { db, prices } => cli::stats::run(&db, prices.as_deref()),
        Command::Check { db } => {
            let sound = match cli::pg::url(&db) {
                Some(url) => cli::pg::check(url)?,
                None => cli::integrity::check(&db)?,
            };
            if !sound {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Recover { db, out } => match cli::pg::url(&db) {
            Some(_) => anyhow::bail!(
                "{}: mull recover copies the readable events out of a damaged SQLite file; a \
                 PostgreSQL database is restored from its own backups or replicas \
                 (`mull check` reads every event back, `mull export` writes them as JSONL)",
                db.display()
            ),
            None => cli::integrity::recover(&db, &out),
        },
        Command::GenBenchLog(args) => cli::gen_bench_log::run(args),
    }
}
