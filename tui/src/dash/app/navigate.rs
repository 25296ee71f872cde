//! Moving around the dashboard: the selection and scrolling, clicks, replay's cursor, and
//! going into and out of sessions, turns and events.

use mull_store::TurnPacing;

use crate::dash::replay::Replay;
use crate::dash::timeline::TimelineBuilder;

use super::{App, Effect, Hit, Pane, TurnView, View};

fn move_index(index: usize, len: usize, delta: isize) -> usize {
    if len == 0 {
        return 0;
    }
    let moved = if delta < 0 {
        index.saturating_sub(delta.unsigned_abs())
    } else {
        index.saturating_add(delta.unsigned_abs())
    };
    moved.min(len - 1)
}

impl App {
    pub(super) fn click(&mut self, hit: Hit) -> Vec<Effect> {
        self.focus = hit.pane;
        let Some(row) = hit.row else {
            return Vec::new();
        };
        let current = match self.view {
            View::Sessions => self.session_selected,
            View::Turns => self.turn_selected,
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.selected),
            View::Event | View::Diff => return Vec::new(),
        };
        // A click on the selected row opens it, as Enter does.
        if row == current {
            return self.drill_in();
        }
        self.follow = false;
        match self.view {
            View::Sessions => {
                self.session_selected = row.min(self.sessions.len().saturating_sub(1))
            }
            View::Turns => self.turn_selected = row.min(self.turns.len().saturating_sub(1)),
            View::Timeline => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.selected = row.min(turn.items().len().saturating_sub(1));
                }
                return self.more_pages();
            }
            View::Event | View::Diff => {}
        }
        Vec::new()
    }

    /// Moves `index` by `delta` rows among the rows shown.
    pub(super) fn move_visible(&self, index: usize, delta: isize) -> usize {
        let len = self.row_count();
        if !self.filter.hide || self.filter.query.trim().is_empty() {
            return move_index(index, len, delta);
        }
        let rows = self.visible_rows();
        if rows.is_empty() {
            return index;
        }
        let here = rows.partition_point(|&r| r < index);
        let here = if rows.get(here) == Some(&index) || delta <= 0 {
            here.min(rows.len() - 1)
        } else {
            // Between shown rows: the first step lands on the next one.
            here.saturating_sub(1)
        };
        rows[move_index(here, rows.len(), delta)]
    }

    pub(super) fn move_selection(&mut self, delta: isize) -> Vec<Effect> {
        // Moving by hand stops following, like scrolling up in `tail -f`.
        if self.view != View::Event {
            self.follow = false;
        }
        if self.view == View::Timeline && self.focus == Pane::Conversation {
            self.conversation_scroll = if delta < 0 {
                self.conversation_scroll
                    .saturating_add(delta.unsigned_abs().min(u16::MAX as usize) as u16)
            } else {
                self.conversation_scroll
                    .saturating_sub(delta.unsigned_abs().min(u16::MAX as usize) as u16)
            };
            return Vec::new();
        }
        if let (View::Diff, Some(diff)) = (self.view, self.diff.as_mut()) {
            let len = diff.diff.differences.len();
            diff.scroll = move_index(diff.scroll, len, delta);
            return Vec::new();
        }
        match self.view {
            View::Sessions => {
                self.session_selected = self.move_visible(self.session_selected, delta);
            }
            View::Turns => {
                self.turn_selected = self.move_visible(self.turn_selected, delta);
            }
            View::Timeline => {
                let current = self.turn.as_ref().map_or(0, |t| t.selected);
                let moved = self.move_visible(current, delta);
                if let Some(turn) = self.turn.as_mut() {
                    turn.selected = moved;
                }
                return self.more_pages();
            }
            View::Event => {
                self.event_scroll = if delta < 0 {
                    self.event_scroll
                        .saturating_sub(delta.unsigned_abs() as u16)
                } else {
                    self.event_scroll
                        .saturating_add(delta.unsigned_abs() as u16)
                };
            }
            View::Diff => {}
        }
        Vec::new()
    }

    pub(super) fn replay_move(&mut self, to: impl FnOnce(&mut Replay, usize)) -> bool {
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let len = turn.events.len();
        let Some(replay) = turn.replay.as_mut() else {
            return false;
        };
        to(replay, len);
        let cursor = replay.cursor;
        turn.seek_to(cursor);
        true
    }

    pub(super) fn step_event(&mut self, delta: isize) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let Some(seq) = self.event_seq else {
            return;
        };
        let index = turn.events.partition_point(|e| e.seq < seq);
        let next = move_index(index, turn.events.len(), delta);
        self.event_seq = turn.events.get(next).map(|e| e.seq);
        self.event_scroll = 0;
    }

    pub(super) fn toggle_replay(&mut self) -> Vec<Effect> {
        if self.view != View::Timeline {
            return Vec::new();
        }
        let Some(turn) = self.turn.as_mut() else {
            return Vec::new();
        };
        if turn.replay.take().is_some() {
            turn.show_all();
            turn.selected = turn.selected.min(turn.items().len().saturating_sub(1));
            return Vec::new();
        }
        // Replay pages through the turn like the plain view: it starts on the events loaded
        // and reads more as the cursor nears their end.
        self.follow = false;
        turn.replay = Some(Replay::new());
        turn.timeline = TimelineBuilder::new();
        turn.pacing = TurnPacing::new();
        turn.conversation = turn.base.clone();
        turn.seek_to(0);
        self.more_pages()
    }

    pub(super) fn drill_in(&mut self) -> Vec<Effect> {
        match self.view {
            View::Sessions => {
                let Some(session) = self.sessions.get(self.session_selected) else {
                    return Vec::new();
                };
                let session_id = session.session_id.clone();
                self.enter_session(session_id)
            }
            View::Turns => self.open_timeline(),
            View::Timeline => {
                if let Some(item) = self.turn.as_ref().and_then(TurnView::selected_item) {
                    self.event_seq = Some(item.first_seq);
                    self.event_scroll = 0;
                    self.view = View::Event;
                }
                Vec::new()
            }
            View::Event | View::Diff => Vec::new(),
        }
    }

    /// When following (and not replaying a turn), selects and enters the newest listed session;
    /// `None` when it does not move.
    pub(super) fn follow_to_newest(&mut self) -> Option<Vec<Effect>> {
        let replaying = self.turn.as_ref().is_some_and(|t| t.replay.is_some());
        if !self.follow || replaying {
            return None;
        }
        self.session_selected = self.sessions.len().saturating_sub(1);
        let id = self.sessions.last().map(|s| s.session_id.clone())?;
        self.follow_pending = true;
        self.turn = None;
        Some(self.enter_session(id))
    }

    /// Lists the turns of `session_id`.
    pub(super) fn enter_session(&mut self, session_id: String) -> Vec<Effect> {
        if self.session_id.as_deref() != Some(session_id.as_str()) {
            self.turns.clear();
            self.turn_selected = 0;
            self.session_tools = None;
            self.session_cost = None;
        }
        self.session_id = Some(session_id.clone());
        self.view = View::Turns;
        self.focus = Pane::List;
        vec![
            Effect::Turns {
                session_id: session_id.clone(),
            },
            Effect::Cost {
                session_id: session_id.clone(),
            },
            Effect::ToolCalls { session_id },
        ]
    }

    pub(super) fn back_out(&mut self) -> Vec<Effect> {
        if !self.filter.query.is_empty() {
            self.filter.query.clear();
            return Vec::new();
        }
        match self.view {
            View::Sessions => {}
            View::Turns => {
                self.view = View::Sessions;
            }
            // A sub-agent's timeline backs out to the parent's, where it was opened.
            View::Timeline if !self.nest.is_empty() => return self.subagent_out(),
            View::Timeline => {
                self.view = View::Turns;
                self.turn = None;
                self.focus = Pane::List;
                if let Some(session_id) = self.session_id.clone() {
                    return vec![Effect::Turns { session_id }];
                }
            }
            View::Event => {
                self.view = View::Timeline;
                self.event_seq = None;
            }
            View::Diff => {
                self.view = self.diff.take().map_or(View::Turns, |d| d.from);
            }
        }
        Vec::new()
    }
}
