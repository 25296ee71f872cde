//! The real router on 127.0.0.1 fed arbitrary bytes: the first byte picks a chat body, a
//! resume id or a raw request; the rest is the input.
#![no_main]

use std::sync::OnceLock;

use mull_reliability::server_targets::HttpTarget;

static TARGET: OnceLock<HttpTarget> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let target = TARGET.get_or_init(HttpTarget::start);
    match data.split_first() {
        Some((0, rest)) => target.chat_body(rest),
        Some((1, rest)) => target.resume(rest),
        Some((_, rest)) => target.raw(rest),
        None => {}
    }
});
