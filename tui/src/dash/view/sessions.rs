//! The session list.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Row, Table, TableState};
use ratatui::Frame;

use crate::dash::app::{session_matches, App};
use crate::dash::view::{fmt_at, selected_style};

/// Draws one row per session, newest last.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let header = Row::new(vec!["session", "started", "last event", "turns", "seqs"])
        .style(Style::new().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = app
        .sessions
        .iter()
        .map(|s| {
            let row = Row::new(vec![
                s.session_id.clone(),
                fmt_at(s.first_at),
                fmt_at(s.last_at),
                s.turns.to_string(),
                format!("{}–{}", s.first_seq, s.last_seq),
            ]);
            if session_matches(&app.filter.query, s) {
                row.style(Style::new().fg(Color::Yellow))
            } else {
                row
            }
        })
        .collect();
    let title = format!(
        " sessions ({}) · {} events in the log ",
        app.sessions.len(),
        app.max_seq
    );
    let table = Table::new(
        rows,
        [
            Constraint::Min(16),
            Constraint::Length(19),
            Constraint::Length(19),
            Constraint::Length(6),
            Constraint::Length(16),
        ],
    )
    .header(header)
    .row_highlight_style(selected_style())
    .block(Block::bordered().title(title));
    let mut state = TableState::default()
        .with_selected((!app.sessions.is_empty()).then_some(app.session_selected));
    frame.render_stateful_widget(table, area, &mut state);
}
