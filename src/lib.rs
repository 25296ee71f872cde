//! mull: LLM agent chat turns over an append-only event log.
//!
//! This facade re-exports the crates of the workspace so applications depend on one crate.

pub use mull_core as core;
