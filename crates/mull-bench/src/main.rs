//! mull's bench binary.
fn main() {}
