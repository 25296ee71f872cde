//! Drawing: pure functions from `&App` to a frame. Nothing here changes state or reads the log.

mod event;
mod header;
mod help;
mod sessions;
mod timeline;
mod turns;

use chrono::{DateTime, Utc};
use mull_core::{DecisionAction, TurnStatus, Usage};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use crate::dash::app::{App, View};

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App) {
    let [header_area, body, footer_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    header::render(frame, header_area, app);
    match app.view {
        View::Sessions => sessions::render(frame, body, app),
        View::Turns => turns::render(frame, body, app),
        View::Timeline => timeline::render(frame, body, app),
        View::Event => event::render(frame, body, app),
    }
    render_footer(frame, footer_area, app);
    if app.help {
        help::render(frame, frame.area());
    }
}

fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let line = if app.filter.editing {
        Line::from(vec![
            Span::styled("/", Style::new().fg(Color::Yellow)),
            Span::raw(app.filter.query.clone()),
            Span::styled("▏", Style::new().fg(Color::Yellow)),
            Span::styled(
                "  kind:K tool:T status:S or text · Enter apply · Esc cancel",
                Style::new().fg(Color::DarkGray),
            ),
        ])
    } else if let Some(status) = &app.status {
        Line::from(Span::styled(status.clone(), Style::new().fg(Color::Red)))
    } else {
        let mut spans = vec![Span::styled(
            "? help · Enter open · Esc back · f follow · space pause · r replay · / filter · q quit",
            Style::new().fg(Color::DarkGray),
        )];
        if !app.filter.query.is_empty() {
            spans.push(Span::styled(
                format!("  filter: {} (n/N)", app.filter.query),
                Style::new().fg(Color::Yellow),
            ));
        }
        Line::from(spans)
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A duration in the unit a reader takes in at a glance.
pub fn fmt_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.2}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// A token count, shortened above ten thousand.
pub fn fmt_tokens(count: Option<u64>) -> String {
    match count {
        None => "-".to_owned(),
        Some(n) if n >= 10_000_000 => format!("{}M", n / 1_000_000),
        Some(n) if n >= 10_000 => format!("{:.1}k", n as f64 / 1000.0),
        Some(n) => n.to_string(),
    }
}

/// Tokens in / out / cached, as one phrase.
pub fn fmt_usage(usage: &Usage) -> String {
    format!(
        "in {} · out {} · cached {}",
        fmt_tokens(usage.input_tokens),
        fmt_tokens(usage.output_tokens),
        fmt_tokens(usage.cached_input_tokens)
    )
}

/// A timestamp as the lists show it (UTC, to the second).
pub fn fmt_at(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The colour of a turn status.
pub fn status_style(status: TurnStatus) -> Style {
    match status {
        TurnStatus::Running => Style::new().fg(Color::Cyan),
        TurnStatus::Completed => Style::new().fg(Color::Green),
        TurnStatus::Error | TurnStatus::Aborted => Style::new().fg(Color::Red),
    }
}

/// The colour of a tool decision badge.
pub fn decision_style(action: DecisionAction) -> Style {
    match action {
        DecisionAction::Allow => Style::new().fg(Color::Green),
        DecisionAction::Rewrite => Style::new().fg(Color::Yellow),
        DecisionAction::Substitute => Style::new().fg(Color::Magenta),
        DecisionAction::Block | DecisionAction::Invalid | DecisionAction::HookFailed => {
            Style::new().fg(Color::Red)
        }
    }
}

/// The style of the selected row.
pub fn selected_style() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

/// Splits `text` into lines of at most `width` columns, breaking at newlines and, inside a
/// line, at the last space that fits (or mid-word when none does).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out = Vec::new();
    for raw in text.split('\n') {
        let mut line = String::new();
        let mut line_width = 0usize;
        let mut last_space: Option<usize> = None;
        for c in raw.chars() {
            let w = c.width().unwrap_or(0);
            if line_width + w > width {
                match last_space {
                    Some(at) if at > 0 => {
                        let rest = line.split_off(at + 1);
                        out.push(line.trim_end().to_owned());
                        line = rest;
                    }
                    _ => out.push(std::mem::take(&mut line)),
                }
                line_width = line.chars().map(|c| c.width().unwrap_or(0)).sum();
                last_space = None;
            }
            if c == ' ' {
                last_space = Some(line.len());
            }
            line.push(c);
            line_width += w;
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests;
