//! Fingerprints of a model request: the canonical hash that identifies it, and the compact
//! [`RequestSummary`] a step record keeps instead of the whole request.
//!
//! A step's request holds the whole conversation so far; recording it in every step would make
//! the log grow with steps × history. The summary keeps what a reader and a replay miss need —
//! the hash, the settings, which tools and how many messages — and a short digest of each
//! message, tool and the system prompt, so a replay that misses can say *which* message or tool
//! differs without the recording holding them twice (the messages themselves are in the log).

use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{CallSettings, ModelRequest, ModelRole, ToolChoice};

/// Hex characters of a digest in a [`RequestSummary`] (64 bits: enough to tell items apart).
pub const DIGEST_HEX_CHARS: usize = 16;

/// The request as it is hashed — serialized exactly as `ModelRequest` serializes (same
/// fields, same order, compact), with header values redacted — and where in that JSON each
/// summarised item sits, so that one serialization serves the hash and every digest.
struct Canonical {
    json: Vec<u8>,
    system: Option<Range<usize>>,
    messages: Vec<Range<usize>>,
    tools: Vec<Range<usize>>,
    output_schema: Option<Range<usize>>,
}

impl Canonical {
    fn of(request: &ModelRequest) -> Canonical {
        let mut json = Vec::with_capacity(1024);
        json.extend_from_slice(b"{\"system\":");
        let system_at = write_json(&mut json, &request.system);
        json.extend_from_slice(b",\"messages\":");
        let messages = write_seq(&mut json, &request.messages);
        json.extend_from_slice(b",\"tools\":");
        let tools = write_seq(&mut json, &request.tools);
        json.extend_from_slice(b",\"tool_choice\":");
        write_json(&mut json, &request.tool_choice);
        json.extend_from_slice(b",\"settings\":");
        if request.settings.headers.is_empty() {
            write_json(&mut json, &request.settings);
        } else {
            write_json(&mut json, &request.settings.redacted());
        }
        let output_schema = request.output_schema.as_ref().map(|schema| {
            json.extend_from_slice(b",\"output_schema\":");
            write_json(&mut json, schema)
        });
        json.push(b'}');
        Canonical {
            json,
            system: request.system.as_ref().map(|_| system_at),
            messages,
            tools,
            output_schema,
        }
    }

    /// The short digest of the item at `range`.
    fn digest(&self, range: &Range<usize>) -> String {
        short_hex(&Sha256::digest(&self.json[range.clone()]).into())
    }
}

/// Appends `value`'s compact JSON to `json`; returns where it landed.
fn write_json(json: &mut Vec<u8>, value: &impl Serialize) -> Range<usize> {
    let start = json.len();
    // Plain data always serializes; should it not, the item is hashed as `null`.
    if serde_json::to_writer(&mut *json, value).is_err() {
        json.truncate(start);
        json.extend_from_slice(b"null");
    }
    start..json.len()
}

/// Appends `items` as a JSON array; returns where each item landed.
fn write_seq<T: Serialize>(json: &mut Vec<u8>, items: &[T]) -> Vec<Range<usize>> {
    json.push(b'[');
    let ranges = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if i > 0 {
                json.push(b',');
            }
            write_json(json, item)
        })
        .collect();
    json.push(b']');
    ranges
}

/// The hex-encoded SHA-256 of `request` with header values redacted (see
/// [`ModelRequest::canonical_hash`]).
impl ModelRequest {
    /// A stable fingerprint of what the model is asked: system, messages, tools, tool choice,
    /// settings and output schema. Header values are left out (they may be secrets and do not
    /// change the answer), so a recorded session matches its replay. Hex-encoded SHA-256.
    pub fn canonical_hash(&self) -> String {
        hex::encode(Sha256::digest(&Canonical::of(self).json))
    }
}

fn short_hex(full: &[u8; 32]) -> String {
    hex::encode(&full[..DIGEST_HEX_CHARS / 2])
}

/// SHA-256 of a value's compact JSON. The JSON is written out first and hashed in one call:
/// serialized straight into the hasher, every key, quote and comma was an update of its own.
fn sha256_of(value: &impl Serialize) -> [u8; 32] {
    // Plain data always serializes.
    let json = serde_json::to_vec(value).unwrap_or_default();
    Sha256::digest(&json).into()
}

/// A short digest of a value's compact JSON: the first [`DIGEST_HEX_CHARS`] hex characters of
/// its SHA-256.
pub fn digest(value: &impl Serialize) -> String {
    short_hex(&sha256_of(value))
}

/// What a step record keeps of its model request (`StepRecord.request`): the canonical hash,
/// everything small as it was sent, and a digest in place of everything that grows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestSummary {
    /// [`ModelRequest::canonical_hash`]: what a replay matches requests by.
    pub hash: String,
    /// Digest of the system prompt, when there was one (the text is in `step_configured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub message_count: u32,
    /// One `role:digest` per message, in order.
    pub messages: Vec<String>,
    /// One `name:digest` per tool offered (the digest covers description and schema).
    pub tools: Vec<String>,
    pub tool_choice: ToolChoice,
    /// Call settings, header values redacted.
    pub settings: CallSettings,
    /// Digest of the structured-output schema, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<String>,
}

impl RequestSummary {
    /// Summarises `request`, computing its canonical hash. The request is serialized once: the
    /// hash covers the whole and each digest its item's stretch of the same bytes.
    pub fn of(request: &ModelRequest) -> RequestSummary {
        let canonical = Canonical::of(request);
        RequestSummary {
            hash: hex::encode(Sha256::digest(&canonical.json)),
            system: canonical.system.as_ref().map(|r| canonical.digest(r)),
            message_count: u32::try_from(request.messages.len()).unwrap_or(u32::MAX),
            messages: request
                .messages
                .iter()
                .zip(&canonical.messages)
                .map(|(m, r)| format!("{}:{}", role_name(m.role), canonical.digest(r)))
                .collect(),
            tools: request
                .tools
                .iter()
                .zip(&canonical.tools)
                .map(|(t, r)| format!("{}:{}", t.name, canonical.digest(r)))
                .collect(),
            tool_choice: request.tool_choice.clone(),
            settings: request.settings.redacted(),
            output_schema: canonical
                .output_schema
                .as_ref()
                .map(|r| canonical.digest(r)),
        }
    }

    /// The summary as the JSON a step record stores.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn role_name(role: ModelRole) -> &'static str {
    match role {
        ModelRole::System => "system",
        ModelRole::User => "user",
        ModelRole::Assistant => "assistant",
        ModelRole::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelMessage, ToolSpec};
    use serde_json::json;

    fn request() -> ModelRequest {
        let mut request = ModelRequest {
            system: Some("be brief".into()),
            messages: vec![
                ModelMessage::text(ModelRole::User, "hi"),
                ModelMessage::text(ModelRole::Assistant, "hello"),
            ],
            tools: vec![ToolSpec {
                name: "add".into(),
                description: "Adds.".into(),
                input_schema: json!({"type": "object"}).into(),
            }],
            output_schema: Some(json!({"type": "string"})),
            ..ModelRequest::default()
        };
        request.settings.temperature = Some(0.5);
        request
            .settings
            .headers
            .insert("authorization".into(), "Bearer s3cret".into());
        request
    }

    #[test]
    fn the_hash_is_sha256_of_the_redacted_request_as_serialized() {
        let request = request();
        let redacted = ModelRequest {
            settings: request.settings.redacted(),
            ..request.clone()
        };
        let bytes = serde_json::to_vec(&redacted).unwrap();
        assert_eq!(
            request.canonical_hash(),
            hex::encode(Sha256::digest(&bytes))
        );
        let plain = ModelRequest {
            output_schema: None,
            settings: CallSettings::default(),
            ..request
        };
        let bytes = serde_json::to_vec(&plain).unwrap();
        assert_eq!(plain.canonical_hash(), hex::encode(Sha256::digest(&bytes)));
    }

    #[test]
    fn the_summary_keeps_digests_and_no_secret() {
        let summary = RequestSummary::of(&request());
        assert_eq!(summary.hash, request().canonical_hash());
        assert_eq!(summary.message_count, 2);
        assert_eq!(summary.messages.len(), 2);
        assert!(summary.messages[0].starts_with("user:"));
        assert_eq!(summary.messages[0].len(), "user:".len() + DIGEST_HEX_CHARS);
        assert!(summary.tools[0].starts_with("add:"));
        assert_eq!(summary.settings.headers["authorization"], "[redacted]");
        let text = summary.to_value().to_string();
        assert!(
            !text.contains("s3cret") && !text.contains("hello"),
            "{text}"
        );
        let back: RequestSummary = serde_json::from_value(summary.to_value()).unwrap();
        assert_eq!(back, summary);
        let request = request();
        assert_eq!(summary.system, request.system.as_ref().map(digest));
        assert_eq!(
            summary.messages[1],
            format!("assistant:{}", digest(&request.messages[1]))
        );
        assert_eq!(
            summary.output_schema,
            request.output_schema.as_ref().map(digest)
        );
        let mut changed = request.clone();
        changed.messages[1] = ModelMessage::text(ModelRole::Assistant, "hullo");
        let other = RequestSummary::of(&changed);
        assert_eq!(other.messages[0], summary.messages[0]);
        assert_ne!(other.messages[1], summary.messages[1]);
    }
}
