//! A Chat Completions server on 127.0.0.1 that plays a tool turn for any conversation, the same
//! on every node: a request whose last message is not a tool result gets a `calculate` call; one
//! that answers a tool call gets a text answer streamed a word at a time, slowly enough for a
//! node to be killed or paused in the middle. It is stateless, so a chat that moves to another
//! node is answered the same way there.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value};

/// How the answers are paced.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Words in a text answer.
    pub words: usize,
    /// The pause before each word.
    pub word_delay: Duration,
}

/// A running model server.
pub struct ModelServer {
    /// `openai-compatible:http://127.0.0.1:PORT/v1#m`, for `--model`.
    pub spec: String,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counters {
    /// Call ids handed out.
    calls: AtomicU64,
    /// Text answers being streamed right now.
    answering: AtomicUsize,
    /// While true, each text answer waits after its first word (see [`ModelServer::hold`]).
    held: tokio::sync::watch::Sender<bool>,
}

impl ModelServer {
    /// Starts the server on a free loopback port, on the current runtime.
    pub async fn start(pace: Pace) -> ModelServer {
        let counters = Arc::new(Counters::default());
        let app = axum::Router::new()
            .fallback(answer)
            .with_state((pace, Arc::clone(&counters)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds a loopback port");
        let addr = listener.local_addr().expect("has an address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ModelServer {
            spec: format!("openai-compatible:http://{addr}/v1#m"),
            counters,
            task,
        }
    }

    /// From now on each text answer stops after its first word until [`ModelServer::release`]:
    /// a test that needs many answers in flight at once gets them however slowly the turns
    /// reach their answers, instead of hoping that answers of a second each overlap.
    pub fn hold(&self) {
        self.counters.held.send_replace(true);
    }

    /// Lets every held answer (and every later one) stream to its end.
    pub fn release(&self) {
        self.counters.held.send_replace(false);
    }

    /// How many first steps (tool calls) were asked for so far.
    pub fn tool_steps(&self) -> u64 {
        self.counters.calls.load(Ordering::SeqCst)
    }

    /// How many text answers are being streamed now (turns in their last step).
    pub fn answering(&self) -> usize {
        self.counters.answering.load(Ordering::SeqCst)
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let data = json!({
        "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {data}\n\n")
}

fn usage() -> String {
    let data = json!({
        "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    });
    format!("data: {data}\n\ndata: [DONE]\n\n")
}

/// Ends the "answering" count when the stream ends, however it ends (a client gone too).
struct Answering(Arc<Counters>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(State((pace, counters)): State<(Pace, Arc<Counters>)>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let after_tool = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    let stream: futures::stream::BoxStream<'static, Result<String, std::io::Error>> = if after_tool
    {
        counters.answering.fetch_add(1, Ordering::SeqCst);
        let guard = Answering(Arc::clone(&counters));
        let words: Vec<String> = (0..pace.words).map(|i| format!("w{i} ")).collect();
        let delay = pace.word_delay;
        let held = counters.held.subscribe();
        Box::pin(async_stream(words, delay, held, guard))
    } else {
        let n = counters.calls.fetch_add(1, Ordering::SeqCst);
        let call = chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": format!("call_{n}"),
                  "type": "function", "function": {"name": "calculate",
                  "arguments": "{\"expression\": \"6 * 7\"}"}}]}),
            None,
        );
        let body = format!("{call}{}{}", chunk(json!({}), Some("tool_calls")), usage());
        Box::pin(futures::stream::once(async move { Ok(body) }))
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("a response")
}

/// The words of an answer, each after `delay`, then the finish.
fn async_stream(
    words: Vec<String>,
    delay: Duration,
    held: tokio::sync::watch::Receiver<bool>,
    guard: Answering,
) -> impl futures::Stream<Item = Result<String, std::io::Error>> + Send + 'static {
    use futures::StreamExt;
    let last = futures::stream::once(async move {
        drop(guard);
        Ok(format!("{}{}", chunk(json!({}), Some("stop")), usage()))
    });
    futures::stream::iter(words.into_iter().enumerate())
        .then(move |(i, word)| {
            let mut held = held.clone();
            async move {
                if i == 1 {
                    // The server is gone only when the test is over: then nothing waits.
                    let _ = held.wait_for(|held| !*held).await;
                }
                tokio::time::sleep(delay).await;
                Ok(chunk(json!({"content": word}), None))
            }
        })
        .chain(last)
}
