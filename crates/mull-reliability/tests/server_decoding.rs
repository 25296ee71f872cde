//! The server's fuzz targets (`src/server_targets.rs`) as bounded, seeded property tests: chat
//! bodies, WebSocket frames and resume paths derived from valid requests by the fuzzers'
//! edits, and arbitrary bytes. Long runs use cargo-fuzz (see RELIABILITY.md).

use mull_reliability::edits::{apply, edits, runner};
use mull_reliability::server_targets::{chat_body, ws_frame, HttpTarget};
use proptest::prelude::*;

/// Valid chat request bodies, as the AI SDK sends them.
fn chat_seeds() -> Vec<Vec<u8>> {
    [
        r#"{"id":"chat_1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hello"}]}],"trigger":"submit-message"}"#,
        r#"{"id":"chat_2","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]},{"id":"m2","role":"assistant","parts":[{"type":"step-start"},{"type":"reasoning","text":"hm","state":"done"},{"type":"tool-weather","toolCallId":"c1","state":"output-available","input":{"city":"Lisbon"},"output":{"sky":"sun"}},{"type":"text","text":"sunny","state":"done"}]}],"trigger":"regenerate-message","messageId":"m2","extra":{"k":[1,2]}}"#,
        r#"{"id":"chat_3","messages":[{"id":"m1","role":"user","parts":[{"type":"dynamic-tool","toolName":"t","toolCallId":"c","state":"input-available","input":{}}]}]}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Valid WebSocket client frames of each type.
fn frame_seeds() -> Vec<Vec<u8>> {
    [
        r#"{"type":"send","requestId":"r1","id":"chat_1","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hello"}]}],"body":{"x":1}}"#,
        r#"{"type":"resume","requestId":"r2","id":"chat_1","lastSequence":3}"#,
        r#"{"type":"abort","requestId":"r1"}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

#[test]
fn chat_body_decoding_keeps_its_promises_on_edited_and_arbitrary_bodies() {
    let seeds = chat_seeds();
    for seed in &seeds {
        chat_body(seed);
    }
    let n = seeds.len();
    runner(512)
        .run(&(0..n, 0..n, edits()), |(base, donor, edits)| {
            chat_body(&apply(&seeds[base], &seeds[donor], &edits));
            Ok(())
        })
        .expect("chat bodies");
    runner(128)
        .run(&proptest::collection::vec(any::<u8>(), 0..256), |bytes| {
            chat_body(&bytes);
            Ok(())
        })
        .expect("arbitrary bytes");
}

#[test]
fn websocket_frame_decoding_keeps_its_promises_on_edited_and_arbitrary_frames() {
    let seeds = frame_seeds();
    for seed in &seeds {
        ws_frame(seed);
    }
    let n = seeds.len();
    runner(512)
        .run(&(0..n, 0..n, edits()), |(base, donor, edits)| {
            ws_frame(&apply(&seeds[base], &seeds[donor], &edits));
            Ok(())
        })
        .expect("frames");
    runner(128)
        .run(&proptest::collection::vec(any::<u8>(), 0..256), |bytes| {
            ws_frame(&bytes);
            Ok(())
        })
        .expect("arbitrary bytes");
}

#[test]
fn the_router_answers_edited_bodies_arbitrary_resume_ids_and_raw_bytes_and_keeps_serving() {
    let target = HttpTarget::start();
    let seeds = chat_seeds();
    for seed in &seeds {
        target.chat_body(seed);
    }
    let n = seeds.len();
    runner(48)
        .run(&(0..n, 0..n, edits()), |(base, donor, edits)| {
            target.chat_body(&apply(&seeds[base], &seeds[donor], &edits));
            Ok(())
        })
        .expect("chat bodies over HTTP");
    runner(48)
        .run(&proptest::collection::vec(any::<u8>(), 0..48), |id| {
            target.resume(&id);
            Ok(())
        })
        .expect("resume ids");
    let request =
        b"GET /api/chat/chat_1/stream HTTP/1.1\r\nhost: fuzz\r\nconnection: close\r\n\r\n";
    runner(32)
        .run(&edits(), |edits| {
            target.raw(&apply(request, request, &edits));
            Ok(())
        })
        .expect("raw request bytes");
}

/// The cargo-fuzz target keeps one server in a static.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<HttpTarget>();
};
