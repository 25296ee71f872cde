//! Calls that wait for a person, drawn: a parked call reads as waiting (not running), an
//! answer says who gave it and when, the demo's own approval is announced before it happens,
//! and at 80×24 the breadcrumb and the confirmation's keys survive beside it all.

use std::sync::Arc;

use chrono::Duration;
use mull_core::FixedClock;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::dash::app::{Msg, SelfAnswer, View, WallClock, MESSAGE_TTL};
use crate::dash::keys::Action;
use crate::dash::testlog::{approval_log, t0, write_live_db};
use crate::dash::Dash;

/// The demo's session ids are this long.
const LONG_SESSION: &str = "demo_01JQ7ZQ4V6X0M8K2B9R3T5W7YA";

struct Fixture {
    _dir: tempfile::TempDir,
    dash: Dash,
    _writer: mull_store::Log,
}

fn open(session: &str, answered: bool) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, writer) = write_live_db(dir.path(), &approval_log(session, answered));
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "mull.db".into();
    Fixture {
        _dir: dir,
        dash,
        _writer: writer,
    }
}

fn press(dash: &mut Dash, actions: &[Action]) {
    for action in actions {
        dash.send(Msg::Action(*action));
    }
}

fn text_at(dash: &Dash, width: u16, height: u16) -> (Terminal<TestBackend>, String) {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    dash.draw(&mut terminal).expect("draw");
    let text = format!("{}", terminal.backend());
    (terminal, text)
}

/// The screen's lines, as the terminal shows them (no colours, no styles).
fn lines(terminal: &Terminal<TestBackend>) -> Vec<String> {
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

fn snap(name: &str, dash: &Dash) {
    for (width, height) in [(160, 45), (80, 24)] {
        let (terminal, _) = text_at(dash, width, height);
        insta::assert_snapshot!(format!("{name}@{width}x{height}"), terminal.backend());
    }
}

#[test]
fn a_parked_call_reads_as_waiting_for_approval_not_running() {
    let mut f = open("sess_1", false);
    press(&mut f.dash, &[Action::Enter, Action::Enter]);
    assert_eq!(f.dash.app.view, View::Timeline);
    let (_, text) = text_at(&f.dash, 160, 45);
    assert!(text.contains("[approval] ⏸ waiting for approval"), "{text}");
    assert!(
        text.contains("ask approval_1 waits for a person since 09:30:00"),
        "{text}"
    );
    assert!(!text.contains("] running"), "nothing runs: {text}");
    snap("timeline_of_calls_waiting_for_approval", &f.dash);
}

#[test]
fn the_timeline_says_who_answered_and_when_in_the_turn_that_asked_and_the_one_that_ran() {
    let mut f = open("sess_1", true);
    press(&mut f.dash, &[Action::Enter, Action::First, Action::Enter]);
    let (_, asked) = text_at(&f.dash, 160, 45);
    assert!(
        asked.contains("ans approved by mull dash at 09:30:05"),
        "{asked}"
    );
    assert!(
        asked.contains("ans denied by mull approve at 09:30:06: Not the Ritz."),
        "{asked}"
    );
    snap("timeline_of_answered_approvals", &f.dash);

    // The continuation ran the approved call: its row still says who approved it.
    press(&mut f.dash, &[Action::Back, Action::Down, Action::Enter]);
    assert_eq!(f.dash.app.open_turn_number(), Some(2));
    let (_, ran) = text_at(&f.dash, 160, 45);
    assert!(ran.contains("book_hotel [allow] 7ms ✓"), "{ran}");
    assert!(
        ran.contains("ans approved by mull dash at 09:30:05"),
        "{ran}"
    );
    // The denial's reason shows once, as the decision's why.
    assert!(
        ran.contains("ans denied by mull approve at 09:30:06"),
        "{ran}"
    );
    assert_eq!(ran.matches("Not the Ritz.").count(), 1, "{ran}");
    snap("timeline_of_a_continuation_after_approvals", &f.dash);
}

#[test]
fn an_answer_from_a_log_that_does_not_say_who_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut events = approval_log("sess_1", true);
    for env in &mut events {
        if let mull_core::Event::ToolApprovalAnswered { by, .. } = &mut env.event {
            *by = None;
        }
    }
    let (path, _writer) = write_live_db(dir.path(), &events);
    let mut dash = Dash::open(&path).expect("open dashboard");
    press(&mut dash, &[Action::Enter, Action::First, Action::Enter]);
    let (_, text) = text_at(&dash, 160, 45);
    assert!(
        text.contains("ans approved (the log does not say by whom) at 09:30:05"),
        "{text}"
    );
}

#[test]
fn the_demos_own_approval_is_announced_with_its_time_until_it_is_due() {
    let mut f = open(LONG_SESSION, false);
    let deadline = t0() + Duration::seconds(61);
    f.dash.app.self_answers.announce(SelfAnswer {
        session_id: LONG_SESSION.into(),
        approval_id: "approval_1".into(),
        tool: "book_hotel".into(),
        at: deadline,
        who: "mull demo".into(),
    });
    let clock = Arc::new(FixedClock::new(t0() + Duration::seconds(19)));
    f.dash.app.clock = WallClock(clock.clone());
    press(&mut f.dash, &[Action::Follow, Action::Enter]);
    let (_, wide) = text_at(&f.dash, 160, 45);
    assert!(
        wide.contains(
            "⏸ book_hotel waits for your approval: a approve · x deny. If nobody answers, \
             mull demo approves it itself at 09:31:01 (in 42 s)."
        ),
        "{wide}"
    );
    let (_, narrow) = text_at(&f.dash, 80, 24);
    assert!(
        narrow.contains("a approve · x deny · mull demo approves it at 09:31:01 (42 s)"),
        "{narrow}"
    );
    snap("turns_with_the_demos_approval_announced", &f.dash);

    // The count goes down with the clock, and the line goes once the time has passed.
    clock.advance(std::time::Duration::from_secs(40));
    let (_, later) = text_at(&f.dash, 160, 45);
    assert!(later.contains("(in 2 s)"), "{later}");
    clock.advance(std::time::Duration::from_secs(3));
    let (_, passed) = text_at(&f.dash, 160, 45);
    assert!(!passed.contains("approves it itself"), "{passed}");
}

#[test]
fn at_80x24_the_breadcrumb_and_the_confirmations_keys_stay() {
    let mut f = open(LONG_SESSION, false);
    press(&mut f.dash, &[Action::Follow, Action::Enter, Action::Enter]);
    assert!(f.dash.app.follow);
    let (terminal, _) = text_at(&f.dash, 80, 24);
    let header = lines(&terminal).remove(0);
    assert!(header.contains("travel-desk › turn 1"), "{header}");
    assert!(header.contains("[FOLLOW]"), "{header}");
    assert!(header.contains("[⏸2 · a]"), "{header}");

    press(&mut f.dash, &[Action::Approve]);
    // Real approval ids are long (the injected id source's): the keys still show whole.
    if let Some(confirm) = f.dash.app.answering.confirm.as_mut() {
        confirm.approval_id = "approval_01JQ7ZQ4V6X0M8K2B9R3T5W7YB".into();
    }
    let (terminal, _) = text_at(&f.dash, 80, 24);
    let footer = lines(&terminal).pop().unwrap_or_default();
    assert!(
        footer.contains("approve book_hotel? y yes · any other key no"),
        "{footer}"
    );
    snap("confirmation_on_a_long_session", &f.dash);
}

#[test]
fn the_focused_pane_is_marked_without_colour() {
    let mut f = open("sess_1", true);
    press(&mut f.dash, &[Action::Enter, Action::First, Action::Enter]);
    let (terminal, _) = text_at(&f.dash, 160, 45);
    let screen = lines(&terminal);
    let timeline_top = screen
        .iter()
        .find(|l| l.contains("timeline ·"))
        .expect("the timeline's title");
    assert!(timeline_top.contains("┏▶ timeline ·"), "{timeline_top}");
    let pacing_top = screen
        .iter()
        .find(|l| l.contains("turn · pacing"))
        .expect("the pacing pane's title");
    assert!(pacing_top.contains("┌ turn · pacing"), "{pacing_top}");

    press(&mut f.dash, &[Action::FocusNext]);
    let (terminal, _) = text_at(&f.dash, 160, 45);
    let screen = lines(&terminal);
    assert!(
        screen.iter().any(|l| l.contains("┏▶ turn · pacing")),
        "{screen:#?}"
    );
    assert!(
        screen.iter().any(|l| l.contains("┌ timeline ·")),
        "{screen:#?}"
    );
    // Narrow, one pane at a time: the tab bar brackets the one shown.
    let (terminal, _) = text_at(&f.dash, 80, 24);
    let tabs = lines(&terminal).remove(1);
    assert!(tabs.contains("[pacing]"), "{tabs}");
    assert!(tabs.contains(" timeline "), "{tabs}");
}

#[test]
fn status_messages_go_once_they_stop_being_true_or_grow_old() {
    let mut f = open("sess_1", false);
    press(&mut f.dash, &[Action::Enter]);
    // A message about a key (nothing marked to diff with) stays a while, then goes.
    press(&mut f.dash, &[Action::Diff]);
    assert!(f.dash.app.status.is_some());
    f.dash.send(Msg::Tick(MESSAGE_TTL / 2));
    assert!(f.dash.app.status.is_some(), "still fresh");
    f.dash.send(Msg::Tick(MESSAGE_TTL / 2));
    assert_eq!(f.dash.app.status, None, "gone after {MESSAGE_TTL:?}");
    let (_, text) = text_at(&f.dash, 160, 45);
    assert!(!text.contains("mark a turn with m first"), "{text}");

    // "Sent; waiting for the writer" goes as soon as the log shows the answer recorded.
    press(&mut f.dash, &[Action::Approve]);
    f.dash.send(Msg::Confirm(true));
    let notice = f.dash.app.answering.notice.clone().unwrap_or_default();
    assert!(notice.contains("sent; waiting for the writer"), "{notice}");
    f.dash.send(Msg::Tick(std::time::Duration::from_millis(20)));
    assert!(f.dash.app.answering.notice.is_some(), "still true");
    let answered = mull_core::Envelope {
        seq: f.dash.app.max_seq + 1,
        session_id: "sess_1".into(),
        turn_id: Some("turn_1".into()),
        at: t0() + Duration::seconds(5),
        v: mull_core::EVENT_VERSION,
        event: mull_core::Event::ToolApprovalAnswered {
            approval_id: "approval_1".into(),
            call_id: "call_1".into(),
            tool: "book_hotel".into(),
            approved: true,
            reason: None,
            expired: false,
            by: Some("mull dash".into()),
        },
    };
    f.dash.send(Msg::Appended(vec![answered]));
    f.dash.send(Msg::Tick(std::time::Duration::from_millis(20)));
    assert_eq!(f.dash.app.answering.notice, None);
}
