//! Counting tokens without a tokenizer: [`TokenCounter`] is what budgets, `compact_after` and
//! compaction reports measure with. The default, [`CharEstimator`], assumes four characters a
//! token, which is close for English prose on the major providers; an application that needs
//! exact numbers plugs its provider's tokenizer in with `SessionConfig::token_counter`.

use std::sync::Arc;

use mull_core::{to_model_messages, ModelContent, ModelMessage, UIMessage};

/// Counts tokens of text; messages are counted through their text.
pub trait TokenCounter: Send + Sync {
    /// Tokens in `text`.
    fn count_text(&self, text: &str) -> u64;

    /// Tokens in model messages: every text, reasoning, file reference, tool input and output.
    fn count_messages(&self, messages: &[ModelMessage]) -> u64 {
        messages
            .iter()
            .flat_map(|m| m.content.iter())
            .map(|c| match c {
                ModelContent::Text { text } | ModelContent::Reasoning { text } => {
                    self.count_text(text)
                }
                ModelContent::File { url, .. } => self.count_text(url),
                ModelContent::ToolCall {
                    tool_name, input, ..
                } => self.count_text(tool_name) + self.count_text(&input.to_string()),
                ModelContent::ToolResult { output, .. } => self.count_text(&output.to_string()),
            })
            .sum()
    }

    /// Tokens in a conversation, as the model would be sent it.
    fn count_conversation(&self, messages: &[UIMessage]) -> u64 {
        self.count_messages(&to_model_messages(messages))
    }
}

/// The default estimate: one token per four characters (rounded up).
#[derive(Debug, Default, Clone, Copy)]
pub struct CharEstimator;

impl TokenCounter for CharEstimator {
    fn count_text(&self, text: &str) -> u64 {
        u64::try_from(text.chars().count().div_ceil(4)).unwrap_or(u64::MAX)
    }
}

/// Any `Fn(&str) -> u64` counts tokens, so a tokenizer can be plugged in as a closure.
impl<F> TokenCounter for F
where
    F: Fn(&str) -> u64 + Send + Sync,
{
    fn count_text(&self, text: &str) -> u64 {
        self(text)
    }
}

/// A shared counter, as the session holds it.
pub type SharedTokenCounter = Arc<dyn TokenCounter>;

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::{ModelRole, Role};
    use serde_json::json;

    #[test]
    fn the_estimator_rounds_four_characters_up_to_a_token() {
        assert_eq!(CharEstimator.count_text(""), 0);
        assert_eq!(CharEstimator.count_text("abc"), 1);
        assert_eq!(CharEstimator.count_text("abcd"), 1);
        assert_eq!(CharEstimator.count_text("abcde"), 2);
        // Characters, not bytes: four two-byte letters are one token.
        assert_eq!(CharEstimator.count_text("éééé"), 1);
    }

    #[test]
    fn messages_count_their_texts_and_tool_traffic() {
        let messages = vec![
            ModelMessage::text(ModelRole::User, "12345678"),
            ModelMessage {
                role: ModelRole::Assistant,
                content: vec![ModelContent::ToolCall {
                    call_id: "c".into(),
                    tool_name: "look".into(),
                    input: json!({"q": 1}),
                }],
            },
        ];
        // 2 (text) + 1 ("look") + 2 ("{\"q\":1}" is 7 chars)
        assert_eq!(CharEstimator.count_messages(&messages), 5);
        let words = |t: &str| t.split_whitespace().count() as u64;
        assert_eq!(
            words.count_conversation(&[UIMessage::text("m", Role::User, "one two three")]),
            3
        );
    }
}
