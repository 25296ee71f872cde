//! Where a chunk is stored so that session reads find it.
//!
//! No index covers every row of a session (it would cost each streamed chunk a second B-tree
//! insert). A reader finds a session's lifecycle events in the lifecycle index and its chunks
//! by walking the stretches of the table its turns span, from a `turn_started` to the turn's
//! `turn_finished` (see [`LogReader::session_page`]). The engine writes chunks only inside
//! turns. A chunk written outside one (by hand, or in an imported file) is stored with the
//! kind [`LOOSE_CHUNK`] instead, which the lifecycle index keeps, so no read misses it.
//!
//! A writer starts knowing no running turn: a turn an earlier process left open gets no more
//! chunks in the stretch readers walk (a late one would be loose), so that stretch ends where
//! this writer began (`writer_starts`), not at the `turn_finished` recovery writes later.
//!
//! [`LogReader::session_page`]: crate::LogReader::session_page

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use crate::schema::LOOSE_CHUNK;

/// The sessions with a turn running, as rows were appended or imported.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenTurns {
    running: HashSet<Arc<str>>,
    /// The session of the last chunk and whether it ran a turn: a turn streams its chunks one
    /// after another, under the same shared id, so most chunks need no hashing.
    last_chunk: Option<(Arc<str>, bool)>,
}

impl OpenTurns {
    /// Notes the turn a row of `kind` opens or closes, and returns the `kind` column to store:
    /// the event's kind, or [`LOOSE_CHUNK`] for a chunk outside its session's turns.
    pub(crate) fn column_kind(
        &mut self,
        session_id: &Arc<str>,
        kind: Cow<'static, str>,
    ) -> Cow<'static, str> {
        match &*kind {
            "chunk" if !self.is_running(session_id) => Cow::Borrowed(LOOSE_CHUNK),
            "turn_started" => {
                self.last_chunk = None;
                self.running.insert(Arc::clone(session_id));
                kind
            }
            "turn_finished" => {
                self.last_chunk = None;
                self.running.remove(session_id);
                kind
            }
            _ => kind,
        }
    }

    fn is_running(&mut self, session_id: &Arc<str>) -> bool {
        if let Some((last, running)) = &self.last_chunk {
            if Arc::ptr_eq(last, session_id) {
                return *running;
            }
        }
        let running = self.running.contains(session_id);
        self.last_chunk = Some((Arc::clone(session_id), running));
        running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_outside_their_sessions_turns_are_marked_loose() {
        let mut turns = OpenTurns::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let mut kind = |session: &Arc<str>, kind: &'static str| {
            turns.column_kind(session, Cow::Borrowed(kind)).into_owned()
        };
        assert_eq!(kind(&a, "chunk"), LOOSE_CHUNK, "no turn yet");
        assert_eq!(kind(&a, "turn_started"), "turn_started");
        assert_eq!(kind(&a, "chunk"), "chunk", "inside a's turn");
        assert_eq!(kind(&b, "chunk"), LOOSE_CHUNK, "b runs no turn");
        assert_eq!(kind(&a, "tool_decided"), "tool_decided");
        assert_eq!(kind(&a, "turn_finished"), "turn_finished");
        assert_eq!(kind(&a, "chunk"), LOOSE_CHUNK, "a's turn is over");
    }
}
