//! The search and filter over the current list: which rows match, which are shown, and
//! jumping between matches.

use super::{item_matches, session_matches, turn_row_matches, App, Effect, FilterEdit, View};

impl App {
    /// The rows of the current list a filter leaves shown (all of them without one).
    pub fn visible_rows(&self) -> Vec<usize> {
        let len = self.row_count();
        if !self.filter.hide || self.filter.query.trim().is_empty() {
            return (0..len).collect();
        }
        (0..len).filter(|&i| self.row_matches(i)).collect()
    }

    /// Rows in the current list.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Sessions => self.sessions.len(),
            View::Turns => self.turns.len(),
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.items().len()),
            View::Event | View::Diff => 0,
        }
    }

    /// Whether row `i` of the current list matches the search.
    pub fn row_matches(&self, i: usize) -> bool {
        let query = &self.filter.query;
        match self.view {
            View::Sessions => self
                .sessions
                .get(i)
                .is_some_and(|s| session_matches(query, s, &self.overviews)),
            View::Turns => self.turns.get(i).is_some_and(|t| {
                let prompt = self
                    .session_id
                    .as_deref()
                    .and_then(|s| self.overviews.get(s))
                    .and_then(|o| o.prompt(&t.request_id));
                turn_row_matches(query, t, prompt)
            }),
            View::Timeline => self
                .turn
                .as_ref()
                .and_then(|t| t.items().get(i))
                .is_some_and(|item| item_matches(query, item)),
            View::Event | View::Diff => false,
        }
    }

    /// The search's matches in the current list, and which of them is selected (1-based).
    pub fn match_count(&self) -> (Option<usize>, usize) {
        if self.filter.query.trim().is_empty() {
            return (None, 0);
        }
        let current = match self.view {
            View::Sessions => self.session_selected,
            View::Turns => self.turn_selected,
            View::Timeline => self.turn.as_ref().map_or(0, |t| t.selected),
            View::Event | View::Diff => return (None, 0),
        };
        let mut total = 0;
        let mut at = None;
        for i in 0..self.row_count() {
            if self.row_matches(i) {
                total += 1;
                if i == current {
                    at = Some(total);
                }
            }
        }
        (at, total)
    }

    pub(super) fn edit_filter(&mut self, edit: FilterEdit) -> Vec<Effect> {
        match edit {
            FilterEdit::Char(c) => self.filter.query.push(c),
            FilterEdit::Backspace => {
                self.filter.query.pop();
            }
            FilterEdit::Apply => {
                self.filter.editing = false;
                return self.jump_to_match(true, true);
            }
            FilterEdit::Cancel => {
                self.filter.editing = false;
                self.filter.query.clear();
            }
        }
        Vec::new()
    }

    /// Moves the selection to the next (or previous) row the filter matches, wrapping around.
    /// With no match the selection stays; the footer's count says so.
    pub(super) fn jump_to_match(&mut self, forward: bool, include_current: bool) -> Vec<Effect> {
        if self.filter.query.trim().is_empty() {
            return Vec::new();
        }
        let (len, current) = match self.view {
            View::Sessions => (self.sessions.len(), self.session_selected),
            View::Turns => (self.turns.len(), self.turn_selected),
            View::Timeline => match &self.turn {
                Some(t) => (t.items().len(), t.selected),
                None => return Vec::new(),
            },
            View::Event | View::Diff => return Vec::new(),
        };
        if len == 0 {
            return Vec::new();
        }
        let start = usize::from(!include_current);
        let found = (start..len + start).find_map(|offset| {
            let offset = offset % len;
            let index = if forward {
                (current + offset) % len
            } else {
                (current + len - offset) % len
            };
            self.row_matches(index).then_some(index)
        });
        if let Some(index) = found {
            self.follow = false;
            match self.view {
                View::Sessions => self.session_selected = index,
                View::Turns => self.turn_selected = index,
                View::Timeline => {
                    if let Some(turn) = self.turn.as_mut() {
                        turn.selected = index;
                    }
                }
                View::Event | View::Diff => {}
            }
        }
        self.more_pages()
    }
}
