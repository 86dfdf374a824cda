//! The HTTP port's listener: at most `lp_max_connections` connections at once (more
//! get a 503 with `Retry-After` and are closed), and a connection that sends nothing
//! for `lp_idle_timeout` is closed, so idle clients cannot use up file descriptors.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_io_timeout::TimeoutStream;

/// Refused connections answered with a 503 at the same time.
const MAX_REFUSALS: usize = 64;

/// A listener that hands out connections while a slot is free.
pub struct Limited {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    /// Refusals being answered at once; past this a connection is closed unanswered.
    refusals: Arc<Semaphore>,
    limit: usize,
    idle: Duration,
}

impl Limited {
    pub fn new(inner: TcpListener, limit: usize, idle: Duration) -> Limited {
        Limited {
            inner,
            slots: Arc::new(Semaphore::new(limit)),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
            limit,
            idle,
        }
    }
}

/// An accepted connection: its slot is given back when it is dropped.
pub struct Conn {
    io: Pin<Box<TimeoutStream<TcpStream>>>,
    _slot: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Limited {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            let (sock, peer) = match self.inner.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to close.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, limit = self.limit, "HTTP connection refused: lp_max_connections reached");
                if let Ok(permit) = self.refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(sock).await;
                        drop(permit);
                    });
                }
                continue;
            };
            let _ = sock.set_nodelay(true);
            let mut io = TimeoutStream::new(sock);
            io.set_read_timeout(Some(self.idle));
            return (
                Conn {
                    io: Box::pin(io),
                    _slot: slot,
                },
                peer,
            );
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Answers 503 to a connection past the limit: reads what the client sent first (so
/// closing does not reset the connection before the answer arrives), then closes.
async fn refuse(mut sock: TcpStream) {
    let body = r#"{"code":"unavailable","message":"too many connections (lp_max_connections reached); retry later"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut buf = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), sock.read(&mut buf)).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        sock.write_all(answer.as_bytes()).await?;
        sock.shutdown().await
    })
    .await;
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io.as_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io.as_mut().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io.as_mut().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
