//! One Postgres client connection: TLS negotiation (SSLRequest or direct TLS), the startup deadline, the
//! connection limit (53300), the message loop, and a watch that cancels the running
//! statement when the client goes away. A malformed message (one pgwire's decoder
//! rejects, or panics on) ends the connection with a FATAL 08P01 error.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::codec::{Framed, FramedParts};

use super::{AbortOnDrop, Conn, ConnRef, Handler};

/// A client must finish startup (and authentication) within this time
/// (PostgreSQL's `authentication_timeout`).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// ... and send its first message (SSLRequest, startup packet or CancelRequest)
/// within this one: drivers send it at once, a silent socket is cut off.
const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one client until it leaves. Its place under the connection limit is taken
/// from `slots` when its startup packet arrives, so that sockets that never send one
/// hold no place; with none free a startup gets FATAL 53300, as PostgreSQL answers
/// past `max_connections` (a CancelRequest needs none).
pub(super) async fn serve(
    sock: TcpStream,
    h: Arc<Handler>,
    slots: Arc<tokio::sync::Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<()> {
    let startup = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup);
    let first = tokio::time::sleep(FIRST_MESSAGE_TIMEOUT);
    tokio::pin!(first);
    let mut slot: Option<OwnedSemaphorePermit> = None;
    let mut heard = false;
    // A second handle on the socket, only ever polled for the peer's close.
    let mut probe = probe(&sock);
    let mut watch = None;
    let socket = tokio::select! {
        _ = &mut first => return Ok(()),
        s = negotiate_tls(sock, tls) => s?,
    };
    // A client asking for direct TLS while none is configured.
    let Some(socket) = socket else {
        return Ok(());
    };
    // Message headers are read as they arrive, so that a message past the limit is
    // refused before pgwire buffers it.
    let parts = socket.into_parts();
    let limited = super::frames::Limited::new(
        parts.io,
        h.engine.config().max_message_size,
        crate::server::inflight_budget(&h.engine),
        &parts.read_buf,
    );
    let mut socket = {
        let mut p = FramedParts::new(limited?, parts.codec);
        p.read_buf = parts.read_buf;
        p.write_buf = parts.write_buf;
        Framed::from_parts(p)
    };
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        // pgwire's decoder panics on some malformed bodies (an empty Parse, Bind,
        // Execute or Describe reads past the message): that is the client's error.
        let next = AssertUnwindSafe(socket.next()).catch_unwind();
        let msg = if starting {
            tokio::select! {
                _ = &mut first, if !heard => return Ok(()),
                _ = &mut startup => return Ok(()),
                m = next => m,
            }
        } else {
            next.await
        };
        let msg = match msg {
            Ok(None) => return Ok(()),
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(PgWireError::IoError(ref e))))
                if let Some(r) = e
                    .get_ref()
                    .and_then(|r| r.downcast_ref::<super::frames::Refusal>()) =>
            {
                tracing::info!(code = r.code, reason = %r.message, "Postgres client message refused");
                return fatal(&mut socket, r.code, r.message.clone()).await;
            }
            Ok(Some(Err(e))) => {
                tracing::debug!(error = %e, "malformed message from a Postgres client");
                return fatal(&mut socket, "08P01", format!("invalid message: {e}")).await;
            }
            Err(_) => {
                tracing::debug!("malformed message from a Postgres client (decoder panicked)");
                return fatal(&mut socket, "08P01", "invalid message format".into()).await;
            }
        };
        match &msg {
            PgWireFrontendMessage::Terminate(_) => return Ok(()),
            // pgwire reads a parameter's format code by its position: a count other
            // than 0, 1 or one per parameter must not get that far.
            PgWireFrontendMessage::Bind(b) if let Some(text) = bad_bind(b) => {
                return fatal(&mut socket, "08P01", text).await;
            }
            PgWireFrontendMessage::Startup(_) if slot.is_none() => {
                slot = slots.clone().try_acquire_owned().ok();
                if slot.is_none() {
                    tracing::warn!(
                        limit = h.engine.config().max_connections,
                        "Postgres connection refused: max_connections reached"
                    );
                    return fatal(
                        &mut socket,
                        "53300",
                        "sorry, too many clients already".into(),
                    )
                    .await;
                }
            }
            _ => {}
        }
        heard = true;
        let extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let result = process_message(
            msg,
            &mut socket,
            h.clone(),
            h.clone(),
            h.clone(),
            h.clone(),
            h.clone(),
        )
        .await;
        if let Err(e) = result {
            // A FATAL error (failed authentication, unknown database) ends the
            // connection: no ReadyForQuery, nothing more read.
            let info = ErrorInfo::from(e);
            if info.is_fatal() {
                socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await?;
                return socket.close().await;
            }
            process_error(
                &mut socket,
                PgWireError::UserError(Box::new(info)),
                extended,
            )
            .await?;
        }
        // A large message leaves the read buffer as large: give the memory back.
        if socket.read_buffer().capacity() > super::frames::LARGE as usize
            && socket.read_buffer().len() <= super::frames::LARGE as usize
        {
            let rest = bytes::BytesMut::from(&socket.read_buffer()[..]);
            *socket.read_buffer_mut() = rest;
        }
        if watch.is_none()
            && let Some(c) = socket.session_extensions().get::<ConnRef>()
            && let Some(p) = probe.take()
        {
            let c = Arc::downgrade(&c.0);
            watch = Some(AbortOnDrop(tokio::spawn(watch_disconnect(p, c))));
        }
    }
}

/// A handle on the same socket for [`watch_disconnect`], if one can be made.
fn probe(sock: &TcpStream) -> Option<TcpStream> {
    use std::os::fd::AsFd;
    let fd = sock.as_fd().try_clone_to_owned().ok()?;
    let std = std::net::TcpStream::from(fd);
    TcpStream::from_std(std).ok()
}

/// Cancels the running statement once the client has closed its end: a query whose
/// reader is gone must not go on using the server's cores and memory. Only waits for
/// readiness; it never reads, so messages stay for the connection's loop.
async fn watch_disconnect(probe: TcpStream, c: std::sync::Weak<Conn>) {
    use tokio::io::Interest;
    loop {
        match probe.ready(Interest::READABLE).await {
            Ok(r) if r.is_read_closed() => break,
            // Messages are waiting (the loop reads them): forget this readiness and
            // wait for the next event, which a close also brings.
            Ok(_) => {
                let _ = probe.try_io(Interest::READABLE, || {
                    Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                });
            }
            Err(_) => return,
        }
    }
    if let Some(c) = c.upgrade() {
        tracing::debug!("Postgres client closed its connection; canceling its statement");
        c.cancel.lock().cancel();
    }
}

/// Sends a FATAL error and closes the connection.
async fn fatal<S>(socket: &mut S, code: &str, message: String) -> std::io::Result<()>
where
    S: futures::Sink<PgWireBackendMessage, Error = std::io::Error> + Unpin,
{
    let info = ErrorInfo::new("FATAL".into(), code.into(), message);
    socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    socket.close().await
}

/// PostgreSQL's error for a Bind whose parameter format codes are neither 0, 1 nor
/// one per parameter (pgwire would index past them).
pub(super) fn bad_bind(b: &pgwire::messages::extendedquery::Bind) -> Option<String> {
    let codes = b.parameter_format_codes.len();
    (codes > 1 && codes != b.parameters.len()).then(|| {
        format!(
            "bind message has {codes} parameter formats but {} parameters",
            b.parameters.len()
        )
    })
}
