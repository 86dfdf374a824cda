//! The HTTP port's listener: at most `lp_max_connections` connections at once (more
//! get a 503 with `Retry-After` and are closed), and a connection that sends nothing
//! for `lp_idle_timeout` is closed, so idle clients cannot use up file descriptors.
//! With TLS configured, connections are opened (HTTPS or plain) off the accept loop.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;

use crate::server::tls::{self, Opened, Stream};
use tokio_io_timeout::TimeoutStream;

/// Refused connections answered with a 503 at the same time.
const MAX_REFUSALS: usize = 64;

/// A listener that hands out connections while a slot is free.
pub struct Limited {
    inner: TcpListener,
    /// TLS acceptor and whether plain HTTP is refused.
    tls: Option<(TlsAcceptor, bool)>,
    /// Connections whose TLS handshake finished.
    opened: (mpsc::Sender<Accepted>, mpsc::Receiver<Accepted>),
    slots: Arc<Semaphore>,
    /// Refusals being answered at once; past this a connection is closed unanswered.
    refusals: Arc<Semaphore>,
    limit: usize,
    idle: Duration,
}

impl Limited {
    pub fn new(
        inner: TcpListener,
        limit: usize,
        idle: Duration,
        tls: Option<(TlsAcceptor, bool)>,
    ) -> Limited {
        Limited {
            inner,
            tls,
            opened: mpsc::channel(MAX_REFUSALS),
            slots: Arc::new(Semaphore::new(limit)),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
            limit,
            idle,
        }
    }
}

/// An accepted connection: its slot is given back when it is dropped.
pub struct Conn {
    io: Box<dyn Stream>,
    _slot: OwnedSemaphorePermit,
}

type Timed = Pin<Box<TimeoutStream<TcpStream>>>;

/// A connection ready to serve, and its peer.
type Accepted = (Conn, SocketAddr);

fn timed(sock: TcpStream, idle: Duration) -> Timed {
    let _ = sock.set_nodelay(true);
    let mut io = TimeoutStream::new(sock);
    io.set_read_timeout(Some(idle));
    Box::pin(io)
}

impl axum::serve::Listener for Limited {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            let accepted = tokio::select! {
                Some(c) = self.opened.1.recv() => return c,
                a = self.inner.accept() => a,
            };
            let (sock, peer) = match accepted {
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
            let idle = self.idle;
            let Some((acceptor, require)) = self.tls.clone() else {
                let io = Box::new(timed(sock, idle));
                return (Conn { io, _slot: slot }, peer);
            };
            let ready = self.opened.0.clone();
            tokio::spawn(async move {
                let io: Box<dyn Stream> =
                    match tls::open(sock, |s| timed(s, idle), &acceptor, require).await {
                        Opened::Tls(s) => s,
                        Opened::Plain(s) => Box::new(s),
                        Opened::Refused => return,
                    };
                let _ = ready.send((Conn { io, _slot: slot }, peer)).await;
            });
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
        Pin::new(&mut *self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
