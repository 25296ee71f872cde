//! The edge a browser meets, over real sockets: pages of foreign origins are refused over HTTP
//! and on the WebSocket upgrade, a `Host` that does not name the server is refused (DNS
//! rebinding), chat bodies must be JSON, preflights are answered for allowed origins only;
//! ids are bounded and refused by field; one client address cannot take every connection; an
//! overlong URI gets a JSON 414; the probes answer. Nothing refused reaches the log.

mod harness;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use harness::{read_sse, server, server_configured, user_request};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON error body");
    (status, body)
}

async fn chats_in_log(server: &harness::Server) -> usize {
    server.log.flush().await.expect("flush");
    server
        .log
        .reader()
        .expect("reader")
        .sessions()
        .expect("sessions")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_cannot_start_a_turn_over_http() {
    let server = server().await;
    let url = format!("http://{}/api/chat", server.addr);
    let client = reqwest::Client::new();

    // The CORS "simple request" a page can send without asking: text/plain, foreign origin.
    let response = client
        .post(&url)
        .header("origin", "https://evil.example")
        .header("content-type", "text/plain")
        .body(user_request("evil-1", "hi").to_string())
        .send()
        .await
        .expect("post");
    let (status, body) = error_of(response).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("evil.example"));

    // The same origin as JSON: still refused.
    let response = client
        .post(&url)
        .header("origin", "https://evil.example")
        .json(&user_request("evil-2", "hi"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 403);

    // No origin (a script, curl) but text/plain: 415.
    let response = client
        .post(&url)
        .header("content-type", "text/plain")
        .body(user_request("plain-1", "hi").to_string())
        .send()
        .await
        .expect("post");
    let (status, body) = error_of(response).await;
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"]["code"], "unsupported_media_type");

    // DNS rebinding: the page's own name as Host.
    let response = client
        .post(&url)
        .header("host", format!("rebound.example:{}", server.addr.port()))
        .json(&user_request("rebound-1", "hi"))
        .send()
        .await
        .expect("post");
    let (status, body) = error_of(response).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("Host"));

    assert_eq!(
        chats_in_log(&server).await,
        0,
        "nothing refused reached the log"
    );

    // The server's own origin, and localhost as its name, work.
    let response = client
        .post(format!("http://localhost:{}/api/chat", server.addr.port()))
        .header("origin", format!("http://localhost:{}", server.addr.port()))
        .json(&user_request("own-1", "hi"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200);
    let (_, done) = read_sse(response, 1000).await;
    assert!(done);
}

async fn ws_connect(
    addr: std::net::SocketAddr,
    origin: Option<&str>,
) -> Result<Ws, tungstenite::Error> {
    let mut request = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .expect("request");
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().expect("header"));
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(ws, _)| ws)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends a chat (`id`, `text`) as a WebSocket `send` frame and returns the raw text of the
/// server's first answer, waiting at most 10 s.
async fn ws_first_answer(ws: &mut Ws, request_id: &str, id: &str, text: &str) -> String {
    let frame = json!({"type": "send", "requestId": request_id, "id": id,
        "messages": user_request(id, text)["messages"]});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .expect("send");
    let reply = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a reply")
        .expect("a frame")
        .expect("ok");
    reply.into_text().expect("text").to_string()
}

/// POSTs a chat (`id`, `text`) from another loopback address (127.0.0.2), as another client
/// would, and returns the whole answer (waiting at most 30 s).
async fn post_from_another_address(addr: std::net::SocketAddr, id: &str, text: &str) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(addr).await.expect("connects");
    let body = user_request(id, text).to_string();
    let head = format!(
        "POST /api/chat HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    other.write_all(head.as_bytes()).await.expect("writes");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), other.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// POSTs a chat (`id`, `text`) until the client's share lets it in (429 meanwhile, for at most
/// 10 s: `freed` says what should have come back), and reads its stream to the end.
async fn post_once_the_share_is_free(server: &harness::Server, id: &str, text: &str, freed: &str) {
    let started = std::time::Instant::now();
    loop {
        let response = server.post_chat(&user_request(id, text)).await;
        if response.status() == 200 {
            assert!(read_sse(response, 1000).await.1);
            break;
        }
        assert_eq!(response.status(), 429);
        assert!(started.elapsed() < Duration::from_secs(10), "{freed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_cannot_open_the_websocket() {
    let server = server().await;
    match ws_connect(server.addr, Some("https://evil.example")).await {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 403);
            let body: Value =
                serde_json::from_slice(response.body().as_deref().unwrap_or(b"{}")).unwrap();
            assert_eq!(body["error"]["code"], "forbidden");
        }
        Err(other) => panic!("refused with {other}"),
        Ok(_) => panic!("a foreign origin got a WebSocket"),
    }
    // Its own origin gets one, and a chat runs on it.
    let own = format!("http://{}", server.addr);
    let mut ws = ws_connect(server.addr, Some(&own)).await.expect("upgrade");
    let frame = json!({"type": "send", "requestId": "r1", "id": "ws-own",
        "messages": user_request("ws-own", "hi")["messages"]});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .expect("send");
    let mut ended = false;
    while let Some(Ok(message)) = tokio::time::timeout(Duration::from_secs(30), ws.next())
        .await
        .expect("frames arrive")
    {
        if let Message::Text(text) = message {
            let frame: Value = serde_json::from_str(&text).unwrap();
            if frame["type"] == "end" {
                ended = true;
                break;
            }
            assert_ne!(frame["type"], "error", "{frame}");
        }
    }
    assert!(ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_is_answered_for_allowed_origins_only() {
    let server = server_configured(|config| {
        config.allowed_origins = vec!["http://localhost:5173".to_owned()];
    })
    .await;
    let client = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        client
            .request(
                reqwest::Method::OPTIONS,
                format!("http://{}/api/chat", server.addr),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let allowed = preflight("http://localhost:5173").await.expect("preflight");
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "http://localhost:5173"
    );
    let refused = preflight("http://localhost:5174").await.expect("preflight");
    assert_eq!(refused.status(), 403);
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    // The allowed origin chats, and may read the stream's protocol header.
    let response = client
        .post(format!("http://{}/api/chat", server.addr))
        .header("origin", "http://localhost:5173")
        .json(&user_request("cors-1", "hi"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://localhost:5173"
    );
    let (_, done) = read_sse(response, 1000).await;
    assert!(done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_ids_are_refused_by_field_and_never_stored() {
    let server = server().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    let huge = "c".repeat(1 << 20);
    let (status, body) = error_of(
        client
            .post(&url)
            .json(&user_request(&huge, "hi"))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_id");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("id: is 1048576 bytes long"),
        "{message}"
    );
    assert!(message.len() < 200, "the id is not echoed back");

    let mut request = user_request("fine", "hi");
    request["messages"][0]["id"] = json!("m/../1");
    let (status, body) =
        error_of(client.post(&url).json(&request).send().await.expect("post")).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("messages[0].id: has the character '/'"));
    assert_eq!(chats_in_log(&server).await, 0);

    // A 200 KB id in the path: the request line is too long, answered as JSON.
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let path = format!("/api/chat/{}/stream", "x".repeat(200 * 1024));
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        server.addr
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    let json_body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let body: Value = serde_json::from_str(json_body).expect("JSON body");
    assert_eq!(body["error"]["code"], "uri_too_long");

    // A path id just over the limit (the line fits): 400 naming the id.
    let long = "x".repeat(mull_server::ids::MAX_ID_LEN + 1);
    let (status, body) = error_of(
        client
            .get(format!("http://{}/api/chat/{long}/stream", server.addr))
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_line_on_a_connection_is_never_answered_by_a_bare_414() {
    let server = server().await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // A first request that asks to keep the connection …
    let first = format!("GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n", server.addr);
    stream.write_all(first.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let whole = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if length.is_some_and(|length| body.len() >= length) {
                    return;
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(whole.is_ok(), "the first answer came");
    // … then, on the same connection, one whose URI is past every limit (hyper's own too).
    let path = format!("/api/chat/{}/stream", "x".repeat(200 * 1024));
    let second = format!(
        "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
        server.addr
    );
    let _ = stream.write_all(second.as_bytes()).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    answer.extend_from_slice(&rest);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The server closes after the first answer (the client opens a new connection, whose
    // request line it reads first): no second answer, and never a 414 without its JSON.
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    let mut again = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let _ = again.write_all(second.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), again.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    let body: Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("")).expect("a JSON body");
    assert_eq!(body["error"]["code"], "uri_too_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_cannot_take_every_connection() {
    let server = server_configured(|config| {
        config.limits.max_connections = 16;
        config.limits.max_per_client = 3;
    })
    .await;
    // One "client" (127.0.0.2) holds its share of idle connections.
    let mut held = Vec::new();
    for _ in 0..3 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        held.push(socket.connect(server.addr).await.expect("connects"));
    }
    // Its next connection is refused with a JSON 503 …
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut extra = socket.connect(server.addr).await.expect("connects");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), extra.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("client_overloaded"), "{answer}");
    // … while another client still chats.
    let response = server.post_chat(&user_request("other-1", "hi")).await;
    assert_eq!(response.status(), 200);
    let (_, done) = read_sse(response, 1000).await;
    assert!(done);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_request_ids_are_bounded_and_not_echoed() {
    let server = server().await;
    let mut ws = ws_connect(server.addr, None).await.expect("upgrade");
    let huge = "r".repeat(100_000);
    let text = ws_first_answer(&mut ws, &huge, "ws-big", "hi").await;
    assert!(
        text.len() < 1000,
        "the id is not echoed: {} bytes",
        text.len()
    );
    let frame: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(frame["type"], "error");
    assert!(frame["errorText"]
        .as_str()
        .unwrap()
        .starts_with("requestId: is 100000 bytes long"));
    assert_eq!(chats_in_log(&server).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_without_a_token() {
    let server = harness::server_with(Some("s3cret"), |s| s).await;
    let client = reqwest::Client::new();
    let health = client
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let ready = client
        .get(format!("http://{}/readyz", server.addr))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["ready"], true);
    // The API still needs the token.
    let chat = server.post_chat(&user_request("t-1", "hi")).await;
    assert_eq!(chat.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_runs_only_its_share_of_turns() {
    let server = server_configured(|config| config.max_turns_per_client = 1).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    // A slow turn runs for this client (127.0.0.1) …
    let running = client
        .post(&url)
        .json(&user_request("slow-share", "hi"))
        .send()
        .await
        .expect("post");
    assert_eq!(running.status(), 200);
    // … so its next one is refused, over HTTP and WebSocket …
    let (status, body) = error_of(
        client
            .post(&url)
            .json(&user_request("second", "hi"))
            .send()
            .await
            .expect("post"),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_turns");
    let mut ws = ws_connect(server.addr, None).await.expect("upgrade");
    let reply = ws_first_answer(&mut ws, "r1", "ws-second", "hi").await;
    let frame: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(frame["type"], "error", "{frame}");
    assert!(frame["errorText"].as_str().unwrap().contains("1 turns"));
    // … while another address still chats, and once the turn ends the slot is free again.
    let answer = post_from_another_address(server.addr, "other-address", "hi").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");
    let (_, done) = read_sse(running, 10_000).await;
    assert!(done);
    post_once_the_share_is_free(&server, "after-share", "hi", "the slot came back").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_has_only_its_share_of_request_bytes_in_flight() {
    let server = server_configured(|config| config.max_bytes_per_client = 64 * 1024).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    let big = "b".repeat(40 * 1024);
    // A slow turn of a 40 KiB message runs for this client (127.0.0.1): it holds its bytes …
    let running = client
        .post(&url)
        .json(&user_request("slow-bytes", &big))
        .send()
        .await
        .expect("post");
    assert_eq!(running.status(), 200);
    // … so another request of it, with a 3 MiB body, is refused: the client, still writing
    // that body when the refusal is decided, reads the JSON answer, not a reset connection.
    let mut second = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let body = user_request("second-bytes", &"s".repeat(3 << 20)).to_string();
    let head = format!(
        "POST /api/chat HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        server.addr,
        body.len()
    );
    second.write_all(head.as_bytes()).await.expect("the head");
    second
        .write_all(body.as_bytes())
        .await
        .expect("the whole body is read");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), second.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    let refusal: Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("")).expect("JSON");
    assert_eq!(refusal["error"]["code"], "too_many_request_bytes");
    // … and so is a 40 KiB WebSocket message, undecoded, while a small one still passes.
    let mut ws = ws_connect(server.addr, None).await.expect("upgrade");
    let reply = ws_first_answer(&mut ws, "r1", "ws-bytes", &big).await;
    let frame: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(frame["type"], "error", "{frame}");
    assert!(frame["errorText"]
        .as_str()
        .unwrap()
        .contains("bytes of requests in flight"));
    assert!(
        frame.get("requestId").is_none(),
        "refused undecoded: {frame}"
    );
    // Another address sends the same and chats.
    let answer = post_from_another_address(server.addr, "other-bytes", &big).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");
    // Once the slow turn ends, its bytes are free again.
    let (_, done) = read_sse(running, 10_000).await;
    assert!(done);
    post_once_the_share_is_free(&server, "after-bytes", &big, "the bytes came back").await;
}
