//! The manifest: what an extension is called, how to start it, which hooks it subscribes to,
//! which host calls it may make, how long a hook may take, and how it takes `on_chunk`.
//!
//! A manifest is TOML (`*.toml`) or JSON (any other extension). The extension process runs in
//! the manifest's directory, so `args = ["policy.py"]` names a file beside the manifest.
//!
//! ```toml
//! name = "token-counter"
//! command = "python3"
//! args = ["token_counter.py"]
//! hooks = ["before_turn", "on_step_finish"]
//! timeout_ms = 5000
//!
//! [permissions]
//! read_messages = true
//! read_context_blocks = ["memory"]
//!
//! [on_chunk]
//! batch = "step"   # "none" (default), "step", or a number of chunks per message
//! ```

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mull_engine::ExtensionHook;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Per-hook timeout when the manifest names none (Think's 5 s).
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;

/// First delay before restarting a crashed extension when the manifest names none.
pub const DEFAULT_RESTART_BACKOFF_MS: u64 = 100;

/// A manifest that could not be read or does not describe an extension.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("extension manifest {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("extension manifest {path}: {source}")]
    Toml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("extension manifest {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("extension manifest {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// Host calls an extension may make back during a hook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    /// `host/read_messages`: the conversation as it stands.
    #[serde(default)]
    pub read_messages: bool,
    /// `host/read_context_block` for these block names (`"*"`: any).
    #[serde(default)]
    pub read_context_blocks: Vec<String>,
    /// `host/write_context_block` for these block names (`"*"`: any).
    #[serde(default)]
    pub write_context_blocks: Vec<String>,
}

impl Permissions {
    /// Whether reading block `name` is granted.
    pub fn may_read_block(&self, name: &str) -> bool {
        self.read_context_blocks
            .iter()
            .any(|b| b == name || b == "*")
    }

    /// Whether writing block `name` is granted.
    pub fn may_write_block(&self, name: &str) -> bool {
        self.write_context_blocks
            .iter()
            .any(|b| b == name || b == "*")
    }
}

/// How `on_chunk` reaches the extension, as written in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum BatchSetting {
    /// One `on_chunk_batch` message per this many chunks (and at each step's end).
    Count(NonZeroU32),
    /// `"none"`: one `on_chunk` request per chunk; `"step"`: one batch per step.
    Word(String),
}

/// The `[on_chunk]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchSetting>,
}

/// How `on_chunk` is delivered, once the manifest is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkBatching {
    /// Every chunk is one request, answered before the turn goes on (Think's behaviour).
    Unbatched,
    /// Chunks are sent in batches of this size; the rest at the step's end.
    Every(NonZeroU32),
    /// All chunks of a step are sent at the step's end.
    PerStep,
}

/// An extension's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The extension's name: `hook_failed.source` and the `ext:<name>:<field>` overrides.
    pub name: String,
    /// The program to start.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables for the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The hooks it subscribes to.
    pub hooks: Vec<ExtensionHook>,
    #[serde(default)]
    pub permissions: Permissions,
    /// How long one hook call may take, in ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// First delay before restarting after a crash, doubled for each crash in a row.
    #[serde(default = "default_restart_backoff_ms")]
    pub restart_backoff_ms: u64,
    #[serde(default)]
    pub on_chunk: ChunkOptions,
    /// Where the process runs (the manifest's directory); not part of the file.
    #[serde(skip)]
    #[schemars(skip)]
    pub dir: Option<PathBuf>,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_restart_backoff_ms() -> u64 {
    DEFAULT_RESTART_BACKOFF_MS
}

impl Manifest {
    /// Reads a manifest file (TOML when it ends in `.toml`, else JSON).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Manifest, ManifestError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut manifest: Manifest = if path.extension().is_some_and(|e| e == "toml") {
            toml::from_str(&text).map_err(|source| ManifestError::Toml {
                path: path.to_owned(),
                source,
            })?
        } else {
            serde_json::from_str(&text).map_err(|source| ManifestError::Json {
                path: path.to_owned(),
                source,
            })?
        };
        manifest.dir = path.parent().map(Path::to_owned);
        manifest.check(path)?;
        Ok(manifest)
    }

    /// Parses a TOML manifest whose process runs in `dir`; `origin` names it in errors.
    pub fn from_toml(
        text: &str,
        dir: impl Into<PathBuf>,
        origin: &str,
    ) -> Result<Manifest, ManifestError> {
        let path = PathBuf::from(origin);
        let mut manifest: Manifest =
            toml::from_str(text).map_err(|source| ManifestError::Toml {
                path: path.clone(),
                source,
            })?;
        manifest.dir = Some(dir.into());
        manifest.check(&path)?;
        Ok(manifest)
    }

    fn check(&self, path: &Path) -> Result<(), ManifestError> {
        let invalid = |reason: String| ManifestError::Invalid {
            path: path.to_owned(),
            reason,
        };
        if self.name.trim().is_empty() {
            return Err(invalid("`name` is empty".into()));
        }
        if self.command.trim().is_empty() {
            return Err(invalid(format!(
                "extension {:?}: `command` is empty",
                self.name
            )));
        }
        if self.timeout_ms == 0 {
            return Err(invalid(format!(
                "extension {:?}: `timeout_ms` is 0; a hook needs time to answer",
                self.name
            )));
        }
        self.chunk_batching().map_err(invalid)?;
        Ok(())
    }

    /// How `on_chunk` is delivered.
    pub fn chunk_batching(&self) -> Result<ChunkBatching, String> {
        match &self.on_chunk.batch {
            None => Ok(ChunkBatching::Unbatched),
            Some(BatchSetting::Count(n)) => Ok(ChunkBatching::Every(*n)),
            Some(BatchSetting::Word(w)) if w == "none" => Ok(ChunkBatching::Unbatched),
            Some(BatchSetting::Word(w)) if w == "step" => Ok(ChunkBatching::PerStep),
            Some(BatchSetting::Word(w)) => Err(format!(
                "extension {:?}: [on_chunk] batch = {w:?}; expected \"none\", \"step\" or a positive number",
                self.name
            )),
        }
    }

    /// The per-hook timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Whether the extension subscribes to `hook`.
    pub fn subscribes(&self, hook: ExtensionHook) -> bool {
        self.hooks.contains(&hook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_toml_manifest_parses() {
        let m = Manifest::from_toml(
            r#"
            name = "counter"
            command = "python3"
            args = ["counter.py"]
            env = { LEVEL = "debug" }
            hooks = ["on_step_finish", "on_chunk"]
            timeout_ms = 250
            [permissions]
            read_messages = true
            write_context_blocks = ["memory"]
            [on_chunk]
            batch = 16
            "#,
            "/tmp",
            "counter.toml",
        )
        .unwrap();
        assert_eq!(m.timeout(), Duration::from_millis(250));
        assert!(m.subscribes(ExtensionHook::OnChunk));
        assert!(!m.subscribes(ExtensionHook::BeforeTurn));
        assert!(m.permissions.may_write_block("memory"));
        assert!(!m.permissions.may_read_block("memory"));
        assert_eq!(
            m.chunk_batching().unwrap(),
            ChunkBatching::Every(NonZeroU32::new(16).unwrap())
        );
    }

    #[test]
    fn defaults_are_think_s() {
        let m = Manifest::from_toml(
            "name = \"a\"\ncommand = \"x\"\nhooks = []\n",
            "/tmp",
            "a.toml",
        )
        .unwrap();
        assert_eq!(m.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(m.chunk_batching().unwrap(), ChunkBatching::Unbatched);
        assert_eq!(m.permissions, Permissions::default());
    }

    #[test]
    fn bad_manifests_name_the_file_and_the_problem() {
        let err = Manifest::from_toml(
            "name = \"a\"\ncommand = \"x\"\nhooks = [\"before_step\"]\n",
            "/tmp",
            "a.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("a.toml") && err.contains("before_step"),
            "{err}"
        );
        let err = Manifest::from_toml(
            "name = \"a\"\ncommand = \"x\"\nhooks = []\n[on_chunk]\nbatch = \"often\"\n",
            "/tmp",
            "b.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("b.toml") && err.contains("often"), "{err}");
    }
}
