//! Bounds on what a Postgres client's messages may hold in memory, checked on the
//! bytes as they arrive (after TLS, before pgwire buffers them): a message longer
//! than `max_message_size` is refused at its header, and the messages over
//! [`LARGE`] together hold at most `http_max_inflight_bytes` (one budget with the
//! line-protocol request bodies), each waiting for its share before it is read.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Messages up to this size are read without taking from the shared budget.
pub const LARGE: u64 = 1 << 20;
/// How long a large message waits for its share of the budget.
const BUDGET_WAIT: Duration = Duration::from_secs(10);
/// How long a large message may pause between two pieces while it holds its share.
const STALL: Duration = Duration::from_secs(5);
/// The untyped requests that may come before the startup packet.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// Why a client's message was refused; carried in the `io::Error` pgwire returns.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The SQLSTATE the client gets.
    pub code: &'static str,
    pub message: String,
}

fn refusal(code: &'static str, message: String) -> io::Error {
    io::Error::other(Refusal { code, message })
}

type Acquire = Pin<Box<dyn Future<Output = Option<OwnedSemaphorePermit>> + Send + 'static>>;

/// A client stream whose message headers are read as they pass.
pub struct Limited<S> {
    inner: S,
    /// The most bytes one message may have (length field included).
    max: u64,
    /// The budget of large messages, in KiB, and its size.
    budget: Arc<Semaphore>,
    budget_kib: u64,
    /// Whether the startup packet has passed (messages after it have a type byte).
    started: bool,
    /// The header being read: `[type, len x4]`, or `[len x4, code x4]` before startup.
    header: [u8; 8],
    have: usize,
    /// Body bytes of the current message still to come.
    remaining: u64,
    /// The current large message's share of the budget.
    held: Option<OwnedSemaphorePermit>,
    /// The share a large message waits for before more of it is read.
    waiting: Option<Mutex<Acquire>>,
    /// Fires when a large message pauses too long.
    stall: Option<Mutex<Pin<Box<tokio::time::Sleep>>>>,
    /// A refusal found in bytes already returned, given on the next read.
    failed: Option<io::Error>,
}

impl<S> Limited<S> {
    /// Wraps `inner`; `seen` are bytes of the stream read before it (pgwire's
    /// look for an SSLRequest), scanned as if they came through it.
    pub fn new(
        inner: S,
        max: u64,
        (budget, budget_kib): (Arc<Semaphore>, u64),
        seen: &[u8],
    ) -> io::Result<Self> {
        let mut l = Limited {
            inner,
            max,
            budget,
            budget_kib,
            started: false,
            header: [0; 8],
            have: 0,
            remaining: 0,
            held: None,
            waiting: None,
            stall: None,
            failed: None,
        };
        match l.scan(seen) {
            Ok(()) => Ok(l),
            Err((_, e)) => Err(e),
        }
    }

    /// Follows the message boundaries through `bytes`; a refused header gives the
    /// offset it starts at in `bytes` (0 when it began in earlier bytes).
    fn scan(&mut self, bytes: &[u8]) -> Result<(), (usize, io::Error)> {
        let mut i = 0;
        let mut start = 0;
        while i < bytes.len() {
            if self.remaining > 0 {
                let n =
                    (bytes.len() - i).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= n as u64;
                i += n;
                continue;
            }
            if self.have == 0 {
                start = i;
            }
            let size = if self.started { 5 } else { 8 };
            let n = (size - self.have).min(bytes.len() - i);
            self.header[self.have..self.have + n].copy_from_slice(&bytes[i..i + n]);
            self.have += n;
            i += n;
            if self.have < size {
                break;
            }
            self.have = 0;
            let h = self.header;
            let (len, body) = if self.started {
                let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as u64;
                (len, len.saturating_sub(4))
            } else {
                let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as u64;
                let code = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    self.started = true;
                }
                (len, len.saturating_sub(8))
            };
            // The message before this one has been read whole.
            self.held = None;
            self.stall = None;
            if len > self.max {
                return Err((
                    start,
                    refusal(
                        "54000",
                        format!(
                            "message of {len} bytes is longer than max_message_size ({} bytes)",
                            self.max
                        ),
                    ),
                ));
            }
            self.remaining = body;
            if len > LARGE && body > 0 {
                let total = self.budget_kib;
                let kib = u32::try_from(len.div_ceil(1024).min(total)).unwrap_or(u32::MAX);
                let budget = self.budget.clone();
                let acquire: Acquire = Box::pin(async move {
                    tokio::time::timeout(BUDGET_WAIT, budget.acquire_many_owned(kib))
                        .await
                        .ok()
                        .and_then(Result::ok)
                });
                self.waiting = Some(Mutex::new(acquire));
            } else {
                self.waiting = None;
            }
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Limited<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        // A large message is read only once it has its share of the budget: until
        // then the client waits on TCP's flow control.
        if let Some(w) = &mut this.waiting {
            let acquire = w.get_mut().unwrap_or_else(|p| p.into_inner());
            let permit = ready!(acquire.as_mut().poll(cx));
            this.waiting = None;
            match permit {
                Some(p) => this.held = Some(p),
                None => {
                    return Poll::Ready(Err(refusal(
                        "53200",
                        "too many message bytes in flight (http_max_inflight_bytes); retry later"
                            .into(),
                    )));
                }
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => {
                if this.held.is_some() && this.remaining > 0 {
                    let stall = this
                        .stall
                        .get_or_insert_with(|| Mutex::new(Box::pin(tokio::time::sleep(STALL))));
                    let sleep = stall.get_mut().unwrap_or_else(|p| p.into_inner());
                    if sleep.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(refusal(
                            "08P01",
                            format!(
                                "the client paused over {} s in the middle of a large message",
                                STALL.as_secs()
                            ),
                        )));
                    }
                }
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                this.stall = None;
                if let Err((at, e)) = this.scan(&buf.filled()[before..]) {
                    // The messages before the refused one go through first.
                    buf.set_filled(before + at);
                    if at == 0 {
                        return Poll::Ready(Err(e));
                    }
                    this.failed = Some(e);
                }
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Limited<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
