//! The header bar: where the user is (left), live throughput, running turns and the modes in
//! force (right). On a narrow terminal the breadcrumb gives up detail first; the live numbers
//! and modes stay.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::dash::app::{App, View};

/// The breadcrumb, most detailed first; the first that fits is drawn.
fn breadcrumbs(app: &App) -> Vec<Vec<String>> {
    let mut full = vec!["mull".to_owned(), app.db_label.clone()];
    let mut short = vec!["mull".to_owned()];
    // Inside a sub-agent: the parents' tool calls it was opened from.
    for frame in &app.nest {
        full.push(frame.label.clone());
        short.push("…".to_owned());
    }
    if app.view != View::Sessions {
        if let Some(session) = &app.session_id {
            let agent = app.overviews.get(session).and_then(|o| o.agent.clone());
            match agent {
                Some(agent) => {
                    full.push(format!("{agent} ({session})"));
                    short.push(agent);
                }
                None => {
                    full.push(session.clone());
                    short.push(session.clone());
                }
            }
        }
    }
    if matches!(app.view, View::Timeline | View::Event) {
        if let Some(turn) = app.open_turn_number() {
            full.push(format!("turn {turn}"));
            short.push(format!("turn {turn}"));
        }
    }
    if app.view == View::Event {
        if let Some(seq) = app.event_seq {
            full.push(format!("seq {seq}"));
            short.push(format!("seq {seq}"));
        }
    }
    vec![full, short, vec!["mull".to_owned()]]
}

/// Draws the breadcrumb and, right-aligned, throughput and mode flags.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let dim = Style::new().fg(Color::DarkGray);
    let mut right: Vec<Span> = vec![
        Span::styled(
            format!(
                "⚡ {} ev/s · {} tok/s",
                app.rates.events_per_sec(),
                app.rates.tokens_per_sec()
            ),
            Style::new().fg(Color::Green),
        ),
        Span::styled(" · ", dim),
    ];
    let running = app.overviews.running();
    right.push(Span::styled(
        format!("▶ {running} running"),
        if running > 0 {
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
        } else {
            dim
        },
    ));
    if app.follow {
        right.push(Span::styled(
            " [FOLLOW]",
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(paused) = &app.paused {
        right.push(Span::styled(
            format!(" [PAUSED +{} new]", paused.arrived),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    let waiting = if app.view == View::Sessions {
        0
    } else {
        app.unanswered_approvals().len()
    };
    if waiting > 0 {
        right.push(Span::styled(
            format!(" [⏸ {waiting} to approve · a]"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(marked) = &app.marked {
        right.push(Span::styled(
            format!(" [◆ {}]", marked.label),
            Style::new().fg(Color::Magenta),
        ));
    }
    if let Some(replay) = app.turn.as_ref().and_then(|t| t.replay.as_ref()) {
        let state = if replay.playing { "▶" } else { "⏸" };
        right.push(Span::styled(
            format!(" [REPLAY {state} {}]", replay.speed.label()),
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ));
    }
    right.push(Span::raw(" "));
    let right_width: usize = right.iter().map(Span::width).sum();
    let room = usize::from(area.width).saturating_sub(right_width + 1);
    let crumbs = breadcrumbs(app);
    let sep = " › ";
    let chosen = crumbs
        .iter()
        .find(|parts| {
            let w: usize = parts
                .iter()
                .map(|p| unicode_width::UnicodeWidthStr::width(p.as_str()))
                .sum::<usize>()
                + 3 * parts.len().saturating_sub(1);
            w < room
        })
        .or(crumbs.last());
    let mut left = vec![Span::raw(" ")];
    for (i, part) in chosen.into_iter().flatten().enumerate() {
        if i > 0 {
            left.push(Span::styled(sep, dim));
        }
        let style = if i == 0 {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        };
        left.push(Span::styled(part.clone(), style));
    }
    let left_width: usize = left.iter().map(Span::width).sum();
    let gap = usize::from(area.width).saturating_sub(left_width + right_width);
    left.push(Span::raw(" ".repeat(gap)));
    left.extend(right);
    frame.render_widget(Paragraph::new(Line::from(left)), area);
}
