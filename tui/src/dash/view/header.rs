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

/// The live numbers and mode flags, right-aligned; `compact` is the short form a narrow
/// terminal gets, so the breadcrumb keeps room.
fn right_spans(app: &App, compact: bool) -> Vec<Span<'static>> {
    let dim = Style::new().fg(Color::DarkGray);
    let (events, tokens) = (app.rates.events_per_sec(), app.rates.tokens_per_sec());
    let mut right: Vec<Span> = vec![
        Span::styled(
            if compact {
                format!("⚡{events} ev/s")
            } else {
                format!("⚡ {events} ev/s · {tokens} tok/s")
            },
            Style::new().fg(Color::Green),
        ),
        Span::styled(if compact { " " } else { " · " }, dim),
    ];
    let running = app.overviews.running();
    right.push(Span::styled(
        if compact {
            format!("▶{running}")
        } else {
            format!("▶ {running} running")
        },
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
            if compact {
                format!(" [⏸{waiting} · a]")
            } else {
                format!(" [⏸ {waiting} to approve · a]")
            },
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(marked) = &app.marked {
        right.push(Span::styled(
            if compact {
                " [◆]".to_owned()
            } else {
                format!(" [◆ {}]", marked.label)
            },
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
    right
}

/// Columns a breadcrumb takes.
fn crumbs_width(parts: &[String]) -> usize {
    parts
        .iter()
        .map(|p| unicode_width::UnicodeWidthStr::width(p.as_str()))
        .sum::<usize>()
        + 3 * parts.len().saturating_sub(1)
        + 1
}

/// Draws the breadcrumb and, right-aligned, throughput and mode flags: the most detailed
/// breadcrumb that fits beside the full numbers, else beside their short form, else the
/// breadcrumb's last two places — never just "mull" where more fits.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let dim = Style::new().fg(Color::DarkGray);
    let width = usize::from(area.width);
    let crumbs = breadcrumbs(app);
    let (full, short) = (&crumbs[0], &crumbs[1]);
    let tail: Vec<String> = short
        .iter()
        .skip(short.len().saturating_sub(2))
        .cloned()
        .collect();
    let fits = |parts: &[String], right: &[Span]| {
        let right_width: usize = right.iter().map(Span::width).sum();
        crumbs_width(parts) + right_width < width
    };
    let (wide, narrow) = (right_spans(app, false), right_spans(app, true));
    let (chosen, right): (&[String], Vec<Span>) = if fits(full, &wide) {
        (full, wide)
    } else if fits(short, &wide) {
        (short, wide)
    } else if fits(full, &narrow) {
        (full, narrow)
    } else if fits(short, &narrow) {
        (short, narrow)
    } else if fits(&tail, &narrow) {
        (&tail, narrow)
    } else {
        (&crumbs[2], narrow)
    };
    let right_width: usize = right.iter().map(Span::width).sum();
    let sep = " › ";
    let mut left = vec![Span::raw(" ")];
    for (i, part) in chosen.iter().enumerate() {
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
    let gap = width.saturating_sub(left_width + right_width);
    left.push(Span::raw(" ".repeat(gap)));
    left.extend(right);
    frame.render_widget(Paragraph::new(Line::from(left)), area);
}
