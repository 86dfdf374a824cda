//! Network front ends. `server/` knows nothing of Parquet or the WAL: it turns
//! protocol messages into calls on `sql::Session` and back.

pub mod influx;
pub mod pg;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// The budget of bytes that line-protocol request bodies (and their gunzipped
/// form) and large Postgres messages hold at once (`http_max_inflight_bytes`),
/// counted in KiB, and its size.
#[derive(Default)]
struct InflightBudget(std::sync::OnceLock<Arc<tokio::sync::Semaphore>>);

fn inflight_budget(engine: &Engine) -> (Arc<tokio::sync::Semaphore>, u64) {
    let total_kib = engine
        .config()
        .http_max_inflight_bytes
        .div_ceil(1024)
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS as u64);
    let budget = engine
        .shared::<InflightBudget>()
        .0
        .get_or_init(|| {
            Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(total_kib).unwrap_or(usize::MAX >> 4),
            ))
        })
        .clone();
    (budget, total_kib)
}

/// Bound listeners, ready to serve.
pub struct Listeners {
    pub pg: TcpListener,
    pub pg_addr: SocketAddr,
    pub http: Option<TcpListener>,
    pub http_addr: Option<SocketAddr>,
    pub tcp: Option<TcpListener>,
    pub tcp_addr: Option<SocketAddr>,
    /// TLS acceptors when a certificate is configured.
    pub tls: Option<tls::Acceptors>,
}

async fn bind_one(addr: SocketAddr, what: &str) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("cannot listen for {what} on {addr}"), e))?;
    let a = l
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound address", e))?;
    Ok((l, a))
}

/// Binds the configured ports and loads the TLS certificate; a port in use or an
/// unusable certificate is a clear error.
pub async fn bind(engine: &Engine) -> Result<Listeners> {
    let tls = engine.config().tls.as_ref().map(tls::load).transpose()?;
    let addr = engine.config().pg_addr;
    let pg = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("cannot listen for Postgres clients on {addr}"), e))?;
    let pg_addr = pg
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound address", e))?;
    let (http, http_addr) = match engine.config().http_addr {
        Some(a) => {
            let (l, a) = bind_one(a, "line protocol over HTTP").await?;
            (Some(l), Some(a))
        }
        None => (None, None),
    };
    let (tcp, tcp_addr) = match engine.config().tcp_addr {
        Some(a) => {
            let (l, a) = bind_one(a, "line protocol over TCP").await?;
            (Some(l), Some(a))
        }
        None => (None, None),
    };
    Ok(Listeners {
        pg,
        pg_addr,
        http,
        http_addr,
        tcp,
        tcp_addr,
        tls,
    })
}

/// Serves until the engine's shutdown token fires.
pub async fn serve(engine: Arc<Engine>, listeners: Listeners) {
    crate::sql::checks::install();
    crate::sql::cagg::start_policies(&engine);
    let mut tasks = vec![];
    let require = engine.config().tls_require;
    if let Some(l) = listeners.http {
        let tls = listeners.tls.as_ref().map(|t| (t.http.clone(), require));
        tasks.push(tokio::spawn(influx::serve(engine.clone(), l, tls)));
    }
    if let Some(l) = listeners.tcp {
        tasks.push(tokio::spawn(influx::tcp::serve(engine.clone(), l)));
    }
    pg::serve(engine, listeners.pg, listeners.tls.map(|t| t.pg)).await;
    for t in tasks {
        let _ = t.await;
    }
}
