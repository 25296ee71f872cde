//! The clean stop, in process: once the server drains, `/readyz` answers 503 and new turns are
//! refused (HTTP 503 `draining`, a WebSocket error frame), while a turn already running on a
//! WebSocket streams to its end, and the socket is then closed by the server.

mod harness;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use harness::{server_configured, user_request};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_is_not_ready_and_starts_no_turn() {
    let server = server_configured(|_| {}).await;
    let client = reqwest::Client::new();
    let ready = |client: reqwest::Client, addr| async move {
        client
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .expect("readyz")
    };
    assert_eq!(ready(client.clone(), server.addr).await.status(), 200);
    server.lifecycle.start_draining();
    let not_ready = ready(client.clone(), server.addr).await;
    assert_eq!(not_ready.status(), 503);
    let body: Value = not_ready.json().await.expect("JSON");
    assert_eq!(body["ready"], false);
    assert!(body["reasons"][0].as_str().unwrap().starts_with("draining"));

    let refused = server.post_chat(&user_request("late", "hi")).await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "draining");
    // The process is up all along.
    let health = client
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_turn_streams_to_its_end_through_a_stop_and_the_socket_closes() {
    let server = server_configured(|config| config.grace = Duration::from_secs(30)).await;
    let url = format!("ws://{}/api/chat/ws", server.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("upgrade");
    let frame = json!({"type": "send", "requestId": "r1", "id": "slow-drain",
        "messages": user_request("slow-drain", "hi")["messages"]});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .expect("send");
    // Wait for the turn's first chunk, then stop the server.
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("a frame")
            .expect("open")
            .expect("ok");
        if let Message::Text(text) = message {
            if serde_json::from_str::<Value>(&text).unwrap()["type"] == "chunk" {
                break;
            }
        }
    }
    let lifecycle = std::sync::Arc::clone(&server.lifecycle);
    let stopping = tokio::spawn(server.shut_down());
    let asked = std::time::Instant::now();
    while !lifecycle.is_draining() {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "the drain starts"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Past the drain's start, a new request is refused.
    let late = json!({"type": "send", "requestId": "r2", "id": "late-ws",
        "messages": user_request("late-ws", "hi")["messages"]});
    ws.send(Message::Text(late.to_string().into()))
        .await
        .expect("send");
    let mut types = Vec::new();
    let mut closed = false;
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
        match message {
            Ok(Message::Text(text)) => {
                let frame: Value = serde_json::from_str(&text).unwrap();
                types.push((
                    frame["requestId"].as_str().unwrap_or("").to_owned(),
                    frame["type"].as_str().unwrap_or("").to_owned(),
                    frame["chunk"]["type"].as_str().unwrap_or("").to_owned(),
                ));
            }
            Ok(Message::Close(_)) | Err(_) => {
                closed = true;
                break;
            }
            Ok(_) => {}
        }
    }
    assert!(closed, "the server closed the socket: {types:?}");
    let r1: Vec<_> = types.iter().filter(|(r, _, _)| r == "r1").collect();
    assert_eq!(
        r1.last().map(|(_, t, _)| t.as_str()),
        Some("end"),
        "{types:?}"
    );
    assert!(
        r1.iter().any(|(_, _, chunk)| chunk == "finish"),
        "the turn finished within the grace: {types:?}"
    );
    assert!(
        types.iter().any(|(r, t, _)| r == "r2" && t == "error"),
        "a request sent while draining is refused: {types:?}"
    );
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("the server stops")
        .expect("stop task");
}
