//! The `mull` binary: the dashboard plus thin wiring of the log's operations.

mod cli;
mod dash;
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
    /// Write a log (or one session of it) as JSONL to standard output.
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
        /// The database.
        db: PathBuf,
    },
    /// Fold a JSONL log and print each session's conversation and a per-turn summary.
    Replay {
        /// The JSONL file.
        file: PathBuf,
        /// Re-execute the demo agent over the log instead, and exit 1 at the first event that
        /// differs.
        #[arg(long)]
        check: bool,
    },
    /// Compare two runs of a conversation turn by turn: decisions, tool calls, text, errors,
    /// usage, timing; the first divergence named exactly. Exits 1 when they diverge.
    Diff(cli::diff::DiffArgs),
    /// Fork a session at a turn, a seq or a chunk into a new session that goes on with the
    /// demo agent (optionally under a stricter policy); the original is never changed.
    Fork(cli::fork::ForkArgs),
    /// Counts of a log: sessions, turns, events by kind, tokens, and cost.
    Stats {
        /// The database: a SQLite file or a `postgres://` URL.
        db: PathBuf,
        /// A price file laid over the built-in prices: {"models": {"MODEL": {"input": 0.15,
        /// "output": 0.6, "cache_read": 0.075, "cache_write": 0.15}}}, USD per million tokens.
        #[arg(long)]
        prices: Option<PathBuf>,
    },
    /// Write a large realistic log for benchmarks.
    #[command(hide = true)]
    GenBenchLog(cli::gen_bench_log::GenArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    telemetry::init()?;
    match cli.command {
        Command::Chat(args) => cli::chat::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Dash(args) => cli::dash::run(args),
        Command::Export { db, session } => match cli::pg::url(&db) {
            Some(url) => cli::pg::export(url, session.as_deref()),
            None => cli::export::run(&db, session.as_deref()),
        },
        Command::Import { file, db } => cli::import::run(&file, &db),
        Command::Replay { file, check: false } => cli::replay::run(&file),
        Command::Replay { file, check: true } => {
            if !cli::check::run(&file)? {
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
        Command::Fork(args) => cli::fork::run(args),
        Command::Stats { db, prices } => match cli::pg::url(&db) {
            Some(url) => cli::pg::stats(url, prices.as_deref()),
            None => cli::stats::run(&db, prices.as_deref()),
        },
        Command::GenBenchLog(args) => cli::gen_bench_log::run(args),
    }
}
