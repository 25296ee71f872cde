//! `mull dash [DB]`: the live dashboard.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::dash::{self, DashOptions};

/// Arguments of `mull dash`.
#[derive(Debug, Args)]
pub struct DashArgs {
    /// The database (opened read-only): a SQLite file or a `postgres://` URL.
    #[arg(default_value = "mull.db")]
    pub db: PathBuf,
    /// Start following the newest session.
    #[arg(long)]
    pub follow: bool,
    /// A price file laid over the built-in prices (as `mull stats --prices`).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Render the first frame off-screen, print the time and peak memory, and exit.
    #[arg(long, hide = true)]
    pub bench_first_frame: bool,
}

/// Runs the dashboard, or the first-frame benchmark.
pub fn run(args: DashArgs) -> Result<()> {
    if args.bench_first_frame {
        let times = dash::bench_first_frame(&args.db, 160, 48)?;
        println!(
            "first frame {:.1} ms · every session's overview drawn {:.1} ms · newest turn's timeline {:.1} ms · scroll {:.2} ms/frame · peak RSS {}",
            times.first_frame.as_secs_f64() * 1000.0,
            times.overviews_drawn.as_secs_f64() * 1000.0,
            times.newest_timeline.as_secs_f64() * 1000.0,
            times.scroll_frame.as_secs_f64() * 1000.0,
            peak_rss().unwrap_or_else(|| "unknown".into())
        );
        return Ok(());
    }
    let prices = crate::cli::stats::price_table(args.prices.as_deref())?;
    dash::run_named(
        &args.db,
        &args.db.display().to_string(),
        DashOptions {
            follow: args.follow,
            prices,
            ..DashOptions::default()
        },
    )
}

/// The process's peak resident set (Linux: VmHWM), as the kernel prints it.
fn peak_rss() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.1} MB", kb as f64 / 1024.0))
}
