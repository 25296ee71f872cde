//! Implementations of [`mull_core::LanguageModel`].

pub mod scripted;
