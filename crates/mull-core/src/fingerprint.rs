//! Fingerprints of a model request: the canonical hash that identifies it, and the compact
//! [`RequestSummary`] a step record keeps instead of the whole request.
//!
//! A step's request holds the whole conversation so far; recording it in every step would make
//! the log grow with steps × history. The summary keeps what a reader and a replay miss need —
//! the hash, the settings, which tools and how many messages — and a short digest of each
//! message, tool and the system prompt, so a replay that misses can say *which* message or tool
//! differs without the recording holding them twice (the messages themselves are in the log).

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{CallSettings, ModelMessage, ModelRequest, ModelRole, ToolChoice, ToolSpec};

/// Hex characters of a digest in a [`RequestSummary`] (64 bits: enough to tell items apart).
pub const DIGEST_HEX_CHARS: usize = 16;

/// Bytes being hashed: every byte goes into the whole request's hasher, and while one item
/// (a message, a tool, the system prompt, the schema) is being written, into its own too.
struct Tee {
    whole: Sha256,
    item: Option<Sha256>,
}

/// The writer serde_json writes the request into.
struct TeeWriter<'a>(&'a RefCell<Tee>);

impl Write for TeeWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut tee = self.0.borrow_mut();
        tee.whole.update(buf);
        if let Some(item) = &mut tee.item {
            item.update(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A value serialized as itself, whose bytes are also digested on their own into `out`. serde_json
/// writes a sequence's separators outside the element, so an element's bytes are exactly its
/// own compact JSON and its digest equals [`digest`] of it.
struct Digested<'a, T> {
    value: &'a T,
    tee: &'a RefCell<Tee>,
    out: &'a RefCell<Vec<String>>,
}

impl<T: Serialize> Serialize for Digested<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.tee.borrow_mut().item = Some(Sha256::new());
        let written = self.value.serialize(serializer);
        let item = self.tee.borrow_mut().item.take();
        if let Some(item) = item {
            let full: [u8; 32] = item.finalize().into();
            self.out.borrow_mut().push(hex(&full[..DIGEST_HEX_CHARS / 2]));
        }
        written
    }
}

/// A sequence whose elements are each [`Digested`].
struct DigestedSeq<'a, T> {
    items: &'a [T],
    tee: &'a RefCell<Tee>,
    out: &'a RefCell<Vec<String>>,
}

impl<T: Serialize> Serialize for DigestedSeq<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.items.iter().map(|value| Digested {
            value,
            tee: self.tee,
            out: self.out,
        }))
    }
}

/// The request as it is hashed: the request with header values left out, serialized exactly as
/// `ModelRequest` serializes (same fields, same order), without cloning the messages.
#[derive(Serialize)]
struct Canonical<'a> {
    system: Option<Digested<'a, String>>,
    messages: DigestedSeq<'a, ModelMessage>,
    tools: DigestedSeq<'a, ToolSpec>,
    tool_choice: &'a ToolChoice,
    settings: Cow<'a, CallSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_schema: Option<Digested<'a, Value>>,
}

/// A request's canonical hash and the digests of its parts, from one pass over its JSON.
struct Fingerprint {
    hash: String,
    system: Option<String>,
    messages: Vec<String>,
    tools: Vec<String>,
    output_schema: Option<String>,
}

fn fingerprint(request: &ModelRequest) -> Fingerprint {
    let settings = if request.settings.headers.is_empty() {
        Cow::Borrowed(&request.settings)
    } else {
        Cow::Owned(request.settings.redacted())
    };
    let tee = RefCell::new(Tee {
        whole: Sha256::new(),
        item: None,
    });
    let (system, messages, tools, schema) = Default::default();
    let canonical = Canonical {
        system: request.system.as_ref().map(|value| Digested {
            value,
            tee: &tee,
            out: &system,
        }),
        messages: DigestedSeq {
            items: &request.messages,
            tee: &tee,
            out: &messages,
        },
        tools: DigestedSeq {
            items: &request.tools,
            tee: &tee,
            out: &tools,
        },
        tool_choice: &request.tool_choice,
        settings,
        output_schema: request.output_schema.as_ref().map(|value| Digested {
            value,
            tee: &tee,
            out: &schema,
        }),
    };
    // Writing into a hasher cannot fail, and plain data always serializes.
    let _ = serde_json::to_writer(TeeWriter(&tee), &canonical);
    drop(canonical);
    let whole: [u8; 32] = tee.into_inner().whole.finalize().into();
    let first = |out: RefCell<Vec<String>>| out.into_inner().into_iter().next();
    Fingerprint {
        hash: hex(&whole),
        system: first(system),
        messages: messages.into_inner(),
        tools: tools.into_inner(),
        output_schema: first(schema),
    }
}

/// The hex-encoded SHA-256 of `request` with header values redacted (see
/// [`ModelRequest::canonical_hash`]).
pub(crate) fn canonical_hash(request: &ModelRequest) -> String {
    fingerprint(request).hash
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A short digest of a value's compact JSON: the first [`DIGEST_HEX_CHARS`] hex characters of
/// its SHA-256.
pub fn digest(value: &impl Serialize) -> String {
    let mut hasher = Sha256::new();
    // Writing into a hasher cannot fail, and plain data always serializes.
    let _ = serde_json::to_writer(&mut hasher, value);
    let full: [u8; 32] = hasher.finalize().into();
    hex(&full[..DIGEST_HEX_CHARS / 2])
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
    /// Summarises `request`, computing its canonical hash.
    pub fn of(request: &ModelRequest) -> RequestSummary {
        let fingerprint = fingerprint(request);
        RequestSummary {
            hash: fingerprint.hash,
            system: fingerprint.system,
            message_count: u32::try_from(request.messages.len()).unwrap_or(u32::MAX),
            messages: request
                .messages
                .iter()
                .zip(fingerprint.messages)
                .map(|(m, digest)| format!("{}:{digest}", role_name(m.role)))
                .collect(),
            tools: request
                .tools
                .iter()
                .zip(fingerprint.tools)
                .map(|(t, digest)| format!("{}:{digest}", t.name))
                .collect(),
            tool_choice: request.tool_choice.clone(),
            settings: request.settings.redacted(),
            output_schema: fingerprint.output_schema,
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
    use crate::model::ModelMessage;
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
                input_schema: json!({"type": "object"}),
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
        assert_eq!(canonical_hash(&request), hex(&Sha256::digest(&bytes)));
        let plain = ModelRequest {
            output_schema: None,
            settings: CallSettings::default(),
            ..request
        };
        let bytes = serde_json::to_vec(&plain).unwrap();
        assert_eq!(canonical_hash(&plain), hex(&Sha256::digest(&bytes)));
    }

    #[test]
    fn the_summary_keeps_digests_and_no_secret() {
        let summary = RequestSummary::of(&request());
        assert_eq!(summary.hash, canonical_hash(&request()));
        assert_eq!(summary.message_count, 2);
        assert_eq!(summary.messages.len(), 2);
        assert!(summary.messages[0].starts_with("user:"));
        assert_eq!(summary.messages[0].len(), "user:".len() + DIGEST_HEX_CHARS);
        assert!(summary.tools[0].starts_with("add:"));
        assert_eq!(summary.settings.headers["authorization"], "[redacted]");
        let text = summary.to_value().to_string();
        assert!(!text.contains("s3cret") && !text.contains("hello"), "{text}");
        let back: RequestSummary = serde_json::from_value(summary.to_value()).unwrap();
        assert_eq!(back, summary);
        // One pass digests each part exactly as digesting it alone would.
        let request = request();
        assert_eq!(summary.system, request.system.as_ref().map(digest));
        assert_eq!(summary.messages[1], format!("assistant:{}", digest(&request.messages[1])));
        assert_eq!(summary.tools[0], format!("add:{}", digest(&request.tools[0])));
        assert_eq!(summary.output_schema, request.output_schema.as_ref().map(digest));
        let mut changed = request.clone();
        changed.messages[1] = ModelMessage::text(ModelRole::Assistant, "hullo");
        let other = RequestSummary::of(&changed);
        assert_eq!(other.messages[0], summary.messages[0]);
        assert_ne!(other.messages[1], summary.messages[1]);
    }
}
