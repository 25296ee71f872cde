//! `Event::decode` on arbitrary bytes: `[version][payload…]`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mull_reliability::targets::event_decode(data);
});
