//! A recorded session: its events, read from a log, checked to be one session from its start.

use std::collections::HashSet;

use mull_core::{Envelope, ErrorStage, Event};
use mull_store::StoreError;

use super::served::{RecordedClock, RecordedIds};
use super::{ReplayError, READ_PAGE};

/// The events of one recorded session, in `seq` order.
#[derive(Debug, Clone)]
pub struct Recording {
    pub(super) session_id: String,
    pub(super) envelopes: Vec<Envelope>,
}

impl Recording {
    /// A recording of the session the first envelope belongs to. Every envelope must belong to
    /// it, and the first must be its `session_opened`.
    pub fn new(envelopes: Vec<Envelope>) -> Result<Recording, ReplayError> {
        let first = envelopes.first().ok_or(ReplayError::Empty)?;
        if !matches!(first.event, Event::SessionOpened { .. }) {
            return Err(ReplayError::NoSessionStart {
                seq: first.seq,
                kind: first.kind().to_owned(),
            });
        }
        let session_id = first.session_id.clone();
        if let Some(other) = envelopes.iter().find(|e| e.session_id != session_id) {
            return Err(ReplayError::MixedSessions {
                seq: other.seq,
                expected: session_id,
                found: other.session_id.clone(),
            });
        }
        Ok(Recording {
            session_id,
            envelopes,
        })
    }

    /// Reads one session of a log as a recording.
    pub fn read(
        reader: &dyn mull_store::ReadLog,
        session_id: &str,
    ) -> Result<Recording, ReplayError> {
        let store_err = |source| ReplayError::Store {
            session_id: session_id.to_owned(),
            source,
        };
        let envelopes = read_session(reader, session_id).map_err(store_err)?;
        Recording::new(envelopes)
    }

    /// The recorded session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The name of the agent that recorded the session (its `session_opened`).
    pub fn agent(&self) -> &str {
        match &self.envelopes[0].event {
            Event::SessionOpened { agent, .. } => agent,
            _ => "",
        }
    }

    /// The recorded events.
    pub fn envelopes(&self) -> &[Envelope] {
        &self.envelopes
    }

    /// Whether the recorded session marked its `on_chat_response` deliveries
    /// (`SessionConfig::redeliver_chat_response`): it holds a delivery mark, or an owed end the
    /// turn itself wrote (a recovery's end is owed whatever the session chose, so it tells
    /// nothing). A log written before deliveries were recorded marks none; so does a session
    /// that opted out. Either is re-executed without marks, as it was recorded: the marks are
    /// the log's bookkeeping, not a decision of the code under test.
    pub fn marks_deliveries(&self) -> bool {
        let mut recovered = HashSet::new();
        self.envelopes.iter().any(|e| match &e.event {
            Event::ChatResponseDelivered { .. } => true,
            Event::TurnFailed {
                stage: ErrorStage::Recovery,
                ..
            } => {
                recovered.insert(e.turn_id.as_deref());
                false
            }
            Event::TurnFinished { response_owed, .. } => {
                *response_owed && !recovered.contains(&e.turn_id.as_deref())
            }
            _ => false,
        })
    }

    /// A clock that replays this recording's readings.
    pub fn clock(&self) -> RecordedClock {
        RecordedClock::new(&self.envelopes)
    }

    /// An id source that replays this recording's ids.
    pub fn ids(&self) -> RecordedIds {
        RecordedIds::new(&self.envelopes)
    }
}

pub(super) fn read_session(
    reader: &dyn mull_store::ReadLog,
    session_id: &str,
) -> Result<Vec<Envelope>, StoreError> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = reader.session_page(session_id, after, READ_PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let full = page.len() == READ_PAGE;
        out.extend(page);
        if !full {
            break;
        }
    }
    Ok(out)
}
