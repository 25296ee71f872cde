use mull_core::{FinishReason, ModelContent};
use serde_json::json;

use super::request::content_block;
use super::stream::stop_reason;
use super::*;

#[test]
fn stop_reasons_map() {
    assert_eq!(stop_reason("end_turn"), FinishReason::Stop);
    assert_eq!(stop_reason("stop_sequence"), FinishReason::Stop);
    assert_eq!(stop_reason("max_tokens"), FinishReason::Length);
    assert_eq!(stop_reason("tool_use"), FinishReason::ToolCalls);
    assert_eq!(stop_reason("refusal"), FinishReason::ContentFilter);
    assert_eq!(stop_reason("something_new"), FinishReason::Other);
}

#[test]
fn data_urls_become_base64_sources() {
    let block = content_block(&ModelContent::File {
        media_type: "image/png".into(),
        url: "data:image/png;base64,AAAA".into(),
    });
    assert_eq!(
        block,
        Some(
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}})
        )
    );
    let block = content_block(&ModelContent::File {
        media_type: "application/pdf".into(),
        url: "https://example.invalid/a.pdf".into(),
    });
    assert_eq!(
        block,
        Some(
            json!({"type": "document", "source": {"type": "url", "url": "https://example.invalid/a.pdf"}})
        )
    );
}

#[test]
fn debug_output_hides_the_key() {
    let model = AnthropicModel::new(AnthropicConfig::new("claude", Secret::new("sk-ant-secret")))
        .expect("client builds");
    assert!(!format!("{model:?}").contains("sk-ant-secret"));
}
