//! Out-of-process extensions for mull: an extension is a separate program, so a crash, a hang
//! or garbage on its output cannot take a turn down with it.
//!
//! - [`manifest`]: the TOML/JSON file that says how to start an extension, which hooks it
//!   subscribes to, which host calls it may make, its per-hook timeout and its `on_chunk`
//!   batching.
//! - [`protocol`]: line-delimited JSON-RPC 2.0 over the child's stdin/stdout, and the JSON
//!   schemas of every message, so an extension can be written in any language.
//! - [`process`]: [`ProcessExtension`], which supervises one child (start, restart with
//!   backoff, kill at timeout) and implements the engine's [`mull_engine::Extension`] trait,
//!   so the engine's dispatcher runs it like an in-process extension.
//!
//! Load extensions into a session with
//! `SessionOptions::with_extensions(extensions.into_iter().map(|e| e as Arc<dyn Extension>))`.

pub mod manifest;
pub mod process;
pub mod protocol;

pub use manifest::{ChunkBatching, Manifest, ManifestError, Permissions};
pub use process::{start_all, ExtensionError, ProcessExtension};
