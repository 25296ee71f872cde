//! mull's bench binary: `cargo run --release -p mull-bench -- <bench> [--json]`.
//!
//! Each bench prints a table, or one JSON object per result with `--json`. Speed goals live
//! here, never in timed tests.

mod dash_pg;
mod log;
mod nodes;
mod otlp;
mod pg_speed;
mod report;
mod runtime;
mod timetravel;
mod turns;

use clap::{Parser, Subcommand};

/// Measures mull's speeds on this machine.
#[derive(Parser)]
#[command(name = "mull-bench")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// The event log: append throughput, projection rebuild, cross-process tail latency.
    Log(log::LogArgs),
    /// The tailing side of the tail-latency bench, run as a child process.
    #[command(hide = true)]
    LogTailChild(log::TailChildArgs),
    /// The engine per streamed chunk: the AI SDK peer's three turn shapes, every chunk logged.
    Turns(turns::TurnsArgs),
    /// What exporting the engine's spans live over OTLP adds to each turn shape.
    Otlp(otlp::OtlpArgs),
    /// The log on PostgreSQL beside SQLite, chats/s over 1-3 server nodes, resume on a
    /// non-owner node (starts a throwaway PostgreSQL).
    Nodes(nodes::NodesArgs),
    /// One measured run of one turn shape, run as a child process.
    #[command(hide = true)]
    TurnsCell(turns::CellArgs),
    /// The dashboard on a large PostgreSQL log: first frame, peak RSS, idle refresh (starts a
    /// throwaway PostgreSQL and imports a generated log into it).
    DashPg(dash_pg::DashPgArgs),
    /// The log on PostgreSQL at speed: (a), (b), (c) beside SQLite and (c)'s physical floor,
    /// group commit over 100 sessions (starts a throwaway PostgreSQL).
    PgSpeed(pg_speed::PgSpeedArgs),
    /// Time travel: backtest sessions/s over recorded demo sessions, and forking a long session.
    Timetravel(timetravel::TimeTravelArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().bench {
        Bench::Log(args) => log::run(&args),
        Bench::LogTailChild(args) => log::tail_child(&args),
        Bench::Turns(args) => turns::run(&args),
        Bench::TurnsCell(args) => turns::cell(&args),
        Bench::Otlp(args) => otlp::run(&args),
        Bench::Timetravel(args) => timetravel::run(&args),
        Bench::Nodes(args) => nodes::run(&args),
        Bench::DashPg(args) => dash_pg::run(&args),
        Bench::PgSpeed(args) => pg_speed::run(&args),
    }
}
