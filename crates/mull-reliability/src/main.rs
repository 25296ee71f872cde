//! `mull-reliability`: long fault runs with one command each (see RELIABILITY.md).

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use clap::{Parser, Subcommand};
use mull_reliability::{crash, load};

#[derive(Parser)]
#[command(about = "Fault trials for mull: crash trials, load, corpus generation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Kills a process running a scripted agent at seeded random moments and checks the log.
    Crash {
        /// How many trials.
        #[arg(long, default_value_t = 200)]
        trials: u64,
        /// The first trial's seed; trial i uses seed + i.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The latest moment to kill, in ms after the child is ready.
        #[arg(long, default_value_t = 400)]
        max_kill_ms: u64,
    },
    /// Many sessions with concurrent turns in one process on the Scripted model.
    Load {
        #[arg(long, default_value_t = 1000)]
        sessions: usize,
        /// Turns each session starts at once (its turn lock queues them).
        #[arg(long, default_value_t = 4)]
        turns: usize,
        /// Text deltas per turn.
        #[arg(long, default_value_t = 20)]
        chunks: usize,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The child of a crash trial (started by `crash`).
    CrashChild {
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        effects: PathBuf,
    },
    /// Rewrites the damaged database files of the bad-input corpus.
    GenBadinput {
        /// Where the files go.
        #[arg(long, default_value = "tests/badinput/db")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crash {
            trials,
            seed,
            max_kill_ms,
        } => crash_trials(trials, seed, max_kill_ms),
        Command::Load {
            sessions,
            turns,
            chunks,
            json,
        } => load(
            load::LoadPlan {
                sessions,
                turns_per_session: turns,
                chunks_per_turn: chunks,
            },
            json,
        ),
        Command::CrashChild { db, effects } => crash::child_main(&db, &effects),
        Command::GenBadinput { out } => mull_reliability::corpus::generate(&out),
    }
}

fn crash_trials(trials: u64, seed: u64, max_kill_ms: u64) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let spawn = |db: &Path, effects: &Path| {
        let mut command = Process::new(&exe);
        command
            .arg("crash-child")
            .arg("--db")
            .arg(db)
            .arg("--effects")
            .arg(effects);
        command
    };
    let summary = crash::run_trials(&spawn, trials, seed, max_kill_ms, |r| {
        eprintln!(
            "seed {:>4}: killed after {:>3} ms, barrier {:>5}, max seq {:>5}, {} effects ({} unfinished), {} repaired, {} interrupted",
            r.seed, r.kill_after_ms, r.last_barrier, r.max_seq, r.effects, r.effects_unfinished, r.calls_repaired, r.turns_interrupted
        );
    })?;
    println!("trials                          {}", summary.trials);
    println!("passed                          {}", summary.passed);
    println!(
        "killed inside a turn            {}",
        summary.killed_mid_turn
    );
    println!(
        "events committed after barrier  {}",
        summary.unbarriered_events
    );
    println!("reports checked durable         {}", summary.reports);
    println!("side effects                    {}", summary.effects);
    println!(
        "  started, not finished         {}",
        summary.effects_unfinished
    );
    println!("tool calls repaired             {}", summary.calls_repaired);
    println!(
        "elapsed                         {:.1} s",
        summary.elapsed.as_secs_f64()
    );
    for failure in &summary.failures {
        println!("FAILED {failure}");
    }
    anyhow::ensure!(
        summary.failures.is_empty(),
        "{} trial(s) failed",
        summary.failures.len()
    );
    Ok(())
}

fn load(plan: load::LoadPlan, json: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let r = runtime.block_on(load::run(&dir.path().join("load.db"), plan))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "sessions": plan.sessions,
                "turns_per_session": plan.turns_per_session,
                "chunks_per_turn": plan.chunks_per_turn,
                "turns": r.turns,
                "events": r.events,
                "elapsed_ms": r.elapsed.as_millis() as u64,
                "turns_per_sec": r.turns_per_sec,
                "events_per_sec": r.events_per_sec,
                "call_p50_ms": r.call_p50.as_secs_f64() * 1e3,
                "call_p99_ms": r.call_p99.as_secs_f64() * 1e3,
                "turn_p50_ms": r.turn_p50_ms,
                "turn_p99_ms": r.turn_p99_ms,
                "peak_rss_kib": r.peak_rss_kib,
            })
        );
        return Ok(());
    }
    println!(
        "sessions × turns × chunks   {} × {} × {}",
        plan.sessions, plan.turns_per_session, plan.chunks_per_turn
    );
    println!("turns                       {}", r.turns);
    println!("events                      {}", r.events);
    println!(
        "elapsed                     {:.2} s",
        r.elapsed.as_secs_f64()
    );
    println!(
        "throughput                  {:.0} turns/s, {:.0} events/s",
        r.turns_per_sec, r.events_per_sec
    );
    println!(
        "call latency p50 / p99      {:.1} / {:.1} ms (queueing included)",
        r.call_p50.as_secs_f64() * 1e3,
        r.call_p99.as_secs_f64() * 1e3
    );
    println!(
        "turn duration p50 / p99     {} / {} ms (turn_started → turn_finished)",
        r.turn_p50_ms, r.turn_p99_ms
    );
    match r.peak_rss_kib {
        Some(kib) => println!("peak RSS                    {:.1} MiB", kib as f64 / 1024.0),
        None => println!("peak RSS                    unknown"),
    }
    println!("interleaved turns           0 (checked from the log)");
    Ok(())
}
