//! A local HTTP server that answers every request with the same stored bytes as a
//! `text/event-stream` body, so the real provider clients (and their SSE decoders) can be fed
//! arbitrary wire bytes without a network.
//!
//! It uses only the standard library: one thread, one connection at a time, `Connection: close`
//! after each response, so a client sees exactly the stored bytes and then the end of the body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

/// A running server on 127.0.0.1; lives as long as the process.
#[derive(Clone)]
pub struct SseServer {
    /// `http://127.0.0.1:<port>/v1`, the base URL to hand a provider's config.
    pub base_url: String,
    body: Arc<Mutex<Vec<u8>>>,
}

impl SseServer {
    /// Binds a free port and starts answering.
    pub fn start() -> std::io::Result<SseServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let body = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::clone(&body);
        std::thread::Builder::new()
            .name("sse-server".to_owned())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let bytes = served
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    // A client that hung up early is not the server's problem.
                    let _ = answer(stream, &bytes);
                }
            })?;
        Ok(SseServer { base_url, body })
    }

    /// Sets the bytes every later response carries as its body.
    pub fn set_body(&self, bytes: &[u8]) {
        let mut body = self.body.lock().unwrap_or_else(PoisonError::into_inner);
        body.clear();
        body.extend_from_slice(bytes);
    }
}

/// Reads one request (headers and a `Content-Length` body) and writes the response.
fn answer(stream: TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut request_body = vec![0u8; length];
    reader.read_exact(&mut request_body)?;
    let mut stream = stream;
    stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    )?;
    stream.write_all(body)?;
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Both)
}
