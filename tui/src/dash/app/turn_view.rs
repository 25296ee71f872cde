//! One turn's timeline as the dashboard holds it: the events loaded so far, the rows and pacing
//! built from them, and the conversation as of the replay cursor.

use mull_core::Envelope;
use mull_store::projection::SessionState;
use mull_store::TurnPacing;

use crate::dash::replay::Replay;
use crate::dash::timeline::{Item, TimelineBuilder};

/// The timeline of one turn: the loaded events, their rows, the conversation as of the cursor.
#[derive(Debug, Clone)]
pub struct TurnView {
    pub session_id: String,
    pub turn_id: String,
    /// The turn's events loaded so far, in seq order.
    pub events: Vec<Envelope>,
    /// Rows built from `events[..=cursor]` (all of them outside replay).
    pub timeline: TimelineBuilder,
    /// The pacing of the same events: first chunk, gaps, tool and model time.
    pub pacing: TurnPacing,
    pub selected: usize,
    /// The last seq of the session scanned by paging.
    pub scanned_to: u64,
    /// No page is left to read (later events come from the tail).
    pub exhausted: bool,
    pub loading: bool,
    /// The session before the turn, once read.
    pub base: Option<SessionState>,
    /// `base` with the turn's events up to the cursor applied.
    pub conversation: Option<SessionState>,
    pub replay: Option<Replay>,
}

impl TurnView {
    pub(super) fn new(session_id: &str, turn_id: &str, first_seq: u64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            turn_id: turn_id.to_owned(),
            events: Vec::new(),
            timeline: TimelineBuilder::new(),
            pacing: TurnPacing::new(),
            selected: 0,
            scanned_to: first_seq.saturating_sub(1),
            exhausted: false,
            loading: true,
            base: None,
            conversation: None,
            replay: None,
        }
    }

    /// The rows shown.
    pub fn items(&self) -> &[Item] {
        self.timeline.items()
    }

    /// The selected row.
    pub fn selected_item(&self) -> Option<&Item> {
        self.items().get(self.selected)
    }

    /// The index of the last event the view shows (the replay cursor, else the last loaded).
    pub fn cursor(&self) -> Option<usize> {
        match &self.replay {
            Some(replay) => Some(replay.cursor),
            None => self.events.len().checked_sub(1),
        }
    }

    /// Adds events of this turn that are newer than the ones loaded.
    pub(super) fn extend(&mut self, events: impl IntoIterator<Item = Envelope>) {
        let last = self.events.last().map(|e| e.seq).unwrap_or(0);
        let fresh: Vec<Envelope> = events
            .into_iter()
            .filter(|e| e.seq > last && e.turn_id.as_deref() == Some(self.turn_id.as_str()))
            .collect();
        for env in fresh {
            if self.replay.is_none() {
                self.timeline.push(&env);
                self.pacing.apply(&env);
                if let Some(conversation) = &mut self.conversation {
                    conversation.apply(&env);
                }
            }
            self.events.push(env);
        }
    }

    /// Rebuilds rows and conversation for the replay cursor after it moved.
    pub(super) fn seek_to(&mut self, index: usize) {
        let forward = self
            .timeline
            .last_seq()
            .zip(self.events.get(index))
            .is_some_and(|(shown, target)| target.seq >= shown);
        if forward {
            let start = self
                .events
                .partition_point(|e| Some(e.seq) <= self.timeline.last_seq());
            for env in self.events.get(start..=index).unwrap_or_default() {
                self.timeline.push(env);
                self.pacing.apply(env);
                if let Some(conversation) = &mut self.conversation {
                    conversation.apply(env);
                }
            }
        } else {
            let shown = self.events.get(..=index).unwrap_or_default();
            self.timeline = TimelineBuilder::from_events(shown);
            self.pacing = pacing_of(shown);
            self.conversation = self.base.clone().map(|mut state| {
                for env in shown {
                    state.apply(env);
                }
                state
            });
        }
        self.selected = self.items().len().saturating_sub(1);
    }

    /// Shows every loaded event again (leaving replay).
    pub(super) fn show_all(&mut self) {
        self.timeline = TimelineBuilder::from_events(&self.events);
        self.pacing = pacing_of(&self.events);
        self.conversation = self.base.clone().map(|mut state| {
            for env in &self.events {
                state.apply(env);
            }
            state
        });
    }
}

fn pacing_of(events: &[Envelope]) -> TurnPacing {
    let mut pacing = TurnPacing::new();
    for env in events {
        pacing.apply(env);
    }
    pacing
}
