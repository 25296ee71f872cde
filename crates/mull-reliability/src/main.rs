//! `mull-reliability`: long fault runs with one command each (see RELIABILITY.md).

fn main() -> anyhow::Result<()> {
    Ok(())
}
