//! What can go wrong configuring or sending spans, in a module of its own so every part of
//! the crate names it without reaching back up to the crate root.

/// What can go wrong configuring or sending spans.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The flag or the variables ask for something mull cannot do.
    #[error("OTLP configuration: {0}")]
    Config(String),
    /// The exporter could not be built (a malformed URL, a bad header).
    #[error("building the OTLP exporter for {endpoint}: {message}")]
    Build { endpoint: String, message: String },
    /// The collector refused the spans or could not be reached.
    #[error("sending spans to {endpoint}: {message}")]
    Send { endpoint: String, message: String },
    /// The log could not be read.
    #[error("reading the log: {0}")]
    Store(#[from] mull_store::StoreError),
    /// `--session` names no session of the log.
    #[error("the log has no session {0:?}")]
    NoSession(String),
}
