//! Edits of valid inputs for the property tests that stand in for the fuzz targets: a fuzzer
//! mutates its seeds; these are the same mutations, seeded and bounded. Shared by the root
//! `tests/reliability_fuzz.rs` (included by path) and this crate's tests.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// A seeded runner of `cases` cases: the same inputs on every run, nothing written to disk.
pub fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

/// Edits of a valid input: cut it, overwrite a byte, insert bytes, or splice in another input.
#[derive(Debug, Clone)]
pub enum Edit {
    Truncate(usize),
    Overwrite(usize, u8),
    Insert(usize, Vec<u8>),
    Splice(usize, usize),
}

/// One to three edits.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Overwrite(at, b)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..12)
        )
            .prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Splice(a, b)),
    ];
    proptest::collection::vec(edit, 1..4)
}

/// `base` with `edits` applied; a splice takes bytes from `donor`.
pub fn apply(base: &[u8], donor: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = base.to_vec();
    for edit in edits {
        let len = out.len().max(1);
        match edit {
            Edit::Truncate(at) => out.truncate(at % len),
            Edit::Overwrite(at, b) => {
                if !out.is_empty() {
                    let i = at % out.len();
                    out[i] = *b;
                }
            }
            Edit::Insert(at, bytes) => {
                let i = at % (out.len() + 1);
                out.splice(i..i, bytes.iter().copied());
            }
            Edit::Splice(at, from) => {
                if !donor.is_empty() {
                    let i = at % (out.len() + 1);
                    let j = from % donor.len();
                    out.splice(i..i, donor[j..].iter().copied());
                }
            }
        }
    }
    out
}
