//! The breadcrumb line: where the user is, and the modes in force.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::dash::app::{App, View};

/// Draws the breadcrumb and the mode flags.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let sep = Span::styled(" › ", Style::new().fg(Color::DarkGray));
    let mut spans = vec![
        Span::styled("mull", Style::new().add_modifier(Modifier::BOLD)),
        sep.clone(),
        Span::raw(app.db_label.clone()),
    ];
    if app.view != View::Sessions {
        if let Some(session) = &app.session_id {
            spans.push(sep.clone());
            spans.push(Span::raw(session.clone()));
        }
    }
    if matches!(app.view, View::Timeline | View::Event) {
        if let Some(turn) = &app.turn {
            spans.push(sep.clone());
            spans.push(Span::raw(turn.turn_id.clone()));
        }
    }
    if app.view == View::Event {
        if let Some(seq) = app.event_seq {
            spans.push(sep);
            spans.push(Span::raw(format!("seq {seq}")));
        }
    }
    if app.follow {
        spans.push(Span::styled(
            "  [FOLLOW]",
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(paused) = &app.paused {
        spans.push(Span::styled(
            format!("  [PAUSED +{} new]", paused.arrived),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(replay) = app.turn.as_ref().and_then(|t| t.replay.as_ref()) {
        let state = if replay.playing { "▶" } else { "⏸" };
        spans.push(Span::styled(
            format!("  [REPLAY {state} {}]", replay.speed.label()),
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
