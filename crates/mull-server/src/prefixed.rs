//! The first request line of a connection, read before hyper sees it.
//!
//! hyper answers a URI it will not parse with a bare `414` and no body; every other refusal of
//! the server is JSON. So the accept loop reads the first request line itself, refuses an
//! overlong one with the JSON error, and hands hyper the bytes it read followed by the rest of
//! the connection ([`Prefixed`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What the start of a connection held.
pub(crate) enum RequestLine {
    /// The bytes read, which hold a whole request line (and maybe more).
    Read(Bytes),
    /// No line end within the limit.
    TooLong,
    /// The client closed before sending a line.
    Closed,
}

/// Reads until the first line end, at most `limit` bytes.
pub(crate) async fn read_request_line<R: AsyncRead + Unpin>(
    stream: &mut R,
    limit: usize,
) -> io::Result<RequestLine> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                RequestLine::Closed
            } else {
                // Let hyper answer what there is (a malformed request gets its 400).
                RequestLine::Read(Bytes::from(buf))
            });
        }
        let searched_from = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        if buf[searched_from..].contains(&b'\n') {
            return Ok(RequestLine::Read(Bytes::from(buf)));
        }
        if buf.len() > limit {
            return Ok(RequestLine::TooLong);
        }
    }
}

/// A connection whose first bytes were already read: they are read again first.
pub(crate) struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: Bytes, inner: S) -> Prefixed<S> {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head = self.prefix.split_to(n);
            buf.put_slice(&head);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_line_is_read_again_then_the_rest() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            client
                .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
        });
        let mut server = server;
        let RequestLine::Read(prefix) = read_request_line(&mut server, 1024).await.unwrap() else {
            panic!("a line");
        };
        let mut all = String::new();
        Prefixed::new(prefix, server)
            .read_to_string(&mut all)
            .await
            .unwrap();
        assert_eq!(all, "GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    }

    #[tokio::test]
    async fn an_overlong_line_is_refused_at_the_limit() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = client.write_all(&vec![b'a'; 40_000]).await;
        });
        assert!(matches!(
            read_request_line(&mut server, 8192).await.unwrap(),
            RequestLine::TooLong
        ));
    }
}
