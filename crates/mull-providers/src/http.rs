//! The HTTP and Server-Sent Events transport shared by the network providers.
//!
//! It owns the three things every streaming provider must get right in the same way:
//! - **Timeouts**: a connect timeout and an optional overall timeout ([`HttpOptions`]).
//! - **Error mapping** to [`ModelErrorKind`], so the engine's retry logic and error classifier
//!   work the same for every provider: 429 → `RateLimit` (with `Retry-After` as seconds or an HTTP
//!   date in `retry_after`), 5xx / connect failures / timeouts / a connection cut mid-stream →
//!   `Transient`, 401 / 403 → `Auth`, other 4xx → `InvalidRequest` with the body kept (so
//!   context-overflow messages stay classifiable), malformed SSE → `Protocol`.
//! - **SSE decoding**, done by `eventsource-stream`: this module only turns its errors into
//!   [`ModelError`]s and drives a provider's decoder over the events.
//!
//! Secrets never leave this module: request headers are not echoed into errors and the
//! [`Secret`] wrapper hides its value from `Debug` and `Display`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event as SseEvent, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use mull_core::{Clock, ModelError, ModelErrorKind, ModelStream, StreamPart};
use reqwest::header::HeaderMap;

/// How much of an error body is kept in a [`ModelError`]; bodies are for diagnosis, not storage.
const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;

/// A credential whose value must never be printed, logged or returned in an error.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The credential itself, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Transport limits of a provider: how long to wait for a connection and for a whole call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Time allowed to open the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Time allowed for a whole call, body included; `None` lets a long stream run for as long as
    /// the server keeps sending (the engine's stall watchdog still applies).
    pub request_timeout: Option<Duration>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Some(Duration::from_secs(600)),
        }
    }
}

/// Builds the reqwest client a provider reuses for all its calls.
/// The host and port of a provider's base URL (the port the scheme implies when none is
/// written); `None` for a URL that does not parse or names no host.
pub(crate) fn server_of(base_url: &str) -> Option<(String, u16)> {
    let url = reqwest::Url::parse(base_url).ok()?;
    Some((url.host_str()?.to_owned(), url.port_or_known_default()?))
}

pub(crate) fn build_client(options: HttpOptions) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder().connect_timeout(options.connect_timeout);
    if let Some(timeout) = options.request_timeout {
        builder = builder.timeout(timeout);
    }
    builder.build()
}

/// Sends a prepared request and returns the response when its status is a success; otherwise
/// reads the error body and maps the failure to a [`ModelError`].
pub(crate) async fn send(
    provider: &str,
    request: reqwest::RequestBuilder,
    clock: &dyn Clock,
) -> Result<reqwest::Response, ModelError> {
    let response = request
        .send()
        .await
        .map_err(|e| transport_error(provider, &e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let body = match response.bytes().await {
        Ok(bytes) => truncate_body(&bytes),
        Err(e) => format!("(error body unreadable: {})", describe_reqwest_error(&e)),
    };
    Err(status_error(
        provider,
        status.as_u16(),
        &headers,
        body,
        clock,
    ))
}

/// Maps an HTTP error status (with its headers and body) to a [`ModelError`].
pub(crate) fn status_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: String,
    clock: &dyn Clock,
) -> ModelError {
    let kind = match status {
        429 => ModelErrorKind::RateLimit,
        401 | 403 => ModelErrorKind::Auth,
        400..=499 => ModelErrorKind::InvalidRequest,
        500..=599 => ModelErrorKind::Transient,
        _ => ModelErrorKind::Other,
    };
    let detail = error_message_in_body(&body);
    let message = match detail {
        Some(detail) => format!("{provider}: HTTP {status}: {detail}"),
        None => format!("{provider}: HTTP {status}"),
    };
    ModelError {
        kind,
        message,
        status: Some(status),
        retry_after: retry_after(headers, clock),
        body: (!body.is_empty()).then_some(body),
    }
}

/// The human-readable message of a JSON error body (`{"error": {"message": …}}` or
/// `{"error": "…"}` or `{"message": …}`), when there is one.
fn error_message_in_body(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = value.get("error").unwrap_or(&value);
    if let Some(text) = error.as_str() {
        return Some(text.to_owned());
    }
    error
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_owned)
}

/// How long the server asked us to wait: `retry-after-ms`, or `Retry-After` as delta-seconds or
/// an HTTP date (measured against the injected clock; a date in the past means "now").
pub(crate) fn retry_after(headers: &HeaderMap, clock: &dyn Clock) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header_str(headers, "retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        if seconds.is_finite() && seconds >= 0.0 {
            return Some(Duration::from_secs_f64(seconds));
        }
    }
    // httpdate reads all three forms HTTP allows (IMF-fixdate, RFC 850, asctime).
    let at = chrono::DateTime::<chrono::Utc>::from(httpdate::parse_http_date(value).ok()?);
    let wait = at.signed_duration_since(clock.now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// Keeps at most [`MAX_ERROR_BODY_BYTES`] of a body, cut at a character boundary.
fn truncate_body(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= MAX_ERROR_BODY_BYTES {
        return text.into_owned();
    }
    let mut end = MAX_ERROR_BODY_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Maps a reqwest failure (connect, timeout, a body cut short) to a [`ModelError`].
pub(crate) fn transport_error(provider: &str, error: &reqwest::Error) -> ModelError {
    let kind = if error.is_builder() {
        ModelErrorKind::InvalidRequest
    } else if error.is_decode() {
        ModelErrorKind::Protocol
    } else {
        // Connect failures, timeouts, resets and bodies cut short are all worth a retry.
        ModelErrorKind::Transient
    };
    ModelError::new(
        kind,
        format!("{provider}: {}", describe_reqwest_error(error)),
    )
}

/// A reqwest error with its causes, without the URL's query (which some gateways use for keys).
fn describe_reqwest_error(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "request timed out"
    } else if error.is_connect() {
        "could not connect"
    } else if error.is_body() || error.is_decode() {
        "response body failed"
    } else if error.is_request() {
        "request failed"
    } else {
        "HTTP error"
    };
    let mut text = what.to_owned();
    if let Some(url) = error.url() {
        text.push_str(&format!(
            " ({}://{}{})",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        ));
        text.push_str(url.path());
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A provider's decoder of its wire format: turns each SSE event into stream parts.
pub(crate) trait WireDecoder: Send + 'static {
    /// Decodes one SSE event into zero or more parts; an error ends the stream.
    fn event(&mut self, event: &SseEvent) -> Result<Vec<StreamPart>, ModelError>;
    /// Called once when the byte stream ends: the parts still owed (or an error when the stream
    /// ended before the provider said it was finished).
    fn end(&mut self) -> Result<Vec<StreamPart>, ModelError>;
    /// Whether the provider's end-of-stream marker has been seen; later events are ignored.
    fn is_done(&self) -> bool;
}

/// The bytes of a successful response, with transport failures described once (causes
/// included, URL query left out) so the decoder needs nothing from reqwest.
pub(crate) fn response_bytes(
    response: reqwest::Response,
) -> impl Stream<Item = Result<impl AsRef<[u8]> + Send + 'static, String>> + Send + 'static {
    response
        .bytes_stream()
        .map(|chunk| chunk.map_err(|e| describe_reqwest_error(&e)))
}

/// Drives `decoder` over a byte stream of SSE: parts come out in order; the first error is
/// yielded and ends the stream. A failed read of `bytes` is a cut connection (`Transient`).
pub(crate) fn decode_sse<S, B, E, D>(provider: Arc<str>, bytes: S, decoder: D) -> ModelStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: fmt::Display + Send + 'static,
    D: WireDecoder,
{
    struct State<E, D> {
        events: E,
        decoder: D,
        pending: VecDeque<Result<StreamPart, ModelError>>,
        finished: bool,
        provider: Arc<str>,
    }
    let state = State {
        events: Box::pin(bytes.eventsource()),
        decoder,
        pending: VecDeque::new(),
        finished: false,
        provider,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                if item.is_err() {
                    state.pending.clear();
                    state.finished = true;
                }
                return Some((item, state));
            }
            if state.finished {
                return None;
            }
            match state.events.next().await {
                Some(Ok(event)) => {
                    if state.decoder.is_done() {
                        continue;
                    }
                    push_all(&mut state.pending, state.decoder.event(&event));
                }
                Some(Err(error)) => {
                    state.finished = true;
                    state
                        .pending
                        .push_back(Err(sse_error(&state.provider, error)));
                }
                None => {
                    state.finished = true;
                    if !state.decoder.is_done() {
                        push_all(&mut state.pending, state.decoder.end());
                    }
                }
            }
        }
    });
    Box::pin(stream)
}

fn push_all(
    pending: &mut VecDeque<Result<StreamPart, ModelError>>,
    decoded: Result<Vec<StreamPart>, ModelError>,
) {
    match decoded {
        Ok(parts) => pending.extend(parts.into_iter().map(Ok)),
        Err(error) => pending.push_back(Err(error)),
    }
}

fn sse_error<E: fmt::Display>(provider: &str, error: EventStreamError<E>) -> ModelError {
    match error {
        // Whatever the transport calls it, a byte stream failing after a 2xx is a cut connection.
        EventStreamError::Transport(e) => ModelError::new(
            ModelErrorKind::Transient,
            format!("{provider}: connection lost mid-stream: {e}"),
        ),
        EventStreamError::Utf8(e) => ModelError::new(
            ModelErrorKind::Protocol,
            format!("{provider}: stream is not valid UTF-8: {e}"),
        ),
        EventStreamError::Parser(e) => ModelError::new(
            ModelErrorKind::Protocol,
            format!("{provider}: malformed server-sent event: {e}"),
        ),
    }
}

/// Parses the JSON of one SSE `data` field, naming the event when it is not valid JSON.
pub(crate) fn parse_data(
    provider: &str,
    event: &SseEvent,
) -> Result<serde_json::Value, ModelError> {
    serde_json::from_str(&event.data).map_err(|e| {
        let mut shown: String = event.data.chars().take(200).collect();
        if shown.len() < event.data.len() {
            shown.push('…');
        }
        ModelError::new(
            ModelErrorKind::Protocol,
            format!(
                "{provider}: invalid JSON in `{}` event data ({e}): {shown}",
                event.event
            ),
        )
    })
}

/// The `Protocol` error for a known event whose fields do not have the documented shape.
pub(crate) fn wrong_shape(provider: &str, event: &str, what: &str) -> ModelError {
    ModelError::new(
        ModelErrorKind::Protocol,
        format!("{provider}: malformed `{event}` event: {what}"),
    )
}

/// Reads the optional field `key` of `parent` (an event or part of one) with `read`; `null`
/// counts as absent. A value `read` rejects is a [`wrong_shape`] error naming `at.key` and
/// what was `expected`, so bad provider output is never mistaken for an empty event.
pub(crate) fn optional_field<'v, T>(
    provider: &str,
    event: &str,
    parent: &'v serde_json::Value,
    at: &str,
    key: &str,
    expected: &str,
    read: impl FnOnce(&'v serde_json::Value) -> Option<T>,
) -> Result<Option<T>, ModelError> {
    match parent.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(found) => read(found).map(Some).ok_or_else(|| {
            wrong_shape(
                provider,
                event,
                &format!(
                    "`{}` should be {expected}, found {}",
                    field_path(at, key),
                    json_kind(found)
                ),
            )
        }),
    }
}

/// Like [`optional_field`], but a missing (or `null`) field is an error too.
pub(crate) fn required_field<'v, T>(
    provider: &str,
    event: &str,
    parent: &'v serde_json::Value,
    at: &str,
    key: &str,
    expected: &str,
    read: impl FnOnce(&'v serde_json::Value) -> Option<T>,
) -> Result<T, ModelError> {
    optional_field(provider, event, parent, at, key, expected, read)?.ok_or_else(|| {
        wrong_shape(
            provider,
            event,
            &format!("`{}` ({expected}) is missing", field_path(at, key)),
        )
    })
}

/// `key` under the dotted path `at` (the top level when `at` is empty), as error messages name it.
fn field_path(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// `value` itself when it is a JSON object: a reader for [`optional_field`].
pub(crate) fn as_object(value: &serde_json::Value) -> Option<&serde_json::Value> {
    value.is_object().then_some(value)
}

/// The JSON type of `value`, for error messages.
pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Maps a provider's in-band error type or code (`overloaded_error`, `rate_limit_exceeded` …) to
/// a [`ModelErrorKind`], so an error event mid-stream is retried or classified like its HTTP twin.
pub(crate) fn in_band_error_kind(error_type: &str) -> ModelErrorKind {
    let t = error_type.to_ascii_lowercase();
    if t.contains("rate_limit") {
        ModelErrorKind::RateLimit
    } else if t.contains("overloaded")
        || t.contains("server_error")
        || t == "api_error"
        || t.contains("timeout")
    {
        ModelErrorKind::Transient
    } else if t.contains("authentication") || t.contains("permission") || t.contains("api_key") {
        ModelErrorKind::Auth
    } else if t.contains("invalid_request")
        || t.contains("context_length")
        || t.contains("not_found")
        || t.contains("request_too_large")
    {
        ModelErrorKind::InvalidRequest
    } else {
        ModelErrorKind::Other
    }
}

/// Builds the [`ModelError`] for an in-band `error` object of a stream: its message, a kind from
/// its type or code, and the whole event data kept as the body for classifiers.
pub(crate) fn in_band_error(provider: &str, error: &serde_json::Value, data: &str) -> ModelError {
    let message = error
        .get("message")
        .and_then(|m| m.as_str())
        .or_else(|| error.as_str())
        .unwrap_or("unspecified error");
    let error_type = ["type", "code"]
        .iter()
        .filter_map(|key| error.get(*key).and_then(|v| v.as_str()))
        .map(in_band_error_kind)
        .find(|kind| *kind != ModelErrorKind::Other)
        .unwrap_or(ModelErrorKind::Other);
    let mut out = ModelError::new(
        error_type,
        format!("{provider}: error event mid-stream: {message}"),
    );
    out.body = Some(data.to_owned());
    out
}

/// The parts a provider's stream opens with: what it warns about the request (`stream-start`)
/// and the HTTP response's headers (`response-metadata`; names lower-case, cookies left out —
/// they are credentials, and the log keeps what it is given forever). `streamed` is
/// `Some(false)` for an answer served without streaming.
pub(crate) fn opening_parts(
    warnings: Vec<mull_core::CallWarning>,
    headers: &HeaderMap,
    streamed: Option<bool>,
) -> Vec<mull_core::StreamPart> {
    let headers = headers
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "set-cookie" | "cookie"))
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    vec![
        mull_core::StreamPart::StreamStart { warnings },
        mull_core::StreamPart::ResponseMetadata {
            id: None,
            model_id: None,
            timestamp: None,
            headers: Some(headers),
            streamed,
        },
    ]
}

/// `stream` behind `first`.
pub(crate) fn prepend(
    first: Vec<mull_core::StreamPart>,
    stream: mull_core::ModelStream,
) -> mull_core::ModelStream {
    use futures::StreamExt;
    Box::pin(futures::stream::iter(first.into_iter().map(Ok)).chain(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::FixedClock;
    use reqwest::header::HeaderValue;

    fn headers(name: &'static str, value: &'static str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_static(value));
        map
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let clock = FixedClock::at_fixture_epoch();
        assert_eq!(
            retry_after(&headers("retry-after", "7"), &clock),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers("retry-after", "Wed, 01 Jan 2025 00:00:30 GMT"),
                &clock
            ),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(
                &headers("retry-after", "Tue, 31 Dec 2024 23:00:00 GMT"),
                &clock
            ),
            Some(Duration::ZERO)
        );
        // The two older forms HTTP still allows a server to send.
        assert_eq!(
            retry_after(
                &headers("retry-after", "Wednesday, 01-Jan-25 00:00:45 GMT"),
                &clock
            ),
            Some(Duration::from_secs(45))
        );
        assert_eq!(
            retry_after(&headers("retry-after", "Wed Jan  1 00:01:00 2025"), &clock),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            retry_after(&headers("retry-after-ms", "1500"), &clock),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after(&headers("retry-after", "soon"), &clock), None);
        assert_eq!(retry_after(&HeaderMap::new(), &clock), None);
    }

    #[test]
    fn statuses_map_to_kinds() {
        let clock = FixedClock::at_fixture_epoch();
        let kind =
            |status| status_error("p", status, &HeaderMap::new(), String::new(), &clock).kind;
        assert_eq!(kind(429), ModelErrorKind::RateLimit);
        assert_eq!(kind(401), ModelErrorKind::Auth);
        assert_eq!(kind(403), ModelErrorKind::Auth);
        assert_eq!(kind(400), ModelErrorKind::InvalidRequest);
        assert_eq!(kind(404), ModelErrorKind::InvalidRequest);
        assert_eq!(kind(500), ModelErrorKind::Transient);
        assert_eq!(kind(529), ModelErrorKind::Transient);
    }

    #[test]
    fn error_messages_come_from_json_bodies() {
        let clock = FixedClock::at_fixture_epoch();
        let body = r#"{"error":{"message":"bad tool schema","type":"invalid_request_error"}}"#;
        let err = status_error("openai", 400, &HeaderMap::new(), body.into(), &clock);
        assert_eq!(err.message, "openai: HTTP 400: bad tool schema");
        assert_eq!(err.body.as_deref(), Some(body));
        let err = status_error("x", 502, &HeaderMap::new(), "<html>".into(), &clock);
        assert_eq!(err.message, "x: HTTP 502");
    }

    #[test]
    fn long_bodies_are_cut_at_a_char_boundary() {
        let body = "é".repeat(MAX_ERROR_BODY_BYTES);
        let cut = truncate_body(body.as_bytes());
        assert!(cut.len() <= MAX_ERROR_BODY_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }

    /// Runs both providers' decoders over `chunks` and returns how many items each produced.
    fn decode_both(chunks: &[Vec<u8>]) -> (usize, usize) {
        let run = |decoder: Box<dyn FnOnce(Vec<Vec<u8>>) -> ModelStream>| {
            let stream = decoder(chunks.to_vec());
            futures::executor::block_on(stream.collect::<Vec<_>>()).len()
        };
        let bytes = |chunks: Vec<Vec<u8>>| {
            futures::stream::iter(chunks.into_iter().map(Ok::<_, reqwest::Error>))
        };
        let openai = run(Box::new(move |c| {
            let provider: Arc<str> = Arc::from("openai");
            decode_sse(
                provider.clone(),
                bytes(c),
                crate::openai::ChatCompletionsDecoder::new(provider),
            )
        }));
        let anthropic = run(Box::new(move |c| {
            let provider: Arc<str> = Arc::from("anthropic");
            decode_sse(
                provider.clone(),
                bytes(c),
                crate::anthropic::MessagesDecoder::new(provider),
            )
        }));
        (openai, anthropic)
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..16)) {
            decode_both(&chunks);
        }

        #[test]
        fn arbitrary_json_events_never_panic(values in proptest::collection::vec(arbitrary_event(), 0..12)) {
            let wire: String = values.iter().map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or("message"))).collect();
            let (openai, anthropic) = decode_both(&[wire.into_bytes()]);
            // Every stream ends with something: a finish part or an error.
            proptest::prop_assert!(openai >= 1 && anthropic >= 1);
        }
    }

    /// JSON shaped like both providers' events, with fields of the wrong types mixed in.
    fn arbitrary_event() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            (0u64..4).prop_map(serde_json::Value::from),
            prop_oneof![
                Just("text"),
                Just("tool_use"),
                Just("thinking"),
                Just("text_delta"),
                Just("input_json_delta"),
                Just("stop"),
                Just("tool_calls"),
                Just("{\"a\""),
                Just("")
            ]
            .prop_map(serde_json::Value::from),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("type"),
                        Just("index"),
                        Just("delta"),
                        Just("content_block"),
                        Just("choices"),
                        Just("tool_calls"),
                        Just("function"),
                        Just("arguments"),
                        Just("name"),
                        Just("id"),
                        Just("content"),
                        Just("finish_reason"),
                        Just("usage"),
                        Just("text"),
                        Just("partial_json")
                    ]
                    .prop_map(str::to_owned),
                    inner,
                    0..4,
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        let kind = prop_oneof![
            Just("message_start"),
            Just("content_block_start"),
            Just("content_block_delta"),
            Just("content_block_stop"),
            Just("message_delta"),
            Just("message_stop"),
            Just("ping"),
            Just("chunk")
        ];
        (kind, value).prop_map(|(kind, value)| {
            let mut event = match value {
                serde_json::Value::Object(map) => map,
                other => {
                    let mut map = serde_json::Map::new();
                    map.insert("delta".into(), other);
                    map
                }
            };
            event.insert("type".into(), kind.into());
            serde_json::Value::Object(event)
        })
    }

    #[test]
    fn secrets_do_not_print() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(secret.expose(), "sk-very-secret");
    }
}

#[cfg(test)]
mod server_tests {
    use super::server_of;

    #[test]
    fn a_base_url_names_its_host_and_port_or_the_schemes() {
        assert_eq!(
            server_of("https://api.openai.com/v1"),
            Some(("api.openai.com".to_owned(), 443))
        );
        assert_eq!(
            server_of("http://127.0.0.1:11434/v1"),
            Some(("127.0.0.1".to_owned(), 11434))
        );
        assert_eq!(server_of("not a url"), None);
    }
}
