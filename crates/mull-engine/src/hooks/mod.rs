//! Hooks: the one dispatcher of a session's hooks (the agent's, then each extension's), each
//! under the one failure guard (`guard.rs`). What hooks see and decide is [`context`].

mod dispatch;
mod extensions;
mod observed;

pub use crate::context;
pub(crate) use dispatch::Hooks;
pub(crate) use extensions::ExtensionHooks;
pub(crate) use observed::{CallFacts, Observed};
