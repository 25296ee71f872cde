//! Where a mouse click lands: the pane and the list row under a screen cell, computed from the
//! same layout the drawing uses, so what is clicked is what was drawn.

use ratatui::layout::{Position, Rect};

use crate::dash::app::{App, Hit, Pane, View};
use crate::dash::view::{areas, columns, sessions, timeline, turns};

/// The row of a bordered table with a header under `y`, given the rows shown and the
/// selected one's place among them (ratatui scrolls a table just enough to show it).
fn table_row(list: Rect, y: u16, visible: &[usize], selected: Option<usize>) -> Option<usize> {
    let first = list.y + 2;
    if y < first || columns::room(list) == 0 {
        return None;
    }
    let offset = columns::first_shown(list, selected);
    visible.get(offset + usize::from(y - first)).copied()
}

/// What the cell at (`column`, `row`) of a screen of `screen` size shows.
pub fn hit(app: &App, screen: Rect, column: u16, row: u16) -> Option<Hit> {
    let [_, _, body, _] = areas(screen, app);
    let at = Position::new(column, row);
    if !body.contains(at) {
        return None;
    }
    match app.view {
        View::Sessions => {
            let [list, _] = sessions::layout(body);
            let visible = app.visible_rows();
            let selected = visible.iter().position(|&i| i == app.session_selected);
            list.contains(at).then(|| Hit {
                pane: Pane::List,
                row: table_row(list, row, &visible, selected),
            })
        }
        View::Turns => {
            let [list, _, _] = turns::layout(body);
            let visible = app.visible_rows();
            let selected = visible.iter().position(|&i| i == app.turn_selected);
            list.contains(at).then(|| Hit {
                pane: Pane::List,
                row: table_row(list, row, &visible, selected),
            })
        }
        View::Timeline => {
            let turn = app.turn.as_ref()?;
            let panes = timeline::panes(body, app, turn);
            if panes.tabs.contains(at) {
                // " " then " label " and a space per pane.
                let mut x = panes.tabs.x + 1;
                for pane in Pane::ALL {
                    let w = pane.label().len() as u16 + 2;
                    if column >= x && column < x + w {
                        return Some(Hit { pane, row: None });
                    }
                    x += w + 1;
                }
                return None;
            }
            if panes.list.contains(at) {
                let inner = Rect {
                    x: panes.list.x + 1,
                    y: panes.list.y + 1,
                    width: panes.list.width.saturating_sub(2),
                    height: panes.list.height.saturating_sub(2),
                };
                let mut y = inner.y;
                let rows = timeline::shown_rows(
                    app,
                    turn,
                    usize::from(inner.width),
                    usize::from(inner.height),
                );
                let found = rows.into_iter().find_map(|(index, lines)| {
                    let end = y + lines as u16;
                    let hit = (row >= y && row < end).then_some(index);
                    y = end;
                    hit
                });
                return Some(Hit {
                    pane: Pane::List,
                    row: found,
                });
            }
            let pane = [
                (panes.pacing, Pane::Pacing),
                (panes.conversation, Pane::Conversation),
                (panes.turn_tools, Pane::Tools),
                (panes.session_tools, Pane::Tools),
            ]
            .into_iter()
            .find(|(rect, _)| rect.contains(at))
            .map(|(_, pane)| pane)?;
            Some(Hit { pane, row: None })
        }
        View::Event | View::Diff => None,
    }
}
