//! The anthropic streaming client fed arbitrary SSE bytes by a local server.
#![no_main]

use std::sync::OnceLock;

use mull_reliability::targets::{SseTarget, Wire};

static TARGET: OnceLock<SseTarget> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    TARGET.get_or_init(|| SseTarget::new(Wire::Anthropic)).run(data);
});
