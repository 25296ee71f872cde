//! The server's chat request decoding on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mull_reliability::server_targets::chat_body(data);
});
