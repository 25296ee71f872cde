//! Every view drawn to a `TestBackend` from a log written through the store, checked with
//! snapshots.

use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::dash::app::{FilterEdit, Msg, View};
use crate::dash::keys::Action;
use crate::dash::testlog::{sample_log, write_db, write_live_db};
use crate::dash::Dash;

/// The two screens every view is checked on: a roomy terminal and the classic 80×24.
const SIZES: [(u16, u16); 2] = [(160, 45), (80, 24)];

struct Fixture {
    _dir: tempfile::TempDir,
    dash: Dash,
    /// The process writing the sample log, alive while the test runs (its running turn is
    /// running, not interrupted).
    _writer: Option<mull_store::Log>,
}

fn open() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, writer) = write_live_db(dir.path(), &sample_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    Fixture {
        _dir: dir,
        dash,
        _writer: Some(writer),
    }
}

#[test]
fn a_turn_whose_writer_is_gone_shows_as_interrupted() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The process that wrote the sample log stopped with its last turn running.
    let path = write_db(dir.path(), &sample_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    let text = format!("{}", screen(&dash).backend());
    assert!(text.contains("↯1"), "{text}");
    assert!(text.contains("0 running"), "{text}");
    snap("sessions_writer_gone", &dash);
}

#[test]
fn damage_beside_the_log_shows_as_a_banner_on_every_screen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &sample_log());
    let whole = Dash::open(&path).expect("open dashboard");
    assert!(whole.app.damage.is_empty());
    assert!(!format!("{}", screen(&whole).backend()).contains("DAMAGED"));
    // A directory where the record file goes: the log reads without whatever it held.
    let mut records = path.clone().into_os_string();
    records.push("-records");
    std::fs::create_dir(&records).expect("mkdir");
    std::fs::write(std::path::Path::new(&records).join("note"), "kept").expect("writes");

    let mut dash = Dash::open(&path).expect("a damaged log still opens, flagged");
    dash.app.db_label = "test.db".into();
    assert_eq!(dash.app.damage.len(), 1, "{:?}", dash.app.damage);
    let text = format!("{}", screen(&dash).backend());
    assert!(
        text.contains("⚠ DAMAGED") && text.contains("mull check test.db"),
        "{text}"
    );
    snap("sessions_with_damage_beside_the_log", &dash);
    press(&mut dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Turns);
    let text = format!("{}", screen(&dash).backend());
    assert!(text.contains("⚠ DAMAGED"), "the banner stays: {text}");
    // Clicks land on what is drawn under the banner: the second turn's row.
    let area = ratatui::layout::Rect::new(0, 0, 160, 45);
    let row = (0..45)
        .find(|&y| {
            let hit = crate::dash::view::hit::hit(&dash.app, area, 5, y);
            hit.and_then(|h| h.row) == Some(1)
        })
        .expect("a row 1 to click");
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    assert!(
        lines[usize::from(row)].contains("2"),
        "row {row} is the second turn's: {text}"
    );
}

fn press(dash: &mut Dash, actions: &[Action]) {
    for action in actions {
        dash.send(Msg::Action(*action));
    }
}

fn screen_at(dash: &Dash, (width, height): (u16, u16)) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    dash.draw(&mut terminal).expect("draw");
    terminal
}

fn screen(dash: &Dash) -> Terminal<TestBackend> {
    screen_at(dash, SIZES[0])
}

/// Checks the screen at both sizes, as `NAME@160x45` and `NAME@80x24`; every frame keeps its
/// key hints.
fn snap(name: &str, dash: &Dash) {
    for size in SIZES {
        let terminal = screen_at(dash, size);
        let text = format!("{}", terminal.backend());
        assert!(
            text.contains("q quit"),
            "{name} at {size:?} lost its key hints:\n{text}"
        );
        insta::assert_snapshot!(format!("{name}@{}x{}", size.0, size.1), terminal.backend());
    }
}

/// Opens the n-th turn (0-based) of the first session.
fn open_turn(dash: &mut Dash, n: usize) {
    press(dash, &[Action::Enter]);
    open_turn_of(dash, n);
}

/// Opens the n-th turn (0-based) of the listed session.
fn open_turn_of(dash: &mut Dash, n: usize) {
    press(dash, &[Action::First]);
    for _ in 0..n {
        press(dash, &[Action::Down]);
    }
    press(dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Timeline);
}

#[test]
fn sessions_view() {
    let f = open();
    snap("sessions_view", &f.dash);
}

#[test]
fn turns_view() {
    let mut f = open();
    press(&mut f.dash, &[Action::Enter]);
    snap("turns_view", &f.dash);
}

#[test]
fn timeline_of_a_completed_turn() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    assert!(!f.dash.app.follow, "a finished turn does not follow");
    press(&mut f.dash, &[Action::Down, Action::Down, Action::Down]);
    snap("timeline_of_a_completed_turn", &f.dash);
}

#[test]
fn timeline_of_a_failed_turn() {
    let mut f = open();
    open_turn(&mut f.dash, 1);
    snap("timeline_of_a_failed_turn", &f.dash);
}

#[test]
fn timeline_of_a_running_turn_follows() {
    let mut f = open();
    open_turn(&mut f.dash, 2);
    assert!(f.dash.app.follow, "a running turn turns follow on");
    snap("timeline_of_a_running_turn_follows", &f.dash);
}

#[test]
fn event_json_view() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    press(
        &mut f.dash,
        &[
            Action::Down,
            Action::Down,
            Action::Down,
            Action::Down,
            Action::Enter,
        ],
    );
    assert_eq!(f.dash.app.view, View::Event);
    snap("event_json_view", &f.dash);
}

#[test]
fn help_overlay() {
    let mut f = open();
    press(&mut f.dash, &[Action::Help]);
    snap("help_overlay", &f.dash);
    press(&mut f.dash, &[Action::Down]);
    assert!(!f.dash.app.help, "any key closes the help");
}

#[test]
fn replay_paused_midway_shows_the_conversation_as_of_the_cursor() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    press(&mut f.dash, &[Action::Replay]);
    // 1× for 1.05 s of recorded time: step 1's text has begun, its stall has not happened.
    f.dash.send(Msg::Tick(Duration::from_millis(1100)));
    press(&mut f.dash, &[Action::Pause]);
    snap(
        "replay_paused_midway_shows_the_conversation_as_of_the_cursor",
        &f.dash,
    );
}

#[test]
fn filter_highlights_matches_and_paused_counts_arrivals() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    press(&mut f.dash, &[Action::Filter]);
    for c in "tool:delete".chars() {
        f.dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
    }
    f.dash.send(Msg::FilterEdit(FilterEdit::Apply));
    press(&mut f.dash, &[Action::Pause]);
    let later = crate::dash::testlog::sample_log();
    f.dash
        .send(Msg::Appended(later.into_iter().take(3).collect()));
    snap(
        "filter_highlights_matches_and_paused_counts_arrivals",
        &f.dash,
    );
}

#[test]
fn timeline_of_a_compacting_turn_shows_the_compaction_and_the_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::compaction_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    open_turn(&mut dash, 1);
    let screen = screen(&dash);
    let text = format!("{}", screen.backend());
    assert!(
        text.contains("⇲ compacted 3 messages (proactive) tokens 41.2k → 1350"),
        "{text}"
    );
    assert!(text.contains("Summary of the earlier"), "{text}");
    assert!(
        !text.contains("Alfama. Day 2"),
        "replaced messages still shown: {text}"
    );
    snap("timeline_of_a_compacting_turn", &dash);
}

#[test]
fn timeline_of_a_regenerated_answer_shows_its_retraction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::regenerate_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    open_turn(&mut dash, 0);
    let screen = screen(&dash);
    let text = format!("{}", screen.backend());
    assert!(text.contains("✂ 1 message retracted by req_2"), "{text}");
    snap("timeline_of_a_regenerated_answer", &dash);
}

/// Every recorded fixture (fixtures/*.jsonl at the workspace root) opens, and every turn's
/// timeline draws; replaying a turn to its end gives the same rows and conversation as the
/// plain view. With no fixtures yet, there is nothing to check.
#[test]
fn every_fixture_turn_draws_and_replays_to_the_same_state() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let Ok(entries) = std::fs::read_dir(&fixtures) else {
        return;
    };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    for fixture in paths {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("fixture.db");
        let log = mull_store::Log::open(&db).expect("open");
        let file = std::fs::File::open(&fixture).expect("fixture");
        mull_store::import_jsonl(
            std::io::BufReader::new(file),
            &fixture.display().to_string(),
            &log,
        )
        .expect("fixture imports");
        log.close().expect("commit");
        let mut dash = Dash::open(&db).expect("open dashboard");
        for s in 0..dash.app.sessions.len() {
            press(&mut dash, &[Action::First]);
            for _ in 0..s {
                press(&mut dash, &[Action::Down]);
            }
            press(&mut dash, &[Action::Enter]);
            for t in 0..dash.app.turns.len() {
                press(&mut dash, &[Action::First]);
                for _ in 0..t {
                    press(&mut dash, &[Action::Down]);
                }
                press(&mut dash, &[Action::Enter]);
                screen(&dash);
                let plain = dash.app.turn.as_ref().map(|t| {
                    (
                        t.items().to_vec(),
                        t.conversation.as_ref().map(|c| c.messages.clone()),
                    )
                });
                press(&mut dash, &[Action::Replay, Action::Last]);
                screen(&dash);
                let replayed = dash.app.turn.as_ref().map(|t| {
                    (
                        t.items().to_vec(),
                        t.conversation.as_ref().map(|c| c.messages.clone()),
                    )
                });
                assert_eq!(plain, replayed, "{} turn {t}", fixture.display());
                dash.app.follow = false;
                press(&mut dash, &[Action::Back]);
            }
            press(&mut dash, &[Action::Back]);
        }
    }
}

#[test]
fn replaying_the_sample_to_the_end_matches_the_plain_view() {
    let mut f = open();
    for t in 0..3 {
        press(&mut f.dash, &[Action::Enter]);
        for _ in 0..t {
            press(&mut f.dash, &[Action::Down]);
        }
        press(&mut f.dash, &[Action::Enter]);
        let plain = f.dash.app.turn.as_ref().map(|t| t.items().to_vec());
        press(&mut f.dash, &[Action::Replay, Action::Last]);
        let replayed = f.dash.app.turn.as_ref().map(|t| t.items().to_vec());
        assert_eq!(plain, replayed, "turn {t}");
        f.dash.app.follow = false;
        press(&mut f.dash, &[Action::Back, Action::Back]);
    }
}

/// Opens the last turn of the first session of a recorded fixture.
fn open_fixture(name: &str) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name);
    let db = dir.path().join("fixture.db");
    let log = mull_store::Log::open(&db).expect("open");
    let file = std::fs::File::open(&fixture).expect("fixture exists");
    mull_store::import_jsonl(std::io::BufReader::new(file), name, &log).expect("imports");
    log.close().expect("commit");
    let mut dash = Dash::open(&db).expect("open dashboard");
    dash.app.db_label = name.into();
    press(&mut dash, &[Action::Enter, Action::Last, Action::Enter]);
    dash.app.follow = false;
    Fixture {
        _dir: dir,
        dash,
        _writer: None,
    }
}

#[test]
fn fixture_tool_decisions_timeline() {
    let f = open_fixture("tool-decisions.jsonl");
    snap("fixture_tool_decisions_timeline", &f.dash);
}

#[test]
fn fixture_aborted_timeline() {
    let f = open_fixture("aborted.jsonl");
    snap("fixture_aborted_timeline", &f.dash);
}

/// A turn a budget stopped says which limit, what was spent and which call was not made, on a
/// row of its own before the turn's failure.
#[test]
fn timeline_of_a_budget_stopped_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::budget_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    open_turn(&mut dash, 1);
    let text = format!("{}", screen(&dash).backend());
    assert!(
        text.contains("✗ budget reached: session tokens 210 of 200 · step 1 not called"),
        "{text}"
    );
    snap("timeline_of_a_budget_stopped_turn", &dash);
}

/// The session's header (the turns pane's title) counts the calls budgets refused beside the
/// cost, from the same fold, naming the limit where the width allows.
#[test]
fn turns_of_a_budget_stopped_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::budget_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    press(&mut dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Turns);
    let wide = format!("{}", screen_at(&dash, (160, 45)).backend());
    assert!(
        wide.contains("· ✗ 1 budget stop (session tokens) "),
        "{wide}"
    );
    let narrow = format!("{}", screen_at(&dash, (80, 24)).backend());
    assert!(narrow.contains("· ✗ 1 budget stop "), "{narrow}");
    snap("turns_of_a_budget_stopped_session", &dash);
}

/// Opens the second turn of a session whose two turns made allowed, blocked, substituted and
/// failing calls.
fn tools_dash() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::tools_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    open_turn(&mut dash, 1);
    Fixture {
        _dir: dir,
        dash,
        _writer: None,
    }
}

#[test]
fn tool_tables_show_the_turn_and_the_session() {
    let f = tools_dash();
    let text = format!("{}", screen(&f.dash).backend());
    assert!(text.contains("tools · this turn"), "{text}");
    assert!(text.contains("tools · session · 2 turns"), "{text}");
    snap("tool_tables_show_the_turn_and_the_session", &f.dash);
}

#[test]
fn a_narrow_screen_shows_one_pane_at_a_time_and_tab_moves_on() {
    let mut f = tools_dash();
    let narrow = |dash: &Dash| format!("{}", screen_at(dash, SIZES[1]).backend());
    let text = narrow(&f.dash);
    assert!(
        text.contains("timeline ·"),
        "the timeline pane first: {text}"
    );
    assert!(!text.contains("tools · this turn"), "{text}");
    press(&mut f.dash, &[Action::FocusNext]);
    let text = narrow(&f.dash);
    assert!(text.contains("chunk gaps"), "then the pacing pane: {text}");
    snap("narrow_pacing_pane", &f.dash);
    press(&mut f.dash, &[Action::FocusNext, Action::FocusNext]);
    let text = narrow(&f.dash);
    assert!(
        text.contains("status_page"),
        "tool names stay whole: {text}"
    );
    assert!(text.contains("blk") && text.contains("sub"), "{text}");
    snap("narrow_tool_tables", &f.dash);
    press(&mut f.dash, &[Action::FocusNext]);
    assert_eq!(
        f.dash.app.focus,
        crate::dash::app::Pane::List,
        "Tab wraps around"
    );
}

#[test]
fn a_blocked_call_shows_its_reason_once_and_is_called_blocked() {
    // The demo's policy blocks its cancel_booking call: the engine records the reason as the
    // call's output too, since that is what the model is told.
    let mut f = open_fixture("demo.jsonl");
    let turn = f
        .dash
        .app
        .turns
        .iter()
        .position(|t| t.tools.blocked > 0)
        .expect("the demo has a blocked call");
    press(&mut f.dash, &[Action::Back]);
    open_turn_of(&mut f.dash, turn);
    let text = format!("{}", screen(&f.dash).backend());
    let reason_lines = text
        .lines()
        .filter(|l| l.contains("Cancelling bookings needs a human"))
        .count();
    assert_eq!(reason_lines, 1, "{text}");
    assert!(text.contains("⚒ cancel_booking → blocked"), "{text}");
    assert!(!text.contains("output-available"), "{text}");
}

#[test]
fn search_counts_matches_and_a_filter_hides_the_rest() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    press(&mut f.dash, &[Action::Filter]);
    for c in "kind:tool".chars() {
        f.dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
    }
    f.dash.send(Msg::FilterEdit(FilterEdit::Apply));
    assert_eq!(f.dash.app.match_count(), (Some(1), 2));
    press(&mut f.dash, &[Action::NextMatch]);
    assert_eq!(f.dash.app.match_count(), (Some(2), 2));
    snap("search_counts_matches", &f.dash);
    let rows = f.dash.app.turn.as_ref().map_or(0, |t| t.items().len());
    press(&mut f.dash, &[Action::HideFilter]);
    for c in "kind:tool".chars() {
        f.dash.send(Msg::FilterEdit(FilterEdit::Char(c)));
    }
    f.dash.send(Msg::FilterEdit(FilterEdit::Apply));
    assert_eq!(f.dash.app.visible_rows().len(), 2);
    assert!(rows > 2);
    snap("filter_hides_non_matches", &f.dash);
    press(&mut f.dash, &[Action::Up]);
    let selected = f.dash.app.turn.as_ref().map(|t| t.selected);
    assert_eq!(
        selected,
        f.dash.app.visible_rows().first().copied(),
        "moving skips the hidden rows"
    );
}

#[test]
fn clicks_select_and_open_rows_and_the_wheel_scrolls() {
    let mut f = open();
    let screen = ratatui::layout::Rect::new(0, 0, 160, 45);
    // Row 3 of the screen: header, border, column headers, then the first session.
    f.dash.click(screen, 10, 4);
    assert_eq!(f.dash.app.session_selected, 1);
    f.dash.click(screen, 10, 3);
    assert_eq!(f.dash.app.session_selected, 0);
    f.dash.click(screen, 10, 3);
    assert_eq!(
        f.dash.app.view,
        View::Turns,
        "a click on the selected row opens it"
    );
    f.dash.click(screen, 10, 4);
    assert_eq!(f.dash.app.turn_selected, 1);
    f.dash.click(screen, 10, 3);
    assert_eq!(f.dash.app.turn_selected, 0);
    f.dash.click(screen, 10, 3);
    assert_eq!(f.dash.app.view, View::Timeline);
    f.dash.wheel(screen, 10, 10, 3);
    assert_eq!(f.dash.app.turn.as_ref().map(|t| t.selected), Some(3));
    // The conversation pane scrolls under the wheel.
    f.dash.wheel(screen, 120, 30, -3);
    assert_eq!(f.dash.app.focus, crate::dash::app::Pane::Conversation);
    assert_eq!(f.dash.app.conversation_scroll, 3);
}

#[test]
fn two_marked_turns_are_diffed_side_by_side() {
    // The demo's second and third turns: different tools, different text.
    let mut f = open_fixture("demo.jsonl");
    press(&mut f.dash, &[Action::Back, Action::First, Action::Down]);
    press(&mut f.dash, &[Action::Mark]);
    assert!(f.dash.app.marked.is_some());
    press(&mut f.dash, &[Action::Down, Action::Diff]);
    assert_eq!(f.dash.app.view, View::Diff);
    let diff = f.dash.app.diff.as_ref().map(|d| &d.diff).expect("diffed");
    let first = diff.first_divergence.as_ref().expect("the turns differ");
    assert_eq!(first.turn, 1, "each side is one turn");
    let text = format!("{}", screen(&f.dash).backend());
    assert!(text.contains("travel-desk turn 2"), "{text}");
    assert!(text.contains("travel-desk turn 3"), "{text}");
    assert!(text.contains("first divergence"), "{text}");
    snap("diff_of_two_turns", &f.dash);
    press(&mut f.dash, &[Action::Back]);
    assert_eq!(
        f.dash.app.view,
        View::Turns,
        "Esc goes back where the diff began"
    );
}

#[test]
fn the_session_list_shows_where_a_fork_branched_off_and_its_origin_lists_its_forks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo.jsonl");
    let db = dir.path().join("forks.db");
    let log = mull_store::Log::open(&db).expect("open");
    let file = std::fs::File::open(&fixture).expect("fixture exists");
    mull_store::import_jsonl(std::io::BufReader::new(file), "demo.jsonl", &log).expect("imports");
    let at = chrono::DateTime::parse_from_rfc3339("2025-01-02T00:00:00Z")
        .expect("time")
        .to_utc();
    let fork = |session: &str, origin: &str, origin_seq: u64| {
        let event = mull_core::Event::SessionForked {
            origin: origin.into(),
            origin_seq,
            origin_turn: None,
        };
        log.append(session, None, at, event).expect("forks");
    };
    fork("sess_strict", "sess_1", 120);
    // The fork of the fork branches off at the fork's one event.
    let strict_seq = log.last_seq();
    fork("sess_stricter", "sess_strict", strict_seq);
    log.close().expect("commit");
    let mut dash = Dash::open(&db).expect("open dashboard");
    dash.app.db_label = "forks.db".into();
    let text = format!("{}", screen(&dash).backend());
    assert!(text.contains("⑂ fork of sess_1 @120"), "{text}");
    assert!(
        text.contains(&format!("⑂ fork of sess_strict @{strict_seq}")),
        "{text}"
    );
    // The origin's details name its fork; the fork's name its origin and its own fork.
    assert!(text.contains("forks sess_strict"), "{text}");
    press(&mut dash, &[Action::Down]);
    snap("sessions_with_forks", &dash);
    let text = format!("{}", screen(&dash).backend());
    assert!(
        text.contains("fork of sess_1 @120 · forks sess_stricter"),
        "{text}"
    );
}

/// The demo's recorded log: its sixth turn asks the research sub-agent.
fn demo_log() -> Vec<mull_core::Envelope> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo.jsonl");
    std::fs::read_to_string(path)
        .expect("the demo fixture")
        .lines()
        .map(|line| serde_json::from_str(line).expect("an envelope"))
        .collect()
}

fn selected_subagent(dash: &Dash) -> Option<String> {
    match dash.app.turn.as_ref()?.selected_item().map(|i| &i.kind) {
        Some(crate::dash::timeline::ItemKind::Tool(tool)) => tool.subagent.clone(),
        _ => None,
    }
}

#[test]
fn a_sub_agents_turn_opens_from_its_parents_tool_call_and_backs_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &demo_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    // The sub-agent's session is not listed: it is reached from its parent's call.
    let listed: Vec<&str> = dash
        .app
        .sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect();
    assert_eq!(listed, ["sess_1"]);
    open_turn(&mut dash, 5);
    press(&mut dash, &[Action::First]);
    for _ in 0..200 {
        if selected_subagent(&dash).is_some() {
            break;
        }
        press(&mut dash, &[Action::Down]);
    }
    assert_eq!(selected_subagent(&dash).as_deref(), Some("sess_1.agent_1"));
    snap("subagent_parent_call", &dash);
    press(&mut dash, &[Action::SubagentIn]);
    assert_eq!(dash.app.view, View::Timeline);
    assert_eq!(dash.app.session_id.as_deref(), Some("sess_1.agent_1"));
    assert_eq!(dash.app.nest.len(), 1);
    snap("subagent_child_turn", &dash);
    // Back out: the parent's timeline as it was left, the call still selected.
    press(&mut dash, &[Action::SubagentOut]);
    assert_eq!(dash.app.session_id.as_deref(), Some("sess_1"));
    assert!(dash.app.nest.is_empty());
    assert_eq!(selected_subagent(&dash).as_deref(), Some("sess_1.agent_1"));
    // Esc on the child's timeline comes back the same way.
    press(&mut dash, &[Action::SubagentIn, Action::Back]);
    assert_eq!(dash.app.session_id.as_deref(), Some("sess_1"));
    assert_eq!(dash.app.view, View::Timeline);
}

#[test]
fn following_from_a_first_frame_drawn_before_the_overviews_settles_on_the_newest_main_session() {
    // The demo's newest session is its research sub-agent's; which sessions are sub-agents' is
    // known only from the overviews, read after the first frame on a large log.
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo.jsonl");
    let db = dir.path().join("demo.db");
    let log = mull_store::Log::open(&db).expect("open");
    let file = std::fs::File::open(&fixture).expect("fixture exists");
    mull_store::import_jsonl(std::io::BufReader::new(file), "demo.jsonl", &log).expect("imports");
    log.close().expect("commit");
    let (mut dash, overviews) = Dash::open_drawing_first(&db, "demo.db").expect("opens");
    dash.follow_newest();
    let before = dash.app.session_id.clone();
    assert!(
        before.as_deref().is_some_and(|id| id.contains(".agent_")),
        "before the overviews the newest listed session is the sub-agent's: {before:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !dash.take_overviews(&overviews) {
        assert!(
            std::time::Instant::now() < deadline,
            "the overviews never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let agent = dash.app.session_overview().and_then(|o| o.agent.clone());
    assert_eq!(
        agent.as_deref(),
        Some("travel-desk"),
        "following left the sub-agent's session it entered first ({before:?})"
    );
    assert!(dash
        .app
        .sessions
        .iter()
        .all(|s| !s.session_id.contains(".agent_")));
    assert_eq!(dash.app.view, View::Turns);
}
