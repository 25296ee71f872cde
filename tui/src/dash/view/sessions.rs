//! The session list: one row per session — its agent, what the user first asked (or, for a
//! fork, where it branched off), how its turns ended, tokens and last activity — and the
//! selected session's ids, lineage and dates below.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Table, TableState, Wrap};
use ratatui::Frame;

use crate::dash::app::App;
use crate::dash::view::columns::{first_shown, fitted_rows, room, Column};
use crate::dash::view::{
    ellipsize, fmt_at, fmt_tokens, fmt_usage, selected_style, status_mix_spans,
};

/// Lines of the detail pane, borders included.
const DETAIL_HEIGHT: u16 = 6;

const COLUMNS: [Column; 7] = [
    Column::fixed("agent", 1),
    Column::flex("first message", 14),
    Column::fixed("turns", 2),
    Column::fixed("status", 3),
    Column::fixed("in/out", 4),
    Column::fixed("last activity", 5),
    Column::fixed("model", 6),
];

/// The table and the detail pane.
pub fn layout(area: Rect) -> [Rect; 2] {
    let detail = if area.height >= 14 { DETAIL_HEIGHT } else { 0 };
    Layout::vertical([Constraint::Min(3), Constraint::Length(detail)]).areas(area)
}

/// Draws one row per session, oldest first, and the selected session's details.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let [list, detail] = layout(area);
    let visible = app.visible_rows();
    let match_style = Style::new().fg(Color::Yellow);
    let matching = !app.filter.query.is_empty();
    let selected = visible.iter().position(|&i| i == app.session_selected);
    // Only the rows that fit are built: a log of thousands of sessions draws a screenful.
    let first = first_shown(list, selected);
    let shown = &visible[first.min(visible.len())..(first + room(list)).min(visible.len())];
    let cells: Vec<Vec<Line>> = shown
        .iter()
        .filter_map(|&i| app.sessions.get(i))
        .map(|s| {
            let o = app.overviews.get(&s.session_id);
            let prompt =
                match o.and_then(|o| Some((o.first_prompt.clone(), o.forked_from.as_ref()?))) {
                    Some((Some(prompt), _)) => format!("⑂ {prompt}"),
                    Some((None, (origin, seq))) => format!("⑂ fork of {origin} @{seq}"),
                    None => o
                        .and_then(|o| o.first_prompt.clone())
                        .unwrap_or_else(|| "—".to_owned()),
                };
            vec![
                Line::from(
                    o.and_then(|o| o.agent.clone())
                        .unwrap_or_else(|| "?".to_owned()),
                ),
                Line::from(prompt),
                Line::from(o.map(|o| o.status.total().to_string()).unwrap_or_default()),
                Line::from(o.map(|o| status_mix_spans(&o.status)).unwrap_or_default()),
                Line::from(
                    o.map(|o| {
                        format!(
                            "{}/{}",
                            fmt_tokens(o.usage.input_tokens),
                            fmt_tokens(o.usage.output_tokens)
                        )
                    })
                    .unwrap_or_default(),
                ),
                Line::from(s.last_at.format("%m-%d %H:%M:%S").to_string()),
                Line::from(o.and_then(|o| o.model_id.clone()).unwrap_or_default()),
            ]
        })
        .collect();
    let inner_width = list.width.saturating_sub(2);
    let (header, rows, widths, _) = fitted_rows(&COLUMNS, cells, inner_width);
    let rows: Vec<_> = rows
        .into_iter()
        .zip(shown)
        .map(|(row, &i)| {
            let matched = matching && app.row_matches(i);
            if matched {
                row.style(match_style)
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
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(selected_style())
        .block(Block::bordered().title(title));
    let mut state = TableState::default().with_selected(selected.map(|at| at - first));
    frame.render_stateful_widget(table, list, &mut state);
    if detail.height > 0 {
        render_detail(frame, detail, app);
    }
}

fn render_detail(frame: &mut Frame, area: Rect, app: &App) {
    let block = Block::bordered().title(" session ");
    let width = usize::from(area.width.saturating_sub(2));
    let dim = Style::new().fg(Color::DarkGray);
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let Some(s) = app.sessions.get(app.session_selected) else {
        frame.render_widget(Paragraph::new("no sessions yet").block(block), area);
        return;
    };
    let o = app.overviews.get(&s.session_id);
    let mut id_line = vec![
        Span::styled("id ", dim),
        Span::styled(s.session_id.clone(), bold),
        Span::styled(" · seqs ", dim),
        Span::raw(format!("{}–{}", s.first_seq, s.last_seq)),
    ];
    if let Some((origin, seq)) = o.and_then(|o| o.forked_from.as_ref()) {
        id_line.push(Span::styled(" · fork of ", dim));
        id_line.push(Span::raw(format!("{origin} @{seq}")));
    }
    let forks = app.overviews.forks_of(&s.session_id);
    if !forks.is_empty() {
        id_line.push(Span::styled(" · forks ", dim));
        id_line.push(Span::raw(forks.join(", ")));
    }
    let mut lines = vec![Line::from(id_line)];
    lines.push(Line::from(vec![
        Span::styled("started ", dim),
        Span::raw(fmt_at(s.first_at)),
        Span::styled(" · last ", dim),
        Span::raw(fmt_at(s.last_at)),
    ]));
    if let Some(o) = o {
        lines.push(Line::from(vec![
            Span::styled("tokens ", dim),
            Span::raw(fmt_usage(&o.usage)),
            Span::styled(" · model ", dim),
            Span::raw(o.model_id.clone().unwrap_or_else(|| "-".into())),
        ]));
        if let Some(prompt) = &o.first_prompt {
            lines.push(Line::from(vec![
                Span::styled("asked ", dim),
                Span::raw(ellipsize(prompt, width.saturating_sub(6))),
            ]));
        }
    }
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}
