//! A session's turns: one row per turn attempt — what the user asked, how it ended, how long
//! it took, its steps, tool calls (blocked and substituted ones counted apart) and tokens —
//! a chart of tokens per turn, the selected turn's ids, and the session's totals.

use mull_store::projection::TurnSummary;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Paragraph, Table, TableState, Wrap};
use ratatui::Frame;

use crate::dash::app::App;
use crate::dash::view::approvals;
use crate::dash::view::columns::{fitted_rows, Column};
use crate::dash::view::{
    fmt_at, fmt_clock, fmt_duration, fmt_tokens, fmt_usage, selected_style, status_style,
};

const COLUMNS: [Column; 10] = [
    Column::fixed("#", 1),
    Column::flex("message", 14),
    Column::fixed("status", 1),
    Column::fixed("in/out", 2),
    Column::fixed("duration", 3),
    Column::fixed("tools", 4),
    Column::fixed("err", 5),
    Column::fixed("steps", 6),
    Column::fixed("started", 7),
    Column::fixed("model", 8),
];

/// Height of the chart and detail row under the list.
const BOTTOM_HEIGHT: u16 = 9;

/// The list, the chart and detail row, and the totals line.
pub fn layout(area: Rect) -> [Rect; 3] {
    let bottom = if area.height >= 18 { BOTTOM_HEIGHT } else { 0 };
    Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(bottom),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// What the message column says for a turn: the user's words, or why there are none.
fn message_of(app: &App, t: &TurnSummary) -> (String, Style) {
    let dim = Style::new().fg(Color::DarkGray);
    match app.session_overview().and_then(|o| o.prompt(&t.request_id)) {
        Some(prompt) if t.attempt == 0 && !t.continuation => (prompt.to_owned(), Style::new()),
        Some(prompt) => (format!("↻ {prompt}"), dim),
        None if t.continuation => ("↳ continues after tool results".to_owned(), dim),
        None => (format!("({})", entry_name(t)), dim),
    }
}

fn entry_name(t: &TurnSummary) -> String {
    serde_json::to_value(t.entry)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "turn".into())
}

/// "3", "3 · 1 blk", "3 · 1 blk · 1 sub".
fn tools_cell(t: &TurnSummary) -> String {
    let mut text = t
        .tools
        .calls
        .max(t.tools.blocked + t.tools.substituted)
        .to_string();
    if t.tools.blocked > 0 {
        text.push_str(&format!(" · {} blk", t.tools.blocked));
    }
    if t.tools.substituted > 0 {
        text.push_str(&format!(" · {} sub", t.tools.substituted));
    }
    text
}

/// Draws one row per turn, the tokens chart, the selected turn's detail and the totals.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let [list, bottom, totals] = layout(area);
    let (list, waiting) = approvals::split(list, app);
    if let Some(section) = waiting {
        approvals::render(frame, section, app);
    }
    let visible = app.visible_rows();
    let matching = !app.filter.query.is_empty();
    let cells: Vec<Vec<Line>> = visible
        .iter()
        .filter_map(|&i| app.turns.get(i).map(|t| (i, t)))
        .map(|(i, t)| {
            let errors = t.tools.failures + t.hook_failures + u32::from(t.error.is_some());
            let (message, message_style) = message_of(app, t);
            let marked = app.marked.as_ref().is_some_and(|m| {
                app.session_id.as_deref() == Some(m.session_id.as_str())
                    && t.turn_id.as_deref() == Some(m.turn_id.as_str())
            });
            vec![
                if marked {
                    Line::styled(format!("◆{}", i + 1), Style::new().fg(Color::Magenta))
                } else {
                    Line::from((i + 1).to_string())
                },
                Line::styled(message, message_style),
                Line::styled(t.status.as_str(), status_style(t.status)),
                Line::from(format!(
                    "{}/{}",
                    fmt_tokens(t.usage.input_tokens),
                    fmt_tokens(t.usage.output_tokens)
                )),
                Line::from(
                    t.duration_ms
                        .map(fmt_duration)
                        .unwrap_or_else(|| "…".into()),
                ),
                Line::from(tools_cell(t)),
                Line::styled(
                    errors.to_string(),
                    if errors > 0 {
                        Style::new().fg(Color::Red)
                    } else {
                        Style::new()
                    },
                ),
                Line::from(t.steps.to_string()),
                Line::from(fmt_clock(t.started_at)),
                Line::from(t.model_id.clone().unwrap_or_default()),
            ]
        })
        .collect();
    let (header, rows, widths, _) = fitted_rows(&COLUMNS, cells, list.width.saturating_sub(2));
    let rows: Vec<_> = rows
        .into_iter()
        .zip(&visible)
        .map(|(row, &i)| {
            if matching && app.row_matches(i) {
                row.style(Style::new().fg(Color::Yellow))
            } else {
                row
            }
        })
        .collect();
    let title = turns_title(app, usize::from(list.width.saturating_sub(2)));
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(selected_style())
        .block(Block::bordered().title(title));
    let mut state =
        TableState::default().with_selected(visible.iter().position(|&i| i == app.turn_selected));
    frame.render_stateful_widget(table, list, &mut state);

    if bottom.height > 0 {
        let [chart, detail] =
            Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
                .areas(bottom);
        render_chart(frame, chart, app);
        render_detail(frame, detail, app);
    }

    let tool_calls: u32 = app.turns.iter().map(|t| t.tools.calls).sum();
    let steps: u32 = app.turns.iter().map(|t| t.steps).sum();
    let mut line = format!(
        " {} turns · {steps} steps · {tool_calls} tool calls · tokens {}",
        app.turns.len(),
        fmt_usage(&app.session_usage()),
    );
    if usize::from(totals.width) < unicode_width::UnicodeWidthStr::width(line.as_str()) {
        line = format!(
            " {} turns · {steps} steps · {tool_calls} tools · in {} out {}",
            app.turns.len(),
            fmt_tokens(app.session_usage().input_tokens),
            fmt_tokens(app.session_usage().output_tokens),
        );
    }
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(
            line,
            Style::new().add_modifier(Modifier::BOLD),
        ))),
        totals,
    );
}

/// The turns pane's title: the agent, how many turns, and from the session's cost fold what
/// they cost and the model calls budgets refused — the limits named when they fit in `width`.
fn turns_title(app: &App, width: usize) -> Line<'static> {
    let cost = app.session_cost.as_ref();
    let spend = cost
        .map(|c| format!("· cost {} ", c.show(&app.prices)))
        .unwrap_or_default();
    let head = match app.session_overview().and_then(|o| o.agent.clone()) {
        Some(agent) => format!(" turns of {agent} ({}) {spend}", app.turns.len()),
        None => format!(" turns ({}) {spend}", app.turns.len()),
    };
    let fits = |stops: &str| {
        unicode_width::UnicodeWidthStr::width(head.as_str())
            + unicode_width::UnicodeWidthStr::width(stops)
            <= width
    };
    let stops = cost
        .and_then(|c| c.budget_stops(false))
        .map(|full| format!("· ✗ {full} "))
        .filter(|full| fits(full))
        .or_else(|| {
            cost.and_then(|c| c.budget_stops(true))
                .map(|short| format!("· ✗ {short} "))
        });
    match stops {
        Some(stops) => Line::from(vec![
            Span::raw(head),
            Span::styled(stops, Style::new().fg(Color::Red)),
        ]),
        None => Line::from(head),
    }
}

/// Tokens (input + output) per turn as bars, the selected turn's bar lit; the newest turns
/// when they do not all fit.
fn render_chart(frame: &mut Frame, area: Rect, app: &App) {
    let block = Block::bordered().title(" tokens per turn (in+out) ");
    let inner = block.inner(area);
    const BAR: u16 = 5;
    let fits = usize::from(inner.width / (BAR + 1)).max(1);
    let start = if app.turns.len() <= fits {
        0
    } else {
        // Keep the selected turn in view, as far right as it can be.
        (app.turn_selected + 1)
            .saturating_sub(fits)
            .min(app.turns.len() - fits)
    };
    let bars: Vec<Bar> = app
        .turns
        .iter()
        .enumerate()
        .skip(start)
        .take(fits)
        .map(|(i, t)| {
            let tokens = t.usage.input_tokens.unwrap_or(0) + t.usage.output_tokens.unwrap_or(0);
            let style = if i == app.turn_selected {
                Style::new().fg(Color::Yellow)
            } else {
                status_style(t.status)
            };
            Bar::default()
                .value(tokens)
                .label(Line::from((i + 1).to_string()))
                .text_value(fmt_tokens(Some(tokens)))
                .style(style)
                .value_style(style.add_modifier(Modifier::REVERSED))
        })
        .collect();
    let chart = BarChart::default()
        .block(block)
        .bar_width(BAR)
        .bar_gap(1)
        .data(BarGroup::default().bars(&bars));
    frame.render_widget(chart, area);
}

/// The selected turn's ids, dates and error: what the list leaves out.
fn render_detail(frame: &mut Frame, area: Rect, app: &App) {
    let block = Block::bordered().title(" turn ");
    let Some(t) = app.selected_turn() else {
        frame.render_widget(Paragraph::new("no turns yet").block(block), area);
        return;
    };
    let dim = Style::new().fg(Color::DarkGray);
    let field = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name} "), dim),
            Span::raw(value),
        ])
    };
    let mut lines = vec![
        field(
            "turn",
            t.turn_id.clone().unwrap_or_else(|| "(no turn id)".into()),
        ),
        field("request", t.request_id.clone()),
        field("message", t.message_id.clone()),
        field(
            "entry",
            format!(
                "{}{}",
                entry_name(t),
                if t.attempt > 0 {
                    format!(" · attempt {}", t.attempt)
                } else {
                    String::new()
                }
            ),
        ),
        field("started", fmt_at(t.started_at)),
    ];
    if let Some(error) = &t.error {
        lines.push(Line::styled(
            format!("error {error}"),
            Style::new().fg(Color::Red),
        ));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}
