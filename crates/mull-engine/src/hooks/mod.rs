//! Hooks: what they see and decide ([`context`]) and the guard every call of the agent's hooks
//! goes through.

pub mod context;
mod guard;

pub(crate) use guard::{guard_hook, guarded, observe, panic_text, record_hook_failure, Caller};
