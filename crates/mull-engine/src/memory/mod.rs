//! What a session remembers beyond the messages sent to the model: compaction of a long
//! history ([`compaction`]), the system prompt built from named blocks the model may write
//! ([`context_blocks`]), full-text search of the conversation ([`search`]), and the token
//! counting they rely on ([`tokens`]).

pub mod compaction;
pub mod context_blocks;
pub mod search;
pub mod tokens;
