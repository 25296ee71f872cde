//! The lines one timeline row takes: time column, stall badge, then what happened, a long text
//! cut to a bounded number of lines.

use chrono::{DateTime, Utc};
use mull_core::DecisionAction;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::dash::timeline::{Item, ItemKind, ToolApproval, ToolRow};
use crate::dash::view::{
    decision_style, fmt_clock, fmt_duration, fmt_tokens, fmt_usage, status_style, wrap,
};

/// Lines of one text row shown before it is cut (the event view has the rest).
pub(super) const TEXT_LINES: usize = 12;
/// Width of the time column: "+12.345s ".
const TIME_COLUMN: usize = 10;

/// The lines one row takes: time column, stall badge, then what happened.
pub(super) fn item_lines(
    item: &Item,
    first_at: Option<DateTime<Utc>>,
    width: usize,
    matched: bool,
) -> Vec<Line<'static>> {
    let offset = first_at
        .map(|t0| (item.at - t0).num_milliseconds().max(0) as f64 / 1000.0)
        .unwrap_or(0.0);
    let mut head = vec![Span::styled(
        format!(
            "{:>width$} ",
            format!("+{offset:.3}s"),
            width = TIME_COLUMN - 1
        ),
        Style::new().fg(if matched {
            Color::Yellow
        } else {
            Color::DarkGray
        }),
    )];
    if let Some(gap) = item.gap_ms {
        head.push(Span::styled(
            format!("⏱ +{:.1}s ", gap as f64 / 1000.0),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    let body = Body {
        width: width.saturating_sub(TIME_COLUMN).max(10),
        indent: " ".repeat(TIME_COLUMN),
    };
    let extra = match &item.kind {
        ItemKind::Text { text, open } => body.text(text, *open, &mut head),
        ItemKind::Tool(tool) => {
            tool_head(tool, &mut head);
            body.tool_details(tool)
        }
        kind => {
            head.extend(one_line(kind, body.width));
            Vec::new()
        }
    };
    if item.events > 1 && !matches!(item.kind, ItemKind::Tool(_)) {
        let count = format!("  ({} events)", item.events);
        // Only where it fits: a cut-off count reads as noise.
        if Line::from(head.clone()).width() + count.len() <= width {
            head.push(Span::styled(count, DIM));
        }
    }
    let mut lines = vec![Line::from(head)];
    lines.extend(extra);
    if item.is_error() {
        lines = lines.into_iter().map(|l| l.patch_style(RED)).collect();
    }
    lines
}

const RED: Style = Style::new().fg(Color::Red);
const DIM: Style = Style::new().fg(Color::DarkGray);
const YELLOW: Style = Style::new().fg(Color::Yellow);

/// Where a row's lines after its first go: the width left of the time column, and the indent
/// that lines them up under it.
struct Body {
    width: usize,
    indent: String,
}

impl Body {
    /// A line under the row's first: indented, then `span`.
    fn line(&self, span: Span<'static>) -> Line<'static> {
        Line::from(vec![Span::raw(self.indent.clone()), span])
    }

    /// A text row: its first wrapped line on the head, up to `TEXT_LINES` below, then how
    /// much more there is.
    fn text(&self, text: &str, open: bool, head: &mut Vec<Span<'static>>) -> Vec<Line<'static>> {
        // Wrap only what can show: a streamed text can grow to megabytes.
        let budget = (TEXT_LINES + 1) * self.width;
        let shown_end = text
            .char_indices()
            .nth(budget)
            .map(|(i, _)| i)
            .unwrap_or(text.len());
        let mut wrapped = wrap(text.get(..shown_end).unwrap_or(text), self.width);
        if open {
            if let Some(last) = wrapped.last_mut() {
                last.push('▌');
            }
        }
        let total = wrapped.len();
        let mut rows = wrapped.into_iter();
        head.push(Span::raw(rows.next().unwrap_or_default()));
        let mut extra: Vec<Line<'static>> = rows
            .by_ref()
            .take(TEXT_LINES - 1)
            .map(|row| self.line(Span::raw(row)))
            .collect();
        if total > TEXT_LINES || shown_end < text.len() {
            let more = if shown_end < text.len() {
                "… more text (Enter: JSON)".to_owned()
            } else {
                format!("… {} more lines (Enter: JSON)", total - TEXT_LINES)
            };
            extra.push(self.line(Span::styled(more, DIM)));
        }
        extra
    }

    /// A call's lines under its head: its input, its approval, why it was decided so, and its
    /// error or output.
    fn tool_details(&self, tool: &ToolRow) -> Vec<Line<'static>> {
        let cut =
            |text: &str| -> String { text.chars().take(self.width.saturating_sub(4)).collect() };
        let mut extra = vec![self.line(Span::styled(format!("in  {}", cut(&tool.input)), DIM))];
        if let Some(approval) = &tool.approval {
            extra.push(self.line(approval_span(approval, tool.reason.as_deref())));
        }
        if let Some(reason) = &tool.reason {
            extra.push(self.line(Span::styled(format!("why {reason}"), YELLOW)));
        }
        // A blocked call's output is its reason, as the model was told: shown once, as why.
        let blocked = tool.decision == Some(DecisionAction::Block);
        let restates_reason =
            |e: &&String| blocked && tool.reason.as_ref().is_some_and(|r| e.contains(r.as_str()));
        if let Some(error) = tool.error.as_ref().filter(|e| !restates_reason(e)) {
            extra.push(self.line(Span::styled(format!("err {error}"), RED)));
        } else if let Some(output) = tool.output.as_ref().filter(|_| !blocked) {
            extra.push(self.line(Span::styled(format!("out {}", cut(output)), DIM)));
        }
        extra
    }
}

/// A call's head: its tool, its decision (or what it waits for), how long it ran and how it
/// ended, and the sub-agent it ran.
fn tool_head(tool: &ToolRow, head: &mut Vec<Span<'static>>) {
    head.push(Span::styled("⚒ ", Style::new().fg(Color::Cyan)));
    head.push(Span::styled(
        tool.tool.clone(),
        Style::new().add_modifier(Modifier::BOLD),
    ));
    head.push(Span::raw(" "));
    let waiting = tool.waits_for_approval();
    match tool.decision {
        Some(action) => head.push(Span::styled(
            format!("[{}]", action.as_str()),
            decision_style(action).add_modifier(Modifier::BOLD),
        )),
        None if tool.client => head.push(Span::styled("[client]", DIM)),
        None if tool.approval.is_some() => head.push(Span::styled(
            "[approval]",
            YELLOW.add_modifier(Modifier::BOLD),
        )),
        None => head.push(Span::styled("[…]", DIM)),
    }
    let not_run = tool.decision.is_some_and(|d| !d.executes());
    if let Some(ms) = tool.duration_ms.filter(|_| !not_run) {
        head.push(Span::raw(format!(" {}", fmt_duration(ms))));
    }
    match tool.success {
        Some(true) if not_run => head.push(Span::styled(" not run", YELLOW)),
        Some(true) => head.push(Span::styled(" ✓", Style::new().fg(Color::Green))),
        Some(false) => head.push(Span::styled(" ✗", RED)),
        None if not_run => head.push(Span::styled(" not run", YELLOW)),
        None if waiting => head.push(Span::styled(
            " ⏸ waiting for approval",
            YELLOW.add_modifier(Modifier::BOLD),
        )),
        None => match tool.approval.as_ref().and_then(|a| a.answer.as_ref()) {
            // Answered: the call runs (or is denied) in the turn that continues.
            Some(answer) if answer.approved && tool.decision.is_none() => {
                head.push(Span::styled(" runs next turn", DIM))
            }
            Some(_) if tool.decision.is_none() => head.push(Span::styled(" not run", YELLOW)),
            _ => head.push(Span::styled(" running", DIM)),
        },
    }
    if let Some(child) = &tool.subagent {
        head.push(Span::styled(
            format!(" ↳ sub-agent {child} (>)"),
            Style::new().fg(Color::Magenta),
        ));
    }
}

/// What a row of one line shows after its time (`None` for a text or a call, which take rows
/// of their own).
fn one_line(kind: &ItemKind, body_width: usize) -> Option<Span<'static>> {
    let span = match kind {
        ItemKind::TurnStarted { entry, attempt } => {
            let retry = if *attempt > 0 {
                format!(", attempt {attempt}")
            } else {
                String::new()
            };
            Span::styled(
                format!("▶ turn started ({entry}{retry})"),
                Style::new().fg(Color::Cyan),
            )
        }
        ItemKind::Configured { model_id, tools } => {
            Span::styled(format!("⚙ configured: {model_id}, {tools} tools"), DIM)
        }
        ItemKind::StepStarted { step } => Span::styled(
            format!("── step {step} ──"),
            Style::new().fg(Color::Blue).add_modifier(Modifier::BOLD),
        ),
        ItemKind::StepFinished {
            step,
            finish_reason,
            usage,
        } => Span::styled(
            format!(
                "── step {step} done: {} · {}",
                finish_reason.as_str(),
                fmt_usage(usage)
            ),
            Style::new().fg(Color::Blue),
        ),
        ItemKind::Reasoning { text, open } => {
            let first: String = text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(body_width.saturating_sub(24))
                .collect();
            Span::styled(
                format!(
                    "▸ reasoning{} ({} chars): {first}",
                    if *open { "…" } else { "" },
                    text.chars().count()
                ),
                DIM.add_modifier(Modifier::ITALIC),
            )
        }
        ItemKind::Retry { attempt, error } => Span::styled(
            format!("↻ model retried (attempt {attempt}): {error}"),
            YELLOW,
        ),
        ItemKind::Error { what, message } => Span::styled(
            format!("✗ {what}: {message}"),
            RED.add_modifier(Modifier::BOLD),
        ),
        ItemKind::Compacted {
            replaced,
            reason,
            shortened,
            tokens_before,
            tokens_after,
        } => {
            let what = if *shortened { "shortened" } else { "compacted" };
            let noun = if *replaced == 1 {
                "message"
            } else {
                "messages"
            };
            Span::styled(
                format!(
                    "⇲ {what} {replaced} {noun} ({reason}) tokens {} → {}",
                    fmt_tokens(Some(*tokens_before)),
                    fmt_tokens(Some(*tokens_after))
                ),
                Style::new().fg(Color::Magenta),
            )
        }
        ItemKind::Retracted {
            messages,
            request_id,
        } => {
            let noun = if *messages == 1 {
                "message"
            } else {
                "messages"
            };
            let by = request_id
                .as_deref()
                .map(|r| format!(" by {r}"))
                .unwrap_or_default();
            Span::styled(format!("✂ {messages} {noun} retracted{by}"), YELLOW)
        }
        ItemKind::MessageSaved { parts } => {
            Span::styled(format!("■ assistant message saved ({parts} parts)"), DIM)
        }
        ItemKind::TurnFinished { status, error } => {
            let mut text = format!("■ turn {}", status.as_str());
            if let Some(error) = error {
                text.push_str(": ");
                text.push_str(error);
            }
            Span::styled(text, status_style(*status).add_modifier(Modifier::BOLD))
        }
        ItemKind::Other { kind } => Span::styled(format!("· {kind}"), DIM),
        ItemKind::Text { .. } | ItemKind::Tool(_) => return None,
    };
    Some(span)
}

/// A call's approval on its own line: since when it waits, or who answered and when (an old
/// log that does not record who says so rather than guess).
fn approval_span(approval: &ToolApproval, shown_reason: Option<&str>) -> Span<'static> {
    let Some(answer) = &approval.answer else {
        let since = approval
            .requested_at
            .map(|at| format!(" since {}", fmt_clock(at)))
            .unwrap_or_default();
        return Span::styled(
            format!(
                "ask {} waits for a person{since}",
                approval.approval_id.as_deref().unwrap_or("the call")
            ),
            Style::new().fg(Color::Yellow),
        );
    };
    let at = fmt_clock(answer.at);
    if answer.expired {
        return Span::styled(
            format!("ans expired unanswered at {at}: denied"),
            Style::new().fg(Color::Red),
        );
    }
    let (verb, style) = if answer.approved {
        ("approved", Style::new().fg(Color::Green))
    } else {
        ("denied", Style::new().fg(Color::Red))
    };
    let by = answer
        .by
        .as_deref()
        .map(|who| format!(" by {who}"))
        .unwrap_or_else(|| " (the log does not say by whom)".to_owned());
    let reason = answer
        .reason
        .as_deref()
        .filter(|r| !answer.approved && Some(*r) != shown_reason)
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Span::styled(format!("ans {verb}{by} at {at}{reason}"), style)
}
