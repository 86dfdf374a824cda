//! The HTTP port's listener: at most `lp_max_connections` connections at once (more
//! get a 503 with `Retry-After` and are closed), and a connection that sends nothing
//! for `lp_idle_timeout` is closed, so idle clients cannot use up file descriptors,
//! and one whose request headers take longer than a few seconds is cut off. When
//! every slot is taken, connections idle for a second or more give theirs up.
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
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::server::tls::{self, Opened, Stream};
use tokio_io_timeout::TimeoutStream;

/// A request's headers must arrive within this time of its first byte: a client
/// that sends them a byte at a time (slowloris) is cut off instead of holding its
/// slot. Idle keep-alive connections are left to `lp_idle_timeout`.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Refused connections answered with a 503 at the same time.
const MAX_REFUSALS: usize = 64;

/// When every slot is taken, connections idle between requests (or not yet sent
/// anything) for this long close, and a new connection waits this long for a slot
/// before its 503.
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);
const SLOT_WAIT: Duration = Duration::from_millis(300);

/// Asks idle connections to close: each one idle waits on the token current when
/// it became idle, and running out of slots cancels it (and starts a new one).
#[derive(Default)]
struct Pressure(std::sync::Mutex<CancellationToken>);

impl Pressure {
    fn current(&self) -> CancellationToken {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn signal(&self) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.cancel();
        *t = CancellationToken::new();
    }
}

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
    pressure: Arc<Pressure>,
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
            pressure: Default::default(),
        }
    }
}

/// An accepted connection: its slot is given back when it is dropped.
pub struct Conn {
    io: Box<dyn Stream>,
    _slot: OwnedSemaphorePermit,
    phase: Phase,
    pressure: Arc<Pressure>,
}

impl Conn {
    fn new(io: Box<dyn Stream>, slot: OwnedSemaphorePermit, pressure: Arc<Pressure>) -> Conn {
        let phase = Phase::idle(&pressure);
        Conn {
            io,
            _slot: slot,
            phase,
            pressure,
        }
    }

    /// Follows the bytes the client sent: the first byte of a request starts its
    /// header deadline, the blank line ending its headers stops it.
    fn saw(&mut self, bytes: &[u8]) {
        const END: &[u8; 4] = b"\r\n\r\n";
        for &b in bytes {
            match &mut self.phase {
                Phase::Body => return,
                Phase::Idle { .. } => {
                    self.phase = Phase::Headers {
                        matched: usize::from(b == b'\r'),
                        deadline: Box::pin(tokio::time::sleep(HEADER_READ_TIMEOUT)),
                    };
                }
                Phase::Headers { matched, .. } => {
                    *matched = if b == END[*matched] {
                        *matched + 1
                    } else {
                        usize::from(b == b'\r')
                    };
                    if *matched == END.len() {
                        self.phase = Phase::Body;
                        return;
                    }
                }
            }
        }
    }

    /// After the server wrote `first` (the start of what it wrote): a response other
    /// than an interim one (100 Continue) ends the request.
    fn wrote(&mut self, first: &[u8]) {
        if first.starts_with(b"HTTP/") && !first.starts_with(b"HTTP/1.1 1") {
            self.phase = Phase::idle(&self.pressure);
        }
    }
}

/// Where a connection is in its current request (see [`HEADER_READ_TIMEOUT`]).
enum Phase {
    /// Between requests (or before the first): since when, and the signal to close
    /// when slots run out.
    Idle {
        since: tokio::time::Instant,
        evict: Pin<Box<WaitForCancellationFutureOwned>>,
    },
    /// Reading a request's headers: how much of the blank line ending them was
    /// seen, and when they must be complete.
    Headers {
        matched: usize,
        deadline: Pin<Box<tokio::time::Sleep>>,
    },
    /// Headers complete: the body, until the response.
    Body,
}

impl Phase {
    fn idle(pressure: &Pressure) -> Phase {
        Phase::Idle {
            since: tokio::time::Instant::now(),
            evict: Box::pin(pressure.current().cancelled_owned()),
        }
    }
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
            let idle = self.idle;
            let pressure = self.pressure.clone();
            let slot = match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    // Idle connections give their slots up; this one waits a moment
                    // for one, off the accept loop.
                    self.pressure.signal();
                    let Ok(permit) = self.refusals.clone().try_acquire_owned() else {
                        continue;
                    };
                    let (slots, limit) = (self.slots.clone(), self.limit);
                    let (ready, tls) = (self.opened.0.clone(), self.tls.clone());
                    tokio::spawn(async move {
                        let slot = tokio::time::timeout(SLOT_WAIT, slots.acquire_owned()).await;
                        let Ok(Ok(slot)) = slot else {
                            tracing::warn!(%peer, limit, "HTTP connection refused: lp_max_connections reached");
                            refuse(sock).await;
                            drop(permit);
                            return;
                        };
                        drop(permit);
                        if let Some(conn) = open(sock, idle, tls, slot, pressure).await {
                            let _ = ready.send((conn, peer)).await;
                        }
                    });
                    continue;
                }
            };
            if self.tls.is_none() {
                let io = Box::new(timed(sock, idle));
                return (Conn::new(io, slot, pressure), peer);
            }
            let (ready, tls) = (self.opened.0.clone(), self.tls.clone());
            tokio::spawn(async move {
                if let Some(conn) = open(sock, idle, tls, slot, pressure).await {
                    let _ = ready.send((conn, peer)).await;
                }
            });
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection with its slot, over TLS when the client opens it so.
async fn open(
    sock: TcpStream,
    idle: Duration,
    tls: Option<(TlsAcceptor, bool)>,
    slot: OwnedSemaphorePermit,
    pressure: Arc<Pressure>,
) -> Option<Conn> {
    let Some((acceptor, require)) = tls else {
        return Some(Conn::new(Box::new(timed(sock, idle)), slot, pressure));
    };
    let io: Box<dyn Stream> = match tls::open(sock, |s| timed(s, idle), &acceptor, require).await {
        Opened::Tls(s) => s,
        Opened::Plain(s) => Box::new(s),
        Opened::Refused => return None,
    };
    Some(Conn::new(io, slot, pressure))
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
        let before = buf.filled().len();
        let r = Pin::new(&mut *self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.saw(&buf.filled()[before..]);
        }
        // Slots ran out while this connection waited for a request: a connection
        // idle for a while closes (end of stream); a newer one waits for the next call.
        let this = &mut *self;
        if r.is_pending()
            && let Phase::Idle { since, evict } = &mut this.phase
            && evict.as_mut().poll(cx).is_ready()
        {
            if since.elapsed() >= EVICTABLE_AFTER {
                return Poll::Ready(Ok(()));
            }
            *evict = Box::pin(this.pressure.current().cancelled_owned());
            let _ = evict.as_mut().poll(cx);
        }
        if let Phase::Headers { deadline, .. } = &mut self.phase
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request headers did not arrive in time",
            )));
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut *self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.wrote(&buf[..n]);
        }
        r
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
        let r = Pin::new(&mut *self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
            && let Some(first) = bufs.iter().find(|b| !b.is_empty())
        {
            self.wrote(&first[..first.len().min(n)]);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
