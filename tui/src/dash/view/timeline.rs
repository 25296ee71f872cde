//! A turn's timeline beside the conversation as of the cursor, the turn's totals, and tool
//! usage for the turn and for its whole session.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph, Row, Table};
use ratatui::Frame;

use crate::dash::app::{item_matches, App, Pane, TurnView};
use std::borrow::Cow;

use crate::dash::timeline::{turn_tool_usage, Item, ItemKind, ToolApproval};
use crate::dash::view::pacing;
use crate::dash::view::{fmt_duration, selected_style};
use mull_store::tool_usage::{session_tool_usage, ToolUsage};

mod messages;
mod rows;

use messages::{message_lines, Decisions};
use rows::item_lines;

/// At least this many columns show every pane side by side; fewer show the focused one.
pub const WIDE: u16 = 110;
/// Height of the pacing pane beside the timeline.
const PACING_HEIGHT: u16 = 16;

/// Where each pane of the turn screen goes (a zero-sized rect for a pane not drawn), and the
/// tab bar of a narrow screen.
pub struct Panes {
    pub tabs: Rect,
    pub list: Rect,
    pub replay_bar: Rect,
    pub pacing: Rect,
    pub conversation: Rect,
    pub turn_tools: Rect,
    pub session_tools: Rect,
}

/// Lays out the turn screen in `area`.
pub fn panes(area: Rect, app: &App, turn: &TurnView) -> Panes {
    let zero = Rect::default();
    let mut panes = Panes {
        tabs: zero,
        list: zero,
        replay_bar: zero,
        pacing: zero,
        conversation: zero,
        turn_tools: zero,
        session_tools: zero,
    };
    let (left, right) = if area.width >= WIDE {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)])
                .areas(area);
        (Some(left), Some(right))
    } else {
        let [tabs, body] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
        panes.tabs = tabs;
        match app.focus {
            Pane::List => (Some(body), None),
            Pane::Pacing => {
                panes.pacing = body;
                (None, None)
            }
            Pane::Conversation => {
                panes.conversation = body;
                (None, None)
            }
            Pane::Tools => {
                let [turn_area, session_area] =
                    Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)])
                        .areas(body);
                panes.turn_tools = turn_area;
                panes.session_tools = session_area;
                (None, None)
            }
        }
    };
    if let Some(left) = left {
        if turn.replay.is_some() {
            let [list, bar] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(3)]).areas(left);
            panes.list = list;
            panes.replay_bar = bar;
        } else {
            panes.list = left;
        }
    }
    if let Some(right) = right {
        let turn_tools = turn_tool_usage(turn.items()).len();
        let session_tools = app.session_tools.as_ref().map_or(0, |c| {
            let mut names: Vec<&str> = c.calls.iter().map(|c| c.tool.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            names.len()
        });
        let pacing = PACING_HEIGHT.min(right.height / 2);
        let rest = right.height.saturating_sub(pacing);
        // The tables take at most half of what is left, and leave the conversation its lines.
        let budget = (rest / 2).min(rest.saturating_sub(3));
        let (turn_height, session_height) = split_tables(
            budget,
            table_height(turn_tools),
            table_height(session_tools),
        );
        let [pacing_area, conversation, turn_area, session_area] = Layout::vertical([
            Constraint::Length(pacing),
            Constraint::Min(3),
            Constraint::Length(turn_height),
            Constraint::Length(session_height),
        ])
        .areas(right);
        panes.pacing = pacing_area;
        panes.conversation = conversation;
        panes.turn_tools = turn_area;
        panes.session_tools = session_area;
    }
    panes
}

/// A pane's frame. The one with the keys is marked three ways, so a terminal without colour
/// still shows it: a thick border, a ▶ before its title, and the colour.
fn pane_block(app: &App, pane: Pane, title: String) -> Block<'static> {
    if app.focus == pane {
        Block::bordered()
            .border_type(BorderType::Thick)
            .title(format!("▶{title}"))
            .border_style(Style::new().fg(Color::Yellow))
            .title_style(Style::new().add_modifier(Modifier::BOLD))
    } else {
        Block::bordered().title(title)
    }
}

/// Draws the turn screen: the timeline, the pacing pane, the conversation as of the cursor
/// and tool usage for the turn and its session — side by side, or one at a time when narrow.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let Some(turn) = &app.turn else {
        frame.render_widget(Paragraph::new("no turn open"), area);
        return;
    };
    let panes = panes(area, app, turn);
    if panes.tabs.height > 0 {
        let mut spans = vec![Span::raw(" ")];
        for pane in Pane::ALL {
            // Brackets mark the shown pane without colour (same width, so clicks still land).
            let (label, style) = if pane == app.focus {
                (
                    format!("[{}]", pane.label()),
                    Style::new()
                        .fg(Color::Yellow)
                        .add_modifier(Modifier::REVERSED | Modifier::BOLD),
                )
            } else {
                (
                    format!(" {} ", pane.label()),
                    Style::new().fg(Color::DarkGray),
                )
            };
            spans.push(Span::styled(label, style));
            spans.push(Span::raw(" "));
        }
        spans.push(Span::styled(
            "Tab: next pane",
            Style::new().fg(Color::DarkGray),
        ));
        frame.render_widget(Paragraph::new(Line::from(spans)), panes.tabs);
    }
    if panes.replay_bar.height > 0 {
        render_replay_bar(frame, panes.replay_bar, turn);
    }
    if panes.list.height > 0 {
        render_items(frame, panes.list, app, turn);
    }
    if panes.pacing.height > 0 {
        let block = pane_block(app, Pane::Pacing, " turn · pacing ".to_owned());
        pacing::render(frame, panes.pacing, app, turn, block);
    }
    if panes.conversation.height > 0 {
        render_conversation(frame, panes.conversation, app, turn);
    }
    let turn_tools = turn_tool_usage(turn.items());
    let session = app.session_tools.as_ref();
    let session_tools = session.map(session_tool_usage).unwrap_or_default();
    // Both tables show the same columns, so they read as one.
    let columns = tool_columns(
        panes.turn_tools.width.saturating_sub(2),
        turn_tools.iter().chain(&session_tools),
    );
    if panes.turn_tools.height > 0 {
        render_tools(
            frame,
            panes.turn_tools,
            pane_block(app, Pane::Tools, " tools · this turn ".to_owned()),
            Some(&turn_tools),
            columns,
        );
    }
    let title = match session {
        Some(calls) => format!(
            " tools · session · {} turn{} ",
            calls.turns,
            if calls.turns == 1 { "" } else { "s" }
        ),
        None => " tools · session ".to_owned(),
    };
    if panes.session_tools.height > 0 {
        render_tools(
            frame,
            panes.session_tools,
            pane_block(app, Pane::Tools, title),
            session.map(|_| session_tools.as_slice()),
            columns,
        );
    }
}

/// A usage table's smallest height: borders, header and one line (a row or "…").
const TABLE_MIN: u16 = 4;

/// The height that shows every row of a usage table (an empty one says so on one line).
fn table_height(rows: usize) -> u16 {
    u16::try_from(rows.max(1))
        .unwrap_or(u16::MAX)
        .saturating_add(3)
}

/// Splits `budget` lines between the turn's and the session's usage tables. When both do not
/// fit, each may take half, and what one leaves unused goes to the other, so neither starves;
/// with almost no room each keeps its header and one line.
fn split_tables(budget: u16, turn_need: u16, session_need: u16) -> (u16, u16) {
    if turn_need.saturating_add(session_need) <= budget {
        return (turn_need, session_need);
    }
    let half = budget / 2;
    let turn = turn_need
        .min(budget.saturating_sub(session_need.min(half)))
        .max(TABLE_MIN);
    let session = session_need.min(budget.saturating_sub(turn)).max(TABLE_MIN);
    (turn, session)
}

/// A usage table's columns after the tool name, most important first: a narrow panel drops
/// them from the end rather than squeeze the tool names.
const TOOL_COLUMNS: [(&str, u16); 6] = [
    ("calls", 5),
    ("fail", 4),
    ("blk", 3),
    ("sub", 3),
    ("mean", 7),
    ("p95", 7),
];
/// Calls and failures stay however narrow the panel is.
const KEPT_COLUMNS: usize = 2;
/// Cells kept for tool names before a column is dropped (fewer when every name is shorter).
const TOOL_NAME_MIN: usize = 10;

/// How many of [`TOOL_COLUMNS`] fit beside the tool names in `width` cells.
fn tool_columns<'a>(width: u16, tools: impl Iterator<Item = &'a ToolUsage>) -> usize {
    let longest = tools
        .map(|u| unicode_width::UnicodeWidthStr::width(u.tool.as_str()))
        .max()
        .unwrap_or(0);
    let name = longest.clamp("tool".len(), TOOL_NAME_MIN);
    (KEPT_COLUMNS..=TOOL_COLUMNS.len())
        .rev()
        .find(|&n| {
            // Each column is one cell of spacing and its own width.
            let others: usize = TOOL_COLUMNS
                .iter()
                .take(n)
                .map(|(_, w)| usize::from(*w) + 1)
                .sum();
            name + others <= usize::from(width)
        })
        .unwrap_or(KEPT_COLUMNS)
}

fn render_items(frame: &mut Frame, area: Rect, app: &App, turn: &TurnView) {
    let title = format!(
        " timeline · {} rows · {} events{} ",
        turn.items().len(),
        turn.events.len(),
        if turn.loading { " · loading…" } else { "" }
    );
    let block = pane_block(app, Pane::List, title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let height = inner.height as usize;
    let width = inner.width as usize;
    let first_at = turn.timeline.first_at();
    let items = turn.items();
    if items.is_empty() {
        frame.render_widget(Paragraph::new("no events yet"), inner);
        return;
    }
    let selected = turn.selected.min(items.len() - 1);
    let mut lines: Vec<Line> = Vec::with_capacity(height);
    for (index, _) in shown_rows(app, turn, width, height) {
        let Some(item) = items.get(index) else {
            continue;
        };
        let is_selected = index == selected;
        let matched = item_matches(&app.filter.query, item);
        for mut line in item_lines(&with_approval(app, item), first_at, width, matched) {
            if is_selected {
                line = line.patch_style(selected_style());
            }
            lines.push(line);
        }
    }
    lines.truncate(height);
    frame.render_widget(Paragraph::new(lines), inner);
}

/// `item`, with the approval of its call when the turn's own events do not hold it: a call
/// approved in one turn runs in the next, whose timeline should still say who approved it.
fn with_approval<'a>(app: &App, item: &'a Item) -> Cow<'a, Item> {
    let ItemKind::Tool(row) = &item.kind else {
        return Cow::Borrowed(item);
    };
    if row.approval.is_some() {
        return Cow::Borrowed(item);
    }
    let answer = app.session_tools.as_ref().and_then(|tools| {
        tools
            .calls
            .iter()
            .rev()
            .find(|c| c.call_id == row.call_id && c.approval.is_some())
            .and_then(|c| c.approval.clone())
    });
    let Some(answer) = answer else {
        return Cow::Borrowed(item);
    };
    let mut item = item.clone();
    if let ItemKind::Tool(row) = &mut item.kind {
        row.approval = Some(Box::new(ToolApproval {
            approval_id: None,
            requested_at: None,
            answer: Some(answer),
        }));
    }
    Cow::Owned(item)
}

/// The rows the timeline pane shows in `width` × `height` cells, with the lines each takes:
/// scrolled so the selected row sits in the top two thirds, rows a filter hides left out.
pub fn shown_rows(app: &App, turn: &TurnView, width: usize, height: usize) -> Vec<(usize, usize)> {
    let items = turn.items();
    let first_at = turn.timeline.first_at();
    let visible = app.visible_rows();
    let lines_of = |i: usize| {
        items
            .get(i)
            .map(|item| item_lines(&with_approval(app, item), first_at, width, false).len())
            .unwrap_or(1)
    };
    let at = visible.partition_point(|&i| i < turn.selected);
    let mut start = at.min(visible.len().saturating_sub(1));
    let mut used = 0usize;
    while start > 0 {
        let above = lines_of(visible[start - 1]);
        if used + above > height * 2 / 3 {
            break;
        }
        used += above;
        start -= 1;
    }
    let mut out = Vec::new();
    let mut total = 0;
    for &index in visible.iter().skip(start) {
        if total >= height {
            break;
        }
        let n = lines_of(index);
        out.push((index, n));
        total += n;
    }
    out
}

fn render_replay_bar(frame: &mut Frame, area: Rect, turn: &TurnView) {
    let Some(replay) = &turn.replay else {
        return;
    };
    let len = turn.events.len().max(1);
    let block = Block::bordered().title(format!(
        " replay {} {} · space ▶/⏸ · s speed · [ ] step · {{ }} scrub ",
        if replay.playing { "▶" } else { "⏸" },
        replay.speed.label()
    ));
    let inner = block.inner(area);
    let label = match (turn.events.get(replay.cursor), turn.events.first()) {
        (Some(now), Some(first)) => format!(
            " {}/{} · seq {} · +{:.3}s",
            replay.cursor + 1,
            len,
            now.seq,
            (now.at - first.at).num_milliseconds() as f64 / 1000.0
        ),
        _ => " no events".to_owned(),
    };
    let bar_width = (inner.width as usize)
        .saturating_sub(label.chars().count() + 2)
        .max(4);
    let filled = if len <= 1 {
        bar_width
    } else {
        replay.cursor * bar_width / (len - 1)
    };
    let bar = format!(
        "{}{}{}",
        "━".repeat(filled.min(bar_width)),
        "●",
        "─".repeat(bar_width.saturating_sub(filled))
    );
    let line = Line::from(vec![
        Span::styled(bar, Style::new().fg(Color::Magenta)),
        Span::raw(label),
    ]);
    frame.render_widget(block, area);
    frame.render_widget(Paragraph::new(line), inner);
}

fn render_conversation(frame: &mut Frame, area: Rect, app: &App, turn: &TurnView) {
    let title = match (&turn.replay, turn.cursor().and_then(|c| turn.events.get(c))) {
        (Some(_), Some(env)) => format!(" conversation as of seq {} ", env.seq),
        _ => " conversation ".to_owned(),
    };
    let block = pane_block(app, Pane::Conversation, title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(state) = &turn.conversation else {
        frame.render_widget(Paragraph::new("loading…"), inner);
        return;
    };
    let width = inner.width as usize;
    let decisions: Decisions = turn
        .items()
        .iter()
        .filter_map(|i| match &i.kind {
            ItemKind::Tool(t) => t.decision.map(|d| (t.call_id.as_str(), d)),
            _ => None,
        })
        .collect();
    let mut lines = Vec::new();
    for message in &state.messages {
        message_lines(message, width, false, &decisions, &mut lines);
    }
    if let Some(draft) = &state.draft {
        message_lines(draft, width, true, &decisions, &mut lines);
    }
    // Anchor at the bottom (the newest message stays in view), scrolled up by the user.
    let bottom = lines
        .len()
        .saturating_sub(usize::from(app.conversation_scroll));
    let skip = bottom.saturating_sub(inner.height as usize);
    lines.truncate(bottom.max(inner.height as usize).min(lines.len()));
    let shown: Vec<Line> = lines.into_iter().skip(skip).collect();
    frame.render_widget(Paragraph::new(shown), inner);
}

/// One usage table with the first `columns` of [`TOOL_COLUMNS`]; `tools` is `None` until read.
/// Rows that do not fit end in a line saying how many more there are. A tool that never ran
/// (every call blocked or substituted) has no duration: "-", never "0ms".
fn render_tools(
    frame: &mut Frame,
    area: Rect,
    block: Block,
    tools: Option<&[ToolUsage]>,
    columns: usize,
) {
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let header = Row::new(
        std::iter::once("tool")
            .chain(TOOL_COLUMNS.iter().take(columns).map(|(name, _)| *name))
            .collect::<Vec<_>>(),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let room = usize::from(inner.height.saturating_sub(1));
    let loaded = tools.is_some();
    let tools = tools.unwrap_or_default();
    let shown = if tools.len() > room {
        room.saturating_sub(1)
    } else {
        tools.len()
    };
    let rows: Vec<Row> = tools
        .iter()
        .take(shown)
        .map(|u| {
            let cells = [
                u.calls.to_string(),
                u.failures.to_string(),
                u.blocks.to_string(),
                u.substitutions.to_string(),
                u.mean_ms()
                    .map(|m| fmt_duration(m.round() as u64))
                    .unwrap_or_else(|| "-".into()),
                u.p95_ms().map(fmt_duration).unwrap_or_else(|| "-".into()),
            ];
            Row::new(
                std::iter::once(u.tool.clone())
                    .chain(cells.into_iter().take(columns))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let widths = std::iter::once(Constraint::Min(4)).chain(
        TOOL_COLUMNS
            .iter()
            .take(columns)
            .map(|(_, w)| Constraint::Length(*w)),
    );
    frame.render_widget(Table::new(rows, widths).header(header), inner);
    // A note across the whole width, on the line after the rows shown.
    let note = match tools.len() - shown {
        _ if !loaded => "loading…".to_owned(),
        0 if tools.is_empty() => "no tool calls".to_owned(),
        0 => return,
        more => format!("… {more} more"),
    };
    let line = Rect {
        y: inner.y.saturating_add(1).saturating_add(shown as u16),
        height: 1,
        ..inner
    };
    if line.y < inner.bottom() {
        frame.render_widget(
            Paragraph::new(note).style(Style::new().fg(Color::DarkGray)),
            line,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::testlog::t0;
    use crate::dash::timeline::Item;
    use rows::TEXT_LINES;

    #[test]
    fn the_tables_share_their_lines_and_neither_starves() {
        // Both fit: each gets what it needs.
        assert_eq!(split_tables(19, 5, 7), (5, 7));
        // Neither fits: half each.
        assert_eq!(split_tables(19, 20, 30), (10, 9));
        // What the small one leaves goes to the big one, whichever it is.
        assert_eq!(split_tables(19, 5, 30), (5, 14));
        assert_eq!(split_tables(19, 30, 5), (14, 5));
        // No room: the session table keeps its header and a "…" line.
        assert_eq!(split_tables(7, 20, 30), (4, 4));
    }

    #[test]
    fn narrow_panels_drop_columns_from_the_right() {
        let tools = [ToolUsage {
            tool: "status_page".into(),
            ..ToolUsage::default()
        }];
        assert_eq!(tool_columns(46, tools.iter()), 6);
        assert_eq!(tool_columns(40, tools.iter()), 5, "p95 goes first");
        assert_eq!(tool_columns(30, tools.iter()), 4, "then mean");
        assert_eq!(tool_columns(26, tools.iter()), 3, "then sub");
        assert_eq!(tool_columns(22, tools.iter()), 2, "then blk");
        assert_eq!(tool_columns(5, tools.iter()), KEPT_COLUMNS);
    }

    #[test]
    fn a_huge_text_row_shows_a_bounded_number_of_lines() {
        let item = Item {
            first_seq: 1,
            last_seq: 50_000,
            events: 50_000,
            at: t0(),
            gap_ms: None,
            kind: ItemKind::Text {
                text: "word ".repeat(50_000),
                open: true,
            },
        };
        let lines = item_lines(&item, Some(t0()), 60, false);
        assert_eq!(lines.len(), TEXT_LINES + 1);
        let last = lines.last().map(|l| l.to_string()).unwrap_or_default();
        assert!(last.contains("… more text"), "{last}");
    }
}
