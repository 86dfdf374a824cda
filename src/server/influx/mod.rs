//! The InfluxDB-compatible line-protocol port: `/write` (1.x), `/api/v2/write`,
//! `/api/v3/write_lp`, `/api/v1/write` (CnosDB), `/ping`, `/health`, `/metrics`,
//! the `/query` statements agents send at start, and the raw TCP listener.

mod auth;
mod listener;
pub mod tcp;

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;

use crate::engine::Engine;
use crate::error::Error;
use crate::lineproto::{self, Precision, WriteOptions, WriteOutcome};

/// Version reported in `X-Influxdb-Version`: agents check for a 1.x server.
pub const INFLUX_VERSION: &str = "1.8.10";
/// Bad lines named in one error message at most.
const MAX_LISTED_ERRORS: usize = 100;

type Params = Query<HashMap<String, String>>;

/// Which API a write came through: they differ in parameter names and error shape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    V1,
    V2,
    V3,
}

/// Serves the HTTP port until shutdown.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    tls: Option<(tokio_rustls::TlsAcceptor, bool)>,
) {
    let shutdown = engine.stopping().clone();
    let listener = listener::Limited::new(
        listener,
        engine.config().lp_max_connections,
        engine.config().lp_idle_timeout,
        tls,
    );
    let app = Router::new()
        .route("/write", post(write_v1))
        .route("/api/v1/write", post(write_v1))
        .route("/api/v2/write", post(write_v2))
        .route("/api/v3/write_lp", post(write_v3))
        .route("/ping", get(ping).head(ping))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/query", get(query).post(query))
        .layer(DefaultBodyLimit::max(64 * 1024))
        .with_state(engine);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
    {
        tracing::error!(error = %e, "line-protocol HTTP server stopped");
    }
}

fn error_response(status: StatusCode, message: &str, extra: Option<serde_json::Value>) -> Response {
    let code = match status.as_u16() {
        400 => "invalid",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not found",
        408 => "request timeout",
        413 => "request too large",
        507 => "insufficient storage",
        422 => "unprocessable entity",
        503 => "unavailable",
        _ => "internal error",
    };
    let mut body = json!({"code": code, "message": message, "error": message});
    if let (Some(extra), Some(obj)) = (extra, body.as_object_mut()) {
        obj.insert("data".into(), extra);
    }
    let mut resp = (status, axum::Json(body)).into_response();
    if status != StatusCode::UNAUTHORIZED {
        let first: String = message
            .chars()
            .take(1024)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&first) {
            resp.headers_mut().insert("X-Influxdb-Error", v);
        }
    }
    version_headers(resp.headers_mut());
    resp
}

fn version_headers(h: &mut HeaderMap) {
    h.insert(
        "X-Influxdb-Version",
        HeaderValue::from_static(INFLUX_VERSION),
    );
    h.insert("X-Influxdb-Build", HeaderValue::from_static("OSS"));
}

fn no_content() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    version_headers(r.headers_mut());
    r
}

/// The request body, gunzipped when `Content-Encoding: gzip`, within the size limit.
#[allow(clippy::result_large_err)] // the error is the response itself
fn decode_body(engine: &Engine, headers: &HeaderMap, body: Bytes) -> Result<Bytes, Response> {
    let limit = engine.config().http_max_body_size;
    if body.len() as u64 > limit {
        return Err(too_large(limit));
    }
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body),
        "gzip" | "x-gzip" => {
            let mut out = Vec::with_capacity(body.len().saturating_mul(8).min(limit as usize));
            let mut dec = flate2::read::MultiGzDecoder::new(&body[..]).take(limit + 1);
            match dec.read_to_end(&mut out) {
                Ok(_) if out.len() as u64 > limit => Err(too_large(limit)),
                Ok(_) => Ok(Bytes::from(out)),
                Err(e) => Err(error_response(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid gzip body: {e}"),
                    None,
                )),
            }
        }
        other => Err(error_response(
            StatusCode::BAD_REQUEST,
            &format!("unsupported Content-Encoding \"{other}\" (use gzip or identity)"),
            None,
        )),
    }
}

/// How long a request waits for room in the body budget before a 503.
const BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a request's whole body may take to arrive.
const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a body may pause between two pieces: a sender that stalls gives its
/// share of the body budget back to the writers waiting for it.
const BODY_STALL: std::time::Duration = std::time::Duration::from_secs(5);
/// Past its first [`BODY_STALL`], a body must keep arriving at this many bytes a
/// second on average (as Apache's mod_reqtimeout `MinRate=500`): one that trickles a
/// byte every few seconds gives its share of the budget back early too. A body
/// holding more of the budget must keep pace to arrive within [`BODY_DEADLINE`]
/// (its share over the time left after the first pause): holding a share of the
/// budget costs the bandwidth to fill it.
const BODY_MIN_RATE: u64 = 500;

/// Why a request body was not read.
enum BodyFailure {
    TooLarge,
    Late,
    Broken,
    /// A chunked body found no room to grow its share of the budget.
    Busy,
}

/// A request body of at most `limit` bytes, arriving within [`BODY_DEADLINE`], never
/// pausing longer than [`BODY_STALL`] and, after it, no slower than
/// [`BODY_MIN_RATE`] or than the pace that fills the share it first took within the
/// deadline. A chunked body's share grows as its bytes arrive (doubling).
async fn read_body(
    body: Body,
    limit: usize,
    share: &mut Share,
    chunked: bool,
) -> Result<Bytes, BodyFailure> {
    use futures::StreamExt;
    let start = tokio::time::Instant::now();
    let deadline = start + BODY_DEADLINE;
    let pace = BODY_MIN_RATE.max(share.bytes() / (BODY_DEADLINE - BODY_STALL).as_secs().max(1));
    let mut pieces = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    loop {
        // What has arrived buys time at the pace, past the first pause.
        let earned = std::time::Duration::from_millis(buf.len() as u64 * 1000 / pace);
        let until = deadline.min(start + BODY_STALL + earned);
        let wait = until
            .saturating_duration_since(tokio::time::Instant::now())
            .min(BODY_STALL);
        match tokio::time::timeout(wait, pieces.next()).await {
            Err(_) => return Err(BodyFailure::Late),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(_))) => return Err(BodyFailure::Broken),
            Ok(Some(Ok(piece))) => {
                let len = buf.len() + piece.len();
                if len > limit {
                    return Err(BodyFailure::TooLarge);
                }
                if chunked
                    && len as u64 > share.bytes()
                    && !share
                        .grow_to((len as u64).max(share.bytes().saturating_mul(2)))
                        .await
                {
                    return Err(BodyFailure::Busy);
                }
                buf.extend_from_slice(&piece);
            }
        }
    }
}

/// What a body sent without a Content-Length (chunked) first takes of the body
/// budget; it takes more as its bytes arrive.
const CHUNKED_FIRST: u64 = 1024 * 1024;

/// A request's share of the line-protocol body budget (whole KiB permits).
struct Share {
    budget: Arc<tokio::sync::Semaphore>,
    permit: tokio::sync::OwnedSemaphorePermit,
    total_kib: u64,
}

impl Share {
    /// Takes room for `bytes` (its Content-Length, or a first piece of a chunked
    /// body), waiting while other requests hold the budget; None when none frees up
    /// within [`BUDGET_WAIT`].
    async fn take(engine: &Engine, bytes: u64) -> Option<Share> {
        let (budget, total_kib) = super::inflight_budget(engine);
        // One request alone may always run, however large the limits.
        let kib = bytes.div_ceil(1024).clamp(1, total_kib);
        let permit = tokio::time::timeout(
            BUDGET_WAIT,
            budget
                .clone()
                .acquire_many_owned(u32::try_from(kib).unwrap_or(u32::MAX)),
        )
        .await
        .ok()?
        .ok()?;
        Some(Share {
            budget,
            permit,
            total_kib,
        })
    }

    fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * 1024
    }

    /// Grows the share to at least `bytes` (and at most the whole budget), waiting
    /// as [`Share::take`] does; false when no room frees up in time.
    async fn grow_to(&mut self, bytes: u64) -> bool {
        let want = bytes.div_ceil(1024).min(self.total_kib);
        let have = self.permit.num_permits() as u64;
        if want <= have {
            return true;
        }
        let more = u32::try_from(want - have).unwrap_or(u32::MAX);
        match tokio::time::timeout(BUDGET_WAIT, self.budget.clone().acquire_many_owned(more)).await
        {
            Ok(Ok(p)) => {
                self.permit.merge(p);
                true
            }
            _ => false,
        }
    }
}

/// 503 with `Retry-After`: the body budget had no room in time.
fn budget_busy() -> Response {
    let mut r = error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many request bytes in flight (http_max_inflight_bytes); retry later",
        None,
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn too_large(limit: u64) -> Response {
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("request body is larger than the limit of {limit} bytes"),
        None,
    )
}

async fn write_v1(
    State(e): State<Arc<Engine>>,
    Query(q): Params,
    h: HeaderMap,
    b: Body,
) -> Response {
    let precision = Precision::parse_v1(q.get("precision").map(String::as_str));
    handle_write(e, Api::V1, q.get("db").cloned(), precision, true, h, &q, b).await
}

async fn write_v2(
    State(e): State<Arc<Engine>>,
    Query(q): Params,
    h: HeaderMap,
    b: Body,
) -> Response {
    let precision = Precision::parse_v2(q.get("precision").map(String::as_str));
    // 1.x-compatible `bucket=db/rp` names the database before the slash.
    let db = q
        .get("bucket")
        .map(|b| b.split('/').next().unwrap_or("").to_string());
    handle_write(e, Api::V2, db, precision, true, h, &q, b).await
}

async fn write_v3(
    State(e): State<Arc<Engine>>,
    Query(q): Params,
    h: HeaderMap,
    b: Body,
) -> Response {
    let precision = Precision::parse_v3(q.get("precision").map(String::as_str));
    let accept_partial = !matches!(
        q.get("accept_partial").map(|s| s.to_ascii_lowercase()),
        Some(ref s) if s == "false" || s == "0" || s == "no"
    );
    handle_write(
        e,
        Api::V3,
        q.get("db").cloned(),
        precision,
        accept_partial,
        h,
        &q,
        b,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn handle_write(
    engine: Arc<Engine>,
    api: Api,
    db: Option<String>,
    precision: Result<Precision, String>,
    accept_partial: bool,
    headers: HeaderMap,
    q: &HashMap<String, String>,
    body: Body,
) -> Response {
    engine
        .metrics()
        .lp_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let user = match auth::identify(&engine, &headers, q) {
        None => return unauthorized(),
        Some(auth::Who::Role(u)) if !engine.catalog().snapshot().is_superuser(&u) => Some(u),
        Some(_) => None,
    };
    let db = match db.filter(|d| !d.is_empty()) {
        Some(d) if d.len() <= 63 => d,
        Some(_) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "database name is longer than 63 bytes",
                None,
            );
        }
        None => {
            let what = if api == Api::V2 { "bucket" } else { "database" };
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("{what} is required"),
                None,
            );
        }
    };
    let precision = match precision {
        Ok(p) => p,
        Err(m) => return error_response(StatusCode::BAD_REQUEST, &m, None),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > engine.config().http_max_body_size) {
        return too_large(engine.config().http_max_body_size);
    }
    let limit = engine.config().http_max_body_size;
    // A body takes its share of the in-flight budget before it is read (its
    // Content-Length, or a first piece of a chunked one), and must arrive within a
    // bound: a slow sender holds its share meanwhile.
    let Some(mut share) = Share::take(&engine, declared.unwrap_or(CHUNKED_FIRST.min(limit))).await
    else {
        return budget_busy();
    };
    let body = match read_body(
        body,
        usize::try_from(limit).unwrap_or(usize::MAX),
        &mut share,
        declared.is_none(),
    )
    .await
    {
        Ok(b) => b,
        Err(BodyFailure::TooLarge) => return too_large(limit),
        Err(BodyFailure::Busy) => return budget_busy(),
        Err(BodyFailure::Late) => {
            return error_response(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time (a pause of over 5 s; after the first 5 s, under 500 bytes a second or too slow to arrive within 60 s; or over 60 s in all)",
                None,
            );
        }
        Err(BodyFailure::Broken) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
                None,
            );
        }
    };
    // Room for the gunzipped text (up to the body limit), taken once the body is in.
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("gzip"));
    if gzip && !share.grow_to(share.bytes().saturating_add(limit)).await {
        return budget_busy();
    }
    let body = match decode_body(&engine, &headers, body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let opts = WriteOptions {
        precision,
        accept_partial,
        create_database: engine.config().lp_create_databases,
        user,
    };
    match lineproto::write(&engine, &db, body, &opts).await {
        Ok(out) if out.errors.is_empty() => no_content(),
        Ok(out) => partial_response(api, &out),
        Err(Error::UndefinedDatabase(d)) => error_response(
            StatusCode::NOT_FOUND,
            &format!("database not found: \"{d}\""),
            None,
        ),
        Err(err) => {
            static FAILED: crate::error::Throttle = crate::error::Throttle::new();
            if let Some(left_out) = FAILED.allow() {
                tracing::error!(error = %err, database = %db, left_out, "line-protocol write failed");
            }
            let status = StatusCode::from_u16(err.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error_response(status, &err.to_string(), None)
        }
    }
}

fn partial_response(api: Api, out: &WriteOutcome) -> Response {
    let mut parts: Vec<String> = out
        .errors
        .iter()
        .take(MAX_LISTED_ERRORS)
        .map(|e| format!("line {}: {}", e.line, e.message))
        .collect();
    if out.errors.len() > MAX_LISTED_ERRORS {
        parts.push(format!(
            "... and {} more bad lines",
            out.errors.len() - MAX_LISTED_ERRORS
        ));
    }
    let message = format!(
        "partial write: {} dropped={}",
        parts.join("\n"),
        out.dropped
    );
    let data = (api == Api::V3).then(|| {
        serde_json::Value::Array(
            out.errors
                .iter()
                .take(MAX_LISTED_ERRORS)
                .map(|e| {
                    json!({"original_line": e.text, "line_number": e.line, "error_message": e.message})
                })
                .collect(),
        )
    });
    error_response(StatusCode::BAD_REQUEST, &message, data)
}

/// 401 for a request without valid credentials.
fn unauthorized() -> Response {
    let mut r = error_response(StatusCode::UNAUTHORIZED, "authorization failed", None);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"sundial\""),
    );
    r
}

/// Whether endpoint `name` may answer this request.
fn may_see(e: &Engine, name: &str, headers: &HeaderMap, q: &HashMap<String, String>) -> bool {
    auth::open_endpoint(e, name) || auth::authorized(e, headers, q)
}

async fn ping(State(e): State<Arc<Engine>>, Query(q): Params, headers: HeaderMap) -> Response {
    if !may_see(&e, "ping", &headers, &q) {
        return unauthorized();
    }
    no_content()
}

async fn health(State(e): State<Arc<Engine>>, Query(q): Params, headers: HeaderMap) -> Response {
    if !may_see(&e, "health", &headers, &q) {
        return unauthorized();
    }
    let body = json!({
        "name": "sundial",
        "message": "ready for queries and writes",
        "status": "pass",
        "checks": [],
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": e.uptime().as_secs(),
    });
    let mut r = (StatusCode::OK, axum::Json(body)).into_response();
    version_headers(r.headers_mut());
    r
}

async fn metrics(State(e): State<Arc<Engine>>, Query(q): Params, headers: HeaderMap) -> Response {
    if !may_see(&e, "metrics", &headers, &q) {
        return unauthorized();
    }
    let text = crate::metrics::render(&e.metrics_snapshot());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `/query`: the InfluxQL agents send at start (`CREATE DATABASE`, `SHOW DATABASES`).
async fn query(
    State(e): State<Arc<Engine>>,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A role that is not a superuser needs CREATEDB for CREATE DATABASE.
    let may_create = match auth::identify(&e, &headers, &q) {
        None => return unauthorized(),
        Some(auth::Who::Role(u)) => e
            .catalog()
            .snapshot()
            .role(&u)
            .is_some_and(|r| r.superuser || r.create_db),
        Some(auth::Who::Unchecked) => true,
    };
    let text = match q.get("q") {
        Some(t) => t.clone(),
        None => url::form_urlencoded::parse(&body)
            .find(|(k, _)| k == "q")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default(),
    };
    let stmt = text.trim().trim_end_matches(';').trim();
    let words: Vec<&str> = stmt.split_whitespace().collect();
    let upper: Vec<String> = words
        .iter()
        .take(2)
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let ok = |series: Option<serde_json::Value>| {
        let mut res = json!({"statement_id": 0});
        if let (Some(s), Some(obj)) = (series, res.as_object_mut()) {
            obj.insert("series".into(), json!([s]));
        }
        let mut r = (StatusCode::OK, axum::Json(json!({"results": [res]}))).into_response();
        version_headers(r.headers_mut());
        r
    };
    match upper
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["CREATE", "DATABASE"] => {
            let Some(name) = words.get(2).map(|n| n.trim_matches('"')) else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "CREATE DATABASE needs a name",
                    None,
                );
            };
            if !may_create {
                return error_response(
                    StatusCode::FORBIDDEN,
                    "permission denied to create database",
                    None,
                );
            }
            let created = e.catalog().create_database(name, true).map(|_| ());
            match created {
                Ok(()) => ok(None),
                Err(err) => {
                    error_response(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string(), None)
                }
            }
        }
        ["SHOW", "DATABASES"] => {
            let names: Vec<serde_json::Value> = e
                .catalog()
                .snapshot()
                .databases
                .keys()
                .map(|n| json!([n]))
                .collect();
            ok(Some(
                json!({"name": "databases", "columns": ["name"], "values": names}),
            ))
        }
        _ => error_response(
            StatusCode::BAD_REQUEST,
            "Sundial answers only CREATE DATABASE and SHOW DATABASES here; query with SQL on the Postgres port",
            None,
        ),
    }
}
