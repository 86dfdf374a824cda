//! Network front ends. `server/` knows nothing of Parquet or the WAL: it turns
//! protocol messages into calls on `sql::Session` and back.

pub mod pg;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// Bound listeners, ready to serve.
pub struct Listeners {
    pub pg: TcpListener,
    pub pg_addr: SocketAddr,
}

/// Binds the configured ports; a port in use is a clear error.
pub async fn bind(engine: &Engine) -> Result<Listeners> {
    let addr = engine.config.pg_addr;
    let pg = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("cannot listen for Postgres clients on {addr}"), e))?;
    let pg_addr = pg
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound address", e))?;
    Ok(Listeners { pg, pg_addr })
}

/// Serves until the engine's shutdown token fires.
pub async fn serve(engine: Arc<Engine>, listeners: Listeners) {
    pg::serve(engine, listeners.pg).await;
}
