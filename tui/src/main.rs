//! The `mull` binary.
fn main() {}
