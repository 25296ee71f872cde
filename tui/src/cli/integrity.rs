//! `mull check DB` and `mull recover DB OUT`: what damage costs a log, and a way out of it.

use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{DamagedRange, IntegrityReport};

/// Checks `db` fully and prints the report; returns whether the log is sound.
pub fn check(db: &Path) -> Result<bool> {
    let report = mull_store::check(db).with_context(|| format!("checking {}", db.display()))?;
    print!("{}", render_check(&report));
    Ok(report.is_sound())
}

/// The report as printed: a verdict, SQLite's first complaints, then every stretch of seqs
/// that cannot be read.
fn render_check(report: &IntegrityReport) -> String {
    let db = report.path.display();
    if report.is_sound() {
        return format!("{db}: sound: {} events read back\n", report.readable);
    }
    let mut out = format!("{db}: damaged\n");
    if !report.problems.is_empty() {
        out.push_str(&format!(
            "  SQLite reports {} problem(s), first: {}\n",
            report.problems.len(),
            report.problems[0]
        ));
    }
    for side in &report.side {
        out.push_str(&format!("  beside it: {side}\n"));
    }
    out.push_str(&stretches(&report.damaged));
    let lost: u64 = report.damaged.iter().filter_map(DamagedRange::lost).sum();
    out.push_str(&format!(
        "{} events read back from the database (up to seq {}); {lost} lost in {} stretch(es)\n",
        report.readable,
        report.last_readable,
        report.damaged.len()
    ));
    out.push_str(&format!(
        "copy every readable event into a new log with: mull recover {db} NEW.db\n"
    ));
    out
}

fn stretches(damaged: &[DamagedRange]) -> String {
    damaged.iter().map(|range| format!("  {range}\n")).collect()
}

/// Copies every readable event of `db` into a new log at `out` and says what was lost.
pub fn recover(db: &Path, out: &Path) -> Result<()> {
    // The store copies without reporting as it goes: a spinner with the time says it works.
    let progress = super::progress::spinner(&format!("recovering {}", db.display()));
    let recovered = mull_store::recover(db, out);
    progress.finish_and_clear();
    let report =
        recovered.with_context(|| format!("recovering {} into {}", db.display(), out.display()))?;
    println!(
        "copied {} events from {} into {} ({} of them from the files beside it)",
        report.copied,
        db.display(),
        out.display(),
        report.from_side_files
    );
    if report.lost.is_empty() {
        println!("nothing was lost");
    } else {
        println!("lost (could not be read):");
        print!("{}", stretches(&report.lost));
    }
    Ok(())
}
