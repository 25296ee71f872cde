//! Hooks: what they see and decide ([`context`]), the one dispatcher of observer hooks, and the
//! guard every call of the agent's hooks goes through.

pub mod context;
mod dispatch;
mod guard;

pub(crate) use dispatch::{dispatch, CallFacts, Observed};
pub(crate) use guard::{guard_hook, guarded, observe, panic_text, record_hook_failure, Caller};
