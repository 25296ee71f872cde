//! What the root test files share: a log in a temporary folder with one deterministic session
//! on it ([`test_log`]), a one-line-per-event trace for snapshots ([`trace`]), a hook-call
//! recorder ([`hook_calls`]), readers that pick events of one kind out of a log ([`events`]),
//! agents answering from a script ([`scripted`]), an agent held to a spend cap ([`budgets`]), an agent whose chosen hook panics or hangs on
//! the first turn ([`faults`]), a log that notes the gates a session waits at ([`gates`]), a
//! parent agent asking a research sub-agent ([`subagents`]), the tools test agents share
//! ([`tools`]), and re-execution of a recorded session ([`replay`]).
//!
//! Every test binary compiles this whole module and uses only part of it, so what one file
//! leaves unused is not dead.
#![allow(dead_code)]

pub mod budgets;
pub mod demo_runs;
pub mod events;
pub mod faults;
pub mod gates;
pub mod hook_calls;
pub mod replay;
pub mod scripted;
pub mod subagents;
pub mod test_log;
pub mod tools;
pub mod trace;
