//! Hooks: the one dispatcher of observer hooks (the agent's, then each extension's) and the
//! calls of extensions' other hooks. What hooks see and decide is [`context`]; the guard
//! around every call is `guard.rs`.

mod dispatch;
pub(crate) mod extensions;

pub use crate::context;
pub(crate) use dispatch::{dispatch, CallFacts, Observed};
