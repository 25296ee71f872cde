//! Implementations of [`mull_core::LanguageModel`]: the network providers ([`openai`] for Chat
//! Completions servers, [`anthropic`] for the Messages API), the deterministic [`scripted`]
//! model, and [`replay`], which serves model output recorded in a mull log.
//!
//! [`config`] turns a `MULL_MODEL` spec and the usual API-key variables into a model.

pub mod anthropic;
pub mod config;
pub mod http;
pub mod openai;
mod probe;
pub mod replay;
pub mod scripted;

pub use config::{
    model_from_env, model_from_spec, model_from_spec_with, ConfigError, ModelOverrides,
};
pub use http::{HttpOptions, Secret};
