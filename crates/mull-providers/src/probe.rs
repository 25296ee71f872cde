//! Finding out why a stream ended with no answer.
//!
//! Some Chat Completions servers answer a streaming request they refuse with HTTP 200 and an
//! empty body (llama.cpp's Python server does so for a prompt longer than its context), or end
//! the stream without a finish, while the same request sent without streaming gets the real
//! error: a 400 whose body says `context_length_exceeded`. A bare "the stream was empty" is
//! unclassifiable and invites retries that cannot help, so when a stream ends early the provider
//! sends **one** non-streaming probe of the same request (output capped at one token) and the
//! error the turn sees is the probe's, named as such: an overflow is then classified like its
//! non-streaming twin and a refusal is not retried. When the probe succeeds the failure did not
//! repeat, and the stream error is reported as transient (a retry may well succeed).
//!
//! Some servers cannot stream some answers at all: llama-cpp-python's server ends the stream of
//! an automatic tool choice empty (saying why only in its own log) while the same request
//! without streaming is answered. So a provider may instead recover (see [`on_ended_early`]):
//! send the whole request without streaming and use that answer; its error, when it has one,
//! is explained the same way as a probe's.

use std::future::Future;

use std::collections::VecDeque;

use futures::StreamExt;
use mull_core::{ModelError, ModelErrorKind, ModelStream, StreamPart};

/// What the end of a stream that owed an answer says, after the provider name.
const ENDED_EARLY: &str = "the stream ended before the server said it was finished";

/// The error for a successful response whose stream ended before the provider's finish: `empty`
/// when not one event arrived.
pub(crate) fn ended_early(provider: &str, empty: bool, what_was_missing: &str) -> ModelError {
    let how = if empty {
        "HTTP 200 with an empty stream"
    } else {
        "a stream cut short"
    };
    ModelError::new(
        ModelErrorKind::Protocol,
        format!("{provider}: {ENDED_EARLY} ({how}: no {what_was_missing})"),
    )
}

/// Whether `error` is one [`ended_early`] made.
fn is_ended_early(error: &ModelError) -> bool {
    error.kind == ModelErrorKind::Protocol
        && error.status.is_none()
        && error.message.contains(ENDED_EARLY)
}

/// Passes `stream` through; when it ends early (see [`ended_early`]), calls `recover` once with
/// that error and whether any content (a part other than call metadata) had already been
/// yielded. `recover` gives either the parts that stand in for the missing answer (yielded
/// next, in order) or the error the turn sees instead.
pub(crate) fn on_ended_early<F, Fut>(stream: ModelStream, recover: F) -> ModelStream
where
    F: FnOnce(ModelError, bool) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<StreamPart>, ModelError>> + Send + 'static,
{
    struct State<F> {
        stream: ModelStream,
        recover: Option<F>,
        pending: VecDeque<StreamPart>,
        content_seen: bool,
    }
    let state = State {
        stream,
        recover: Some(recover),
        pending: VecDeque::new(),
        content_seen: false,
    };
    let recovered = futures::stream::unfold(state, |mut state| async move {
        if let Some(part) = state.pending.pop_front() {
            return Some((Ok(part), state));
        }
        let item = match state.stream.next().await? {
            Err(error) if is_ended_early(&error) => match state.recover.take() {
                Some(recover) => match recover(error, state.content_seen).await {
                    Ok(parts) => {
                        state.pending.extend(parts);
                        Ok(state.pending.pop_front()?)
                    }
                    Err(error) => Err(error),
                },
                None => Err(error),
            },
            Ok(part) => {
                state.content_seen |= !part.is_call_metadata();
                Ok(part)
            }
            Err(error) => Err(error),
        };
        Some((item, state))
    });
    Box::pin(recovered)
}

/// Sends `request`; one the connection failed under (no HTTP status) is sent once more.
/// llama.cpp's server keeps the connection of an empty-200 stream alive but drops it as soon
/// as the next request is written on it, so a request sent on that pooled connection right
/// after (the probe, or the same request without streaming) gets a reset; the second send goes
/// out on a fresh connection and reads the real answer.
pub(crate) async fn send_after_empty_stream(
    provider: &str,
    request: reqwest::RequestBuilder,
    clock: &dyn mull_core::Clock,
) -> Result<reqwest::Response, ModelError> {
    let again = request.try_clone();
    match crate::http::send(provider, request, clock).await {
        Err(error) if error.status.is_none() => match again {
            Some(again) => crate::http::send(provider, again, clock).await,
            None => Err(error),
        },
        other => other,
    }
}

/// The error a turn sees for a stream that ended early, given what the probe answered.
pub(crate) fn explain(ended: ModelError, probe: Result<(), ModelError>) -> ModelError {
    match probe {
        // The server said what was wrong: that is the error, kind and body included.
        Err(probe) if probe.status.is_some() => ModelError {
            message: format!(
                "{}; the same request without streaming was answered: {}",
                ended.message, probe.message
            ),
            ..probe
        },
        Err(probe) => ModelError {
            message: format!(
                "{}; a probe of the same request without streaming failed too: {}",
                ended.message, probe.message
            ),
            ..ended
        },
        Ok(()) => ModelError {
            kind: ModelErrorKind::Transient,
            message: format!(
                "{}; the same request without streaming succeeded, so the failure did not repeat",
                ended.message
            ),
            ..ended
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::{default_context_overflow_classifier, ChatErrorClassification};

    #[test]
    fn a_refusing_probe_gives_its_status_kind_and_body() {
        let mut probe = ModelError::new(ModelErrorKind::InvalidRequest, "x: HTTP 400: too long");
        probe.status = Some(400);
        probe.body = Some(r#"{"error":{"code":"context_length_exceeded"}}"#.into());
        let error = explain(ended_early("x", true, "[DONE]"), Err(probe));
        assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
        assert_eq!(error.status, Some(400));
        assert!(error.message.starts_with("x: the stream ended before"));
        assert!(error
            .message
            .contains("without streaming was answered: x: HTTP 400"));
        assert_eq!(
            default_context_overflow_classifier(&error),
            Some(ChatErrorClassification::ContextOverflow)
        );
    }

    #[test]
    fn a_succeeding_probe_makes_the_failure_transient() {
        let error = explain(ended_early("x", false, "finish_reason"), Ok(()));
        assert!(error.is_retryable());
        assert!(error.message.contains("a stream cut short"));
    }

    #[test]
    fn a_probe_that_cannot_connect_keeps_the_stream_error() {
        let probe = ModelError::new(ModelErrorKind::Transient, "x: could not connect");
        let error = explain(ended_early("x", true, "[DONE]"), Err(probe));
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.ends_with("failed too: x: could not connect"));
    }
}
