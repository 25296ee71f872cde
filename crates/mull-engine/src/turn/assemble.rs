//! The context a turn starts from: tools merged, history compacted and truncated, the system
//! prompt built, `before_turn` and the extensions asked, and the result recorded as
//! `turn_configured`.

use std::sync::Arc;

use mull_core::{to_model_messages, truncate_for_context, ErrorStage, Event, LanguageModel};

use super::parts::TurnParts;
use super::run::TurnRun;
use crate::config::{ModelChoice, ResolvedTurn, TurnDefaults};
use crate::context::TurnContext;
use crate::error::{ChatError, EngineError};
use crate::memory::compaction::{CONTEXT_KEEP_LAST, CONTEXT_TRUNCATE_CHARS};
use crate::outside::HookPoint;
use crate::tool::{ToolEntry, ToolSet};

impl TurnRun<'_> {
    /// The turn's tools, merged in the seed's order (later layers winning on a name clash:
    /// workspace → agent → session → MCP → client → caller), with what listing them reported.
    pub(super) async fn tools(&self) -> (ToolSet, Vec<String>) {
        let parts = &self.parts;
        let agent = parts.hooks.agent();
        let mut tools = agent.workspace().map(|w| w.tools()).unwrap_or_default();
        tools.merge(&agent.tools());
        tools.merge(&crate::memory::session_tools(
            parts.recorder,
            parts.config,
            parts.search,
        ));
        let sources: Vec<_> = (agent.mcp_servers().into_iter())
            .chain(parts.options.mcp_servers.iter().cloned())
            .collect();
        let (mcp_tools, tool_problems) = crate::tool_source::list_all(&sources).await;
        tools.merge(&mcp_tools);
        for spec in &self.spec.client_tools {
            tools.insert(ToolEntry::Client(spec.clone()));
        }
        tools.merge(&self.spec.caller_tools);
        (parts.options.outside.tools(tools), tool_problems)
    }

    /// Assembles the context over `tools`, runs `before_turn`, merges its config and records
    /// it.
    pub(super) async fn configure(
        &mut self,
        tools: ToolSet,
        tool_problems: Vec<String>,
    ) -> Result<Result<ResolvedTurn, ChatError>, EngineError> {
        let parts = &self.parts;
        let agent = parts.hooks.agent();
        self.parts
            .compactor()
            .compact_if_over_threshold(self.tid())
            .await?;
        let mut messages = parts.recorder.read(|s| to_model_messages(&s.messages));
        truncate_for_context(&mut messages, CONTEXT_TRUNCATE_CHARS, CONTEXT_KEEP_LAST);
        if messages.is_empty() {
            return Ok(Err(self.error(
                ErrorStage::Turn,
                "the conversation is empty: there is nothing to send to the model",
            )));
        }
        let refresh = !parts.config.cached_prompt;
        let system = match crate::memory::context_blocks::build_system_prompt(
            parts.recorder,
            parts.hooks,
            parts.config,
            self.tid(),
            refresh,
        )
        .await?
        {
            Some(system) => system,
            None => agent.system_prompt(),
        };
        let system = crate::session_config::skills::with_listing(system, &parts.config.skills);
        let defaults = TurnDefaults {
            model: parts.options.outside.model(agent.model()),
            system,
            messages,
            tools,
            max_steps: agent.max_steps(),
            send_reasoning: agent.send_reasoning(),
            max_retries: agent.max_retries(),
            stall_timeout_ms: agent.chat_stream_stall_timeout_ms(),
        };
        let ctx = TurnContext {
            system: defaults.system.clone(),
            messages: defaults.messages.clone(),
            tools: defaults.tools.clone(),
            model: Arc::clone(&defaults.model),
            continuation: self.spec.continuation,
            body: self.spec.body.clone(),
            request_id: self.spec.request_id.clone(),
            entry: self.spec.entry,
            abort: self.spec.signal.clone(),
        };
        let config = match parts
            .hooks
            .guard_hook(
                self.tid(),
                HookPoint::BeforeTurn(&ctx),
                agent.before_turn(&ctx),
            )
            .await?
        {
            Ok(config) => {
                let mut config = config.unwrap_or_default();
                config.tools = config.tools.map(|t| parts.options.outside.tools(t));
                config
            }
            Err(text) => {
                return Ok(Err(
                    self.error(ErrorStage::Turn, format!("before_turn failed: {text}"))
                ))
            }
        };
        let model = match resolve_model(parts, config.model.as_ref()) {
            Ok(model) => model,
            Err(message) => return Ok(Err(self.error(ErrorStage::Turn, message))),
        };
        let resolved = ResolvedTurn::merge(defaults, config, model);
        let resolved = parts
            .hooks
            .extensions()
            .before_turn(self.tid(), &ctx, resolved)
            .await?;
        if resolved.messages.is_empty() {
            return Ok(Err(self.error(
                ErrorStage::Turn,
                "before_turn left no messages to send to the model",
            )));
        }
        let mut record = resolved.record();
        record.tool_problems = tool_problems;
        // The turn's model on its `invoke_agent` span, as the GenAI conventions ask.
        let span = tracing::Span::current();
        span.record("gen_ai.provider.name", record.provider.as_str());
        span.record("gen_ai.request.model", record.model_id.as_str());
        self.append(Event::TurnConfigured {
            config: Box::new(record),
        })?;
        Ok(Ok(resolved))
    }
}

pub(super) fn resolve_model(
    parts: &TurnParts<'_>,
    choice: Option<&ModelChoice>,
) -> Result<Option<Arc<dyn LanguageModel>>, String> {
    let chosen = match choice {
        None => return Ok(None),
        Some(ModelChoice::Model(model)) => Arc::clone(model),
        Some(ModelChoice::Id(id)) => {
            parts.hooks.agent().resolve_model(id).ok_or_else(|| {
                format!("model resolution failed: the agent knows no model {id:?}")
            })?
        }
    };
    Ok(Some(parts.options.outside.model(chosen)))
}
