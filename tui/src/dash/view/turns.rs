//! A session's turns, with their totals.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::dash::app::{turn_matches, App};
use crate::dash::view::{
    fmt_at, fmt_duration, fmt_tokens, fmt_usage, selected_style, status_style,
};

/// Draws one row per turn and a line of session totals.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let [list, totals] = Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
    let header = Row::new(vec![
        "turn", "status", "started", "duration", "steps", "in", "out", "cached", "tools", "errors",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = app
        .turns
        .iter()
        .map(|t| {
            let errors = t.tools.failures + t.hook_failures + u32::from(t.error.is_some());
            let status = Line::from(Span::styled(t.status.as_str(), status_style(t.status)));
            let mut row = Row::new(vec![
                Line::from(t.turn_id.clone().unwrap_or_else(|| t.request_id.clone())),
                status,
                Line::from(fmt_at(t.started_at)),
                Line::from(
                    t.duration_ms
                        .map(fmt_duration)
                        .unwrap_or_else(|| "…".into()),
                ),
                Line::from(t.steps.to_string()),
                Line::from(fmt_tokens(t.usage.input_tokens)),
                Line::from(fmt_tokens(t.usage.output_tokens)),
                Line::from(fmt_tokens(t.usage.cached_input_tokens)),
                Line::from(t.tools.calls.to_string()),
                Line::from(Span::styled(
                    errors.to_string(),
                    if errors > 0 {
                        Style::new().fg(Color::Red)
                    } else {
                        Style::new()
                    },
                )),
            ]);
            if turn_matches(&app.filter.query, t) {
                row = row.style(Style::new().fg(Color::Yellow));
            }
            row
        })
        .collect();
    let title = format!(
        " turns of {} ({}) ",
        app.session_id.as_deref().unwrap_or("?"),
        app.turns.len()
    );
    let table = Table::new(
        rows,
        [
            Constraint::Min(10),
            Constraint::Length(9),
            Constraint::Length(19),
            Constraint::Length(8),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(6),
        ],
    )
    .header(header)
    .row_highlight_style(selected_style())
    .block(Block::bordered().title(title));
    let mut state =
        TableState::default().with_selected((!app.turns.is_empty()).then_some(app.turn_selected));
    frame.render_stateful_widget(table, list, &mut state);

    let tool_calls: u32 = app.turns.iter().map(|t| t.tools.calls).sum();
    let steps: u32 = app.turns.iter().map(|t| t.steps).sum();
    let line = Line::from(vec![
        Span::styled(
            " session totals: ",
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            "{} turns · {steps} steps · tokens {} · {tool_calls} tool calls",
            app.turns.len(),
            fmt_usage(&app.session_usage()),
        )),
    ]);
    frame.render_widget(Paragraph::new(line), totals);
}
