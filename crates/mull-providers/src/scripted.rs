//! A deterministic, scriptable model for tests, demos and benchmarks.
