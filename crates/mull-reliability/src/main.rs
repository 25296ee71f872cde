//! `mull-reliability`: long fault runs with one command each (see RELIABILITY.md).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Fault trials for mull: crash trials, load, corpus generation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rewrites the damaged database files of the bad-input corpus.
    GenBadinput {
        /// Where the files go.
        #[arg(long, default_value = "tests/badinput/db")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::GenBadinput { out } => mull_reliability::corpus::generate(&out),
    }
}
