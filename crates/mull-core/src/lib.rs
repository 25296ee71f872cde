//! The vocabulary of mull: every fact a turn can produce ([`Event`]), the messages those facts
//! fold into ([`UIMessage`]), the parts a model streams ([`StreamPart`]), the data recorded for
//! hook decisions, and the [`LanguageModel`] interface.
//!
//! What you implement here, if anything: [`LanguageModel`], to bring a model the providers do
//! not cover — its provider name, its model id, and `stream`, which starts one call and returns
//! the [`StreamPart`]s it produces (an error before the first part is the call's refusal, a
//! later one ends the stream). A [`Clock`] and an [`IdSource`] are injected into sessions, so a
//! run with [`FixedClock`] and [`SequentialIds`] writes the same bytes every time.
//!
//! This crate is pure data and pure functions: no I/O and no async runtime. Everything that
//! stores, runs or draws lives in the crates above it.

pub mod appended;
pub mod budget;
pub mod classify;
pub mod clock;
pub mod convert;
mod delta_payload;
pub mod event;
pub mod fingerprint;
pub mod input;
pub mod message;
pub mod model;
pub mod price;
pub mod stream;

pub use budget::{BudgetLimits, BudgetMeasure, BudgetScope, BudgetSpend, ModelCallKind};
pub use classify::{default_context_overflow_classifier, ChatErrorClassification, ErrorInput};
pub use clock::{Clock, FixedClock, IdSource, RandomIds, SequentialIds, SystemClock};
pub use convert::{to_model_messages, truncate_for_context};
pub use event::wire_name;
pub use event::{
    CompactionReason, ContextBlockSource, DecisionAction, EntryPath, Envelope, ErrorStage, Event,
    EventDecodeError, EventRef, HookName, StepRecord, StepReport, SubmissionStatus, ToolCallRecord,
    ToolResultRecord, TurnConfigRecord, TurnStatus, EVENT_VERSION,
};
pub use fingerprint::{RequestSummary, SummaryCache};
pub use input::{Input, TurnRequest};
pub use message::{Role, ToolPart, ToolPartState, UIMessage, UIPart};
pub use model::{
    CallSettings, LanguageModel, ModelContent, ModelError, ModelErrorKind, ModelErrorRecord,
    ModelMessage, ModelRequest, ModelRole, ModelStream, ToolChoice, ToolSpec,
};
pub use price::{BilledTokens, ModelPrice, PriceError, PriceTable};
pub use stream::{CallWarning, FinishReason, Source, StreamPart, Usage};
