//! Fault trials for mull: the log is the truth, so prove it under faults.
//!
//! - [`targets`]: the bodies of the fuzz targets (SSE decoders, `Event::decode`, JSONL import),
//!   shared by the cargo-fuzz project in `fuzz/` and the property tests in `tests/`.
//! - [`corpus`]: writes the damaged databases of the bad-input corpus.
//! - [`sse_server`]: a local server that feeds arbitrary bytes to the real provider clients.
//!
//! The root `tests/reliability_*.rs` include some of these modules by path (the facade package
//! has no dependency on this crate), so those modules use only crates the facade's tests have.

pub mod corpus;
pub mod sse_server;
pub mod targets;
