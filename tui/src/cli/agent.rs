//! The agent behind `mull chat` and `mull serve` with a real model: the model a spec names,
//! overflow recovery on (the default classifier, then one compaction written by the same model,
//! then the retry), and — when asked for with `--tools` — two harmless tools, a clock and a
//! calculator, so a real model can make a tool turn.

use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use mull::core::{
    default_context_overflow_classifier, ChatErrorClassification, Clock, LanguageModel, SystemClock,
};
use mull::engine::{
    compact_function, model_summarizer, Agent, ChatError, ChatErrorContext, CompactOptions,
    SessionConfig, Tool, ToolError, ToolExecution, ToolOutput, ToolSet,
};
use mull::providers::config::{model_from_spec_with, ConfigError, ModelOverrides, MODEL_VARIABLE};
use mull::providers::openai::Streaming;
use serde_json::{json, Value};

/// The `--model` value that runs the demo's scripted agent, no network or key needed.
pub const SCRIPTED_DEMO: &str = "scripted-demo";

/// The agent for `--model` (any model spec, or [`SCRIPTED_DEMO`]), or for `MULL_MODEL` when
/// `--model` is left out; `tools` offers the built-in clock and calculator.
pub(crate) fn choose_agent(model: Option<&str>, tools: bool) -> Result<Arc<dyn Agent>> {
    choose_agent_streaming(model, None, tools)
}

/// [`choose_agent`], with `--stream` (when given) winning over the spec's `?stream=`.
pub(crate) fn choose_agent_streaming(
    model: Option<&str>,
    streaming: Option<Streaming>,
    tools: bool,
) -> Result<Arc<dyn Agent>> {
    let overrides = ModelOverrides::default().streaming(streaming);
    let env = |name: &str| std::env::var(name).ok();
    let model = match model {
        Some(SCRIPTED_DEMO) => return Ok(mull::demo::agent()),
        Some(spec) => model_from_spec_with(spec, overrides, env),
        None => match std::env::var(MODEL_VARIABLE) {
            Ok(spec) => model_from_spec_with(&spec, overrides, env),
            Err(_) => Err(ConfigError::MissingSpec),
        },
    };
    match model {
        Ok(model) => Ok(Arc::new(ChatAgent {
            model,
            clock: Arc::new(SystemClock),
            tools,
        })),
        Err(ConfigError::MissingSpec) => anyhow::bail!(
            "no model: pass --model SPEC or set MULL_MODEL (a spec such as `openai:gpt-4o-mini`, \
             `anthropic:claude-sonnet-4-5` or `openai-compatible:http://127.0.0.1:8080/v1#model`)\n\
             or run offline with the demo's scripted model: --model {SCRIPTED_DEMO}"
        ),
        Err(e) => Err(e.into()),
    }
}

/// The real-model agent: see the module docs.
struct ChatAgent {
    model: Arc<dyn LanguageModel>,
    clock: Arc<dyn Clock>,
    tools: bool,
}

#[async_trait]
impl Agent for ChatAgent {
    fn name(&self) -> &str {
        "mull-chat"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }

    fn system_prompt(&self) -> String {
        let mut prompt = "You are a helpful assistant. Answer briefly.".to_owned();
        if self.tools {
            prompt.push_str(
                " Use time_now for the current date and time and calculate for arithmetic.",
            );
        }
        prompt
    }

    fn tools(&self) -> ToolSet {
        if !self.tools {
            return ToolSet::new();
        }
        ToolSet::new()
            .with(Arc::new(TimeNow {
                clock: Arc::clone(&self.clock),
            }))
            .with(Arc::new(Calculate))
    }

    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        let summarize = model_summarizer(Arc::clone(&self.model));
        session
            .context_overflow(true, 1)
            .on_compaction(compact_function(CompactOptions::new(summarize)))
    }

    fn classify_chat_error(
        &self,
        error: &ChatError,
        _ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        default_context_overflow_classifier(error.as_error_input())
    }
}

/// `time_now`: the current time in UTC, from the session's kind of clock.
struct TimeNow {
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl Tool for TimeNow {
    fn name(&self) -> &str {
        "time_now"
    }

    fn description(&self) -> &str {
        "The current date and time in UTC (RFC 3339)."
    }

    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {}, "additionalProperties": false}))
    }

    async fn execute(&self, _input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Value(
            json!({"utc": self.clock.now().to_rfc3339()}),
        ))
    }
}

/// `calculate`: evaluates an arithmetic expression.
struct Calculate;

#[async_trait]
impl Tool for Calculate {
    fn name(&self) -> &str {
        "calculate"
    }

    fn description(&self) -> &str {
        "Evaluates an arithmetic expression such as `(2 + 3) * 4.5 / 2` or `2^10 % 7`."
    }

    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The expression."}},
            "required": ["expression"],
            "additionalProperties": false
        }))
    }

    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let expression = input["expression"].as_str().unwrap_or_default();
        let value = evaluate(expression)?;
        Ok(ToolOutput::Value(
            json!({"expression": expression, "value": value}),
        ))
    }
}

/// Evaluates arithmetic only: numbers, operators and parentheses (no variables or functions).
fn evaluate(expression: &str) -> Result<Value, ToolError> {
    let value =
        evalexpr::eval(expression).map_err(|e| format!("cannot evaluate {expression:?}: {e}"))?;
    match value {
        evalexpr::Value::Int(n) => Ok(json!(n)),
        evalexpr::Value::Float(x) => Ok(json!(x)),
        other => Err(format!("{expression:?} is not arithmetic (it gives {other})").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calculate_does_arithmetic_and_refuses_the_rest() {
        assert_eq!(evaluate("(2 + 3) * 4").unwrap(), json!(20));
        assert_eq!(evaluate("7 / 2.0").unwrap(), json!(3.5));
        assert!(evaluate("\"text\"").is_err());
        assert!(evaluate("2 +").is_err());
    }

    #[test]
    fn tools_are_offered_only_when_asked_for() {
        let spec = "openai-compatible:http://127.0.0.1:9/v1#m";
        assert!(choose_agent(Some(spec), false).unwrap().tools().is_empty());
        let names = choose_agent(Some(spec), true).unwrap().tools().names();
        assert_eq!(names, ["time_now", "calculate"]);
    }
}
