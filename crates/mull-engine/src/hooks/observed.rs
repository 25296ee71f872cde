//! What an observer hook (`on_chunk`, `after_tool_call`, `on_step_finish`,
//! `on_chat_response`) sees, built from the event it observes.
//!
//! A turn appends an event, then builds its [`Observed`] here from that event (and what only
//! the turn knows beside it — the request, the model's messages, the decision) and hands it to
//! the dispatcher. A new observer hook is one variant here and one row in the dispatcher.

use mull_core::{DecisionAction, Event, ModelMessage, StepRecord, StreamPart, UIMessage};
use serde_json::Value;

use crate::context::{ChatResponseResult, ChunkContext, StepContext, ToolCallResultContext};
use crate::outside::HookPoint;

/// What an observer hook sees, built from the event it observes.
#[derive(Debug)]
pub(crate) enum Observed {
    /// A `chunk` event of one of the seed's chunk kinds.
    Chunk(ChunkContext),
    /// A `tool_call_finished` event of a decided call.
    ToolResult(ToolCallResultContext),
    /// A `step_finished` event.
    Step(Box<StepContext>),
    /// A `turn_finished` event, once the turn lock is released.
    ChatResponse(ChatResponseResult),
}

/// What the turn knows about a finished tool call beside its `tool_call_finished` event.
pub(crate) struct CallFacts<'a> {
    /// The input the model emitted.
    pub model_input: &'a Value,
    /// The input execute ran with.
    pub effective_input: &'a Value,
    pub decision: DecisionAction,
    pub dynamic: bool,
    /// The conversation as the model saw it for the call's step.
    pub messages: &'a [ModelMessage],
}

impl Observed {
    /// `on_chunk` of a `chunk` event's step and part, for request `request_id`.
    pub(crate) fn chunk(step: u32, part: StreamPart, request_id: &str) -> Observed {
        Observed::Chunk(ChunkContext {
            chunk: part,
            step_number: step,
            request_id: request_id.to_owned(),
        })
    }

    /// `after_tool_call` of a `tool_call_finished` event (`None` for any other event).
    pub(crate) fn tool_result(event: &Event, call: CallFacts<'_>) -> Option<Observed> {
        let Event::ToolCallFinished {
            step,
            call_id,
            tool,
            success,
            output,
            error,
            duration_ms,
        } = event
        else {
            return None;
        };
        Some(Observed::ToolResult(ToolCallResultContext {
            tool_call_id: call_id.clone(),
            tool_name: tool.clone(),
            input: call.model_input.clone(),
            effective_input: call.effective_input.clone(),
            decision: call.decision,
            dynamic: call.dynamic,
            step_number: *step,
            messages: call.messages.to_vec(),
            duration_ms: *duration_ms,
            success: *success,
            output: output.clone(),
            error: error.clone(),
        }))
    }

    /// `on_step_finish` of a `step_finished` event: its report with the step's content
    /// (`record`), the step's reasoning blocks, and what the step produced as the next step's
    /// model sees it.
    pub(crate) fn step(
        record: StepRecord,
        reasoning: Vec<String>,
        response_messages: Vec<ModelMessage>,
    ) -> Observed {
        Observed::Step(Box::new(StepContext {
            step_number: record.step,
            record,
            reasoning,
            response_messages,
        }))
    }

    /// `on_chat_response` of a `turn_finished` event, with the turn's message (`None` for any
    /// other event).
    pub(crate) fn chat_response(
        event: &Event,
        message: UIMessage,
        continuation: bool,
    ) -> Option<Observed> {
        let Event::TurnFinished {
            request_id,
            status,
            error,
            ..
        } = event
        else {
            return None;
        };
        Some(Observed::ChatResponse(ChatResponseResult {
            message,
            request_id: request_id.clone(),
            continuation,
            status: *status,
            error: error.clone(),
            recovered: false,
        }))
    }

    /// The hook that observes it, with what it sees.
    pub(crate) fn point(&self) -> HookPoint<'_> {
        match self {
            Observed::Chunk(ctx) => HookPoint::OnChunk(ctx),
            Observed::ToolResult(ctx) => HookPoint::AfterToolCall(ctx),
            Observed::Step(ctx) => HookPoint::OnStepFinish(ctx),
            Observed::ChatResponse(result) => HookPoint::OnChatResponse(result),
        }
    }
}
