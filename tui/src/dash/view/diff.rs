//! Two turns side by side: what each run is, the first divergence named, then every
//! difference with the first turn's value beside the second's — the store's diff of the two
//! turns, drawn.

use mull_store::diff::{Aspect, Difference};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use serde_json::Value;

use crate::dash::app::App;
use crate::dash::view::{ellipsize, selected_style};

/// A compared value as one line: text as it is, anything else as JSON, nothing as "-".
fn value_text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.split_whitespace().collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

/// "s0 c1 weather": where in the turn, short.
fn place(d: &Difference) -> String {
    let mut out = String::new();
    if let Some(step) = d.step {
        out.push_str(&format!("step {step}"));
    }
    if let Some(call) = d.call {
        out.push_str(&format!(" call {call}"));
    }
    if let Some(tool) = &d.tool {
        out.push_str(&format!(" {tool}"));
    }
    if out.is_empty() {
        out.push_str("turn");
    }
    out.trim().to_owned()
}

/// Draws the diff screen.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let Some(view) = &app.diff else {
        frame.render_widget(Paragraph::new("no diff"), area);
        return;
    };
    let diff = &view.diff;
    let [summary, table] =
        Layout::vertical([Constraint::Length(5), Constraint::Min(3)]).areas(area);
    let dim = Style::new().fg(Color::DarkGray);
    let mut lines = vec![
        Line::from(vec![
            Span::styled(
                "A ",
                Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("{} · {} events", diff.a.label, diff.a.events)),
        ]),
        Line::from(vec![
            Span::styled(
                "B ",
                Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("{} · {} events", diff.b.label, diff.b.events)),
        ]),
    ];
    lines.push(match &diff.first_divergence {
        Some(first) => Line::from(vec![
            Span::styled("first divergence ", Style::new().fg(Color::Yellow)),
            Span::raw(format!(
                "{}: {} → {}",
                first.location(),
                value_text(&first.a),
                value_text(&first.b)
            )),
        ]),
        None if diff.differences.is_empty() => {
            Line::styled("the two turns are the same", Style::new().fg(Color::Green))
        }
        None => Line::styled(
            "no divergence: only timing differs",
            Style::new().fg(Color::Green),
        ),
    });
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" diff of two turns ")),
        summary,
    );

    let inner_width = usize::from(table.width.saturating_sub(2));
    let place_width = diff
        .differences
        .iter()
        .map(|d| unicode_width::UnicodeWidthStr::width(place(d).as_str()))
        .max()
        .unwrap_or(5)
        .clamp(5, 24);
    let field_width = diff
        .differences
        .iter()
        .map(|d| d.event.len() + 1 + d.field.len())
        .max()
        .unwrap_or(5)
        .clamp(5, 34);
    // The field column goes first when narrow; the values always share what is left.
    let show_field = inner_width >= place_width + field_width + 11 + 40;
    let fixed = place_width + 1 + 11 + 1 + if show_field { field_width + 1 } else { 0 };
    let value_width = inner_width.saturating_sub(fixed + 1) / 2;
    let rows: Vec<Row> = diff
        .differences
        .iter()
        .map(|d| {
            let first = diff.first_divergence.as_ref() == Some(d);
            let style = match d.aspect {
                _ if first => Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
                Aspect::Timing => dim,
                _ => Style::new(),
            };
            let mut cells = vec![
                ellipsize(&place(d), place_width),
                d.aspect.as_str().to_owned(),
            ];
            if show_field {
                cells.push(ellipsize(&format!("{}.{}", d.event, d.field), field_width));
            }
            cells.push(ellipsize(&value_text(&d.a), value_width));
            cells.push(ellipsize(&value_text(&d.b), value_width));
            Row::new(cells).style(style)
        })
        .collect();
    let mut header = vec!["where", "aspect"];
    let mut widths = vec![
        Constraint::Length(place_width as u16),
        Constraint::Length(11),
    ];
    if show_field {
        header.push("field");
        widths.push(Constraint::Length(field_width as u16));
    }
    header.extend(["A", "B"]);
    widths.extend([
        Constraint::Length(value_width as u16),
        Constraint::Length(value_width as u16),
    ]);
    let title = format!(" {} differences ", diff.differences.len());
    let table_widget = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(selected_style())
        .block(Block::bordered().title(title));
    let mut state =
        TableState::default().with_selected((!diff.differences.is_empty()).then_some(view.scroll));
    frame.render_stateful_widget(table_widget, table, &mut state);
}
