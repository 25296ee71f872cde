//! The fuzz targets of `fuzz/` as bounded, seeded property tests: the same target bodies
//! (`crates/mull-reliability/src/targets.rs`), fed inputs derived from the bad-input corpus and
//! from arbitrary bytes. Long runs use cargo-fuzz (see RELIABILITY.md); these keep every
//! promise checked on each `cargo test` in a few seconds.

#[path = "../crates/mull-reliability/src/edits.rs"]
mod edits;
#[path = "../crates/mull-reliability/src/sse_server.rs"]
mod sse_server;
#[path = "../crates/mull-reliability/src/targets.rs"]
mod targets;

use std::path::Path;

use edits::{apply, edits, runner};
use proptest::prelude::*;
use targets::{SseTarget, Wire};

fn corpus(rel: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/badinput")
            .join(rel),
    )
    .expect("reads the corpus")
}

/// Every corpus file of one wire format, valid and not.
fn wire_corpus(wire: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/badinput/sse")
        .join(wire);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("lists the corpus")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| std::fs::read(p).expect("reads"))
        .collect()
}

fn sse_property(wire: Wire, name: &str) {
    let target = SseTarget::new(wire);
    let inputs = wire_corpus(name);
    let count = inputs.len();
    let strategy = (0..count, 0..count, edits());
    runner(48)
        .run(&strategy, |(base, donor, edits)| {
            target.run(&apply(&inputs[base], &inputs[donor], &edits));
            Ok(())
        })
        .expect("the client keeps its promises on edited streams");
    runner(16)
        .run(&proptest::collection::vec(any::<u8>(), 0..512), |bytes| {
            target.run(&bytes);
            Ok(())
        })
        .expect("the client keeps its promises on arbitrary bytes");
}

#[test]
fn openai_stream_decoding_survives_edited_and_arbitrary_streams() {
    sse_property(Wire::OpenAi, "openai");
}

#[test]
fn anthropic_stream_decoding_survives_edited_and_arbitrary_streams() {
    sse_property(Wire::Anthropic, "anthropic");
}

/// Payloads shaped like events: a known or unknown `type`, fields of any JSON type.
fn event_like() -> impl Strategy<Value = (u16, String)> {
    let kinds: Vec<String> = mull_core::Event::KNOWN_KINDS
        .iter()
        .map(|k| (*k).to_owned())
        .chain(["telepathy_detected".to_owned(), "".to_owned()])
        .collect();
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z_0-9]{0,8}".prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    let fields = proptest::collection::btree_map(
        prop_oneof![
            Just("step".to_owned()),
            Just("request_id".to_owned()),
            Just("part".to_owned()),
            Just("messages".to_owned()),
            "[a-z_]{1,10}",
        ],
        value,
        0..6,
    );
    (0u16..4, proptest::sample::select(kinds), fields).prop_map(|(v, kind, fields)| {
        let mut object: serde_json::Map<String, serde_json::Value> = fields.into_iter().collect();
        object.insert("type".to_owned(), kind.into());
        (v, serde_json::Value::Object(object).to_string())
    })
}

#[test]
fn event_decode_keeps_its_promises_on_event_shaped_and_arbitrary_payloads() {
    runner(512)
        .run(&event_like(), |(v, payload)| {
            targets::check_event_payload(v, &payload);
            Ok(())
        })
        .expect("event-shaped payloads");
    let valid = corpus("jsonl/unknown_kind_and_old_version.jsonl");
    runner(256)
        .run(&edits(), |edits| {
            let mut data = vec![1u8];
            data.extend(apply(&valid, &valid, &edits));
            targets::event_decode(&data);
            Ok(())
        })
        .expect("edited payloads");
    runner(256)
        .run(&proptest::collection::vec(any::<u8>(), 0..256), |bytes| {
            targets::event_decode(&bytes);
            Ok(())
        })
        .expect("arbitrary bytes");
}

#[test]
fn jsonl_import_is_all_or_nothing_and_round_trips_on_edited_files() {
    let inputs: Vec<Vec<u8>> = [
        "jsonl/unknown_kind_and_old_version.jsonl",
        "jsonl/seq_goes_back.jsonl",
        "jsonl/known_kind_bad_shape.jsonl",
    ]
    .iter()
    .map(|f| corpus(f))
    .collect();
    // The untouched valid file is imported and round-trips.
    targets::jsonl_import(&inputs[0]);
    runner(64)
        .run(
            &(0..inputs.len(), 0..inputs.len(), edits()),
            |(base, donor, edits)| {
                targets::jsonl_import(&apply(&inputs[base], &inputs[donor], &edits));
                Ok(())
            },
        )
        .expect("edited JSONL");
}
