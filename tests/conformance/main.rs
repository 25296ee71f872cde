//! Conformance: one or more tests per numbered item of CONFORMANCE.md (A–G). Each test runs a
//! scripted agent on a fresh log with a fixed clock and counting ids, then asserts the event
//! trace (an insta snapshot rendered one line per event) and the hook calls observed.
//!
//! One file per section (E, the longest, in three by sub-topic), all sharing the recording agent
//! and the harness; snapshots live in `snapshots/` beside these files.

#[path = "../support/mod.rs"]
mod support;

mod harness;
mod recording_agent;

mod a_defaults;
mod b_turn_setup;
mod c_steps;
mod d_tool_calls;
mod e_ending_aborts_and_errors;
mod e_ending_stages;
mod e_ending_success;
mod f_context_overflow;
mod g_entry_paths;
mod hooks;
mod i_chat_recovery;
