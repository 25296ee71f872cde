//! `import_jsonl` on arbitrary bytes, into a fresh log each run.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mull_reliability::targets::jsonl_import(data);
});
