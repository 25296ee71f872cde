//! Tools and models as a replay presents them: named as the agent chose, answering from the
//! recording.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use mull_core::{
    ContextBlockSource, Envelope, Event, LanguageModel, ModelError, ModelRequest, ModelStream,
    StreamPart,
};
use serde_json::Value;

use crate::memory::context_blocks::write as write_block;
use crate::subagent::CallSite;
use crate::tool::{Tool, ToolError, ToolExecution, ToolOutput};

use super::{lock, Shared};

/// What one recorded tool call produced.
#[derive(Debug, Clone)]
pub(super) struct RecordedRun {
    preliminary: Vec<Value>,
    result: Result<Value, String>,
    /// The turn was cancelled while the call ran: the replayed call waits for the cancellation.
    aborted: bool,
    /// The recorded process stopped while the call ran (no outcome was recorded): the
    /// replayed call writes what it had written, then parks at the stop like the process did.
    unfinished: bool,
    /// What the call wrote besides its results, to write again, each after as many
    /// preliminary values as preceded it in the recording.
    effects: Vec<(usize, Effect)>,
    /// How long it took, as recorded: served as the call's duration.
    duration_ms: u64,
}

/// An event a tool call wrote besides its results, as recorded.
#[derive(Debug, Clone)]
pub(super) enum Effect {
    /// A context block the `update_context` tool wrote.
    Block(BlockWrite),
    /// A sub-agent link in the calling session (`subagent_started`, `subagent_finished`).
    Link(Box<Event>),
}

/// A context block write a tool call made, as recorded.
#[derive(Debug, Clone)]
pub(super) struct BlockWrite {
    block: String,
    content: String,
    source: ContextBlockSource,
}

/// An executed call whose outcome is still to come while the recording is read.
#[derive(Debug, Default)]
pub(super) struct OpenRun {
    preliminary: Vec<Value>,
    cancelled: bool,
    effects: Vec<(usize, Effect)>,
}

/// The recorded runs of every executed tool call, per call id, oldest first.
#[derive(Debug, Default)]
pub(super) struct ToolRuns {
    runs: Mutex<HashMap<String, VecDeque<RecordedRun>>>,
}

impl ToolRuns {
    pub(super) fn new(envelopes: &[Envelope]) -> ToolRuns {
        let mut runs: HashMap<String, VecDeque<RecordedRun>> = HashMap::new();
        // Executed calls still running, by (turn, call id).
        let mut open: HashMap<(Option<String>, String), OpenRun> = HashMap::new();
        for envelope in envelopes {
            let turn = envelope.turn_id.clone();
            match &envelope.event {
                Event::ToolDecided {
                    call_id, action, ..
                } if action.executes() => {
                    open.insert((turn, call_id.clone()), OpenRun::default());
                }
                Event::ContextBlockUpdated {
                    block,
                    content,
                    source,
                    call_id: Some(call_id),
                } => {
                    if let Some(run) = open.get_mut(&(turn, call_id.clone())) {
                        let at = run.preliminary.len();
                        run.effects.push((
                            at,
                            Effect::Block(BlockWrite {
                                block: block.clone(),
                                content: content.clone(),
                                source: *source,
                            }),
                        ));
                    }
                }
                Event::SubagentStarted { call_id, .. }
                | Event::SubagentFinished { call_id, .. } => {
                    if let Some(run) = open.get_mut(&(turn, call_id.clone())) {
                        let at = run.preliminary.len();
                        run.effects
                            .push((at, Effect::Link(Box::new(envelope.event.clone()))));
                    }
                }
                Event::Chunk {
                    part:
                        StreamPart::ToolResult {
                            call_id,
                            output,
                            preliminary: true,
                            ..
                        },
                    ..
                } => {
                    if let Some(run) = open.get_mut(&(turn, call_id.clone())) {
                        run.preliminary.push(output.clone());
                    }
                }
                Event::CancellationRequested { .. } => {
                    for run in open.values_mut() {
                        run.cancelled = true;
                    }
                }
                Event::ToolCallFinished {
                    call_id,
                    success,
                    output,
                    error,
                    duration_ms,
                    ..
                } => {
                    if let Some(run) = open.remove(&(turn, call_id.clone())) {
                        let result = if *success {
                            Ok(output.clone().unwrap_or(Value::Null))
                        } else {
                            Err(error.clone().unwrap_or_default())
                        };
                        runs.entry(call_id.clone())
                            .or_default()
                            .push_back(RecordedRun {
                                preliminary: run.preliminary,
                                aborted: run.cancelled && !success,
                                unfinished: false,
                                result,
                                effects: run.effects,
                                duration_ms: *duration_ms,
                            });
                    }
                }
                _ => {}
            }
        }
        for ((_, call_id), run) in open {
            runs.entry(call_id).or_default().push_back(RecordedRun {
                preliminary: run.preliminary,
                aborted: run.cancelled,
                unfinished: true,
                result: Err("the recorded process stopped while the call ran".to_owned()),
                effects: run.effects,
                duration_ms: 0,
            });
        }
        ToolRuns {
            runs: Mutex::new(runs),
        }
    }

    fn take(&self, call_id: &str) -> Option<RecordedRun> {
        lock(&self.runs)
            .get_mut(call_id)
            .and_then(VecDeque::pop_front)
    }
}

/// The model a recording was made with, by name, streaming from the replay's model. Recorded
/// cancellations due are re-issued when the call starts and before each part is read, so a
/// step the recording cancelled mid-call is cancelled at the same point.
pub(super) struct PresentedModel {
    pub(super) provider: String,
    pub(super) model_id: String,
    pub(super) server: Option<(String, u16)>,
    pub(super) shared: Arc<Shared>,
}

#[async_trait]
impl LanguageModel for PresentedModel {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn server(&self) -> Option<(String, u16)> {
        self.server.clone()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.shared.checkpoint().await;
        let serving = self.shared.model.stream(request).await?;
        let shared = Arc::clone(&self.shared);
        Ok(Box::pin(futures::stream::unfold(
            (serving, shared),
            |(mut serving, shared)| async move {
                shared.checkpoint().await;
                let item = serving.next().await?;
                Some((item, (serving, shared)))
            },
        )))
    }
}

/// A server tool whose execute answers with what the recorded call produced.
pub(super) struct RecordedTool {
    pub(super) tool: Arc<dyn Tool>,
    pub(super) shared: Arc<Shared>,
}

#[async_trait]
impl Tool for RecordedTool {
    fn name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn input_schema(&self) -> Arc<Value> {
        self.tool.input_schema()
    }

    fn is_streaming(&self) -> bool {
        self.tool.is_streaming()
    }

    fn is_dynamic(&self) -> bool {
        self.tool.is_dynamic()
    }

    fn needs_approval(&self, input: &Value) -> bool {
        self.tool.needs_approval(input)
    }

    async fn execute(&self, _input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        self.shared.checkpoint().await;
        let Some(run) = self.shared.tools.take(&call.call_id) else {
            return Err(format!(
                "the recording holds no result for tool call {:?} ({}): it never ran there",
                call.call_id, call.tool_name
            )
            .into());
        };
        let _ = call.served_duration_ms.set(run.duration_ms);
        let writer = EffectWriter {
            site: call.site.clone(),
            call_id: call.call_id.clone(),
        };
        // What the call wrote before its first value (a sub-agent's start) is written before a
        // recorded cancellation is waited for, as it was before the cancellation came.
        let (now, later): (Vec<_>, Vec<_>) = run.effects.into_iter().partition(|(at, _)| *at == 0);
        for (_, effect) in &now {
            writer.write(effect).await?;
        }
        if run.aborted {
            call.cancel.cancelled().await;
        }
        if run.unfinished && !self.tool.is_streaming() {
            return self.park().await;
        }
        if !self.tool.is_streaming() {
            return match run.result {
                Ok(value) => Ok(ToolOutput::Value(value)),
                Err(error) => Err(error.into()),
            };
        }
        let mut items: Vec<Result<Value, ToolError>> =
            run.preliminary.into_iter().map(Ok).collect();
        if let (Err(error), false) = (run.result, run.unfinished) {
            items.push(Err(error.into()));
        }
        let parking = run.unfinished.then(|| {
            let shared = Arc::clone(&self.shared);
            futures::stream::once(async move {
                park(&shared).await;
                Err::<Value, ToolError>("unreachable: a parked call never resumes".into())
            })
        });
        if later.is_empty() {
            let served = futures::stream::iter(items);
            return Ok(ToolOutput::Stream(match parking {
                Some(parking) => served.chain(parking).boxed(),
                None => served.boxed(),
            }));
        }
        // Effects recorded between preliminary values are written again between them: the
        // one after value `at - 1` is written before value `at` is handed out (or at the end).
        let served = futures::stream::unfold(
            (
                items.into_iter().enumerate(),
                later.into_iter().peekable(),
                writer,
                false,
            ),
            |(mut items, mut later, writer, ended)| async move {
                if ended {
                    return None;
                }
                let next = items.next();
                let position = next.as_ref().map_or(usize::MAX, |(i, _)| *i);
                while let Some((_, effect)) = later.next_if(|(at, _)| *at <= position) {
                    if let Err(error) = writer.write(&effect).await {
                        return Some((Err(error), (items, later, writer, true)));
                    }
                }
                let (_, item) = next?;
                Some((item, (items, later, writer, false)))
            },
        );
        Ok(ToolOutput::Stream(match parking {
            Some(parking) => served.chain(parking).boxed(),
            None => served.boxed(),
        }))
    }
}

impl RecordedTool {
    /// Waits where the recorded process stopped, for good.
    async fn park(&self) -> Result<ToolOutput, ToolError> {
        park(&self.shared).await;
        Err("unreachable: a parked call never resumes".into())
    }
}

/// A call the recorded process never finished: parks at the stop (the driver moves on to the
/// next process), and never resumes in any case.
async fn park(shared: &Shared) {
    shared.stop_point().await;
    std::future::pending::<()>().await
}

/// Writes a recorded call's effects again, into the session replaying it (the one the call
/// runs in).
struct EffectWriter {
    site: CallSite,
    call_id: String,
}

impl EffectWriter {
    async fn write(&self, effect: &Effect) -> Result<(), ToolError> {
        match effect {
            Effect::Block(write) => {
                write_block(
                    &self.site.session.inner.recorder,
                    &write.block,
                    &write.content,
                    write.source,
                    Some(self.call_id.clone()),
                )
                .await
                .map_err(|e| format!("writing context block {:?} again: {e}", write.block))?;
            }
            Effect::Link(event) => {
                let recorder = &self.site.session.inner.recorder;
                recorder.append(Some(&self.site.turn_id), (**event).clone())?;
                recorder.flush().await?;
            }
        }
        Ok(())
    }
}
