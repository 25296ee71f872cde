//! Protocol tests: the router on 127.0.0.1:0 with a Scripted-model agent, driven over real
//! HTTP and WebSocket connections; streams are checked part by part and against the log.

mod harness;

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use harness::*;
use mull_core::{Event, TurnStatus};
use mull_server::ServerConfig;
use serde_json::{json, Value};

#[tokio::test]
async fn a_text_turn_streams_the_ui_message_stream_over_sse() {
    let server = server().await;
    let response = server.post_chat(&user_request("text-1", "hi")).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
    let (events, done) = read_sse(response, usize::MAX).await;
    assert!(done, "the stream ends with [DONE]");
    assert_eq!(
        types(&events),
        vec![
            "start",
            "start-step",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text-delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(text, "Hello, world!");
    assert_eq!(events.last().expect("finish")["finishReason"], "stop");
    // Built from the log: the same parts come out of the logged events.
    assert_eq!(turns_from_log(&server.log, "text-1").await, vec![events]);
    // The free-form field reached the turn's body.
    let body = session_events(&server.log, "text-1")
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::TurnStarted { body, .. } => Some(body),
            _ => None,
        })
        .expect("turn_started");
    assert_eq!(body["tenant"], "acme");
}

#[tokio::test]
async fn server_tools_stream_input_preliminary_and_final_outputs() {
    let server = server().await;
    let response = server.post_chat(&user_request("tool-1", "weather?")).await;
    let (events, done) = read_sse(response, usize::MAX).await;
    assert!(done);
    let weather: Vec<&Value> = events
        .iter()
        .filter(|e| e["toolCallId"] == "call_weather")
        .collect();
    assert_eq!(
        types(&weather.iter().map(|v| (*v).clone()).collect::<Vec<_>>()),
        vec![
            "tool-input-start",
            "tool-input-delta",
            "tool-input-delta",
            "tool-input-available",
            "tool-output-available"
        ]
    );
    assert_eq!(weather[3]["input"], json!({"city": "Paris"}));
    assert_eq!(weather[4]["output"]["sky"], "sunny");
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["toolCallId"] == "call_progress" && e["type"] == "tool-output-available")
        .collect();
    assert_eq!(
        progress.len(),
        4,
        "three preliminary outputs and the final one: {progress:?}"
    );
    assert!(progress[..3].iter().all(|e| e["preliminary"] == true));
    assert!(progress[3].get("preliminary").is_none());
    assert_eq!(
        events.iter().filter(|e| e["type"] == "start-step").count(),
        2,
        "two model steps"
    );
    assert_eq!(turns_from_log(&server.log, "tool-1").await, vec![events]);
}

#[tokio::test]
async fn a_client_tool_result_continues_the_turn() {
    let server = server().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    let (first, _) = read_sse(
        client
            .post(&url)
            .json(&user_request("client-1", "where am I?"))
            .send()
            .await
            .expect("post"),
        usize::MAX,
    )
    .await;
    let call = first
        .iter()
        .find(|e| e["type"] == "tool-input-available")
        .expect("the client tool call reaches the client");
    assert_eq!(call["toolName"], "get_location");
    assert_eq!(first.last().expect("finish")["type"], "finish");
    assert_eq!(first.last().expect("finish")["finishReason"], "tool-calls");
    let message_id = first[0]["messageId"].as_str().expect("message id");

    let answer = json!({
        "id": "client-1",
        "trigger": "submit-message",
        "messages": [
            {"id": "u-client-1", "role": "user", "parts": [{"type": "text", "text": "where am I?"}]},
            {"id": message_id, "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-get_location", "toolCallId": "call_location",
                 "state": "output-available", "input": {}, "output": {"city": "Berlin"}}
            ]}
        ]
    });
    let (second, done) = read_sse(
        client.post(&url).json(&answer).send().await.expect("post"),
        usize::MAX,
    )
    .await;
    assert!(done);
    let text: String = second
        .iter()
        .filter(|e| e["type"] == "text-delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(text, "You are in Berlin.");
    let events = session_events(&server.log, "client-1").await;
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::ClientToolResult { call_id, output: Some(output), .. }
            if call_id == "call_location" && output["city"] == "Berlin")));
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::TurnStarted {
            continuation: true,
            ..
        }
    )));
    // The model's second call saw the client's answer.
    assert_eq!(
        turns_from_log(&server.log, "client-1").await,
        vec![first, second]
    );
}

#[tokio::test]
async fn a_dropped_stream_resumes_from_the_turn_start_exactly_once() {
    let server = server().await;
    let client = reqwest::Client::new();
    let response = server.post_chat(&user_request("slow-1", "go")).await;
    let (partial, done) = read_sse(response, 6).await;
    assert!(!done);
    // The connection is dropped here; the turn goes on.
    let resumed = client
        .get(format!("http://{}/api/chat/slow-1/stream", server.addr))
        .send()
        .await
        .expect("resume");
    assert_eq!(resumed.status(), 200);
    assert_eq!(resumed.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let (replayed, done) = read_sse(resumed, usize::MAX).await;
    assert!(done);
    assert_eq!(
        &replayed[..6],
        &partial[..],
        "the replay starts at the turn's start"
    );
    let deltas = replayed
        .iter()
        .filter(|e| e["type"] == "text-delta")
        .count();
    assert_eq!(deltas, agent::SLOW_DELTAS, "every delta exactly once");
    assert_eq!(turns_from_log(&server.log, "slow-1").await, vec![replayed]);

    // Once the turn is over there is nothing to resume.
    let idle = client
        .get(format!("http://{}/api/chat/slow-1/stream", server.addr))
        .send()
        .await
        .expect("resume");
    assert_eq!(idle.status(), 204);
}

#[tokio::test]
async fn cancel_aborts_the_running_turn_and_keeps_the_partial() {
    let server = server().await;
    let client = reqwest::Client::new();
    let response = server.post_chat(&user_request("slow-2", "go")).await;
    let mut events = response.bytes_stream();
    let _ = events.next().await;
    // A resumed stream of the same turn sees the abort too.
    let resumed = client
        .get(format!("http://{}/api/chat/slow-2/stream", server.addr))
        .send()
        .await
        .expect("resume");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled: Value = client
        .post(format!("http://{}/api/chat/slow-2/cancel", server.addr))
        .send()
        .await
        .expect("cancel")
        .json()
        .await
        .expect("json");
    assert_eq!(cancelled["cancelled"], true);
    let (replayed, done) = read_sse(resumed, usize::MAX).await;
    assert!(done);
    assert_eq!(replayed.last().expect("abort")["type"], "abort");
    let deltas = replayed
        .iter()
        .filter(|e| e["type"] == "text-delta")
        .count();
    assert!(
        deltas > 0 && deltas < agent::SLOW_DELTAS,
        "{deltas} deltas before the abort"
    );
    let log = session_events(&server.log, "slow-2").await;
    assert!(log.iter().any(|e| matches!(
        &e.event,
        Event::TurnFinished {
            status: TurnStatus::Aborted,
            ..
        }
    )));
    assert!(log.iter().any(|e| matches!(&e.event,
        Event::AssistantMessageSaved { message, .. } if !message.parts.is_empty())));
    // Cancelling again is a no-op.
    let again: Value = client
        .post(format!("http://{}/api/chat/slow-2/cancel", server.addr))
        .send()
        .await
        .expect("cancel")
        .json()
        .await
        .expect("json");
    assert_eq!(again["cancelled"], false);
}

#[tokio::test]
async fn a_token_is_required_when_set() {
    let server = server_with(Some("s3cret"), |s| s).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    for auth in [None, Some("Bearer wrong"), Some("s3cret")] {
        let mut request = client.post(&url).json(&user_request("text-t", "hi"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.expect("post");
        assert_eq!(response.status(), 401, "{auth:?}");
        let body: Value = response.json().await.expect("json error body");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    let resume = client
        .get(format!("http://{}/api/chat/text-t/stream", server.addr))
        .send()
        .await
        .expect("get");
    assert_eq!(resume.status(), 401);
    assert!(session_events(&server.log, "text-t").await.is_empty());
    let response = client
        .post(&url)
        .bearer_auth("s3cret")
        .json(&user_request("text-t", "hi"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200);
    let (events, done) = read_sse(response, usize::MAX).await;
    assert!(done && !events.is_empty());

    let open = ServerConfig {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        token: None,
        ..ServerConfig::default()
    };
    let err = open.check().expect_err("a public address needs a token");
    assert!(err.to_string().contains("MULL_TOKEN"), "{err}");
    // A token no request could match is refused before anything binds.
    for blank in ["", " ", "\t", " s3cret"] {
        let config = ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: Some(blank.to_owned()),
            ..ServerConfig::default()
        };
        let err = config.check().expect_err("a blank token is refused");
        assert!(err.to_string().contains("MULL_TOKEN is empty"), "{err}");
    }
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_leave_the_log_alone() {
    let server = server_with(None, |s| s.with_max_body_bytes(2048)).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    let cases: Vec<(reqwest::RequestBuilder, u16, &str, &str)> = vec![
        (
            client
                .post(&url)
                .header("content-type", "application/json")
                .body("{nope"),
            400,
            "bad_request",
            "not JSON",
        ),
        (
            client.post(&url).json(
                &json!({"id": "bad-1", "messages": [{"id": "u", "role": "user",
            "parts": [{"type": "telepathy"}]}]}),
            ),
            400,
            "bad_request",
            "messages[0].parts[0]",
        ),
        (
            client.post(&url).json(
                &json!({"id": "bad-1", "messages": [], "trigger": "regenerate-message",
                               "messageId": "m"}),
            ),
            404,
            "unknown_chat",
            "bad-1",
        ),
        (
            client
                .post(&url)
                .json(&json!({"id": "bad-1", "messages": "x".repeat(4096)})),
            413,
            "body_too_large",
            "2048",
        ),
        (
            client.get(format!("http://{}/api/chat/nobody/stream", server.addr)),
            404,
            "unknown_chat",
            "nobody",
        ),
        (
            client.post(format!("http://{}/api/chat/nobody/cancel", server.addr)),
            404,
            "unknown_chat",
            "nobody",
        ),
        (
            client.get(format!("http://{}/api/nothing", server.addr)),
            404,
            "not_found",
            "/api/nothing",
        ),
        (
            client.get(&url),
            405,
            "method_not_allowed",
            "GET is not allowed on /api/chat",
        ),
        (
            client.delete(format!("http://{}/api/chat/nobody/cancel", server.addr)),
            405,
            "method_not_allowed",
            "DELETE",
        ),
    ];
    for (request, status, code, needle) in cases {
        let response = request.send().await.expect("send");
        assert_eq!(response.status().as_u16(), status, "{code}");
        let body: Value = response.json().await.expect("json error body");
        assert_eq!(body["error"]["code"], code);
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    assert!(session_events(&server.log, "bad-1").await.is_empty());
    assert!(session_events(&server.log, "nobody").await.is_empty());
}

#[tokio::test]
async fn a_bad_body_for_a_known_chat_is_a_parse_failure_in_its_log() {
    let server = server().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    let ok = client
        .post(&url)
        .json(&user_request("known", "Hi"))
        .send()
        .await
        .expect("send");
    let _ = read_sse(ok, 10_000).await;
    let before = session_events(&server.log, "known").await.len();

    let bad = client
        .post(&url)
        .json(
            &json!({"id": "known", "messages": [{"id": "u", "role": "user",
            "parts": [{"type": "telepathy"}]}]}),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(bad.status().as_u16(), 400);

    let events = session_events(&server.log, "known").await;
    assert_eq!(
        events.len(),
        before + 1,
        "exactly one event for the bad body"
    );
    match &events[before].event {
        Event::TurnFailed {
            stage,
            messages_persisted,
            error,
            ..
        } => {
            assert_eq!(*stage, mull_core::ErrorStage::Parse);
            assert!(!messages_persisted);
            assert!(error.contains("messages[0].parts[0]"), "{error}");
        }
        other => panic!("expected turn_failed, got {other:?}"),
    }
}

async fn ws_connect(
    addr: SocketAddr,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/chat/ws"))
        .await
        .expect("websocket");
    socket
}

async fn ws_send(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    frame: Value,
) {
    socket
        .send(tokio_tungstenite::tungstenite::Message::Text(
            frame.to_string().into(),
        ))
        .await
        .expect("send frame");
}

async fn ws_next(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("a frame in time")
            .expect("socket open")
            .expect("frame");
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
            return serde_json::from_str(&text).expect("frame is JSON");
        }
    }
}

fn send_frame(request_id: &str, chat_id: &str) -> Value {
    json!({
        "type": "send", "requestId": request_id, "id": chat_id, "trigger": "submit-message",
        "messages": [{"id": format!("u-{chat_id}"), "role": "user", "parts": [{"type": "text", "text": "go"}]}],
        "headers": {}, "body": {}
    })
}

#[tokio::test]
async fn websocket_multiplexes_chats_and_resumes_after_a_sequence() {
    let server = server().await;
    let mut socket = ws_connect(server.addr).await;
    ws_send(&mut socket, send_frame("r-a", "text-ws")).await;
    ws_send(&mut socket, send_frame("r-b", "slow-ws")).await;
    let mut text_chunks = Vec::new();
    let mut slow_chunks = Vec::new();
    let mut text_ended = false;
    while !(text_ended && slow_chunks.len() >= 8) {
        let frame = ws_next(&mut socket).await;
        match (frame["requestId"].as_str(), frame["type"].as_str()) {
            (Some("r-a"), Some("chunk")) => text_chunks.push(frame),
            (Some("r-a"), Some("end")) => text_ended = true,
            (Some("r-b"), Some("chunk")) => slow_chunks.push(frame),
            (_, Some("start")) => {}
            other => panic!("unexpected frame {other:?}: {frame}"),
        }
    }
    let sequences: Vec<u64> = text_chunks
        .iter()
        .filter_map(|f| f["sequence"].as_u64())
        .collect();
    assert_eq!(sequences, (0..text_chunks.len() as u64).collect::<Vec<_>>());
    let text_parts: Vec<Value> = text_chunks.iter().map(|f| f["chunk"].clone()).collect();
    assert_eq!(
        turns_from_log(&server.log, "text-ws").await,
        vec![text_parts]
    );

    // Drop the socket mid-turn, reconnect, resume after the last chunk seen.
    let last_seen = slow_chunks
        .last()
        .and_then(|f| f["sequence"].as_u64())
        .expect("sequence");
    drop(socket);
    let mut socket = ws_connect(server.addr).await;
    ws_send(
        &mut socket,
        json!({"type": "resume", "requestId": "r-c", "id": "slow-ws",
                                "lastSequence": last_seen, "headers": {}, "body": {}}),
    )
    .await;
    let mut resumed = Vec::new();
    loop {
        let frame = ws_next(&mut socket).await;
        match frame["type"].as_str() {
            Some("chunk") => resumed.push(frame),
            Some("end") => break,
            Some("start") => {}
            other => panic!("unexpected frame {other:?}: {frame}"),
        }
    }
    assert_eq!(resumed[0]["sequence"].as_u64(), Some(last_seen + 1));
    let mut whole: Vec<Value> = slow_chunks.iter().map(|f| f["chunk"].clone()).collect();
    whole.extend(resumed.iter().map(|f| f["chunk"].clone()));
    assert_eq!(
        turns_from_log(&server.log, "slow-ws").await,
        vec![whole],
        "every chunk exactly once"
    );

    ws_send(
        &mut socket,
        json!({"type": "resume", "requestId": "r-d", "id": "slow-ws", "headers": {}, "body": {}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut socket).await,
        json!({"type": "no-active", "requestId": "r-d"})
    );
    ws_send(
        &mut socket,
        json!({"type": "resume", "requestId": "r-e", "id": "nobody", "headers": {}, "body": {}}),
    )
    .await;
    let frame = ws_next(&mut socket).await;
    assert_eq!(frame["type"], "error");
    assert!(frame["errorText"]
        .as_str()
        .unwrap_or_default()
        .contains("nobody"));
}

#[tokio::test]
async fn websocket_abort_cancels_the_turn() {
    let server = server().await;
    let mut socket = ws_connect(server.addr).await;
    ws_send(&mut socket, send_frame("r-1", "slow-abort")).await;
    let mut chunks = 0;
    while chunks < 5 {
        if ws_next(&mut socket).await["type"] == "chunk" {
            chunks += 1;
        }
    }
    ws_send(&mut socket, json!({"type": "abort", "requestId": "r-1"})).await;
    for _ in 0..100 {
        let log = session_events(&server.log, "slow-abort").await;
        if log.iter().any(|e| {
            matches!(
                &e.event,
                Event::TurnFinished {
                    status: TurnStatus::Aborted,
                    ..
                }
            )
        }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the turn was not aborted");
}
