//! The overflow probe against a server that drops the connection it kept alive: llama.cpp's
//! Python server answers an over-long streaming request with an empty 200 on a kept-alive
//! connection, then resets that connection when the next request is written on it. The probe
//! must reach the server all the same (once more, on a fresh connection) and read the real
//! error, so the overflow can be classified.

mod common;

use std::time::Duration;

use common::{collect, say_hi};
use mull_core::{
    default_context_overflow_classifier, ChatErrorClassification, ErrorInput, LanguageModel,
};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const OVERFLOW: &str = r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 7745 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;

/// Reads one HTTP request from `conn` and returns its body.
async fn read_request(conn: &mut BufReader<TcpStream>) -> String {
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        let n = conn
            .read_line(&mut line)
            .await
            .expect("reads a header line");
        assert!(n > 0, "the connection closed inside a request head");
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().expect("a length");
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).await.expect("reads the body");
    String::from_utf8(body).expect("utf-8")
}

#[tokio::test]
async fn a_probe_whose_kept_alive_connection_is_reset_is_sent_again_and_reads_the_overflow() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (first, _) = listener.accept().await.expect("accepts");
        let mut first = BufReader::new(first);
        let streaming = read_request(&mut first).await;
        first
            .get_mut()
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\n\r\n",
            )
            .await
            .expect("answers");
        // The probe comes on the same connection, which the server resets.
        let reset = read_request(&mut first).await;
        let first = first.into_inner();
        first.set_zero_linger().expect("linger");
        drop(first);
        let (second, _) = listener.accept().await.expect("accepts the probe again");
        let mut second = BufReader::new(second);
        let probe = read_request(&mut second).await;
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{OVERFLOW}",
            OVERFLOW.len()
        );
        second
            .get_mut()
            .write_all(answer.as_bytes())
            .await
            .expect("answers the probe");
        (streaming, reset, probe)
    });
    let model = OpenAiModel::new(OpenAiConfig::compatible(
        format!("http://{addr}/v1"),
        "local",
    ))
    .expect("model");
    let stream = model.stream(say_hi()).await.expect("the stream opens");
    let (_, error) = collect(stream).await;
    let error = error.expect("the stream ends in an error");
    assert_eq!(error.status, Some(400), "{error:?}");
    assert!(
        error.message.contains("maximum context length"),
        "{error:?}"
    );
    assert_eq!(
        default_context_overflow_classifier(ErrorInput::from(&error)),
        Some(ChatErrorClassification::ContextOverflow)
    );
    let (streaming, reset, probe) = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server is done")
        .expect("the server did not panic");
    assert!(streaming.contains(r#""stream":true"#));
    assert!(reset.contains(r#""stream":false"#));
    assert_eq!(reset, probe);
}
