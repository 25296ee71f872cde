//! The session's tool calls that wait for a person: one row each under the turn list — the
//! tool, its call and approval ids, since when it waits and when it expires, or the answer a
//! continuation has yet to act on — and the keys that answer. The dashboard does not write the
//! log (SQLite has one writer per file, often the process it watches): `a` / `x` post the answer
//! to the log's inbox, and the row says "answer sent, waiting for the writer" until the
//! session's writer has recorded it. A PostgreSQL log, read where it is, is
//! answered the same way: the answer goes to the database's inbox, for the node that holds the
//! session (or opens it) to take.

use mull_store::PendingApproval;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use unicode_width::UnicodeWidthStr;

use crate::dash::app::{App, View};
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
    let selected = app.selected_approval().map(|p| p.approval_id.as_str());
    let mut lines: Vec<Line> = waiting
        .iter()
        .take(usize::from(MAX_ROWS))
        .map(|p| {
            let state = match &p.answer {
                None if app.answer_sent(p) => Span::styled(
                    "answer sent, waiting for the writer",
                    Style::new().fg(Color::Cyan),
                ),
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
            let mark = if selected == Some(p.approval_id.as_str()) {
                "▶"
            } else {
                " "
            };
            Line::from(vec![
                Span::styled(
                    format!("{mark}⏸ {} ", p.tool),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::styled(format!("{} · {} ", p.call_id, p.approval_id), dim),
                state,
            ])
        })
        .collect();
    lines.push(Line::styled(
        " a approve / x deny the ▶ call · w next call · y confirms",
        dim,
    ));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The line that says a waiting call will be approved without a person, and when: the keys
/// that answer it first, then the deadline and the seconds left — the most that fits `width`.
pub fn self_answer_banner(app: &App, width: u16) -> Option<Line<'static>> {
    if app.view == View::Sessions {
        return None;
    }
    let (pending, plan) = app.pending_self_answer()?;
    let (tool, who, at) = (&pending.tool, &plan.who, fmt_clock(plan.at));
    let left = app.seconds_until(plan.at);
    let candidates = [
        format!(
            " ⏸ {tool} waits for your approval: a approve · x deny. If nobody answers, {who} \
             approves it itself at {at} (in {left} s)."
        ),
        format!(" ⏸ {tool} waits for you: a approve · x deny · else {who} approves it at {at} ({left} s)"),
        format!(" ⏸ {tool}: a approve · x deny · {who} approves it at {at} ({left} s)"),
        format!(" ⏸ a approve · x deny · {who} approves at {at} ({left} s)"),
        format!(" ⏸ {who} approves at {at} ({left} s)"),
    ];
    let width = usize::from(width);
    let text = candidates
        .iter()
        .find(|c| c.width() <= width)
        .or(candidates.last())?;
    Some(Line::styled(
        text.clone(),
        Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
    ))
}

#[cfg(test)]
mod tests {
    use mull_core::{EntryPath, Event};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    use crate::dash::app::Msg;
    use crate::dash::keys::Action;
    use crate::dash::testlog::{parked_bookings, t0, write_db, LogBuilder};
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
        parked_bookings(&mut b, s, Some(t0() + chrono::Duration::minutes(10)));
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
                by: Some("mull dash".into()),
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

    #[test]
    fn the_keys_ask_to_confirm_then_show_the_answer_waiting_for_the_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_db(dir.path(), &parked_log());
        let mut dash = Dash::open(&path).expect("open dashboard");
        dash.app.db_label = "test.db".into();
        dash.send(Msg::Action(Action::Enter));
        // One call still waits (the other is answered): `a` asks about it.
        dash.send(Msg::Action(Action::Approve));
        let confirm = dash.app.answering.confirm.clone().expect("a confirmation");
        assert_eq!(confirm.approval_id, "approval_1");
        assert!(confirm.approved);
        for (width, height) in [(160, 45), (80, 24)] {
            let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
            dash.draw(&mut terminal).expect("draw");
            let text = format!("{}", terminal.backend());
            assert!(text.contains("approve book_hotel (approval_1)?"), "{text}");
            insta::assert_snapshot!(
                format!("approvals_confirm@{width}x{height}"),
                terminal.backend()
            );
        }
        // Anything but y drops it, and nothing is posted.
        dash.send(Msg::Confirm(false));
        assert!(dash.app.answering.confirm.is_none());
        assert!(dash.app.answering.sent.is_empty());
        // `x` then y: the denial is posted to the inbox.
        dash.send(Msg::Action(Action::Deny));
        dash.send(Msg::Confirm(true));
        let inbox = mull_store::Inbox::open(&path).expect("inbox");
        let waiting = inbox.waiting(Some("sess_1")).expect("reads");
        assert_eq!(waiting.len(), 1);
        assert_eq!(
            waiting[0].message,
            Ok(mull_store::InboxMessage::ApprovalAnswer {
                approval_id: "approval_1".into(),
                approved: false,
                reason: Some("denied from the dashboard".into()),
                by: Some("mull dash".into()),
            })
        );
        for (width, height) in [(160, 45), (80, 24)] {
            let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
            dash.draw(&mut terminal).expect("draw");
            let text = format!("{}", terminal.backend());
            assert!(
                text.contains("answer sent, waiting for the writer"),
                "{text}"
            );
            insta::assert_snapshot!(
                format!("approvals_answer_sent@{width}x{height}"),
                terminal.backend()
            );
        }
        // Asking again while the answer waits is refused with a message, not posted twice.
        dash.send(Msg::Action(Action::Approve));
        assert!(dash.app.answering.confirm.is_none());
        assert_eq!(inbox.waiting(None).expect("reads").len(), 1);
    }

    /// An agent whose `book` tool always needs approval and counts its runs.
    struct Booker {
        runs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        /// One script for the session: the booking, then (after the answer) the reply.
        model: std::sync::Arc<dyn mull::core::LanguageModel>,
    }

    #[async_trait::async_trait]
    impl mull::engine::Agent for Booker {
        fn name(&self) -> &str {
            "booker"
        }
        fn model(&self) -> std::sync::Arc<dyn mull::core::LanguageModel> {
            std::sync::Arc::clone(&self.model)
        }
        fn tools(&self) -> mull::engine::ToolSet {
            let runs = std::sync::Arc::clone(&self.runs);
            let book =
                mull::engine::FnTool::new("book", "Books.", move |_: serde_json::Value, _| {
                    let runs = std::sync::Arc::clone(&runs);
                    async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, mull::engine::ToolError>(json!({"booked": "Ritz"}))
                    }
                })
                .with_schema(json!({"type": "object"}))
                .needs_approval(true)
                .shared();
            mull::engine::ToolSet::new().with(book)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_press_posts_the_answer_and_the_running_session_takes_it() {
        use mull::engine::{CommandOptions, Reply, Session, SessionOptions, TurnOptions};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("live.db");
        // The writer: a library session that parks a booking, and stays open.
        let log = mull_store::Log::open(&path).expect("writer");
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let agent = std::sync::Arc::new(Booker {
            runs: std::sync::Arc::clone(&runs),
            model: std::sync::Arc::new(
                mull::providers::scripted::ScriptedModel::builder("scripted-book")
                    .step(|s| s.tool_call("c1", "book", json!({"hotel": "Ritz"})))
                    .step(|s| s.text("Booked."))
                    .build(),
            ),
        });
        let session = Session::open(&log, agent, SessionOptions::new("live"))
            .await
            .expect("session");
        session
            .save_messages(
                vec![mull::core::UIMessage::user("u1", "Book the Ritz.")],
                TurnOptions::default(),
            )
            .await
            .expect("turn");
        let pending = session.pending_approvals();
        assert_eq!(pending.len(), 1);
        log.flush().await.expect("flush");

        // The dashboard, a reader of the same file while the writer holds it: `a`, then y.
        let mut dash = Dash::open(&path).expect("open dashboard");
        dash.send(Msg::Action(Action::Enter));
        assert_eq!(dash.app.session_id.as_deref(), Some("live"));
        dash.send(Msg::Action(Action::Approve));
        dash.send(Msg::Confirm(true));
        let notice = dash.app.answering.notice.clone().unwrap_or_default();
        assert!(notice.contains("sent; waiting for the writer"), "{notice}");
        let inbox = mull_store::Inbox::open(&path).expect("inbox");
        let waiting = inbox.waiting(None).expect("reads");
        assert_eq!(waiting.len(), 1, "the key press wrote one inbox row");
        assert_eq!(waiting[0].session_id, "live");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0, "not yet");

        // The running session takes it: one input event, the tool runs once.
        let replies = session
            .take_inbox(&inbox, CommandOptions::default())
            .await
            .expect("takes");
        assert_eq!(replies.len(), 1);
        assert!(matches!(replies[0], Reply::Turn(_)), "{:?}", replies[0]);
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(session.pending_approvals().is_empty());
        let taken = inbox.get(waiting[0].id).expect("reads").expect("row");
        assert_eq!(taken.outcome.as_deref(), Some("answered"));
        // Taking again finds nothing: the answer is acted on once.
        assert!(session
            .take_inbox(&inbox, CommandOptions::default())
            .await
            .expect("takes")
            .is_empty());
        log.flush().await.expect("flush");
        let events = mull_store::LogReader::open(&path)
            .expect("reader")
            .session_page("live", 0, 1000)
            .expect("events");
        let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
        let answered = kinds
            .iter()
            .filter(|k| **k == "tool_approval_answered")
            .count();
        assert_eq!(answered, 1, "{kinds:?}");

        // The dashboard, reloading the session, no longer lists the call as waiting.
        dash.send(Msg::Action(Action::Back));
        dash.send(Msg::Action(Action::Enter));
        assert!(dash.app.unanswered_approvals().is_empty());
        log.close().expect("closes");
    }

    /// A PostgreSQL log is read where it is; the answer goes to the database's inbox, and
    /// the node holding the session takes it there.
    #[test]
    fn on_a_postgres_log_a_key_press_posts_to_its_inbox_and_the_node_takes_it() {
        use mull::engine::{CommandOptions, Reply, Session, SessionOptions, TurnOptions};
        use mull_store::InboxStore;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let Some(pg) = mull_store_pg::testing::TestPg::start("dash_pg_inbox") else {
            return;
        };
        let url = pg.database();
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let runs = Arc::new(AtomicUsize::new(0));
        // The node: a library session on the PostgreSQL log that parks a booking and holds it.
        let (log, session) = runtime.block_on(async {
            let log = mull_store_pg::PgLog::connect(&url, mull_store_pg::PgOptions::new("n1"))
                .await
                .expect("node");
            let agent = Arc::new(Booker {
                runs: Arc::clone(&runs),
                model: Arc::new(
                    mull::providers::scripted::ScriptedModel::builder("scripted-book")
                        .step(|s| s.tool_call("c1", "book", json!({"hotel": "Ritz"})))
                        .step(|s| s.text("Booked."))
                        .build(),
                ),
            });
            let session =
                Session::open_on(Arc::new(log.clone()), agent, SessionOptions::new("live"))
                    .await
                    .expect("session");
            session
                .save_messages(
                    vec![mull::core::UIMessage::user("u1", "Book the Ritz.")],
                    TurnOptions::default(),
                )
                .await
                .expect("turn");
            log.flush_all().await.expect("flush");
            (log, session)
        });
        assert_eq!(session.pending_approvals().len(), 1);

        // The dashboard reads the database where it is and posts to its inbox: `a`, then y.
        let mut dash = Dash::open_named(std::path::Path::new(&url), &url).expect("dashboard");
        dash.send(Msg::Action(Action::Enter));
        assert_eq!(dash.app.session_id.as_deref(), Some("live"));
        dash.send(Msg::Action(Action::Approve));
        dash.send(Msg::Confirm(true));
        let notice = dash.app.answering.notice.clone().unwrap_or_default();
        assert!(notice.contains("sent; waiting for the writer"), "{notice}");
        let inbox = runtime
            .block_on(mull_store_pg::PgInbox::open(&url))
            .expect("inbox");
        let waiting = runtime.block_on(inbox.waiting(None)).expect("reads");
        assert_eq!(waiting.len(), 1, "the key press wrote one inbox row");
        assert_eq!(waiting[0].session_id, "live");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "not yet");

        // The node takes it: one input event, the tool runs once.
        let replies = runtime
            .block_on(session.take_inbox(&inbox, CommandOptions::default()))
            .expect("takes");
        assert_eq!(replies.len(), 1);
        assert!(matches!(replies[0], Reply::Turn(_)), "{:?}", replies[0]);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let taken = runtime
            .block_on(inbox.get(waiting[0].id))
            .expect("reads")
            .expect("row");
        assert_eq!(taken.outcome.as_deref(), Some("answered"));
        let events = runtime.block_on(async {
            log.flush_all().await.expect("flush");
            let reads = mull_store_pg::Reads::open(&url).await.expect("reads");
            reads.session_page("live", 0, 1000).await.expect("events")
        });
        let answered = events
            .iter()
            .filter(|e| e.kind() == "tool_approval_answered")
            .count();
        assert_eq!(answered, 1);
        drop(dash);
        drop(session);
    }
}
