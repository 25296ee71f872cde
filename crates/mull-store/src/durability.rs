//! What an event a gate let out survives: a killed process, or a power cut too. Its own
//! module because the schema (how commits sync) and the gate (how record writes sync) both
//! read it.

/// What a gate waits for before something leaves the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// A killed process (SIGKILL, panic, OOM) keeps every event a gate let out: it is in the
    /// operating system's page cache (SQLite's WAL with `synchronous=NORMAL`, or the record
    /// file after one `write`). A power cut or OS crash may lose the last of them.
    #[default]
    Process,
    /// A power cut keeps them too: commits run with `synchronous=FULL`, and every record-file
    /// write is followed by `fdatasync`. Each gate then waits for the disk.
    Power,
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(Durability::Process),
            "power" => Ok(Durability::Power),
            other => Err(format!(
                "unknown durability {other:?}: `process` (survives a killed process) or \
                 `power` (survives a power cut; fsyncs at every gate)"
            )),
        }
    }
}
