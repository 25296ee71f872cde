//! Which names the GenAI attributes and metrics go out under.
//!
//! mull writes the OpenTelemetry GenAI semantic conventions as released in
//! `semantic-conventions-genai` v0.1.0 (`gen_ai.usage.cache_write.input_tokens`,
//! `gen_ai.usage.reasoning.output_tokens`, `gen_ai.response.time_to_first_chunk`,
//! `gen_ai.request.stream`, `gen_ai.conversation.compacted`, the per-direction token
//! histograms). Backends built against the conventions before that release read a few of these
//! under older names; [`Conventions::Legacy`] sends those instead. Every place that names an
//! attribute or a metric asks [`Conventions::name`], so the table below is the one list of
//! differences, for live spans, re-exported spans and metrics alike.

use std::env;

/// The variable that picks the older names: `MULL_OTEL_GENAI_CONVENTIONS=legacy`.
pub const CONVENTIONS_VARIABLE: &str = "MULL_OTEL_GENAI_CONVENTIONS";

/// The name sets mull can send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Conventions {
    /// `semantic-conventions-genai` v0.1.0 (the default).
    #[default]
    Current,
    /// The names of the GenAI conventions before v0.1.0 (semantic-conventions 1.37–1.38).
    Legacy,
}

/// (current name, older name). A current name absent here is the same in both sets.
const RENAMED: &[(&str, &str)] = &[(
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
)];

impl Conventions {
    /// What [`CONVENTIONS_VARIABLE`] asks for: `legacy` picks the older names, anything else
    /// (or nothing) the current ones.
    pub fn from_env() -> Conventions {
        match env::var(CONVENTIONS_VARIABLE) {
            Ok(v) if v.trim().eq_ignore_ascii_case("legacy") => Conventions::Legacy,
            _ => Conventions::Current,
        }
    }

    /// The name `current` goes out under in this set.
    pub fn name(self, current: &'static str) -> &'static str {
        self.name_of(current)
    }

    /// The name `current` (any string, e.g. a live span's field) goes out under in this set.
    pub fn name_of(self, current: &str) -> &str {
        match self {
            Conventions::Current => current,
            Conventions::Legacy => RENAMED
                .iter()
                .find(|(new, _)| *new == current)
                .map_or(current, |(_, old)| old),
        }
    }

    /// Whether the token usage metric is the single `gen_ai.client.token.usage` histogram
    /// split by `gen_ai.token.type` (older) rather than one histogram per direction.
    pub fn single_token_histogram(self) -> bool {
        self == Conventions::Legacy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_renamed_attributes_change() {
        let key = "gen_ai.usage.cache_write.input_tokens";
        assert_eq!(Conventions::Current.name(key), key);
        assert_eq!(
            Conventions::Legacy.name(key),
            "gen_ai.usage.cache_creation.input_tokens"
        );
        assert_eq!(
            Conventions::Legacy.name("gen_ai.usage.input_tokens"),
            "gen_ai.usage.input_tokens"
        );
    }
}
