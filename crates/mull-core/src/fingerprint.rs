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

use crate::model::{CallSettings, ModelMessage, ModelRequest, ModelRole, ToolChoice};

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
        let system_at = write_head(&mut json, request);
        let messages = write_items(&mut json, &request.messages);
        let tail = write_tail(&mut json, request);
        Canonical {
            json,
            system: request.system.as_ref().map(|_| system_at),
            messages,
            tools: tail.tools,
            output_schema: tail.output_schema,
        }
    }

    /// The short digest of the item at `range`.
    fn digest(&self, range: &Range<usize>) -> String {
        short_hex(&Sha256::digest(&self.json[range.clone()]).into())
    }
}

/// Appends the start of the canonical request, `{"system":…,"messages":[`; returns where the
/// system prompt landed.
fn write_head(json: &mut Vec<u8>, request: &ModelRequest) -> Range<usize> {
    json.extend_from_slice(b"{\"system\":");
    let system_at = write_json(json, &request.system);
    json.extend_from_slice(b",\"messages\":[");
    system_at
}

/// Where the items after the messages landed.
struct Tail {
    tools: Vec<Range<usize>>,
    output_schema: Option<Range<usize>>,
}

/// Appends what follows the messages' array in the canonical request, from its closing `]` to
/// the request's closing `}`.
fn write_tail(json: &mut Vec<u8>, request: &ModelRequest) -> Tail {
    json.extend_from_slice(b"],\"tools\":");
    let tools = write_seq(json, &request.tools);
    json.extend_from_slice(b",\"tool_choice\":");
    write_json(json, &request.tool_choice);
    json.extend_from_slice(b",\"settings\":");
    if request.settings.headers.is_empty() {
        write_json(json, &request.settings);
    } else {
        write_json(json, &request.settings.redacted());
    }
    let output_schema = request.output_schema.as_ref().map(|schema| {
        json.extend_from_slice(b",\"output_schema\":");
        write_json(json, schema)
    });
    json.push(b'}');
    Tail {
        tools,
        output_schema,
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
    let ranges = write_items(json, items);
    json.push(b']');
    ranges
}

/// Appends `items` comma-separated (an array's inside); returns where each item landed.
fn write_items<T: Serialize>(json: &mut Vec<u8>, items: &[T]) -> Vec<Range<usize>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if i > 0 {
                json.push(b',');
            }
            write_json(json, item)
        })
        .collect()
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

/// The summaries of one conversation's successive requests (a turn's steps). Each request
/// repeats the one before with messages appended, and hashing the whole conversation again at
/// every step made a step cost O(history): here the SHA-256 state after the messages already
/// hashed is kept with their digests, and a step hashes only its new messages and what follows
/// them. The same bytes are hashed, so the result is exactly [`RequestSummary::of`]'s (recorded
/// hashes and replays are unchanged); a request that does not extend the kept one (another
/// system prompt, an earlier message changed or dropped) starts over.
#[derive(Clone, Default)]
pub struct SummaryCache {
    /// `{"system":…,"messages":[` of the kept requests, serialized.
    head: Vec<u8>,
    /// Where the system prompt sits in `head`, when there is one.
    system: Option<Range<usize>>,
    /// The messages hashed so far, each with its `role:digest`.
    messages: Vec<(ModelMessage, String)>,
    /// SHA-256 after `head` and the kept messages, comma-separated.
    state: Sha256,
}

impl std::fmt::Debug for SummaryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryCache")
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
    }
}

impl SummaryCache {
    /// A cache holding nothing yet.
    pub fn new() -> SummaryCache {
        SummaryCache::default()
    }

    /// [`RequestSummary::of`] `request`, reusing what the kept requests hashed.
    pub fn summarize(&mut self, request: &ModelRequest) -> RequestSummary {
        self.extend(request);
        let mut tail = Vec::with_capacity(256);
        let at = write_tail(&mut tail, request);
        let mut whole = self.state.clone();
        whole.update(&tail);
        let digest_of = |json: &[u8], range: &Range<usize>| {
            short_hex(&Sha256::digest(&json[range.clone()]).into())
        };
        RequestSummary {
            hash: hex::encode(whole.finalize()),
            system: self.system.as_ref().map(|r| digest_of(&self.head, r)),
            message_count: u32::try_from(request.messages.len()).unwrap_or(u32::MAX),
            messages: self.messages.iter().map(|(_, d)| d.clone()).collect(),
            tools: request
                .tools
                .iter()
                .zip(&at.tools)
                .map(|(t, r)| format!("{}:{}", t.name, digest_of(&tail, r)))
                .collect(),
            tool_choice: request.tool_choice.clone(),
            settings: request.settings.redacted(),
            output_schema: at.output_schema.as_ref().map(|r| digest_of(&tail, r)),
        }
    }

    /// Brings the kept state to `request`'s messages: appends the new ones, or starts over when
    /// `request` does not extend what is kept.
    fn extend(&mut self, request: &ModelRequest) {
        let mut head = Vec::with_capacity(64);
        let system = write_head(&mut head, request);
        let kept = &self.messages;
        let extends = head == self.head
            && kept.len() <= request.messages.len()
            && kept.iter().zip(&request.messages).all(|((k, _), m)| k == m);
        if !extends {
            self.state = Sha256::new();
            self.state.update(&head);
            self.head = head;
            self.system = request.system.as_ref().map(|_| system);
            self.messages.clear();
        }
        let mut json = Vec::new();
        for message in &request.messages[self.messages.len()..] {
            if !self.messages.is_empty() {
                self.state.update(b",");
            }
            json.clear();
            write_json(&mut json, message);
            self.state.update(&json);
            let digest = short_hex(&Sha256::digest(&json).into());
            let summarised = format!("{}:{digest}", role_name(message.role));
            self.messages.push((message.clone(), summarised));
        }
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

    /// How one step's request differs from the one before.
    #[derive(Debug, Clone)]
    enum Change {
        /// Messages appended (the usual step).
        Append(Vec<(u8, String)>),
        /// An earlier message rewritten (a hook, compaction).
        Rewrite(usize, String),
        /// The conversation cut to its first n messages.
        Truncate(usize),
        /// Another system prompt, or none.
        System(Option<String>),
        /// Other tools or settings: only what follows the messages changes.
        Tail(u8),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        let text = "[a-z\"\\\\ é\n]{0,12}";
        prop_oneof![
            4 => proptest::collection::vec((0u8..4, text), 0..4).prop_map(Change::Append),
            1 => (0usize..8, text).prop_map(|(i, t)| Change::Rewrite(i, t)),
            1 => (0usize..8).prop_map(Change::Truncate),
            1 => proptest::option::of(text).prop_map(Change::System),
            1 => (0u8..4).prop_map(Change::Tail),
        ]
    }

    fn apply(request: &mut ModelRequest, change: Change) {
        let role = |r: u8| match r {
            0 => ModelRole::User,
            1 => ModelRole::Assistant,
            2 => ModelRole::Tool,
            _ => ModelRole::System,
        };
        match change {
            Change::Append(messages) => request.messages.extend(
                messages
                    .into_iter()
                    .map(|(r, t)| ModelMessage::text(role(r), t)),
            ),
            Change::Rewrite(i, text) => {
                if let Some(m) = request.messages.get_mut(i) {
                    *m = ModelMessage::text(m.role, text);
                }
            }
            Change::Truncate(n) => request.messages.truncate(n),
            Change::System(system) => request.system = system,
            Change::Tail(n) => {
                request.tools.truncate(usize::from(n % 2));
                request.settings.temperature = Some(f64::from(n));
                request.output_schema = (n > 1).then(|| json!({"n": n}));
                if n == 3 {
                    request.settings.headers.insert("k".into(), "v".into());
                }
            }
        }
    }

    proptest::proptest! {
        /// Step after step, whatever each step changed, the cache gives exactly the summary
        /// (hash and every digest) a fresh computation gives.
        #[test]
        fn a_cached_summary_is_the_fresh_one(changes in proptest::collection::vec(change(), 1..12)) {
            let mut request = request();
            let mut cache = SummaryCache::new();
            proptest::prop_assert_eq!(cache.summarize(&request), RequestSummary::of(&request));
            for change in changes {
                apply(&mut request, change);
                let fresh = RequestSummary::of(&request);
                proptest::prop_assert_eq!(&fresh.hash, &request.canonical_hash());
                proptest::prop_assert_eq!(cache.summarize(&request), fresh);
            }
        }
    }

    #[test]
    fn a_changed_earlier_message_changes_the_cached_hash() {
        let mut request = request();
        let mut cache = SummaryCache::new();
        let first = cache.summarize(&request);
        request.messages[0] = ModelMessage::text(ModelRole::User, "hi!");
        let changed = cache.summarize(&request);
        assert_ne!(changed.hash, first.hash);
        assert_ne!(changed.messages[0], first.messages[0]);
        assert_eq!(changed.messages[1], first.messages[1]);
        assert_eq!(changed, RequestSummary::of(&request));
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
