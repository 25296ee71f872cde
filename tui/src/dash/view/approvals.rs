//! The session's tool calls that wait for a person: one row each under the turn list — the
//! tool, its call and approval ids, since when it waits and when it expires, or the answer a
//! continuation has yet to act on — and the command that answers. The dashboard only reads the
//! log (SQLite has one writer per file, often the process it watches), so the answer is given
//! with `mull approve`, which writes it through the library.

use mull_store::PendingApproval;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use crate::dash::app::App;
use crate::dash::view::fmt_clock;

/// Most rows the section takes; more waiting calls are counted in its title.
const MAX_ROWS: u16 = 4;

fn pending(app: &App) -> &[PendingApproval] {
    app.session_tools
        .as_ref()
        .map_or(&[], |tools| tools.approvals.as_slice())
}

/// Splits the turn list's area: the list above, the waiting calls below (none when nothing
/// waits, or the screen is too short to spare the rows).
pub fn split(area: Rect, app: &App) -> (Rect, Option<Rect>) {
    let rows = u16::try_from(pending(app).len())
        .unwrap_or(u16::MAX)
        .min(MAX_ROWS);
    if rows == 0 || area.height < rows + 3 + 6 {
        return (area, None);
    }
    let [list, section] =
        Layout::vertical([Constraint::Min(6), Constraint::Length(rows + 3)]).areas(area);
    (list, Some(section))
}

/// Draws the waiting calls and the command that answers one.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let waiting = pending(app);
    let title = format!(" waiting for approval ({}) ", waiting.len());
    let block = Block::bordered()
        .title(title)
        .border_style(Style::new().fg(Color::Yellow));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let dim = Style::new().fg(Color::DarkGray);
    let mut lines: Vec<Line> = waiting
        .iter()
        .take(usize::from(MAX_ROWS))
        .map(|p| {
            let state = match &p.answer {
                None => match p.expires_at {
                    Some(at) => Span::styled(
                        format!(
                            "waiting since {} · expires {}",
                            fmt_clock(p.requested_at),
                            fmt_clock(at)
                        ),
                        Style::new().fg(Color::Yellow),
                    ),
                    None => Span::styled(
                        format!("waiting since {}", fmt_clock(p.requested_at)),
                        Style::new().fg(Color::Yellow),
                    ),
                },
                Some(a) if a.expired => Span::styled("expired · denied next turn", dim),
                Some(a) if a.approved => {
                    Span::styled("approved · runs next turn", Style::new().fg(Color::Green))
                }
                Some(_) => Span::styled("denied · answered next turn", Style::new().fg(Color::Red)),
            };
            Line::from(vec![
                Span::styled(
                    format!(" ⏸ {} ", p.tool),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::styled(format!("{} · {} ", p.call_id, p.approval_id), dim),
                state,
            ])
        })
        .collect();
    let session = app.session_id.as_deref().unwrap_or("S");
    lines.push(Line::styled(
        format!(
            " answer: mull approve {} --session {session} ID [--deny --reason R]",
            app.db_label
        ),
        dim,
    ));
    frame.render_widget(Paragraph::new(lines), inner);
}

#[cfg(test)]
mod tests {
    use mull_core::{EntryPath, Event, TurnStatus, Usage};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    use crate::dash::app::Msg;
    use crate::dash::keys::Action;
    use crate::dash::testlog::{t0, write_db, LogBuilder};
    use crate::dash::Dash;

    /// A session whose turn parked two bookings: one still waits, one was approved and waits
    /// for the continuation to run it.
    fn parked_log() -> Vec<mull_core::Envelope> {
        let mut b = LogBuilder::new();
        let (s, t) = ("sess_1", Some("turn_1"));
        b.push(
            s,
            t,
            0,
            Event::TurnStarted {
                request_id: "req_1".into(),
                message_id: "msg_1".into(),
                entry: EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: json!(null),
            },
        );
        b.push(s, t, 10, Event::StepStarted { step: 0 });
        for (ms, call, hotel) in [(100, "call_1", "Ritz"), (200, "call_2", "Savoy")] {
            b.push(
                s,
                t,
                ms,
                Event::ToolCallStarted {
                    step: 0,
                    call_id: call.into(),
                    tool: "book_hotel".into(),
                    input: json!({ "hotel": hotel }),
                    client: false,
                },
            );
            b.push(
                s,
                t,
                ms + 1,
                Event::ToolApprovalRequested {
                    step: 0,
                    call_id: call.into(),
                    tool: "book_hotel".into(),
                    approval_id: format!("approval_{}", &call[5..]),
                    input: json!({ "hotel": hotel }),
                    reason: None,
                    expires_at: Some(t0() + chrono::Duration::minutes(10)),
                },
            );
        }
        b.push(
            s,
            t,
            300,
            Event::TurnFinished {
                request_id: "req_1".into(),
                status: TurnStatus::Completed,
                error: None,
                steps: 1,
                usage: Usage::default(),
            },
        );
        b.push(
            s,
            t,
            5_000,
            Event::ToolApprovalAnswered {
                approval_id: "approval_2".into(),
                call_id: "call_2".into(),
                tool: "book_hotel".into(),
                approved: true,
                reason: None,
                expired: false,
            },
        );
        b.events
    }

    #[test]
    fn the_turn_list_shows_the_calls_waiting_for_approval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_db(dir.path(), &parked_log());
        let mut dash = Dash::open(&path).expect("open dashboard");
        dash.app.db_label = "test.db".into();
        dash.send(Msg::Action(Action::Enter));
        for (width, height) in [(160, 45), (80, 24)] {
            let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
            dash.draw(&mut terminal).expect("draw");
            let text = format!("{}", terminal.backend());
            assert!(text.contains("waiting for approval (2)"), "{text}");
            assert!(text.contains("approval_1"), "{text}");
            insta::assert_snapshot!(
                format!("turns_with_pending_approvals@{width}x{height}"),
                terminal.backend()
            );
        }
    }
}
