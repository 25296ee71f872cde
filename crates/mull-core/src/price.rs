//! What tokens cost: a price table per model, and the cost of one model call's [`Usage`].
//!
//! Prices are US dollars per million tokens, four per model: uncached input, output, cache
//! reads and cache writes. [`PriceTable::defaults`] knows the common OpenAI and Anthropic models
//! at their list prices when this table was written; a JSON file (see [`PriceTable::parse`])
//! adds models or overrides any of them, since prices change and local models cost nothing a
//! provider bills. A model the table does not know, or a call whose provider reported no
//! usage, has an **unknown** cost: never a zero that looks like a fact.
//!
//! Token accounting follows mull's [`Usage`]: `input_tokens` counts every prompt token, cache
//! reads (`cached_input_tokens`) and cache writes included, so the uncached part is what is left
//! after both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stream::Usage;

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input: f64,
    /// Output tokens (reasoning included).
    pub output: f64,
    /// Input tokens read from the prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Input tokens written to the prompt cache; the input price when absent (OpenAI charges
    /// nothing extra for writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// The tokens of one call, split the way they are billed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BilledTokens {
    pub uncached_input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

impl BilledTokens {
    /// Splits `usage` (with the cache writes the provider reported apart, when it did); `None`
    /// when the provider reported no input or no output count.
    pub fn of(usage: &Usage, cache_write: Option<u64>) -> Option<BilledTokens> {
        let input = usage.input_tokens?;
        let output = usage.output_tokens?;
        let cache_read = usage.cached_input_tokens.unwrap_or(0);
        let cache_write = cache_write.unwrap_or(0);
        Some(BilledTokens {
            uncached_input: input.saturating_sub(cache_read + cache_write),
            cache_read,
            cache_write,
            output,
        })
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &BilledTokens) {
        self.uncached_input += other.uncached_input;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.output += other.output;
    }
}

/// Cache-write tokens of one model call, from its step's provider metadata: only Anthropic
/// reports them (`{"anthropic": {"cache_creation_input_tokens": N}}`); `None` elsewhere.
pub fn cache_write_tokens(provider_metadata: Option<&serde_json::Value>) -> Option<u64> {
    provider_metadata?
        .get("anthropic")?
        .get("cache_creation_input_tokens")?
        .as_u64()
}

impl ModelPrice {
    /// The cost of `tokens`, in US dollars.
    pub fn cost(&self, tokens: &BilledTokens) -> f64 {
        let per = |n: u64, price: f64| n as f64 * price / 1_000_000.0;
        per(tokens.uncached_input, self.input)
            + per(tokens.cache_read, self.cache_read.unwrap_or(self.input))
            + per(tokens.cache_write, self.cache_write.unwrap_or(self.input))
            + per(tokens.output, self.output)
    }
}

/// Why a price file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    #[error("price file is not valid: {0} (expected {{\"models\": {{\"MODEL\": {{\"input\": 0.15, \"output\": 0.6, \"cache_read\": 0.075, \"cache_write\": 0.15}}}}}})")]
    Shape(#[source] serde_json::Error),
    #[error("price of model `{model}` is negative or not a number")]
    Negative { model: String },
}

/// Prices by model id. A model id matches its own entry, else the longest entry it starts with
/// (`claude-sonnet-4-5-20250929` is priced as `claude-sonnet-4-5`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    models: BTreeMap<String, ModelPrice>,
}

#[derive(Deserialize)]
struct PriceFile {
    models: BTreeMap<String, ModelPrice>,
}

/// One row of the built-in table: (model, input, output, cache read, cache write).
type DefaultPrice = (&'static str, f64, f64, Option<f64>, Option<f64>);

/// List prices in USD per million tokens.
const DEFAULTS: &[DefaultPrice] = &[
    // OpenAI: cached input at its discount, no surcharge for cache writes.
    ("gpt-5", 1.25, 10.0, Some(0.125), None),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025), None),
    ("gpt-5-nano", 0.05, 0.40, Some(0.005), None),
    ("gpt-4.1", 2.0, 8.0, Some(0.50), None),
    ("gpt-4.1-mini", 0.40, 1.60, Some(0.10), None),
    ("gpt-4.1-nano", 0.10, 0.40, Some(0.025), None),
    ("gpt-4o", 2.50, 10.0, Some(1.25), None),
    ("gpt-4o-mini", 0.15, 0.60, Some(0.075), None),
    ("o3", 2.0, 8.0, Some(0.50), None),
    ("o4-mini", 1.10, 4.40, Some(0.275), None),
    // Anthropic: cache reads at a tenth of input, five-minute cache writes at 1.25×.
    ("claude-opus-4-5", 5.0, 25.0, Some(0.50), Some(6.25)),
    ("claude-opus-4-1", 15.0, 75.0, Some(1.50), Some(18.75)),
    ("claude-opus-4", 15.0, 75.0, Some(1.50), Some(18.75)),
    ("claude-sonnet-4-5", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-sonnet-4", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-3-7-sonnet", 3.0, 15.0, Some(0.30), Some(3.75)),
    ("claude-haiku-4-5", 1.0, 5.0, Some(0.10), Some(1.25)),
    ("claude-3-5-haiku", 0.80, 4.0, Some(0.08), Some(1.0)),
];

impl PriceTable {
    /// An empty table: every cost is unknown.
    pub fn new() -> PriceTable {
        PriceTable::default()
    }

    /// The common OpenAI and Anthropic models at list price.
    pub fn defaults() -> PriceTable {
        let mut table = PriceTable::new();
        for &(model, input, output, cache_read, cache_write) in DEFAULTS {
            table.set(
                model,
                ModelPrice {
                    input,
                    output,
                    cache_read,
                    cache_write,
                },
            );
        }
        table
    }

    /// Sets (or replaces) one model's price.
    pub fn set(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.models.insert(model.into(), price);
    }

    /// Reads a price file, `{"models": {"MODEL": {"input": …, "output": …, "cache_read": …,
    /// "cache_write": …}}}`, and lays its entries over this table.
    pub fn parse(mut self, json: &str) -> Result<PriceTable, PriceError> {
        let file: PriceFile = serde_json::from_str(json).map_err(PriceError::Shape)?;
        for (model, price) in file.models {
            let all = [price.input, price.output]
                .into_iter()
                .chain(price.cache_read)
                .chain(price.cache_write);
            if all.into_iter().any(|p| !p.is_finite() || p < 0.0) {
                return Err(PriceError::Negative { model });
            }
            self.set(model, price);
        }
        Ok(self)
    }

    /// The price of `model_id`: its entry, else the longest entry it starts with.
    pub fn price(&self, model_id: &str) -> Option<&ModelPrice> {
        if let Some(price) = self.models.get(model_id) {
            return Some(price);
        }
        self.models
            .iter()
            .filter(|(name, _)| model_id.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
    }

    /// The cost of `tokens` on `model_id`, unknown when the model has no price.
    pub fn cost(&self, model_id: &str, tokens: &BilledTokens) -> Option<f64> {
        self.price(model_id).map(|p| p.cost(tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dated_model_id_is_priced_as_its_family_and_the_longest_name_wins() {
        let table = PriceTable::defaults();
        assert_eq!(
            table.price("gpt-4o-mini-2024-07-18").map(|p| p.input),
            Some(0.15)
        );
        assert_eq!(
            table.price("gpt-4o-2024-08-06").map(|p| p.input),
            Some(2.50)
        );
        assert_eq!(
            table
                .price("claude-sonnet-4-5-20250929")
                .map(|p| p.cache_write),
            Some(Some(3.75))
        );
        assert_eq!(table.price("local"), None);
    }

    #[test]
    fn cache_reads_and_writes_are_billed_apart_from_uncached_input() {
        let usage = Usage {
            input_tokens: Some(1_000_000),
            output_tokens: Some(100_000),
            cached_input_tokens: Some(600_000),
            ..Usage::default()
        };
        let tokens = BilledTokens::of(&usage, Some(100_000)).expect("known");
        assert_eq!(tokens.uncached_input, 300_000);
        let cost = PriceTable::defaults()
            .cost("claude-sonnet-4-5", &tokens)
            .expect("priced");
        // 0.3 × 3 + 0.6 × 0.30 + 0.1 × 3.75 + 0.1 × 15
        assert!((cost - (0.9 + 0.18 + 0.375 + 1.5)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn unreported_usage_and_unknown_models_have_no_cost() {
        assert_eq!(BilledTokens::of(&Usage::default(), None), None);
        let tokens = BilledTokens::default();
        assert_eq!(PriceTable::defaults().cost("gemma-3-270m", &tokens), None);
    }

    #[test]
    fn a_price_file_overrides_and_adds_and_refuses_bad_prices() {
        let table = PriceTable::defaults()
            .parse(r#"{"models": {"local": {"input": 0, "output": 0}, "gpt-4o": {"input": 2, "output": 8}}}"#)
            .expect("valid");
        assert_eq!(table.price("local").map(|p| p.output), Some(0.0));
        assert_eq!(table.price("gpt-4o").map(|p| p.input), Some(2.0));
        let err = PriceTable::new()
            .parse(r#"{"models": {"m": {"input": -1, "output": 0}}}"#)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "price of model `m` is negative or not a number"
        );
        assert!(PriceTable::new().parse("[]").is_err());
    }
}
