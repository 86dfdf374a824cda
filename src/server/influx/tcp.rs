//! Raw TCP line protocol: newline-delimited lines into one database, no replies.
//! Complete lines are written in batches as they arrive; bad lines are logged and
//! counted in `/metrics`.

use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::engine::Engine;
use crate::lineproto::{self, Precision, WriteOptions};

/// Bytes gathered before a batch is written even if more are coming.
const BATCH_BYTES: usize = 1024 * 1024;
/// Accepts connections until shutdown.
/// Past `lp_max_connections` a new connection is closed at once.
pub async fn serve(engine: Arc<Engine>, listener: TcpListener) {
    let limit = engine.config().lp_max_connections;
    let slots = Arc::new(tokio::sync::Semaphore::new(limit));
    loop {
        tokio::select! {
            _ = engine.stopping().cancelled() => return,
            acc = listener.accept() => match acc {
                Ok((sock, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, limit, "line-protocol TCP connection refused: lp_max_connections reached");
                        continue;
                    };
                    let engine = engine.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        if let Err(e) = connection(&engine, sock).await {
                            tracing::warn!(%peer, error = %e, "line-protocol TCP connection failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a line-protocol TCP connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Reads lines until the peer closes, or sends nothing for `lp_idle_timeout` (the
/// complete lines are kept either way).
async fn connection(engine: &Engine, mut sock: TcpStream) -> crate::Result<()> {
    let idle = engine.config().lp_idle_timeout;
    let limit = engine.config().http_max_body_size as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    // Inside a line longer than the limit: drop bytes up to the next newline.
    let mut skipping = false;
    loop {
        let n = tokio::select! {
            // Shutdown: the unfinished last line is not written (it may be cut short).
            _ = engine.stopping().cancelled() => return Ok(()),
            r = tokio::time::timeout(idle, sock.read(&mut chunk)) => match r {
                Ok(r) => r.map_err(|e| crate::Error::io("reading line protocol", e))?,
                Err(_) => 0, // idle: treat as end of stream
            },
        };
        if n == 0 {
            if !buf.is_empty() && !skipping {
                write_batch(engine, &buf).await?;
            }
            return Ok(());
        }
        let mut data = &chunk[..n];
        if skipping {
            match data.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    skipping = false;
                    data = &data[i + 1..];
                }
                None => continue,
            }
        }
        buf.extend_from_slice(data);
        // Write what is complete when enough has gathered or the sender paused.
        let paused = n < chunk.len();
        if (buf.len() >= BATCH_BYTES || paused)
            && let Some(end) = buf.iter().rposition(|b| *b == b'\n')
        {
            let rest = buf.split_off(end + 1);
            write_batch(engine, &buf).await?;
            buf = rest;
        }
        if buf.len() > limit {
            tracing::warn!(
                bytes = buf.len(),
                "line-protocol TCP line longer than the body limit; dropped"
            );
            engine
                .metrics()
                .lp_lines_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            buf.clear();
            skipping = true;
        }
    }
}

async fn write_batch(engine: &Engine, body: &[u8]) -> crate::Result<()> {
    let opts = WriteOptions {
        precision: Precision::Nanos,
        accept_partial: true,
        create_database: true,
        // Loopback only when auth is on (config): no credentials on this port.
        user: None,
    };
    let db = engine.config().tcp_database.clone();
    let out = lineproto::write(engine, &db, bytes::Bytes::copy_from_slice(body), &opts).await?;
    for e in out.errors.iter().take(10) {
        tracing::warn!(line = e.line, "line-protocol TCP: {}", e.message);
    }
    Ok(())
}
