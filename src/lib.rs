//! mull: LLM agent chat turns over an append-only event log.
//!
//! This facade re-exports the crates of the workspace so applications depend on one crate:
//! [`core`] (the vocabulary), [`store`] (the log), [`engine`] (the turn loop and hooks) and
//! [`providers`] (models), plus [`demo`], a scripted agent that shows a few turns,
//! [`tool_desk`], an agent whose tool policy shows every decision, [`agents`], the built-in
//! agents by name, [`policy`], stricter tool policies over any agent, and [`replay`],
//! re-execution and backtests over the log.

pub use mull_core as core;
pub use mull_engine as engine;
pub use mull_providers as providers;
pub use mull_store as store;

pub mod agents;
pub mod demo;
pub mod policy;
pub mod replay;
pub mod tool_desk;
