//! Drawing: pure functions from `&App` to a frame. Nothing here changes state or reads the log.
//!
//! Every screen keeps a header (where you are, live throughput, modes; under it a red banner
//! while the log reads without rows files beside it hold) and a status bar (the
//! position in the list, the search's count, the keys that work here). Tables choose their
//! columns by priority for the width they get ([`fit_columns`]): a narrow terminal drops whole
//! columns, never cuts a value, and keeps the key hints.

mod approvals;
mod banner;
mod columns;
mod diff;
mod event;
mod header;
mod help;
pub mod hit;
mod pacing;
mod sessions;
mod timeline;
mod turns;

use chrono::{DateTime, Utc};
use mull_core::{DecisionAction, TurnStatus, Usage};
use mull_store::StatusMix;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::dash::app::{App, View};

/// The header (a line more for the damage banner when `app` has one), a line announcing a call
/// the writer will approve by itself (none when there is nothing to announce), the body and
/// the status bar.
pub fn areas(area: Rect, app: &App) -> [Rect; 4] {
    let header = if app.damage.is_empty() { 1 } else { 2 };
    let self_answer = u16::from(approvals::self_answer_banner(app, area.width).is_some());
    Layout::vertical([
        Constraint::Length(header),
        Constraint::Length(self_answer),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App) {
    let [header_area, self_answer_area, body, footer_area] = areas(frame.area(), app);
    let [header_area, banner_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(header_area);
    header::render(frame, header_area, app);
    banner::render(frame, banner_area, app);
    if let Some(line) = approvals::self_answer_banner(app, self_answer_area.width) {
        frame.render_widget(Paragraph::new(line), self_answer_area);
    }
    match app.view {
        View::Sessions => sessions::render(frame, body, app),
        View::Turns => turns::render(frame, body, app),
        View::Timeline => timeline::render(frame, body, app),
        View::Event => event::render(frame, body, app),
        View::Diff => diff::render(frame, body, app),
    }
    render_footer(frame, footer_area, app);
    if app.help {
        help::render(frame, body);
    }
}

/// Key hints per view, most useful first; the status bar shows what fits, always ending with
/// help and quit.
fn hints(app: &App) -> &'static [&'static str] {
    match app.view {
        View::Sessions => &[
            "Enter open",
            "/ search",
            "& filter",
            "f follow",
            "space pause",
        ],
        View::Turns if !app.unanswered_approvals().is_empty() => &[
            "a approve",
            "x deny",
            "w next call",
            "Enter open",
            "Esc back",
            "/ search",
            "f follow",
        ],
        View::Turns => &[
            "Enter open",
            "Esc back",
            "m mark",
            "d diff",
            "/ search",
            "& filter",
            "f follow",
        ],
        View::Timeline if !app.unanswered_approvals().is_empty() => &[
            "a approve",
            "x deny",
            "Enter JSON",
            "Esc back",
            "Tab pane",
            "/ search",
        ],
        View::Timeline => &[
            "Enter JSON",
            "Esc back",
            "Tab pane",
            "r replay",
            "/ search",
            "f follow",
        ],
        View::Event => &["←/→ events", "Esc back", "↑/↓ scroll"],
        View::Diff => &["↑/↓ differences", "Esc back"],
    }
}

/// Where the user is in the current list: "sessions 2/5", "turn 3/3", "row 4/18".
fn position(app: &App) -> String {
    let (what, at, len) = match app.view {
        View::Sessions => ("session", app.session_selected, app.sessions.len()),
        View::Turns => ("turn", app.turn_selected, app.turns.len()),
        View::Timeline => match &app.turn {
            Some(t) => ("row", t.selected, t.items().len()),
            None => ("row", 0, 0),
        },
        View::Diff => match &app.diff {
            Some(d) => ("difference", d.scroll, d.diff.differences.len()),
            None => ("difference", 0, 0),
        },
        View::Event => {
            return app
                .event_seq
                .map(|s| format!("seq {s}"))
                .unwrap_or_default()
        }
    };
    if len == 0 {
        format!("no {what}s")
    } else {
        format!("{what} {}/{len}", at + 1)
    }
}

fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let dim = Style::new().fg(Color::DarkGray);
    let yellow = Style::new().fg(Color::Yellow);
    let width = usize::from(area.width);
    let mut left: Vec<Span> = Vec::new();
    if app.filter.editing {
        left.push(Span::styled(
            if app.filter.hide { "&" } else { "/" },
            yellow,
        ));
        left.push(Span::raw(app.filter.query.clone()));
        left.push(Span::styled("▏", yellow));
        let (_, total) = app.match_count();
        left.push(Span::styled(
            format!(" {total} match{} ", plural_es(total)),
            yellow,
        ));
        left.push(Span::styled(
            "kind:K tool:T status:S or text · Enter apply · Esc cancel",
            dim,
        ));
        frame.render_widget(Paragraph::new(Line::from(left)), area);
        return;
    }
    if let Some(confirm) = &app.answering.confirm {
        let verb = if confirm.approved { "approve" } else { "deny" };
        // The keys always show; the approval id, then words, give way on a narrow screen.
        let (tool, id) = (&confirm.tool, &confirm.approval_id);
        let candidates = [
            (
                format!(" {verb} {tool} ({id})? "),
                "y yes · any other key no",
            ),
            (format!(" {verb} {tool}? "), "y yes · any other key no"),
            (format!(" {verb} {tool}? "), "y yes · other key no"),
            (
                format!(" {verb} {}? ", ellipsize(tool, width.saturating_sub(22))),
                "y yes · other no",
            ),
        ];
        let (question, keys) = candidates
            .iter()
            .find(|(q, k)| q.width() + k.width() <= width)
            .unwrap_or(&candidates[3]);
        let line = Line::from(vec![
            Span::styled(question.clone(), yellow.add_modifier(Modifier::BOLD)),
            Span::styled(*keys, dim),
        ]);
        frame.render_widget(Paragraph::new(line), area);
        return;
    }
    if let Some(notice) = &app.answering.notice {
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(format!(" {notice}"), yellow))),
            area,
        );
        return;
    }
    if let Some(status) = &app.status {
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(
                status.clone(),
                Style::new().fg(Color::Red),
            ))),
            area,
        );
        return;
    }
    left.push(Span::styled(
        format!(" {} ", position(app)),
        Style::new().add_modifier(Modifier::REVERSED),
    ));
    if !app.filter.query.is_empty() {
        let (at, total) = app.match_count();
        let what = if app.filter.hide { "filter" } else { "search" };
        let at = at.map(|a| format!("{a}/")).unwrap_or_default();
        left.push(Span::styled(
            format!(
                " {what} {:?}: {at}{total} match{} (n/N) ",
                app.filter.query,
                plural_es(total)
            ),
            yellow,
        ));
    }
    let used: usize = left.iter().map(|s| s.width()).sum();
    let tail = " · ? help · q quit";
    let mut text = String::new();
    for hint in hints(app) {
        let next = if text.is_empty() {
            format!(" {hint}")
        } else {
            format!("{text} · {hint}")
        };
        if used + next.width() + tail.width() > width {
            break;
        }
        text = next;
    }
    text.push_str(if text.is_empty() {
        " ? help · q quit"
    } else {
        tail
    });
    left.push(Span::styled(text, dim));
    frame.render_widget(Paragraph::new(Line::from(left)), area);
}

fn plural_es(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "es"
    }
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

/// A time of day, for columns where the date is in the detail pane.
pub fn fmt_clock(at: DateTime<Utc>) -> String {
    at.format("%H:%M:%S").to_string()
}

/// A session's turns by how they ended: "✓3 ✗1 ▶1" (only the kinds it has).
pub fn status_mix_spans(mix: &StatusMix) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let mut add = |n: u64, mark: &str, style: Style| {
        if n > 0 {
            if !spans.is_empty() {
                spans.push(Span::raw(" "));
            }
            spans.push(Span::styled(format!("{mark}{n}"), style));
        }
    };
    add(mix.completed, "✓", status_style(TurnStatus::Completed));
    add(mix.error, "✗", status_style(TurnStatus::Error));
    add(mix.aborted, "⊘", status_style(TurnStatus::Aborted));
    add(mix.running, "▶", status_style(TurnStatus::Running));
    add(mix.interrupted, "↯", status_style(TurnStatus::Interrupted));
    spans
}

/// `text` cut to `width` columns at a word boundary where one is near, ending in "…".
pub fn ellipsize(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    if let Some(space) = out.rfind(' ') {
        if space * 4 >= out.len() * 3 {
            out.truncate(space);
        }
    }
    out.push('…');
    out
}

/// The colour of a turn status.
pub fn status_style(status: TurnStatus) -> Style {
    match status {
        TurnStatus::Running => Style::new().fg(Color::Cyan),
        TurnStatus::Completed => Style::new().fg(Color::Green),
        TurnStatus::Error | TurnStatus::Aborted => Style::new().fg(Color::Red),
        TurnStatus::Interrupted => Style::new().fg(Color::Magenta),
    }
}

/// The colour of a tool decision badge.
pub fn decision_style(action: DecisionAction) -> Style {
    match action {
        DecisionAction::Allow => Style::new().fg(Color::Green),
        DecisionAction::Rewrite => Style::new().fg(Color::Yellow),
        DecisionAction::Substitute => Style::new().fg(Color::Magenta),
        DecisionAction::Block
        | DecisionAction::Invalid
        | DecisionAction::HookFailed
        | DecisionAction::Denied => Style::new().fg(Color::Red),
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
mod answer_tests;
#[cfg(test)]
mod tests;
