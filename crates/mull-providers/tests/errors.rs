//! HTTP failures of both providers map to the error kinds the engine's retry logic and
//! classifiers expect, without leaking credentials.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{serve, Reply};
use mull_core::{
    default_context_overflow_classifier, ChatErrorClassification, FixedClock, LanguageModel,
    ModelError, ModelErrorKind, ModelMessage, ModelRequest, ModelRole,
};
use mull_providers::anthropic::{AnthropicConfig, AnthropicModel};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use mull_providers::{HttpOptions, Secret};

const KEY: &str = "sk-must-never-leak";

fn request() -> ModelRequest {
    let mut request = ModelRequest {
        messages: vec![ModelMessage::text(ModelRole::User, "hi")],
        ..ModelRequest::default()
    };
    request
        .settings
        .headers
        .insert("authorization-extra".into(), "also-secret-header".into());
    request
}

fn models(base_url: &str, http: HttpOptions) -> Vec<Arc<dyn LanguageModel>> {
    let clock = Arc::new(FixedClock::at_fixture_epoch());
    let mut openai = OpenAiConfig::openai("gpt-4o-mini", Secret::new(KEY));
    openai.base_url = base_url.to_owned();
    openai.http = http;
    let mut anthropic = AnthropicConfig::new("claude", Secret::new(KEY));
    anthropic.base_url = base_url.to_owned();
    anthropic.http = http;
    vec![
        Arc::new(
            OpenAiModel::new(openai)
                .expect("openai")
                .with_clock(clock.clone()),
        ),
        Arc::new(
            AnthropicModel::new(anthropic)
                .expect("anthropic")
                .with_clock(clock),
        ),
    ]
}

async fn failures(reply: Reply, http: HttpOptions) -> Vec<ModelError> {
    let server = serve(reply).await;
    let mut out = Vec::new();
    for model in models(&server.base_url, http) {
        match model.stream(request()).await {
            Ok(_) => panic!("{} accepted a failed call", model.provider()),
            Err(error) => {
                let shown = format!("{error:?} {error}");
                assert!(!shown.contains(KEY), "key leaked: {shown}");
                assert!(
                    !shown.contains("also-secret-header"),
                    "header leaked: {shown}"
                );
                out.push(error);
            }
        }
    }
    out
}

fn status(status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Reply {
    Reply::Status {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn rate_limits_carry_retry_after_seconds() {
    let body = r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    for error in failures(
        status(429, vec![("retry-after", "12".into())], body),
        HttpOptions::default(),
    )
    .await
    {
        assert_eq!(error.kind, ModelErrorKind::RateLimit);
        assert_eq!(error.status, Some(429));
        assert_eq!(error.retry_after, Some(Duration::from_secs(12)));
        assert!(
            error.message.ends_with("HTTP 429: Rate limit reached"),
            "{}",
            error.message
        );
        assert!(error.is_retryable());
    }
}

#[tokio::test]
async fn rate_limits_carry_retry_after_dates_against_the_clock() {
    let reply = status(
        429,
        vec![("retry-after", "Wed, 01 Jan 2025 00:01:00 GMT".into())],
        "",
    );
    for error in failures(reply, HttpOptions::default()).await {
        assert_eq!(error.kind, ModelErrorKind::RateLimit);
        assert_eq!(error.retry_after, Some(Duration::from_secs(60)));
        assert_eq!(error.body, None);
    }
}

#[tokio::test]
async fn server_errors_are_transient() {
    for code in [500, 503, 529] {
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        for error in failures(status(code, vec![], body), HttpOptions::default()).await {
            assert_eq!(error.kind, ModelErrorKind::Transient);
            assert_eq!(error.status, Some(code));
            assert_eq!(error.body.as_deref(), Some(body));
        }
    }
}

#[tokio::test]
async fn auth_failures_are_auth_and_do_not_echo_the_key() {
    for code in [401, 403] {
        let body =
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
        for error in failures(status(code, vec![], body), HttpOptions::default()).await {
            assert_eq!(error.kind, ModelErrorKind::Auth);
            assert!(!error.is_retryable());
        }
    }
}

#[tokio::test]
async fn bad_requests_keep_the_body_so_overflow_is_classifiable() {
    let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212345 tokens > 200000 maximum"}}"#;
    for error in failures(status(400, vec![], body), HttpOptions::default()).await {
        assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
        assert_eq!(error.body.as_deref(), Some(body));
        assert_eq!(
            default_context_overflow_classifier(&error),
            Some(ChatErrorClassification::ContextOverflow)
        );
    }
    let body =
        r#"{"error":{"message":"Invalid schema for function 'f'","type":"invalid_request_error"}}"#;
    for error in failures(status(400, vec![], body), HttpOptions::default()).await {
        assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
        assert_eq!(default_context_overflow_classifier(&error), None);
    }
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    for model in models(&format!("http://{addr}/v1"), HttpOptions::default()) {
        let error = model.stream(request()).await.err().expect("refused");
        assert_eq!(error.kind, ModelErrorKind::Transient);
        assert!(
            error.message.contains("could not connect"),
            "{}",
            error.message
        );
        assert!(!format!("{error:?}").contains(KEY));
    }
}

#[tokio::test]
async fn the_request_timeout_applies_and_is_transient() {
    let http = HttpOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_millis(200)),
    };
    for error in failures(Reply::Stall(Duration::from_secs(5)), http).await {
        assert_eq!(error.kind, ModelErrorKind::Transient);
        assert!(error.message.contains("timed out"), "{}", error.message);
    }
}
