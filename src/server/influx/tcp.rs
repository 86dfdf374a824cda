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
pub async fn serve(engine: Arc<Engine>, listener: TcpListener) {
    loop {
        tokio::select! {
            _ = engine.shutdown.cancelled() => return,
            acc = listener.accept() => match acc {
                Ok((sock, peer)) => {
                    let engine = engine.clone();
                    tokio::spawn(async move {
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

async fn connection(engine: &Engine, mut sock: TcpStream) -> crate::Result<()> {
    let limit = engine.config.http_max_body_size as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            _ = engine.shutdown.cancelled() => 0,
            r = sock.read(&mut chunk) => r.map_err(|e| crate::Error::io("reading line protocol", e))?,
        };
        if n == 0 {
            if !buf.is_empty() {
                write_batch(engine, &buf).await?;
            }
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
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
                .metrics
                .lp_lines_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            buf.clear();
        }
    }
}

async fn write_batch(engine: &Engine, body: &[u8]) -> crate::Result<()> {
    let opts = WriteOptions {
        precision: Precision::Nanos,
        accept_partial: true,
        create_database: true,
    };
    let db = engine.config.tcp_database.clone();
    let out = lineproto::write(engine, &db, body, &opts).await?;
    for e in out.errors.iter().take(10) {
        tracing::warn!(line = e.line, "line-protocol TCP: {}", e.message);
    }
    Ok(())
}
