//! The conversation pane's lines for one message: text, reasoning and tool parts, a blocked or
//! substituted call named for what it was.

use mull_core::{DecisionAction, Role, ToolPartState, UIMessage, UIPart};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::dash::view::{decision_style, wrap};

/// Decisions by call id, from the turn's rows: the conversation names a blocked or
/// substituted call for what it was, not by the output the model was shown.
pub(super) type Decisions<'a> = std::collections::HashMap<&'a str, DecisionAction>;

pub(super) fn message_lines(
    message: &UIMessage,
    width: usize,
    draft: bool,
    decisions: &Decisions,
    out: &mut Vec<Line<'static>>,
) {
    let (who, style) = match message.role {
        Role::User => (
            "user",
            Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        ),
        Role::Assistant => (
            "assistant",
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ),
        Role::System => (
            "system",
            Style::new()
                .fg(Color::DarkGray)
                .add_modifier(Modifier::BOLD),
        ),
    };
    out.push(Line::from(Span::styled(
        format!("{who}{}", if draft { " (streaming)" } else { "" }),
        style,
    )));
    let dim = Style::new().fg(Color::DarkGray);
    for part in &message.parts {
        match part {
            UIPart::Text { text, .. } => {
                for row in wrap(text, width.saturating_sub(2)) {
                    out.push(Line::from(format!("  {row}")));
                }
            }
            UIPart::Reasoning { text, .. } => {
                out.push(Line::from(Span::styled(
                    format!("  ▸ reasoning ({} chars)", text.chars().count()),
                    dim,
                )));
            }
            UIPart::Tool(tool) => {
                let decision = decisions.get(tool.call_id.as_str()).copied();
                let state = match (decision, tool.state) {
                    (Some(DecisionAction::Block), _) => "blocked",
                    (Some(DecisionAction::Substitute), _) => "answered by a hook",
                    (_, ToolPartState::InputStreaming) => "writing input",
                    (_, ToolPartState::InputAvailable) => "running",
                    (_, ToolPartState::OutputAvailable) => "done",
                    (_, ToolPartState::OutputError) => "failed",
                    (_, ToolPartState::OutputDenied) => "denied",
                    (_, ToolPartState::ApprovalRequested) => "waiting for approval",
                    (_, ToolPartState::ApprovalResponded) => "answered, runs next turn",
                };
                let style = match (decision, tool.state) {
                    (Some(action), _) if !action.executes() => decision_style(action),
                    (_, ToolPartState::OutputError | ToolPartState::OutputDenied) => {
                        Style::new().fg(Color::Red)
                    }
                    _ => dim,
                };
                out.push(Line::from(Span::styled(
                    format!("  ⚒ {} → {state}", tool.tool_name),
                    style,
                )));
            }
            UIPart::StepStart => {}
            UIPart::SourceUrl { url, .. } => {
                out.push(Line::from(Span::styled(format!("  ↗ {url}"), dim)))
            }
            UIPart::SourceDocument { title, .. } => {
                out.push(Line::from(Span::styled(format!("  ↗ {title}"), dim)))
            }
            UIPart::File { media_type, .. } => out.push(Line::from(Span::styled(
                format!("  ▤ file {media_type}"),
                dim,
            ))),
            UIPart::Data { name, .. } => {
                out.push(Line::from(Span::styled(format!("  ◆ data-{name}"), dim)))
            }
        }
    }
}
