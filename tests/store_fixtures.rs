//! Projection replay of the recorded fixtures: each fixture is imported into a fresh log,
//! exported again (byte for byte the same), and every session in it is rebuilt into a
//! `SessionState` and snapshotted.

use std::io::BufReader;

use mull_store::{export_jsonl, import_jsonl, Log, SessionState};

#[test]
fn fixtures_replay_into_session_state() {
    insta::glob!("../fixtures", "*.jsonl", |path| {
        let name = path.display().to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("replay.db")).expect("opens a log");
        let file = std::fs::File::open(path).expect("opens the fixture");
        import_jsonl(BufReader::new(file), &name, &log).expect("the fixture imports");
        let reader = log.reader().expect("reader");

        let mut exported = Vec::new();
        export_jsonl(&reader, None, &mut exported).expect("exports");
        let original = std::fs::read(path).expect("reads the fixture");
        assert!(
            exported == original,
            "{name}: export differs from the fixture"
        );

        let states: Vec<SessionState> = reader
            .sessions()
            .expect("sessions")
            .iter()
            .map(|s| {
                let state = reader.load_session(&s.session_id).expect("loads");
                let turns = reader.turns(&s.session_id).expect("turns");
                assert_eq!(
                    turns, state.turns,
                    "{name}: turns() disagrees with the fold"
                );
                state
            })
            .collect();
        assert!(!states.is_empty(), "{name}: no session");
        insta::assert_json_snapshot!(states);
    });
}
