//! The server's WebSocket client frame decoding on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mull_reliability::server_targets::ws_frame(data);
});
