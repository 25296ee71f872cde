//! Extensions: code that is not the agent but subscribes to five of its hooks (`before_turn`,
//! `before_tool_call`, `after_tool_call`, `on_step_finish`, `on_chunk`), as Think's extension
//! hooks do. `before_step` is never offered: its context holds a live model, which is not data.
//!
//! An extension sees JSON-safe snapshots, never the engine's live contexts, so the same
//! contract serves an in-process Rust extension and one running in another process (the
//! `mull-extensions` crate implements [`Extension`] over a child process).
//!
//! Snapshots and replies have Think's shapes and field names (camelCase, as its
//! documentation writes them), so an extension written for Think works unchanged.
//!
//! The dispatcher runs subscribed extensions in load order, right after the agent's own hook
//! at the same point. Only `before_turn`'s reply is used: a [`TurnConfigPatch`] whose scalar
//! fields replace the turn's (headers and provider options merge key by key); `model`,
//! `tools`, `stopWhen`, `experimental_transform` and `output` are ignored. A reply field that
//! is unknown or of the wrong type fails the reply, naming the field. Every field an extension sets
//! is listed in `turn_configured.overrides` as `ext:<name>:<field>`. An extension hook that
//! fails, panics or outlives its timeout is a `hook_failed` event with `source` = the
//! extension's name; the turn goes on.
//!
//! mull does better than Think in one place: each `before_turn` snapshot shows the turn as
//! configured so far (the agent's `before_turn` and earlier extensions applied), including the
//! current `active_tools`, so a policy extension narrows what the agent allowed instead of
//! widening it by accident.
//!
//! Where things are: the contract here ([`Extension`], [`ExtensionHook`], [`ExtensionHost`]),
//! the snapshots hooks see (`snapshot.rs`), a `before_turn` reply and how it changes a turn
//! (`patch.rs`). The dispatcher that runs subscribers at each hook is `hooks/extensions.rs`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_core::{HookName, UIMessage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::HookResult;

pub(crate) mod patch;
mod snapshot;

pub use patch::{
    ForcedTool, ForcedToolKind, PatchError, TimeoutPatch, ToolChoiceMode, ToolChoicePatch,
    TurnConfigPatch,
};
pub use snapshot::{
    ChunkSnapshot, StepSnapshot, ToolCallSnapshot, ToolResultSnapshot, TurnSnapshot, UsageSnapshot,
};

/// How long an extension hook may take before it counts as failed (Think's 5 s).
pub const DEFAULT_EXTENSION_TIMEOUT: Duration = Duration::from_secs(5);

/// The hooks an extension may subscribe to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExtensionHook {
    BeforeTurn,
    BeforeToolCall,
    AfterToolCall,
    OnStepFinish,
    OnChunk,
}

impl ExtensionHook {
    /// Every subscribable hook, in the order a turn reaches them.
    pub const ALL: [ExtensionHook; 5] = [
        ExtensionHook::BeforeTurn,
        ExtensionHook::BeforeToolCall,
        ExtensionHook::AfterToolCall,
        ExtensionHook::OnStepFinish,
        ExtensionHook::OnChunk,
    ];

    /// The snake_case name, as in manifests and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionHook::BeforeTurn => "before_turn",
            ExtensionHook::BeforeToolCall => "before_tool_call",
            ExtensionHook::AfterToolCall => "after_tool_call",
            ExtensionHook::OnStepFinish => "on_step_finish",
            ExtensionHook::OnChunk => "on_chunk",
        }
    }

    /// The hook's name in `hook_failed` events.
    pub fn hook_name(self) -> HookName {
        match self {
            ExtensionHook::BeforeTurn => HookName::BeforeTurn,
            ExtensionHook::BeforeToolCall => HookName::BeforeToolCall,
            ExtensionHook::AfterToolCall => HookName::AfterToolCall,
            ExtensionHook::OnStepFinish => HookName::OnStepFinish,
            ExtensionHook::OnChunk => HookName::OnChunk,
        }
    }
}

/// Why a host call an extension made was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostCallError {
    /// The extension was not granted the permission the call needs.
    #[error("permission denied: extension {extension:?} was not granted {permission}")]
    PermissionDenied {
        extension: String,
        permission: String,
    },
    /// The session offers no such facility.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The call was understood but refused (an unknown block, a write over budget …).
    #[error("refused: {0}")]
    Rejected(String),
}

/// What the session lets an extension read and write back during a hook (Think's host
/// bridge). Permission checks belong to whoever loaded the extension; this is the session's
/// side of the call.
pub trait ExtensionHost: Send + Sync {
    /// The session's id.
    fn session_id(&self) -> &str;
    /// The conversation as it stands.
    fn messages(&self) -> Vec<UIMessage>;
    /// A named context block's text (`None` when the block is empty).
    fn read_context_block(&self, name: &str) -> Result<Option<String>, HostCallError>;
    /// Replaces a named context block's text.
    fn write_context_block(&self, name: &str, text: &str) -> Result<(), HostCallError>;
}

/// An extension: observes five hooks through snapshots and may patch a turn's scalar
/// settings in `before_turn`. Every method has a default that does nothing.
#[async_trait]
pub trait Extension: Send + Sync + 'static {
    /// The name `hook_failed.source` and `turn_configured.overrides` record.
    fn name(&self) -> &str;

    /// Whether the dispatcher calls this extension for `hook` (all hooks by default).
    fn subscribes(&self, _hook: ExtensionHook) -> bool {
        true
    }

    /// How long one call of `hook` may take before it counts as failed.
    fn timeout(&self, _hook: ExtensionHook) -> Duration {
        DEFAULT_EXTENSION_TIMEOUT
    }

    /// Before the model is called, after the agent's `before_turn`.
    async fn before_turn(
        &self,
        _snapshot: &TurnSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<Option<TurnConfigPatch>> {
        Ok(None)
    }

    /// A tool call was decided by the agent (observation only).
    async fn before_tool_call(
        &self,
        _snapshot: &ToolCallSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A tool call's outcome is known (observation only).
    async fn after_tool_call(
        &self,
        _snapshot: &ToolResultSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A step ended (observation only).
    async fn on_step_finish(
        &self,
        _snapshot: &StepSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A stream part was logged (observation only).
    async fn on_chunk(
        &self,
        _snapshot: &ChunkSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        Ok(())
    }

    /// A step ended: an extension that batches chunks delivers what it holds. Called on every
    /// `on_chunk` subscriber before its `on_step_finish`.
    async fn flush_chunks(&self, _host: &dyn ExtensionHost) -> HookResult<()> {
        Ok(())
    }
}

/// The extensions of a session, in load order.
#[derive(Clone, Default)]
pub struct Extensions {
    pub(crate) list: Vec<Arc<dyn Extension>>,
}

impl Extensions {
    /// No extensions.
    pub fn new() -> Extensions {
        Extensions::default()
    }

    /// Appends `extension` (it runs after those already loaded).
    pub fn push(&mut self, extension: Arc<dyn Extension>) {
        self.list.push(extension);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The extensions' names, in load order.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|e| e.name().to_owned()).collect()
    }

    pub(crate) fn subscribed(
        &self,
        hook: ExtensionHook,
    ) -> impl Iterator<Item = &Arc<dyn Extension>> {
        self.list.iter().filter(move |e| e.subscribes(hook))
    }
}

impl FromIterator<Arc<dyn Extension>> for Extensions {
    fn from_iter<I: IntoIterator<Item = Arc<dyn Extension>>>(iter: I) -> Extensions {
        Extensions {
            list: iter.into_iter().collect(),
        }
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use mull_core::{StreamPart, ToolChoice};
    use serde_json::Value;

    use super::*;

    #[test]
    fn chunk_snapshots_carry_text_and_tool_identity() {
        let text = ChunkSnapshot::from(&StreamPart::TextDelta {
            id: "t".into(),
            text: "hi".into(),
        });
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            serde_json::json!({"type": "text-delta", "text": "hi"})
        );
        let call = ChunkSnapshot::from(&StreamPart::ToolCall {
            call_id: "c1".into(),
            tool_name: "search".into(),
            input: "{}".into(),
        });
        assert_eq!(call.tool_name.as_deref(), Some("search"));
        assert_eq!(call.tool_call_id.as_deref(), Some("c1"));
        assert_eq!(call.text, None);
    }

    #[test]
    fn a_seed_shaped_patch_decodes_with_ignored_fields() {
        let patch = TurnConfigPatch::from_json(&serde_json::json!({
            "system": "s",
            "model": "other-model",
            "tools": {"x": {}},
            "activeTools": ["search"],
            "toolChoice": {"type": "tool", "toolName": "search"},
            "timeout": {"totalMs": 1000},
            "chatStreamStallTimeoutMs": 0
        }))
        .unwrap()
        .unwrap();
        assert_eq!(patch.system.as_deref(), Some("s"));
        assert_eq!(patch.active_tools, Some(vec!["search".to_owned()]));
        assert!(patch.model.is_some());
        assert_eq!(patch.timeout.unwrap().total_ms, Some(1000));
        assert_eq!(patch.chat_stream_stall_timeout_ms, Some(0));
        assert_eq!(
            ToolChoice::from(patch.tool_choice.unwrap()),
            ToolChoice::Tool {
                tool_name: "search".into()
            }
        );
        let required = TurnConfigPatch::from_json(&serde_json::json!({"toolChoice": "required"}))
            .unwrap()
            .unwrap();
        assert_eq!(
            ToolChoice::from(required.tool_choice.unwrap()),
            ToolChoice::Required
        );
        assert_eq!(TurnConfigPatch::from_json(&Value::Null), Ok(None));
    }

    #[test]
    fn a_reply_field_that_is_unknown_or_mistyped_is_named() {
        let unknown = TurnConfigPatch::from_json(&serde_json::json!({"active_tools": ["a"]}));
        assert_eq!(
            unknown,
            Err(PatchError::UnknownField {
                field: "active_tools".into()
            })
        );
        let mistyped = TurnConfigPatch::from_json(&serde_json::json!({
            "system": "fine",
            "maxSteps": "three"
        }))
        .unwrap_err();
        assert!(
            matches!(&mistyped, PatchError::BadValue { field, .. } if field == "maxSteps"),
            "{mistyped}"
        );
        let nested =
            TurnConfigPatch::from_json(&serde_json::json!({"timeout": {"total": 5}})).unwrap_err();
        assert!(
            matches!(&nested, PatchError::BadValue { field, .. } if field == "timeout"),
            "{nested}"
        );
        assert_eq!(
            TurnConfigPatch::from_json(&serde_json::json!([1])),
            Err(PatchError::NotAnObject("an array"))
        );
    }
}
