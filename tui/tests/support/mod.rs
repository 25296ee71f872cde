//! Helpers of the binary's multi-node tests: `mull serve` processes and what drives them.

#![allow(dead_code)]

pub mod model;
pub mod nodes;
