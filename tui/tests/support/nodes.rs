//! `mull serve` processes on one database, and a bare HTTP/1.1 client for them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mull_store_pg::testing::TestPg;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One `mull serve` process; killed (and reaped) when dropped.
pub struct Node {
    pub name: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    child: Child,
    /// Where its standard error goes.
    pub stderr: PathBuf,
}

impl Node {
    /// Starts `mull serve --db URL --node NAME` on a free loopback port with `extra` arguments,
    /// and waits for its address line.
    pub fn start(db: &str, name: &str, dir: &std::path::Path, extra: &[&str]) -> Node {
        let stderr = dir.join(format!("{name}.stderr"));
        let file = std::fs::File::create(&stderr).expect("creates the stderr file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mull"))
            .args(["serve", "--addr", "127.0.0.1:0", "--db", db, "--node", name])
            .args(extra)
            .env_remove("MULL_TOKEN")
            .env_remove("OPENAI_COMPATIBLE_API_KEY")
            .env("RUST_LOG", "mull_store_pg=warn,mull_server=info")
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .expect("starts mull serve");
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let addr = match line.trim().strip_prefix("listening on http://") {
            Some(addr) if read.is_ok() => addr.to_owned(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let err = std::fs::read_to_string(&stderr).unwrap_or_default();
                panic!("node {name} did not start: {line:?}\n{err}");
            }
        };
        Node {
            name: name.to_owned(),
            addr,
            child,
            stderr,
        }
    }

    /// Sends a signal (`KILL`, `STOP`, `CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("runs kill");
        assert!(status.success(), "kill -{signal} {}", self.name);
    }

    /// Whether the process is still running (it did not exit on its own).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What the process wrote to standard error so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit; `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits up to `limit` for the process to exit on its own, then stops it with Ctrl-C;
    /// returns its exit status.
    pub fn interrupt_or_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.signal("INT");
        self.child.wait().expect("waits for the node")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A paused process cannot die of SIGKILL until it runs again.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response: status (0 when the connection broke before a status line) and body text.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// The connection ended cleanly (not cut).
    pub complete: bool,
}

impl Reply {
    /// A UI message stream that reached its end.
    pub fn finished_stream(&self) -> bool {
        self.status == 200 && self.body.contains("data: [DONE]")
    }
}

impl Reply {
    /// The UI message chunks of a streamed reply: the JSON of each `data:` line of its body
    /// (chunked transfer decoded), `[DONE]` left out.
    pub fn ui_parts(&self) -> Vec<serde_json::Value> {
        let Some((head, body)) = self.body.split_once("\r\n\r\n") else {
            return Vec::new();
        };
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_owned()
        };
        body.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .filter_map(|data| serde_json::from_str(data).ok())
            .collect()
    }

    /// What the client was told: the text of its `text-delta` chunks, the `errorText` of its
    /// `error` chunk, and whether a `finish` chunk came.
    pub fn told(&self) -> Told {
        let mut told = Told::default();
        for part in self.ui_parts() {
            match part["type"].as_str() {
                Some("text-delta") => told.text.push_str(part["delta"].as_str().unwrap_or("")),
                Some("error") => told.error = part["errorText"].as_str().map(str::to_owned),
                Some("finish") => told.finished = true,
                _ => {}
            }
        }
        told
    }
}

/// A turn's outcome as a client saw it, or as the log holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Told {
    pub text: String,
    pub error: Option<String>,
    pub finished: bool,
}

/// The body of a chunked transfer, its chunks joined.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let (Some(chunk), Some(next)) = (after.get(..size), after.get(size..)) else {
            break;
        };
        if size == 0 {
            break;
        }
        out.push_str(chunk);
        rest = next.strip_prefix("\r\n").unwrap_or(next);
    }
    out
}

/// Sends one request (`Connection: close`) and reads the answer until the server closes it or
/// `limit` passes.
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> Reply {
    request_from(None, addr, method, path, body, limit).await
}

/// Connects to `addr`, from the local address `from` when given (such as `127.0.0.2`: another
/// client address on loopback).
async fn connect_from(from: Option<&str>, addr: &str) -> std::io::Result<tokio::net::TcpStream> {
    let Some(from) = from else {
        return tokio::net::TcpStream::connect(addr).await;
    };
    let socket = tokio::net::TcpSocket::new_v4()?;
    let local = format!("{from}:0")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    socket.bind(local)?;
    let remote = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    socket.connect(remote).await
}

/// [`request`] from the local address `from` (see [`connect_from`]).
pub async fn request_from(
    from: Option<&str>,
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> Reply {
    let exchange = async {
        let mut stream = match connect_from(from, addr).await {
            Ok(stream) => stream,
            Err(e) => {
                return Reply {
                    status: 0,
                    body: format!("connecting: {e}"),
                    complete: false,
                }
            }
        };
        let body = body.unwrap_or("");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if let Err(e) = stream.write_all(head.as_bytes()).await {
            return Reply {
                status: 0,
                body: format!("sending the request: {e}"),
                complete: false,
            };
        }
        let mut bytes = Vec::new();
        let complete = stream.read_to_end(&mut bytes).await.is_ok();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let complete = complete && (!text.contains("chunked") || text.ends_with("0\r\n\r\n"));
        Reply {
            status,
            body: text,
            complete,
        }
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(reply) => reply,
        Err(_) => Reply {
            status: 0,
            body: format!("no answer within {limit:?}"),
            complete: false,
        },
    }
}

/// `POST /api/chat` with one new user message.
pub async fn post_message(addr: &str, chat: &str, message: &str, limit: Duration) -> Reply {
    let body = serde_json::json!({
        "id": chat, "trigger": "submit-message",
        "messages": [{"id": message, "role": "user", "parts": [{"type": "text", "text": "Work it out."}]}]
    })
    .to_string();
    request(addr, "POST", "/api/chat", Some(&body), limit).await
}

/// `GET /api/chat/{id}/stream`: the chat's running turn, from its first chunk.
pub async fn resume(addr: &str, chat: &str, limit: Duration) -> Reply {
    request(
        addr,
        "GET",
        &format!("/api/chat/{chat}/stream"),
        None,
        limit,
    )
    .await
}

/// Where a multi-node test runs: a throwaway PostgreSQL cluster and a database on it, a
/// folder for the nodes' files, and the runtime that drives the clients and the model server.
/// Fields drop in order: the runtime, then the folder, then the cluster.
pub struct PgGround {
    pub runtime: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub pg: TestPg,
}

impl PgGround {
    /// The ground for `test`; `None` when PostgreSQL is not installed and not required (see
    /// [`TestPg::start`]).
    pub fn start(test: &str) -> Option<PgGround> {
        let pg = TestPg::start(test)?;
        Some(PgGround {
            runtime: runtime(),
            dir: tempfile::tempdir().expect("tempdir"),
            url: pg.database(),
            pg,
        })
    }
}

/// The runtime a multi-node test drives its clients and model server on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Held for the whole of a test that runs several nodes on one cluster, so such tests run one
/// at a time. Two at once on a two-core machine starve each other's lease renewals: leases then
/// run out under nodes that are alive, and the test measures the machine instead of mull.
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it leaves nothing behind that the next one shares.
    CLUSTERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
