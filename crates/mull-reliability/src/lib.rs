//! Fault trials for mull: the log is the truth, so prove it under faults.
//!
//! - [`targets`]: the bodies of the fuzz targets (SSE decoders, `Event::decode`, JSONL import),
//!   shared by the cargo-fuzz project in `fuzz/` and the property tests in `tests/`.
//! - [`crash`]: crash trials: a child process running a scripted agent is killed with
//!   SIGKILL at a seeded moment, then the log is reopened and checked.
//! - [`load`]: many sessions with concurrent turns in one process; checks no turn interleaves.
//! - [`corpus`]: writes the damaged databases of the bad-input corpus.
//! - [`server_targets`]: the bodies of the server's fuzz targets (chat bodies, WebSocket
//!   frames, the resume path) against the real router.
//! - [`sse_server`]: a local server that feeds arbitrary bytes to the real provider clients.

pub mod corpus;
pub mod crash;
pub mod edits;
pub mod load;
pub mod server_targets;
pub mod sse_server;
pub mod targets;
