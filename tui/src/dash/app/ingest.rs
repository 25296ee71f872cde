//! Taking in what the log returns and what it appends: a session's turns, new events (held
//! while paused), and the timeline's pages, read ahead of the selection.

use mull_core::{Envelope, Event, TurnStatus};
use mull_store::projection::TurnSummary;

use super::{App, Effect, Pane, TurnView, View, PAGE_AHEAD, REPLAY_AHEAD};

fn is_lifecycle(event: &Event) -> bool {
    !matches!(event, Event::Chunk { .. })
}

impl App {
    pub(super) fn receive_turns(
        &mut self,
        session_id: String,
        turns: Vec<TurnSummary>,
    ) -> Vec<Effect> {
        if self.session_id.as_deref() != Some(session_id.as_str()) {
            return Vec::new();
        }
        let keep = self.selected_turn().and_then(|t| t.turn_id.clone());
        let newest_before = self.turns.last().and_then(|t| t.turn_id.clone());
        self.turns = turns;
        self.turn_selected = if self.follow {
            self.turns.len().saturating_sub(1)
        } else {
            keep.and_then(|id| {
                self.turns
                    .iter()
                    .position(|t| t.turn_id.as_deref() == Some(id.as_str()))
            })
            .unwrap_or(self.turn_selected)
            .min(self.turns.len().saturating_sub(1))
        };
        if let Some(effects) = self.open_subagent_turn(&session_id) {
            return effects;
        }
        // Following a session's timeline moves on to the turn that just started.
        let newest = self.turns.last().and_then(|t| t.turn_id.clone());
        let replaying = self.turn.as_ref().is_some_and(|t| t.replay.is_some());
        // A new session's first turn may arrive after the session itself.
        let pending = self.follow_pending;
        if !self.turns.is_empty() {
            self.follow_pending = false;
        }
        let newest_running = self
            .turns
            .last()
            .is_some_and(|t| t.status == TurnStatus::Running);
        let moved_on = newest.is_some()
            && newest != newest_before
            && (newest_before.is_some() || pending)
            && newest != self.turn.as_ref().map(|t| t.turn_id.clone());
        let open = match self.view {
            View::Timeline => moved_on,
            View::Turns => moved_on && newest_running,
            _ => false,
        };
        if self.follow && !replaying && open {
            return self.open_timeline();
        }
        Vec::new()
    }

    pub(super) fn appended(&mut self, events: Vec<Envelope>) -> Vec<Effect> {
        if events.is_empty() {
            return Vec::new();
        }
        self.live_events += events.len() as u64;
        self.rates.record(&events);
        for env in &events {
            self.overviews.apply(env);
        }
        if let Some(backlog) = self.overview_backlog.as_mut() {
            backlog.extend(
                events
                    .iter()
                    .filter(|e| mull_store::OVERVIEW_KINDS.contains(&e.event.kind()))
                    .cloned(),
            );
        }
        if let Some(last) = events.last() {
            self.max_seq = self.max_seq.max(last.seq);
        }
        if let Some(paused) = self.paused.as_mut() {
            paused.arrived += events.len() as u64;
            let session = self.session_id.as_deref();
            // Keep what the frozen view will need; the rest is re-read when it thaws.
            paused.held.extend(
                events
                    .into_iter()
                    .filter(|e| Some(e.session_id.as_str()) == session),
            );
            return Vec::new();
        }
        self.apply_appended(events, false)
    }

    pub(super) fn apply_appended(
        &mut self,
        events: Vec<Envelope>,
        force_refresh: bool,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        if force_refresh || events.iter().any(|e| is_lifecycle(&e.event)) {
            effects.push(Effect::Sessions);
            if let Some(session_id) = &self.session_id {
                if force_refresh
                    || events
                        .iter()
                        .any(|e| &e.session_id == session_id && is_lifecycle(&e.event))
                {
                    effects.push(Effect::Turns {
                        session_id: session_id.clone(),
                    });
                }
            }
        }
        if let Some(tools) = self.session_tools.as_mut() {
            // Events the read already saw are skipped by seq.
            for env in &events {
                tools.apply(env);
            }
        }
        if let Some(cost) = self.session_cost.as_mut() {
            for env in &events {
                cost.apply(env);
            }
        }
        let follow = self.follow;
        if let Some(turn) = self.turn.as_mut() {
            // While pages are still being read, the pages bring these events in order.
            if turn.exhausted {
                turn.extend(events);
                if follow && turn.replay.is_none() {
                    turn.selected = turn.items().len().saturating_sub(1);
                }
            }
        }
        effects.extend(self.more_pages());
        effects
    }

    /// Asks for the next timeline page when the selection nears the end (always when following).
    pub(super) fn more_pages(&mut self) -> Vec<Effect> {
        let follow = self.follow;
        let Some(turn) = self.turn.as_mut() else {
            return Vec::new();
        };
        let near_end = match &turn.replay {
            Some(replay) => replay.cursor + REPLAY_AHEAD >= turn.events.len(),
            None => turn.selected + PAGE_AHEAD >= turn.items().len(),
        };
        if turn.exhausted || turn.loading || !(near_end || follow) {
            return Vec::new();
        }
        turn.loading = true;
        vec![Effect::TimelinePage {
            session_id: turn.session_id.clone(),
            turn_id: turn.turn_id.clone(),
            after_seq: turn.scanned_to,
        }]
    }

    pub(super) fn open_timeline(&mut self) -> Vec<Effect> {
        let (Some(session_id), Some(summary)) =
            (self.session_id.clone(), self.selected_turn().cloned())
        else {
            return Vec::new();
        };
        let Some(turn_id) = summary.turn_id.clone() else {
            self.status = Some(format!(
                "turn {} has no turn id; its events cannot be listed",
                summary.request_id
            ));
            return Vec::new();
        };
        if summary.status == TurnStatus::Running {
            self.follow = true;
        }
        let first_seq = summary.first_seq;
        self.turn = Some(TurnView::new(&session_id, &turn_id, first_seq));
        self.view = View::Timeline;
        self.focus = Pane::List;
        self.conversation_scroll = 0;
        vec![
            Effect::TimelinePage {
                session_id: session_id.clone(),
                turn_id: turn_id.clone(),
                after_seq: first_seq.saturating_sub(1),
            },
            Effect::BaseState {
                session_id,
                turn_id,
                before_seq: first_seq,
            },
        ]
    }
}
