//! Implementations of [`mull_core::LanguageModel`]: the network providers ([`openai`] for Chat
//! Completions servers, [`anthropic`] for the Messages API), the deterministic [`scripted`]
//! model, and [`replay`], which serves model output recorded in a mull log.
//!
//! [`config`] turns a spec — the one `mull chat --model` and `MULL_MODEL` take — and the usual
//! API-key variables into a model; give it to your agent's `model()`. Keys are read through the
//! function you pass, so a service can take them from anywhere. For tests, a
//! [`ScriptedModel`](scripted::ScriptedModel) plays steps you write, offline and the same every
//! run.
//!
//! ```
//! use mull_providers::model_from_spec;
//! use mull_providers::scripted::ScriptedModel;
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // `openai:MODEL`, `anthropic:MODEL`, `openai-compatible:URL#MODEL`, or `scripted-demo`.
//! let model = model_from_spec("openai:gpt-4o-mini", |name| {
//!     (name == "OPENAI_API_KEY").then(|| "sk-from-your-secret-store".to_owned())
//! })?;
//! assert_eq!(model.model_id(), "gpt-4o-mini");
//!
//! // Two steps: a tool call, then the answer.
//! let scripted = ScriptedModel::builder("scripted")
//!     .step(|s| s.tool_call("c1", "order_status", json!({ "order": "A-1001" })))
//!     .step(|s| s.text("Order A-1001 was delivered."))
//!     .build();
//! # let _ = scripted;
//! # Ok(())
//! # }
//! ```

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
