//! Context blocks: named pieces of the system prompt. A block is either *provided* (an async
//! closure computes it) or *writable* (the model updates it through the `update_context` tool,
//! or the application through
//! [`Session::set_context_block`](crate::Session::set_context_block)), within a token budget.
//!
//! Block values live in the log: every new value is a `context_block_updated` event and the
//! projection ([`mull_store::SessionState::context_blocks`]) holds the current ones. The system
//! prompt is rendered from the projection, so a replay of the log rebuilds the same prompt. A
//! provider's value is recorded only when it differs from the current one. Without a cached
//! prompt, providers run before every turn; with one, they run only for a block that has no
//! value yet (or on
//! [`Session::refresh_context_blocks`](crate::Session::refresh_context_blocks)), so the prompt
//! stays byte-identical until a block changes.
//!
//! A write by the model takes effect from the next turn: a turn's prompt is fixed when the turn
//! is configured.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use mull_core::{ContextBlockSource, Event, HookName};
use serde_json::{json, Value};

use crate::error::EngineError;
use crate::guard::Caller;
use crate::hooks::Hooks;
use crate::recorder::Recorder;
use crate::session_config::SessionConfig;
use crate::tool::{Tool, ToolError, ToolExecution, ToolOutput};

pub(crate) use crate::session_config::block::append_write;
pub use crate::session_config::block::{BlockProvider, ContextBlock, ContextError};
pub(crate) use crate::session_config::check_write;

/// The name of the tool through which the model writes a block.
pub const UPDATE_CONTEXT_TOOL: &str = "update_context";

/// Renders the system prompt from the blocks' current values, in the order they were added.
/// A block with no value is left out unless the model may write it.
pub(crate) fn render(config: &SessionConfig, values: &BTreeMap<String, String>) -> String {
    let mut sections = Vec::new();
    for (name, block) in &config.blocks {
        let value = values.get(name).map(String::as_str).unwrap_or("");
        if value.is_empty() && !block.is_writable() {
            continue;
        }
        let mut section = format!("## {name}");
        if let Some(description) = &block.description {
            section.push('\n');
            section.push_str(description);
        }
        if block.is_writable() {
            let used = config.counter.count_text(value);
            let budget = match block.max_tokens {
                Some(max) => format!("{used}/{max} tokens"),
                None => format!("{used} tokens"),
            };
            section.push_str(&format!(
                "\n(Writable with the {UPDATE_CONTEXT_TOOL} tool; {budget}.)"
            ));
        }
        section.push('\n');
        section.push_str(if value.is_empty() { "(empty)" } else { value });
        sections.push(section);
    }
    sections.join("\n\n")
}

/// The system prompt of the session's blocks for the turn about to be configured, or `None`
/// when the session has no blocks. Providers run (all of them when `refresh`, else only for
/// blocks without a value); each value that differs from the current one is recorded first.
/// A failing provider is a `hook_failed` event and its block keeps its current value.
pub(crate) async fn build_system_prompt(
    recorder: &Recorder,
    hooks: &Hooks,
    config: &SessionConfig,
    turn_id: Option<&str>,
    refresh: bool,
) -> Result<Option<String>, EngineError> {
    if config.blocks.is_empty() {
        return Ok(None);
    }
    for (name, block) in &config.blocks {
        let Some(provider) = &block.provider else {
            continue;
        };
        let current = recorder.read(|s| s.context_blocks.get(name).cloned());
        if current.is_some() && !refresh {
            continue;
        }
        let source = format!("context_block:{name}");
        let caller = Caller {
            hook: HookName::ContextBlockProvider,
            source: &source,
        };
        match hooks.guard(turn_id, caller, provider.get()).await? {
            Ok(value) if current.as_ref() != Some(&value) => {
                recorder.append(
                    turn_id,
                    Event::ContextBlockUpdated {
                        block: name.clone(),
                        content: value,
                        source: ContextBlockSource::Provider,
                        call_id: None,
                    },
                )?;
            }
            // Unchanged, or failed (recorded as `hook_failed`): the block keeps what it had.
            Ok(_) | Err(_) => {}
        }
    }
    recorder.flush().await?;
    Ok(Some(recorder.read(|s| render(config, &s.context_blocks))))
}

/// Records a checked write.
pub(crate) async fn write(
    recorder: &Recorder,
    block: &str,
    content: &str,
    source: ContextBlockSource,
    call_id: Option<String>,
) -> Result<(), EngineError> {
    append_write(recorder, block, content, source, call_id)?;
    recorder.flush().await
}

/// The `update_context` tool: the model rewrites one writable block.
struct UpdateContextTool {
    /// Weak: the tool answers only while its session is open.
    recorder: Weak<Recorder>,
    config: Weak<SessionConfig>,
    description: String,
    schema: Arc<Value>,
}

/// The `update_context` tool when the session has a writable block.
pub(crate) fn update_context_tool(
    recorder: &Arc<Recorder>,
    config: &Arc<SessionConfig>,
) -> Option<Arc<dyn Tool>> {
    let writable: Vec<(&String, &ContextBlock)> = config
        .blocks
        .iter()
        .filter(|(_, b)| b.is_writable())
        .map(|(n, b)| (n, b))
        .collect();
    if writable.is_empty() {
        return None;
    }
    let mut description = String::from(
        "Replaces the whole content of a context block of your system prompt. Blocks:",
    );
    for (name, block) in &writable {
        description.push_str(&format!("\n- {name}"));
        if let Some(d) = &block.description {
            description.push_str(&format!(": {d}"));
        }
        if let Some(max) = block.max_tokens {
            description.push_str(&format!(" (at most {max} tokens)"));
        }
    }
    let names: Vec<&String> = writable.iter().map(|(n, _)| *n).collect();
    Some(Arc::new(UpdateContextTool {
        recorder: Arc::downgrade(recorder),
        config: Arc::downgrade(config),
        description,
        schema: json!({
            "type": "object",
            "properties": {
                "block": {"type": "string", "enum": names},
                "content": {"type": "string", "description": "The block's new content, in full."}
            },
            "required": ["block", "content"],
            "additionalProperties": false
        })
        .into(),
    }))
}

#[async_trait]
impl Tool for UpdateContextTool {
    fn name(&self) -> &str {
        UPDATE_CONTEXT_TOOL
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::clone(&self.schema)
    }
    async fn execute(&self, input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let closed = "the session of this tool is closed";
        let recorder = self.recorder.upgrade().ok_or(closed)?;
        let config = self.config.upgrade().ok_or(closed)?;
        let block = input.get("block").and_then(Value::as_str).unwrap_or("");
        let content = input.get("content").and_then(Value::as_str).unwrap_or("");
        let tokens = check_write(&config, block, content, true)?;
        write(
            &recorder,
            block,
            content,
            ContextBlockSource::Model,
            Some(call.call_id.clone()),
        )
        .await?;
        let max_tokens = config.block(block).and_then(|b| b.max_tokens);
        Ok(ToolOutput::Value(
            json!({"block": block, "tokens": tokens, "max_tokens": max_tokens}),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SessionConfig {
        SessionConfig::new()
            .with_context(
                "soul",
                ContextBlock::provided(|| async { Ok("Be kind.".to_owned()) }),
            )
            .with_context("memory", ContextBlock::writable("Facts about the user.", 3))
            .with_context("notes", ContextBlock::default().read_only())
    }

    #[test]
    fn the_prompt_renders_blocks_in_order_and_skips_empty_read_only_ones() {
        let mut values = BTreeMap::new();
        values.insert("soul".to_owned(), "Be kind.".to_owned());
        let prompt = render(&config(), &values);
        assert_eq!(
            prompt,
            "## soul\nBe kind.\n\n## memory\nFacts about the user.\n\
             (Writable with the update_context tool; 0/3 tokens.)\n(empty)"
        );
        values.insert("memory".to_owned(), "Tea.".to_owned());
        assert!(render(&config(), &values).ends_with("1/3 tokens.)\nTea."));
    }

    #[test]
    fn writes_are_checked_for_block_writability_and_budget() {
        let c = config();
        assert_eq!(check_write(&c, "memory", "Likes tea.", true).ok(), Some(3));
        let over = check_write(&c, "memory", "Likes tea and long walks.", true)
            .expect_err("over budget")
            .to_string();
        assert!(
            over.contains("\"memory\"") && over.contains("at most 3"),
            "{over}"
        );
        assert!(matches!(
            check_write(&c, "soul", "x", true),
            Err(ContextError::NotWritable { .. })
        ));
        assert!(matches!(
            check_write(&c, "notes", "x", true),
            Err(ContextError::NotWritable { .. })
        ));
        assert!(check_write(&c, "notes", "x", false).is_ok());
        let unknown = check_write(&c, "diary", "x", true)
            .expect_err("unknown")
            .to_string();
        assert!(unknown.contains("soul, memory, notes"), "{unknown}");
    }
}
