//! mull's chat server: an axum router that speaks the Vercel AI SDK's chat protocols (the UI
//! message stream over SSE, and the WebSocket chat transport), served from the event log.
//!
//! - [`wire`]: the AI SDK's camelCase messages and chat requests, mapped to mull's model.
//! - [`ui_stream`]: logged events → UI message stream chunks, one pure mapping for live and
//!   resumed streams.

pub mod ui_stream;
pub mod wire;
