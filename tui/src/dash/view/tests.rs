//! Every view drawn to a `TestBackend` from a log written through the store, checked with
//! snapshots.

use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::dash::app::{FilterEdit, Msg, View};
use crate::dash::keys::Action;
use crate::dash::testlog::{sample_log, write_db};
use crate::dash::Dash;

const WIDTH: u16 = 120;
const HEIGHT: u16 = 34;

struct Fixture {
    _dir: tempfile::TempDir,
    dash: Dash,
}

fn open() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &sample_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    Fixture { _dir: dir, dash }
}

fn press(dash: &mut Dash, actions: &[Action]) {
    for action in actions {
        dash.send(Msg::Action(*action));
    }
}

fn screen(dash: &Dash) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("terminal");
    dash.draw(&mut terminal).expect("draw");
    terminal
}

/// Opens the n-th turn (0-based) of the first session.
fn open_turn(dash: &mut Dash, n: usize) {
    press(dash, &[Action::Enter]);
    for _ in 0..n {
        press(dash, &[Action::Down]);
    }
    press(dash, &[Action::Enter]);
    assert_eq!(dash.app.view, View::Timeline);
}

#[test]
fn sessions_view() {
    let f = open();
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn turns_view() {
    let mut f = open();
    press(&mut f.dash, &[Action::Enter]);
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn timeline_of_a_completed_turn() {
    let mut f = open();
    open_turn(&mut f.dash, 0);
    assert!(!f.dash.app.follow, "a finished turn does not follow");
    press(&mut f.dash, &[Action::Down, Action::Down, Action::Down]);
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn timeline_of_a_failed_turn() {
    let mut f = open();
    open_turn(&mut f.dash, 1);
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn timeline_of_a_running_turn_follows() {
    let mut f = open();
    open_turn(&mut f.dash, 2);
    assert!(f.dash.app.follow, "a running turn turns follow on");
    insta::assert_snapshot!(screen(&f.dash).backend());
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
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn help_overlay() {
    let mut f = open();
    press(&mut f.dash, &[Action::Help]);
    insta::assert_snapshot!(screen(&f.dash).backend());
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
    insta::assert_snapshot!(screen(&f.dash).backend());
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
    insta::assert_snapshot!(screen(&f.dash).backend());
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
    insta::assert_snapshot!(screen.backend());
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
    insta::assert_snapshot!(screen.backend());
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
    Fixture { _dir: dir, dash }
}

#[test]
fn fixture_tool_decisions_timeline() {
    let f = open_fixture("tool-decisions.jsonl");
    insta::assert_snapshot!(screen(&f.dash).backend());
}

#[test]
fn fixture_aborted_timeline() {
    let f = open_fixture("aborted.jsonl");
    insta::assert_snapshot!(screen(&f.dash).backend());
}

/// Opens the second turn of a session whose two turns made allowed, blocked, substituted and
/// failing calls, on a `width`-column screen.
fn tools_screen(width: u16) -> Terminal<TestBackend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_db(dir.path(), &crate::dash::testlog::tools_log());
    let mut dash = Dash::open(&path).expect("open dashboard");
    dash.app.db_label = "test.db".into();
    open_turn(&mut dash, 1);
    let mut terminal = Terminal::new(TestBackend::new(width, HEIGHT)).expect("terminal");
    dash.draw(&mut terminal).expect("draw");
    terminal
}

#[test]
fn tool_tables_show_the_turn_and_the_session() {
    let screen = tools_screen(WIDTH);
    let text = format!("{}", screen.backend());
    assert!(text.contains("tools · this turn"), "{text}");
    assert!(text.contains("tools · session · 2 turns"), "{text}");
    insta::assert_snapshot!(screen.backend());
}

#[test]
fn narrow_tool_tables_drop_the_least_important_columns() {
    let screen = tools_screen(80);
    let text = format!("{}", screen.backend());
    assert!(
        text.contains("status_page"),
        "tool names stay whole: {text}"
    );
    assert!(!text.contains("p95") && !text.contains("mean"), "{text}");
    assert!(text.contains("blk") && text.contains("sub"), "{text}");
    insta::assert_snapshot!(screen.backend());
}
