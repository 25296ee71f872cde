//! `mull chat` driven by a script through the real binary: piped lines are turns, answers go to
//! standard output, every event goes to the log; configuration mistakes name the variable.

use std::process::Output;

use mull_core::TurnStatus;
use mull_store::LogReader;

mod support;

fn chat(args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    let args: Vec<&str> = std::iter::once("chat")
        .chain(args.iter().copied())
        .collect();
    let here = std::env::current_dir().expect("the test's directory");
    support::run_mull(&here, &args, env, input)
}

#[test]
fn piped_lines_are_turns_and_answers_go_to_stdout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let db_arg = db.to_str().expect("utf-8 path");
    let output = chat(
        &["--db", db_arg, "--model", "scripted-demo"],
        &[],
        "What's Lisbon like?\n\nWeather, and a walk?\nSomewhere to stay?\nPlease cancel LIS-2291.\n",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "Lisbon is a hilly, sunny city on the Tagus: yellow trams grinding up the slopes of Alfama, tiled façades in every colour, miradouros with the whole river below you, fado drifting out of small bars at night, and custard tarts still warm from the ovens in Belém.",
            "Checking the forecast and the guides.",
            "Friday is the sunny one (24 °C): walk Alfama in the morning, from the cathedral up to the castle walls, and come down through the alleys for lunch. Saturday turns cloudy, good for the tile museum and the riverside galleries; pack a jacket for Sunday's rain and spend it in the cafés of Chiado.",
            "Two good options near Alfama: Casa do Largo, a small guesthouse on a quiet square (from 140 € a night), and the Memmo Alfama, with a rooftop pool looking over the river (from 260 €). Both are a short walk from the tram 28 stops.",
            "I can't cancel bookings myself. Please confirm the cancellation of LIS-2291 in the app, and I will look for a new stay once it is done.",
        ],
        "{stderr}"
    );
    // Tool activity is on standard error, never mixed into the answers.
    assert!(stderr.contains("[tool weather"), "{stderr}");

    let reader = LogReader::open(&db).expect("open log");
    let sessions = reader.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1);
    let turns = reader.turns(&sessions[0].session_id).expect("turns");
    assert_eq!(turns.len(), 4, "the blank line is not a turn");
    assert!(turns.iter().all(|t| t.status == TurnStatus::Completed));
}

#[test]
fn without_mull_model_it_says_how_to_set_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let output = chat(&["--db", db.to_str().expect("utf-8")], &[], "hi\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no model: pass --model SPEC or set MULL_MODEL"),
        "{stderr}"
    );
    assert!(stderr.contains("--model scripted-demo"), "{stderr}");
}

#[test]
fn a_missing_key_names_its_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let output = chat(
        &["--db", db.to_str().expect("utf-8")],
        &[("MULL_MODEL", "openai:gpt-4o-mini")],
        "hi\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("set OPENAI_API_KEY"), "{stderr}");
}

#[test]
fn rust_log_prints_the_engines_spans_to_standard_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let db_arg = db.to_str().expect("utf-8");
    let output = chat(
        &["--db", db_arg, "--model", "scripted-demo"],
        &[("RUST_LOG", "mull_engine=info")],
        "Where is the Louvre?\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("invoke_agent"), "{stderr}");
    assert!(stderr.contains("gen_ai.operation.name"), "{stderr}");
    // Without RUST_LOG, nothing of the kind.
    let quiet = chat(&["--db", db_arg, "--model", "scripted-demo"], &[], "Hi\n");
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("invoke_agent"));
}
