//! The dashboard state's behaviour, driven through `Dash` over a live log.

use mull_core::{Event, TurnStatus};

use super::matching::query_matches;
use super::*;
use crate::dash::testlog::{append_all, sample_log, write_live_db};
use crate::dash::timeline::ItemKind;
use crate::dash::Dash;

/// A log being written by a live process (its writer open until the test ends), and a
/// dashboard on it.
struct Live {
    _dir: tempfile::TempDir,
    log: mull_store::Log,
}

fn open_with(events: &[Envelope]) -> (Live, Dash) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, log) = write_live_db(dir.path(), events);
    let dash = Dash::open(&path).expect("open");
    (Live { _dir: dir, log }, dash)
}

fn press(dash: &mut Dash, actions: &[Action]) {
    for action in actions {
        dash.send(Msg::Action(*action));
    }
}

/// Appends `events` to the log behind `dash` (as the process writing it would) and
/// delivers them as the tail does.
fn commit_and_deliver(live: &Live, dash: &mut Dash, events: &[Envelope]) {
    append_all(&live.log, events);
    live.log.flush_blocking().expect("commit");
    dash.send(Msg::Appended(events.to_vec()));
}

#[test]
fn enter_drills_in_and_esc_backs_out() {
    let (_dir, mut dash) = open_with(&sample_log());
    assert_eq!(dash.app.sessions.len(), 2);
    press(&mut dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Turns);
    assert_eq!(dash.app.turns.len(), 3);
    press(&mut dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Timeline);
    let turn = dash.app.turn.as_ref().expect("turn open");
    assert_eq!(turn.turn_id, "turn_1");
    assert!(turn.exhausted);
    assert!(turn.conversation.is_some());
    press(&mut dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Event);
    assert_eq!(dash.app.selected_event().map(|e| e.seq), Some(3));
    press(&mut dash, &[Action::StepForward]);
    assert_eq!(dash.app.event_seq, Some(4));
    press(&mut dash, &[Action::Back, Action::Back, Action::Back]);
    assert_eq!(dash.app.view, View::Sessions);
    press(&mut dash, &[Action::Back]);
    assert_eq!(dash.app.view, View::Sessions);
    press(&mut dash, &[Action::Quit]);
    assert!(dash.app.quit);
}

#[test]
fn following_opens_the_newest_running_turn() {
    let (_dir, mut dash) = open_with(&sample_log()[..44]);
    dash.follow_newest();
    assert!(dash.app.follow);
    assert_eq!(dash.app.view, View::Timeline);
    assert_eq!(
        dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
        Some("turn_3")
    );
    let (_dir, mut dash) = open_with(&sample_log());
    dash.follow_newest();
    assert_eq!(
        dash.app.view,
        View::Turns,
        "sess_2's newest turn has finished"
    );
    assert_eq!(dash.app.session_id.as_deref(), Some("sess_2"));
}

#[test]
fn selection_clamps_at_both_ends() {
    let (_dir, mut dash) = open_with(&sample_log());
    press(&mut dash, &[Action::Up]);
    assert_eq!(dash.app.session_selected, 0);
    press(&mut dash, &[Action::PageDown]);
    assert_eq!(dash.app.session_selected, 1);
    press(&mut dash, &[Action::First]);
    assert_eq!(dash.app.session_selected, 0);
    press(&mut dash, &[Action::Last]);
    assert_eq!(dash.app.session_selected, 1);
}

#[test]
fn live_events_extend_a_followed_timeline() {
    let all = sample_log();
    // Stop in the middle of turn_1's second step.
    let cut = all
        .iter()
        .position(|e| matches!(&e.event, Event::StepStarted { step: 1 }))
        .expect("step 1");
    let (dir, mut dash) = open_with(&all[..=cut]);
    press(&mut dash, &[Action::Enter, Action::Enter]);
    assert!(dash.app.follow, "the turn is running, so follow is on");
    let rows_before = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
    commit_and_deliver(&dir, &mut dash, &all[cut + 1..cut + 4]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert!(turn.items().len() > rows_before);
    assert_eq!(
        turn.selected,
        turn.items().len() - 1,
        "follow keeps the newest row selected"
    );
    assert!(matches!(
        &turn.items().last().map(|i| &i.kind),
        Some(ItemKind::Text { text, open: true }) if text.starts_with("Rust 1.95")
    ));
    assert_eq!(dash.app.live_events, 3);
}

#[test]
fn the_session_tool_calls_follow_new_events_without_a_reread() {
    let all = crate::dash::testlog::tools_log();
    // Stop in turn_2 before its failing call finished.
    let cut = all
        .iter()
        .position(
            |e| matches!(&e.event, Event::ToolCallFinished { tool, .. } if tool == "status_page"),
        )
        .expect("the failing call");
    let (dir, mut dash) = open_with(&all[..cut]);
    press(&mut dash, &[Action::Enter]);
    let calls = |dash: &Dash| {
        dash.app
            .session_tools
            .as_ref()
            .map(|c| (c.turns, mull_store::tool_usage::session_tool_usage(c)))
            .expect("read on entering the session")
    };
    let (turns, before) = calls(&dash);
    assert_eq!(turns, 2);
    let status = |usage: &[mull_store::tool_usage::ToolUsage]| {
        usage
            .iter()
            .find(|u| u.tool == "status_page")
            .map(|u| (u.calls, u.failures))
    };
    assert_eq!(status(&before), Some((1, 0)));
    // The tail may hand back events the read already saw: they are not counted twice.
    commit_and_deliver(&dir, &mut dash, &all[cut..]);
    dash.send(Msg::Appended(all[..cut].to_vec()));
    let (_, after) = calls(&dash);
    assert_eq!(status(&after), Some((1, 1)));
    let search = after.iter().find(|u| u.tool == "search").map(|u| u.calls);
    assert_eq!(search, Some(3));
}

#[test]
fn pause_freezes_the_view_and_counts_what_arrived() {
    let all = sample_log();
    let cut = all
        .iter()
        .position(|e| matches!(&e.event, Event::StepStarted { step: 1 }))
        .expect("step 1");
    let (dir, mut dash) = open_with(&all[..=cut]);
    press(&mut dash, &[Action::Enter, Action::Enter, Action::Pause]);
    let frozen = dash.app.turn.as_ref().map(|t| t.items().to_vec());
    commit_and_deliver(&dir, &mut dash, &all[cut + 1..cut + 6]);
    assert_eq!(dash.app.paused.as_ref().map(|p| p.arrived), Some(5));
    assert_eq!(dash.app.turn.as_ref().map(|t| t.items().to_vec()), frozen);
    press(&mut dash, &[Action::Pause]);
    assert!(dash.app.paused.is_none());
    let thawed = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
    assert!(thawed > frozen.map(|f| f.len()).unwrap_or(0));
}

#[test]
fn following_moves_on_to_the_next_turn_of_the_session() {
    let all = sample_log();
    let cut = all
        .iter()
        .position(|e| matches!(&e.event, Event::TurnFinished { .. }))
        .expect("turn_1 finishes");
    let (dir, mut dash) = open_with(&all[..=cut]);
    press(&mut dash, &[Action::Enter, Action::Enter, Action::Follow]);
    assert_eq!(
        dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
        Some("turn_1")
    );
    let next = all
        .iter()
        .position(|e| e.turn_id.as_deref() == Some("turn_2"))
        .expect("turn_2");
    commit_and_deliver(&dir, &mut dash, &all[cut + 1..=next + 1]);
    assert_eq!(
        dash.app.turn.as_ref().map(|t| t.turn_id.as_str()),
        Some("turn_2")
    );
}

#[test]
fn replay_steps_scrubs_and_leaves() {
    let (_dir, mut dash) = open_with(&sample_log());
    press(&mut dash, &[Action::Enter, Action::Enter]);
    let all_rows = dash.app.turn.as_ref().map(|t| t.items().len()).unwrap_or(0);
    press(&mut dash, &[Action::Replay]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(0));
    assert_eq!(turn.items().len(), 1);
    press(&mut dash, &[Action::StepForward, Action::StepForward]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert_eq!(
        turn.replay.as_ref().map(|r| (r.cursor, r.playing)),
        Some((2, false))
    );
    assert_eq!(turn.items().len(), 3);
    press(&mut dash, &[Action::Last]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert_eq!(turn.items().len(), all_rows);
    let final_messages = turn.conversation.as_ref().map(|c| c.messages.len());
    press(&mut dash, &[Action::ScrubBack, Action::First]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(0));
    // Before the turn's first event is applied only the user's message is there.
    assert!(turn.conversation.as_ref().map(|c| c.messages.len()) < final_messages);
    press(&mut dash, &[Action::Speed]);
    assert_eq!(
        dash.app
            .turn
            .as_ref()
            .and_then(|t| t.replay.as_ref())
            .map(|r| r.speed),
        Some(crate::dash::replay::Speed::X10)
    );
    press(&mut dash, &[Action::Replay]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert!(turn.replay.is_none());
    assert_eq!(turn.items().len(), all_rows);
}

#[test]
fn replay_pages_through_a_turn_longer_than_a_page() {
    use crate::dash::testlog::LogBuilder;
    use mull_core::StreamPart;
    let mut b = LogBuilder::new();
    let (s, t) = ("sess_big", Some("turn_big"));
    b.push(s, t, 0, sample_log().remove(2).event);
    for i in 0..(TIMELINE_PAGE as i64 * 2 + 500) {
        b.push(
            s,
            t,
            1 + i,
            Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "t".into(),
                    text: "x".into(),
                },
                original: None,
            },
        );
    }
    b.push(
        s,
        t,
        TIMELINE_PAGE as i64 * 3,
        Event::TurnFinished {
            request_id: "req_1".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    );
    let total = b.events.len();
    let (_dir, mut dash) = open_with(&b.events);
    press(&mut dash, &[Action::Enter, Action::Enter]);
    let turn = dash.app.turn.as_ref().expect("turn");
    assert!(
        turn.events.len() < total,
        "the first look reads one page, not the turn"
    );
    assert!(!turn.exhausted);
    let first_look = turn.events.len();
    press(&mut dash, &[Action::Down]);
    let after_scroll = dash.app.turn.as_ref().map_or(0, |t| t.events.len());
    assert!(
        after_scroll > first_look,
        "moving near the end reads the next page"
    );
    assert!(after_scroll < total);
    press(&mut dash, &[Action::Replay, Action::Speed, Action::Speed]);
    for _ in 0..total {
        dash.send(Msg::Tick(Duration::from_millis(20)));
    }
    let turn = dash.app.turn.as_ref().expect("turn");
    assert_eq!(
        turn.events.len(),
        total,
        "replay read the rest page by page"
    );
    assert_eq!(turn.replay.as_ref().map(|r| r.cursor), Some(total - 1));
    let text_len = turn
        .items()
        .iter()
        .map(|i| match &i.kind {
            ItemKind::Text { text, .. } => text.len(),
            _ => 0,
        })
        .sum::<usize>();
    assert_eq!(text_len, total - 2);
}

#[test]
fn filter_jumps_between_matches_and_wraps() {
    let (_dir, mut dash) = open_with(&sample_log());
    press(&mut dash, &[Action::Enter, Action::Enter, Action::Filter]);
    for c in "kind:tool".chars() {
        dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
    }
    dash.send(Msg::FilterEdit(FilterEdit::Apply));
    let selected = |dash: &Dash| {
        dash.app
            .turn
            .as_ref()
            .and_then(|t| t.selected_item())
            .and_then(|i| match &i.kind {
                ItemKind::Tool(t) => Some(t.tool.clone()),
                _ => None,
            })
    };
    assert_eq!(selected(&dash).as_deref(), Some("search"));
    press(&mut dash, &[Action::NextMatch]);
    assert_eq!(selected(&dash).as_deref(), Some("delete_all"));
    press(&mut dash, &[Action::NextMatch]);
    assert_eq!(selected(&dash).as_deref(), Some("search"), "wraps around");
    press(&mut dash, &[Action::PrevMatch]);
    assert_eq!(selected(&dash).as_deref(), Some("delete_all"));
    press(&mut dash, &[Action::Filter]);
    for c in "zebra".chars() {
        dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
    }
    dash.send(Msg::FilterEdit(FilterEdit::Apply));
    assert_eq!(
        dash.app.match_count(),
        (None, 0),
        "no match, and the count says so"
    );
    assert_eq!(dash.app.status, None, "no message outlives the search");
    press(&mut dash, &[Action::Back]);
    assert!(
        dash.app.filter.query.is_empty(),
        "Esc clears the filter first"
    );
    assert_eq!(dash.app.view, View::Timeline);
}

#[test]
fn queries_match_by_field_or_text() {
    assert!(query_matches("tool:sea", "tool", "search", "allow", ""));
    assert!(!query_matches("tool:sea", "text", "", "", "search me"));
    assert!(query_matches("status:err", "turn", "", "error", ""));
    assert!(query_matches("kind:step", "step_started", "", "", ""));
    assert!(query_matches("RUST", "text", "", "", "rust 1.95"));
    assert!(!query_matches("  ", "text", "", "", "anything"));
}

#[test]
fn following_leaves_a_sub_agents_session_once_its_link_is_known() {
    use crate::dash::testlog::LogBuilder;
    let base = sample_log();
    let (live, mut dash) = open_with(&base);
    dash.follow_newest();
    let parent = dash.app.session_id.clone().expect("a session is followed");
    let mut b = LogBuilder::new();
    b.events = base.clone();
    // A sub-agent's session begins; its link to the parent is written a moment later.
    b.push(
        "sess_child",
        Some("turn_c"),
        10_000,
        Event::TurnStarted {
            request_id: "req_c".into(),
            message_id: "msg_c".into(),
            entry: mull_core::EntryPath::SubAgent,
            continuation: false,
            attempt: 0,
            body: serde_json::Value::Null,
        },
    );
    commit_and_deliver(&live, &mut dash, &b.events[base.len()..]);
    assert_eq!(
        dash.app.session_id.as_deref(),
        Some("sess_child"),
        "unlinked, it looks like a new session"
    );
    b.push(
        "sess_child",
        Some("turn_c"),
        10_001,
        Event::SubagentLinked {
            parent_session_id: parent.clone(),
            parent_turn_id: "turn_1".into(),
            parent_call_id: "call_1".into(),
            depth: 1,
            budget: None,
        },
    );
    commit_and_deliver(&live, &mut dash, &b.events[base.len() + 1..]);
    assert!(dash.app.follow);
    assert_ne!(dash.app.session_id.as_deref(), Some("sess_child"));
    assert!(dash
        .app
        .sessions
        .iter()
        .all(|s| s.session_id != "sess_child"));
}
