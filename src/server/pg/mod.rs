//! PostgreSQL wire protocol (pgwire): startup with trust, md5 or SCRAM
//! authentication and database check, simple and extended query, cancel requests, and encoding of
//! Arrow results in text or binary per column.

mod auth;
mod conn;
mod frames;
#[doc(hidden)]
pub mod fuzz;
mod params;

use std::collections::HashMap;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type};
use async_trait::async_trait;
use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use parking_lot::Mutex;
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, ConnectionManager, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Execute, Parse, ParseComplete, Sync as PgSync,
};
use pgwire::messages::response::{ReadyForQuery, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::error::Error;
use crate::sql::functions::pgtext::pg_text_batch;
use crate::sql::tx::Status as TxStatus;
use crate::sql::{self, Output, Prepared, Session};

/// Converts a Sundial error to a client-visible ErrorResponse.
pub fn to_pg(e: Error) -> PgWireError {
    let mut info = ErrorInfo::new(
        "ERROR".to_owned(),
        e.sqlstate().to_owned(),
        e.client_message(),
    );
    info.detail = e.detail();
    info.hint = e.hint();
    PgWireError::UserError(Box::new(info))
}

/// Counts a statement as in flight while alive.
struct Active(Arc<std::sync::atomic::AtomicUsize>);

impl Active {
    fn new(n: &Arc<std::sync::atomic::AtomicUsize>) -> Active {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Active(n.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Per-connection state kept in pgwire's session extensions.
struct Conn {
    session: Session,
    /// Cancel token of the statement running now.
    cancel: Mutex<CancellationToken>,
    /// Whether the statement's token was canceled by `statement_timeout` (not by
    /// a CancelRequest), and the timer that does it.
    timed_out: Arc<std::sync::atomic::AtomicBool>,
    timer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The runtime serving the connection, where timers run: the statement runtime's
    /// workers may all be inside computations that do not yield.
    home: tokio::runtime::Handle,
    /// Whether the running statement only reads (its task may be abandoned).
    read_only: std::sync::atomic::AtomicBool,
    /// A `COPY ... FROM STDIN` receiving data.
    copy: Mutex<Option<Box<sql::copy::CopyIn>>>,
}

/// Cancel tokens by backend pid, with their secret keys.
type Registry = Mutex<HashMap<i32, (bytes::Bytes, Arc<Conn>)>>;

/// The shared handler: one instance serves every connection.
pub struct Handler {
    engine: Arc<Engine>,
    /// Statements executing now; shutdown waits for them.
    active: Arc<std::sync::atomic::AtomicUsize>,
    manager: Arc<ConnectionManager>,
    registry: Arc<Registry>,
    /// Hands out backend pids (a counter, unique per process) and secret keys.
    pids: RandomPidSecretKeyGenerator,
    parser: Arc<Parser>,
}

struct Params {
    user: String,
    app: Option<String>,
}

impl ServerParameterProvider for Params {
    fn server_parameters<C: ClientInfo>(&self, _client: &C) -> Option<HashMap<String, String>> {
        let mut m = HashMap::new();
        for (k, v) in [
            ("server_version", "15.6"),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("is_superuser", "on"),
            ("in_hot_standby", "off"),
            ("default_transaction_read_only", "off"),
        ] {
            m.insert(k.to_string(), v.to_string());
        }
        m.insert("session_authorization".into(), self.user.clone());
        m.insert(
            "application_name".into(),
            self.app.clone().unwrap_or_default(),
        );
        Some(m)
    }
}

#[async_trait]
impl StartupHandler for Handler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let authenticated = match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if self.engine.config().tls_require && !client.is_secure() {
                    return Err(auth::fatal(
                        "28000",
                        format!(
                            "connection from {} refused: this server requires TLS (sslmode=require)",
                            client.socket_addr().ip()
                        ),
                    ));
                }
                auth::begin(&self.engine, client).await?
            }
            PgWireFrontendMessage::PasswordMessageFamily(msg) => {
                auth::step(&self.engine, client, msg).await?
            }
            _ => false,
        };
        if authenticated {
            self.open_session(client).await?;
        }
        Ok(())
    }
}

impl Handler {
    /// After authentication: checks the role may log in and opens the session on
    /// its database (FATAL 3D000 when there is none).
    async fn open_session<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let user = client
            .metadata()
            .get(pgwire::api::METADATA_USER)
            .cloned()
            .unwrap_or_else(|| "sundial".into());
        let db = client
            .metadata()
            .get(pgwire::api::METADATA_DATABASE)
            .cloned()
            .unwrap_or_else(|| user.clone());
        if self.engine.config().auth != crate::config::AuthMethod::Trust {
            let catalog = self.engine.catalog().snapshot();
            match catalog.role(&user) {
                Some(r) if r.login => {
                    let open = self
                        .registry
                        .lock()
                        .values()
                        .filter(|(_, c)| c.session.user == user)
                        .count();
                    if !catalog.may_connect(&user, &db) && catalog.databases.contains_key(&db) {
                        return Err(auth::fatal(
                            "42501",
                            format!(
                                "permission denied for database \"{db}\": role \"{user}\" does not have CONNECT privilege"
                            ),
                        ));
                    }
                    if r.conn_limit >= 0 && open >= r.conn_limit as usize && !r.superuser {
                        return Err(auth::fatal(
                            "53300",
                            format!("too many connections for role \"{user}\""),
                        ));
                    }
                }
                Some(_) => {
                    return Err(auth::fatal(
                        "28000",
                        format!("role \"{user}\" is not permitted to log in"),
                    ));
                }
                None => {
                    return Err(auth::fatal(
                        "28000",
                        format!("role \"{user}\" does not exist"),
                    ));
                }
            }
        }
        let (pid, secret) = self.pids.generate(client);
        let pid = (std::process::id() as i32)
            .wrapping_mul(1000)
            .wrapping_add(pid)
            .abs();
        let session = match Session::new(self.engine.clone(), &db, &user, pid) {
            Ok(s) => s,
            Err(e) => return Err(auth::fatal(e.sqlstate(), e.to_string())),
        };
        client.set_pid_and_secret_key(pid, secret.clone());
        let (handle, guard) = self.manager.register(pid, secret.clone());
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert(guard);
        let c = Arc::new(Conn {
            session,
            cancel: Mutex::new(CancellationToken::new()),
            timed_out: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            timer: Mutex::new(None),
            home: tokio::runtime::Handle::current(),
            read_only: std::sync::atomic::AtomicBool::new(false),
            copy: Mutex::new(None),
        });
        self.registry
            .lock()
            .insert(pid, (secret.to_bytes(), c.clone()));
        client.session_extensions().insert(ConnRef(c));
        let app = client.metadata().get("application_name").cloned();
        finish_authentication(client, &Params { user, app }).await?;
        Ok(())
    }
}

/// Wrapper so the session can be looked up by type in the extensions.
struct ConnRef(Arc<Conn>);

fn conn_of<C: ClientInfo>(client: &C) -> PgWireResult<Arc<Conn>> {
    client
        .session_extensions()
        .get::<ConnRef>()
        .map(|r| r.0.clone())
        .ok_or_else(|| to_pg(Error::Internal("connection has no session".into())))
}

#[async_trait]
impl CancelHandler for Handler {
    async fn on_cancel_request(&self, req: CancelRequest) {
        let target = self.registry.lock().get(&req.pid).cloned();
        if let Some((secret, c)) = target
            && secret == req.secret_key.to_bytes()
        {
            c.cancel.lock().cancel();
            self.manager.cancel(req.pid, &req.secret_key).await;
        }
    }
}

/// Ends a row stream with 57014 once the statement is canceled (by a CancelRequest
/// or by `statement_timeout`).
struct Cancelable<S> {
    inner: S,
    cancel: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    timed_out: Arc<std::sync::atomic::AtomicBool>,
    done: bool,
}

impl<S> Stream for Cancelable<S>
where
    S: Stream<Item = PgWireResult<pgwire::messages::data::DataRow>> + Unpin,
{
    type Item = PgWireResult<pgwire::messages::data::DataRow>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.cancel.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(Some(Err(to_pg(canceled(&self.timed_out)))));
        }
        self.inner.poll_next_unpin(cx)
    }
}

/// Renders `timestamptz` values in the session time zone, as PostgreSQL does.
fn localize(batch: RecordBatch, tz: &str) -> datafusion::error::Result<RecordBatch> {
    if tz == "UTC" {
        return Ok(batch);
    }
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(_, Some(_))))
    {
        return Ok(batch);
    }
    let mut fields = vec![];
    let mut cols = vec![];
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if let DataType::Timestamp(u, Some(_)) = f.data_type() {
            let dt = DataType::Timestamp(*u, Some(Arc::from(tz)));
            cols.push(arrow::compute::cast(c, &dt)?);
            fields.push(f.as_ref().clone().with_data_type(dt));
        } else {
            cols.push(c.clone());
            fields.push(f.as_ref().clone());
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        cols,
    )?)
}

fn tag_of(tag: &str) -> Tag {
    if let Some(n) = tag.strip_prefix("INSERT 0 ")
        && let Ok(n) = n.parse::<usize>()
    {
        return Tag::new("INSERT").with_oid(0).with_rows(n);
    }
    Tag::new(tag)
}

fn fields_for(schema: &SchemaRef, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    // pgwire indexes the codes by column: a Bind with some but not all of them is
    // the client's protocol error (PostgreSQL's message), not a panic.
    if let Format::Individual(codes) = format
        && codes.len() != schema.fields().len()
    {
        return Err(to_pg(Error::sql(
            "08P01",
            format!(
                "bind message has {} result formats but query has {} columns",
                codes.len(),
                schema.fields().len()
            ),
        )));
    }
    let mut fields = arrow_schema_to_pg_fields(&catalog_types(schema), format, None)?;
    // Columns described as another PostgreSQL type than Arrow's names (`name` for a
    // text column), with the same values in both formats.
    for (info, f) in fields.iter_mut().zip(schema.fields()) {
        let ty = match crate::json::Kind::of(f) {
            Some(crate::json::Kind::Json) => Some(pgwire::api::Type::JSON),
            Some(crate::json::Kind::Jsonb) => Some(pgwire::api::Type::JSONB),
            None => None,
        };
        if let Some(ty) = ty {
            *info = FieldInfo::new(info.name().to_string(), None, None, ty, info.format());
            continue;
        }
        let ty = match f
            .metadata()
            .get(crate::query::system::PG_TYPE_KEY)
            .map(String::as_str)
        {
            Some("name") if f.data_type() == &DataType::Utf8 => pgwire::api::Type::NAME,
            // Empty in both formats.
            Some("void") if f.data_type() == &DataType::Utf8 => pgwire::api::Type::VOID,
            _ => continue,
        };
        *info = FieldInfo::new(info.name().to_string(), None, None, ty, info.format());
    }
    Ok(fields)
}

/// The type arrow-pg names a column's PostgreSQL type by: it knows `numeric` only as
/// a 128-bit decimal (Sundial encodes every decimal's values itself, `pgtext`).
fn named_type(dt: &DataType) -> DataType {
    match dt {
        // Sent as bigint (`pg_text_batch`): PostgreSQL has no unsigned type.
        DataType::UInt64 => DataType::Int64,
        DataType::Decimal256(..) => DataType::Decimal128(38, 0),
        DataType::List(f) if matches!(f.data_type(), DataType::Decimal256(..)) => {
            DataType::List(Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(DataType::Decimal128(38, 0)),
            ))
        }
        other => other.clone(),
    }
}

/// Drops the catalog's `oid` / `"char"` column markers (field metadata) where a cast
/// carried them onto another type (`oid::bigint`): only `Int32` columns are oids and
/// only text columns are `"char"`. Decimals are named as [`named_type`] says.
fn catalog_types(schema: &SchemaRef) -> arrow::datatypes::Schema {
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let named = named_type(f.data_type());
            let f = if &named == f.data_type() {
                f.clone()
            } else {
                Arc::new(f.as_ref().clone().with_data_type(named))
            };
            let keep = match f.data_type() {
                DataType::Int32 => "pg.oid_alias",
                DataType::Utf8 => "pg.char",
                _ => "",
            };
            if f.metadata().keys().any(|k| k != keep) {
                let mut m = f.metadata().clone();
                m.retain(|k, _| k == keep);
                f.as_ref().clone().with_metadata(m)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    arrow::datatypes::Schema::new(fields)
}

fn to_response(c: &Conn, out: Output, format: &Format) -> PgWireResult<Response> {
    Ok(match out {
        Output::Command(tag) => Response::Execution(tag_of(&tag)),
        Output::TxStart(tag) => Response::TransactionStart(Tag::new(&tag)),
        Output::TxEnd(tag) => Response::TransactionEnd(Tag::new(&tag)),
        Output::CopyIn(state) => {
            let n = state.columns();
            let format = i8::from(state.is_binary());
            *c.copy.lock() = Some(state);
            Response::CopyIn(CopyResponse::new(format, n, futures::stream::empty()))
        }
        Output::CopyOut(n, binary, stream) => {
            // Built as text so pgwire adds no trailer of its own (the stream ends
            // with one), then marked binary.
            let mut resp =
                CopyResponse::new(0, n, stream.map(|r| r.map(CopyData::new).map_err(to_pg)));
            resp.format = i8::from(binary);
            Response::CopyOut(resp)
        }
        Output::Fetched(schema, stream) => {
            match to_response(c, Output::Rows(schema, stream), format)? {
                Response::Query(mut q) => {
                    q.command_tag = "FETCH".into();
                    Response::Query(q)
                }
                other => other,
            }
        }
        Output::Tagged(tag, schema, stream) => {
            match to_response(c, Output::Rows(schema, stream), format)? {
                Response::Query(mut q) => {
                    q.command_tag = tag;
                    Response::Query(q)
                }
                other => other,
            }
        }
        Output::Rows(schema, stream) => {
            let fields = Arc::new(fields_for(&schema, format)?);
            let tz = c
                .session
                .settings
                .read()
                .get("timezone")
                .cloned()
                .unwrap_or_else(|| "UTC".into());
            let tz = crate::sql::session::normalize_tz(&tz).unwrap_or_else(|_| "UTC".into());
            let f2 = fields.clone();
            let rows = stream
                .map(move |b| {
                    let it: Box<dyn Iterator<Item = PgWireResult<_>> + Send + Sync> = match b
                        .and_then(|b| localize(b, &tz))
                        .and_then(|b| pg_text_batch(b, &f2))
                    {
                        Ok(b) => encode_recordbatch(f2.clone(), b),
                        Err(e) => Box::new(std::iter::once(Err(to_pg(Error::DataFusion(e))))),
                    };
                    futures::stream::iter(it)
                })
                .flatten();
            let cancel = c.cancel.lock().clone();
            let rows = Cancelable {
                inner: Box::pin(rows),
                cancel: Box::pin(cancel.cancelled_owned()),
                timed_out: c.timed_out.clone(),
                done: false,
            };
            Response::Query(QueryResponse::new(fields, rows))
        }
    })
}

/// Settings PostgreSQL 15 reports to the client whenever they change (GUC_REPORT):
/// the session's key and the name on the wire. Drivers follow them (psycopg and
/// pgjdbc read TimeZone to interpret timestamps).
const REPORTED: [(&str, &str); 8] = [
    ("timezone", "TimeZone"),
    ("datestyle", "DateStyle"),
    ("intervalstyle", "IntervalStyle"),
    ("application_name", "application_name"),
    ("client_encoding", "client_encoding"),
    ("standard_conforming_strings", "standard_conforming_strings"),
    (
        "default_transaction_read_only",
        "default_transaction_read_only",
    ),
    ("session_authorization", "session_authorization"),
];

/// The current values of [`REPORTED`].
fn reported(c: &Conn) -> Vec<Option<String>> {
    let s = c.session.settings.read();
    REPORTED.iter().map(|(k, _)| s.get(*k).cloned()).collect()
}

/// Sends a ParameterStatus for each reported setting that changed since `before`.
async fn report_changes<C>(client: &mut C, c: &Conn, before: &[Option<String>]) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let now = reported(c);
    for ((_, name), (was, is)) in REPORTED.iter().zip(before.iter().zip(now)) {
        if let Some(v) = is.filter(|v| was.as_ref() != Some(v)) {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name.to_string(),
                    v,
                )))
                .await?;
        }
    }
    Ok(())
}

/// A new cancel token for the statement about to run, canceled by a timer when the
/// session's `statement_timeout` is set.
fn fresh_cancel(c: &Conn) {
    let token = CancellationToken::new();
    *c.cancel.lock() = token.clone();
    c.timed_out
        .store(false, std::sync::atomic::Ordering::SeqCst);
    c.read_only
        .store(false, std::sync::atomic::Ordering::SeqCst);
    arm_timeout(c);
}

/// (Re)starts the statement_timeout timer from the session's setting now: when it
/// fires it cancels the statement's token. PostgreSQL (13 on) times each statement of
/// a Query message by itself, with the setting the statements before it left.
fn arm_timeout(c: &Conn) {
    let token = c.cancel.lock().clone();
    let mut timer = c.timer.lock();
    if let Some(t) = timer.take() {
        t.abort();
    }
    let limit = c
        .session
        .settings
        .read()
        .get("statement_timeout")
        .and_then(|v| sql::session::duration_setting(v));
    if let Some(limit) = limit.filter(|d| !d.is_zero()) {
        let flag = c.timed_out.clone();
        *timer = Some(c.home.spawn(async move {
            tokio::time::sleep(limit).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            token.cancel();
        }));
    }
}

/// The error of a canceled statement: its timeout's or its client's.
fn canceled(timed_out: &std::sync::atomic::AtomicBool) -> Error {
    match timed_out.load(std::sync::atomic::Ordering::SeqCst) {
        true => Error::sql("57014", "canceling statement due to statement timeout"),
        false => Error::Canceled,
    }
}

/// The error a statement gets when an operator computing its rows panics (XX000).
fn operator_panicked() -> datafusion::error::DataFusionError {
    tracing::error!("an operator panicked while computing a statement's rows");
    datafusion::error::DataFusionError::Execution(
        "internal error: the statement failed unexpectedly while computing its rows".into(),
    )
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop<T = ()>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `out` with its rows read on the statement runtime as far as the first two
/// batches. A result that ends there (an aggregate, a newest row, most dashboard
/// queries) reaches the client with no task or channel of its own: two thread
/// hand-offs less per query. A longer one goes on computing in [`detached`].
async fn settled(out: Output) -> Output {
    match out {
        Output::Rows(schema, stream) => Output::Rows(schema, settled_rows(stream).await),
        Output::Fetched(schema, stream) => Output::Fetched(schema, settled_rows(stream).await),
        Output::Tagged(tag, schema, stream) => {
            Output::Tagged(tag, schema, settled_rows(stream).await)
        }
        other => other,
    }
}

async fn settled_rows(
    mut stream: datafusion::physical_plan::SendableRecordBatchStream,
) -> datafusion::physical_plan::SendableRecordBatchStream {
    let schema = stream.schema();
    let mut first = Vec::with_capacity(2);
    let mut ended = false;
    while first.len() < 2 && !ended {
        match std::panic::AssertUnwindSafe(stream.next())
            .catch_unwind()
            .await
        {
            Ok(Some(r)) => {
                ended = r.is_err();
                first.push(r);
            }
            Ok(None) => ended = true,
            Err(_) => {
                first.push(Err(operator_panicked()));
                ended = true;
            }
        }
    }
    let first = futures::stream::iter(first);
    if ended {
        return Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, first),
        );
    }
    let rest = detached(stream);
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, first.chain(rest)),
    )
}

/// `stream`, computed by a task of its own on the statement runtime: whoever polls it
/// (the connection's task, which also watches for cancellation) waits on a channel,
/// never inside an operator that computes for seconds without yielding. Dropping it
/// aborts the task.
fn detached(
    stream: datafusion::physical_plan::SendableRecordBatchStream,
) -> datafusion::physical_plan::SendableRecordBatchStream {
    let schema = stream.schema();
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let task = crate::query::runtime::handle().spawn(async move {
        let mut stream = stream;
        loop {
            // A panic inside an operator must reach the client as an error: the
            // closed channel would otherwise read as the end of the rows, and an
            // aggregate over them would answer "0 rows".
            let r = match std::panic::AssertUnwindSafe(stream.next())
                .catch_unwind()
                .await
            {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => {
                    let _ = tx.send(Err(operator_panicked())).await;
                    break;
                }
            };
            if tx.send(r).await.is_err() {
                break;
            }
        }
    });
    let task = AbortOnDrop(task);
    let rows = futures::stream::unfold((rx, task), |(mut rx, task)| async move {
        rx.recv().await.map(|r| (r, (rx, task)))
    });
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rows))
}

/// `r`, after telling the session when it is an error (a block it fails in is
/// aborted).
fn noted<T>(c: &Conn, r: PgWireResult<T>) -> PgWireResult<T> {
    if r.is_err() {
        c.session.note_error();
    }
    r
}

/// The status ReadyForQuery reports for the session's transaction.
fn wire_status(c: &Conn) -> TransactionStatus {
    match c.session.tx_status() {
        TxStatus::Idle => TransactionStatus::Idle,
        TxStatus::InBlock => TransactionStatus::Transaction,
        TxStatus::Failed => TransactionStatus::Error,
    }
}

#[async_trait]
impl SimpleQueryHandler for Handler {
    /// pgwire derives the status it reports from the status before the query and
    /// the responses (an error moves a block to failed, BEGIN into one, COMMIT and
    /// ROLLBACK out of it); starting from "in a block" whenever the session is in
    /// one, failed or not, makes `ROLLBACK TO SAVEPOINT` leave the failed state.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let c = conn_of(client)?;
        client.set_transaction_status(match c.session.tx_status() {
            TxStatus::Idle => TransactionStatus::Idle,
            TxStatus::InBlock | TxStatus::Failed => TransactionStatus::Transaction,
        });
        noted(&c, self._on_query(client, query).await)
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let c = conn_of(client)?;
        let _active = Active::new(&self.active);
        fresh_cancel(&c);
        let before = reported(&c);
        let out = on_statement_runtime(&c, run_simple(c.clone(), query.to_string())).await?;
        report_changes(client, &c, &before).await?;
        let _ = client.flush().await;
        Ok(out)
    }
}

/// Runs `work` (a statement's planning and execution) on the statement runtime
/// ([`crate::query::runtime`]). A cancel or `statement_timeout` of a statement that
/// only reads (`work` says so in `Conn::read_only`) answers 57014 at once, even
/// while `work` is inside a computation that does not yield, and abandons it; one
/// that writes runs to its end, so that what the client is told is what happened.
async fn on_statement_runtime<T: Send + 'static>(
    c: &Conn,
    work: impl std::future::Future<Output = PgWireResult<T>> + Send + 'static,
) -> PgWireResult<T> {
    let failed = |_| {
        Err(to_pg(Error::Internal(
            "the statement failed unexpectedly".into(),
        )))
    };
    let token = c.cancel.lock().clone();
    let mut task = crate::query::runtime::spawn(token.clone(), work);
    tokio::select! {
        r = &mut task => return r.unwrap_or_else(failed),
        _ = token.cancelled() => {}
    }
    if c.read_only.load(std::sync::atomic::Ordering::SeqCst) {
        task.abort();
        return Err(to_pg(canceled(&c.timed_out)));
    }
    task.await.unwrap_or_else(failed)
}

/// A simple-protocol query string: its statements run one after another (in an
/// implicit transaction when there are several), the first error ending them.
async fn run_simple(c: Arc<Conn>, query: String) -> PgWireResult<Vec<Response>> {
    let metrics = c.session.engine.metrics();
    let steps = match c.session.steps(&query) {
        Ok(s) => s,
        Err(e) => {
            c.session.note_error();
            return Ok(vec![Response::Error(Box::new(err_info(e)))]);
        }
    };
    // only comments (pgx's ping is `-- ping`): PostgreSQL answers EmptyQueryResponse
    if steps.is_empty() {
        return Ok(vec![Response::EmptyQuery]);
    }
    // One statement: a cancel abandons the whole task (`on_statement_runtime`). With
    // several, each read-only one is abandoned by itself below, so that the task goes
    // on to end the implicit transaction (rolling back what came before).
    let several = steps.len() > 1;
    c.read_only.store(
        !several && steps.iter().all(sql::Step::read_only),
        std::sync::atomic::Ordering::SeqCst,
    );
    let implicit = c.session.implicit_transaction(&steps);
    if implicit {
        c.session.begin_implicit();
    }
    let mut out = vec![];
    let mut ok = true;
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 {
            arm_timeout(&c);
        }
        let started = std::time::Instant::now();
        let abandon = several && step.read_only();
        let work = run_one(c.clone(), step, implicit);
        let res = match abandon {
            true => abandonable(&c, work).await,
            false => work.await,
        };
        metrics.sql_query(started.elapsed(), res.is_err());
        match res {
            Ok(o) => out.push(to_response(&c, o, &Format::UnifiedText)?),
            Err(e) => {
                ok = false;
                if !implicit {
                    c.session.note_error();
                }
                out.push(Response::Error(Box::new(err_info(e))));
                break;
            }
        }
    }
    if implicit && let Err(e) = c.session.end_implicit(ok).await {
        out.push(Response::Error(Box::new(err_info(e))));
    }
    Ok(out)
}

/// One statement of a Query message, its rows read at once inside the implicit
/// transaction (an error in them, a division by zero, must roll back the statements
/// before it), else as far as [`settled`] reads them.
async fn run_one(c: Arc<Conn>, step: sql::Step, implicit: bool) -> Result<Output, Error> {
    let res = std::panic::AssertUnwindSafe(c.session.run_step(step))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(Error::Internal("the statement failed unexpectedly".into())));
    match res {
        Ok(Output::Rows(schema, stream)) if implicit => {
            // The rows held count against the queries' memory pool (53200 past it).
            let pool = c.session.engine.runtime().memory_pool.clone();
            let held = datafusion::execution::memory_pool::MemoryConsumer::new(
                "rows of a statement in an implicit transaction",
            )
            .register(&pool);
            let collect = async {
                let mut stream = stream;
                let mut batches = vec![];
                while let Some(b) = stream.next().await {
                    let b = b?;
                    held.try_grow(b.get_array_memory_size())?;
                    batches.push(b);
                }
                Ok::<_, datafusion::error::DataFusionError>(batches)
            };
            std::panic::AssertUnwindSafe(collect)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(operator_panicked()))
                .map_err(Error::from)
                .map(|batches| {
                    // The reservation goes with the rows, given back once they
                    // have been sent (or dropped).
                    let rows = futures::stream::iter(batches).map(move |b| {
                        let _held = &held;
                        Ok(b)
                    });
                    let again = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        schema.clone(),
                        rows,
                    );
                    Output::Rows(schema, Box::pin(again))
                })
        }
        Ok(o) => Ok(settled(o).await),
        Err(e) => Err(e),
    }
}

/// `work` in a task of its own on the statement runtime, abandoned (57014) when the
/// statement is canceled or times out, even inside a computation that does not yield.
async fn abandonable(
    c: &Conn,
    work: impl std::future::Future<Output = Result<Output, Error>> + Send + 'static,
) -> Result<Output, Error> {
    let token = c.cancel.lock().clone();
    let mut task = AbortOnDrop(crate::query::runtime::spawn(token.clone(), work));
    tokio::select! {
        r = &mut task.0 => r.unwrap_or_else(|_| {
            Err(Error::Internal("the statement failed unexpectedly".into()))
        }),
        _ = token.cancelled() => Err(canceled(&c.timed_out)),
    }
}

fn err_info(e: Error) -> ErrorInfo {
    match to_pg(e) {
        PgWireError::UserError(i) => *i,
        other => ErrorInfo::new("ERROR".into(), "XX000".into(), other.to_string()),
    }
}

/// A statement prepared with Parse.
#[derive(Clone, Debug)]
pub struct Stmt {
    prepared: Prepared,
    /// Parameter types the client declared in Parse (what a statement Sundial runs
    /// itself expects its `$n` values as).
    declared: Vec<Option<DataType>>,
    /// For `FETCH`: the columns of its cursor when it was parsed (Describe).
    fetched: Option<SchemaRef>,
}

/// Arrow type for a parameter type a client declares in Parse.
fn pg_to_arrow(t: &Type) -> Option<DataType> {
    use arrow::datatypes::TimeUnit;
    Some(match *t {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::NUMERIC => crate::catalog::ANY_NUMERIC,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DataType::Utf8,
        Type::BYTEA => DataType::Binary,
        Type::DATE => DataType::Date32,
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
        _ => return None,
    })
}

/// Plans statements at Parse time.
pub struct Parser;

fn param_types(stmt: &Stmt) -> Vec<Option<DataType>> {
    let plan = match &stmt.prepared {
        Prepared::Plan { plan, .. } => plan,
        Prepared::Native(n) => {
            // Declared types, text for the rest.
            let n = sql::args::placeholder_count(n);
            return (0..n)
                .map(|i| {
                    Some(
                        stmt.declared
                            .get(i)
                            .cloned()
                            .flatten()
                            .unwrap_or(DataType::Utf8),
                    )
                })
                .collect();
        }
    };
    let types = placeholder_types(plan);
    let mut v: Vec<(usize, Option<DataType>)> = types
        .into_iter()
        .filter_map(|(k, t)| {
            k.trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .map(|i| (i, t))
        })
        .collect();
    v.sort_by_key(|(i, _)| *i);
    let n = v.last().map(|(i, _)| *i).unwrap_or(0);
    let mut out = vec![None; n];
    for (i, t) in v {
        if i >= 1 {
            out[i - 1] = t;
        }
    }
    out
}

/// The JSON kind of each `$n` a plan types as `json` or `jsonb` (a value for a
/// JSON column): described to the client as such, and read as such in binary.
fn param_kinds(stmt: &Stmt) -> Vec<Option<crate::json::Kind>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let Prepared::Plan { plan, .. } = &stmt.prepared else {
        return vec![];
    };
    let mut out: Vec<Option<crate::json::Kind>> = vec![];
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Placeholder(ph) = e
                    && let Some(kind) = ph.field.as_deref().and_then(crate::json::Kind::of)
                    && let Ok(i) = ph.id.trim_start_matches('$').parse::<usize>()
                    && i >= 1
                {
                    if out.len() < i {
                        out.resize(i, None);
                    }
                    out[i - 1].get_or_insert(kind);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    out
}

/// Every `$n` of a plan with the first type found for it. (DataFusion's
/// `get_parameter_types` fails when two uses infer different types and forgets a type
/// when a later use has none; a statement then seemed to have no parameters.)
fn placeholder_types(
    plan: &datafusion::logical_expr::LogicalPlan,
) -> HashMap<String, Option<DataType>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let mut types: HashMap<String, Option<DataType>> = HashMap::new();
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Placeholder(ph) = e {
                    let t = ph.field.as_ref().map(|f| f.data_type().clone());
                    let slot = types.entry(ph.id.clone()).or_insert(None);
                    if slot.is_none() {
                        *slot = t;
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    types
}

fn result_schema(p: &Prepared) -> Option<SchemaRef> {
    match p {
        Prepared::Plan {
            plan,
            is_dml,
            names,
            described,
            ..
        } => {
            if *is_dml {
                None
            } else {
                let schema = described
                    .clone()
                    .unwrap_or_else(|| Arc::new(plan.schema().as_arrow().clone()));
                Some(sql::names::rename(schema, names.as_deref()))
            }
        }
        Prepared::Native(stmt) => {
            sql::session::result_schema(stmt).or_else(|| sql::ddl::result_schema(stmt))
        }
    }
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Stmt;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql_text: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Stmt>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let c = conn_of(client)?;
        // Parsing and planning run on the statement runtime, as execution does: a
        // statement that takes long to plan holds up no other connection.
        let (run, text, types) = (c.clone(), sql_text.to_string(), types.to_vec());
        let parsed = crate::query::runtime::handle()
            .spawn(async move { parse_one(&run, &text, &types).await })
            .await
            .unwrap_or_else(|_| {
                Err(to_pg(Error::Internal(
                    "planning the statement failed unexpectedly".into(),
                )))
            });
        noted(&c, parsed)
    }

    fn get_parameter_types(&self, stmt: &Stmt) -> PgWireResult<Vec<Type>> {
        let kinds = param_kinds(stmt);
        param_types(stmt)
            .iter()
            .enumerate()
            .map(|(i, t)| match (kinds.get(i).copied().flatten(), t) {
                (Some(crate::json::Kind::Json), _) => Ok(Type::JSON),
                (Some(crate::json::Kind::Jsonb), _) => Ok(Type::JSONB),
                (None, Some(dt)) => into_pg_type(&named_type(dt)),
                (None, None) => Ok(Type::TEXT),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Stmt,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match stmt
            .fetched
            .clone()
            .or_else(|| result_schema(&stmt.prepared))
        {
            Some(s) => fields_for(&s, format.unwrap_or(&Format::UnifiedText)),
            None => Ok(vec![]),
        }
    }
}

/// A query whose `$n` take the types PostgreSQL infers for a statement that runs
/// natively: `SELECT 1 FROM t WHERE <filter>` for `DELETE FROM t WHERE <filter>`,
/// and for UPDATE the same with `column = <value>` for every assignment.
fn delete_filter(stmt: &datafusion::sql::sqlparser::ast::Statement) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{AssignmentTarget, FromTable, Statement};
    // INSERT … ON CONFLICT / RETURNING: the plain INSERT, whose plan types its
    // values by the target columns.
    if let Statement::Insert(i) = stmt
        && sql::args::placeholder_count(stmt) > 0
    {
        let mut plain = i.clone();
        plain.on = None;
        plain.returning = None;
        return Some(Statement::Insert(plain).to_string());
    }
    if let Statement::Update(u) = stmt {
        if sql::args::placeholder_count(stmt) == 0 {
            return None;
        }
        let mut conds: Vec<String> = u
            .assignments
            .iter()
            .filter_map(|a| match &a.target {
                AssignmentTarget::ColumnName(n) => Some(format!("({n} = ({}))", a.value)),
                AssignmentTarget::Tuple(_) => None,
            })
            .collect();
        if let Some(w) = &u.selection {
            conds.push(format!("({w})"));
        }
        let mut from = u.table.to_string();
        if let Some(
            datafusion::sql::sqlparser::ast::UpdateTableFromKind::AfterSet(f)
            | datafusion::sql::sqlparser::ast::UpdateTableFromKind::BeforeSet(f),
        ) = &u.from
        {
            for t in f {
                from.push_str(&format!(", {t}"));
            }
        }
        return Some(format!(
            "SELECT 1 FROM {from} WHERE {}",
            conds.join(" AND ")
        ));
    }
    let Statement::Delete(d) = stmt else {
        return None;
    };
    let from = match &d.from {
        FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
    };
    let (Some(w), [t]) = (&d.selection, from.as_slice()) else {
        return None;
    };
    (sql::args::placeholder_count(stmt) > 0).then(|| format!("SELECT 1 FROM {t} WHERE {w}"))
}

/// Parse: one statement, prepared with the parameter types the client declared.
async fn parse_one(c: &Conn, sql_text: &str, types: &[Option<Type>]) -> PgWireResult<Option<Stmt>> {
    {
        let mut stmts = sql::parse(sql_text).map_err(to_pg)?;
        if stmts.len() > 1 {
            return Err(to_pg(Error::sql(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            )));
        }
        let Some(stmt) = stmts.pop() else {
            return Ok(None);
        };
        let mut declared: Vec<Option<DataType>> = types
            .iter()
            .map(|t| t.as_ref().and_then(pg_to_arrow))
            .collect();
        let filter = delete_filter(&stmt);
        let prepared = c
            .session
            .prepare_typed(stmt, &declared)
            .await
            .map_err(to_pg)?;
        // DELETE runs natively: its `$n` take the types PostgreSQL would infer, read
        // from the plan of the same filter as a query.
        if let Some(q) = filter
            && let Ok(mut parsed) = sql::parse(&q)
            && let Some(stmt) = parsed.pop()
            && let Ok(plan) = c.session.prepare_typed(stmt, &declared).await
        {
            let inferred = param_types(&Stmt {
                prepared: plan,
                declared: vec![],
                fetched: None,
            });
            declared.resize(declared.len().max(inferred.len()), None);
            for (d, i) in declared.iter_mut().zip(inferred) {
                if d.is_none() {
                    *d = i;
                }
            }
        }
        let mut fetched = match &prepared {
            Prepared::Native(n) => {
                sql::cursor::fetch_target(n).and_then(|name| c.session.cursors.schema(&name))
            }
            Prepared::Plan { .. } => None,
        };
        // UPDATE … RETURNING describes its rows: the items over the table's row.
        if let Prepared::Native(n) = &prepared
            && let Some(q) = sql::update::returning_query(&c.session, n)
            && let Ok(mut parsed) = sql::parse(&q)
            && let Some(stmt) = parsed.pop()
            && let Ok(plan) = c.session.prepare_typed(stmt, &declared).await
        {
            fetched = result_schema(&plan);
        }
        Ok(Some(Stmt {
            prepared,
            declared,
            fetched,
        }))
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handler {
    type Statement = Stmt;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        self.parser.clone()
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let r = self.execute_portal(client, message).await;
        match conn_of(client) {
            Ok(c) => noted(&c, r),
            Err(_) => r,
        }
    }

    /// pgwire's, but the ParseComplete waits in the buffer for Sync or Flush (one
    /// write for the whole exchange, as PostgreSQL sends it).
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| pgwire::api::DEFAULT_NAME.to_owned());
        match pgwire::api::stmt::StoredStatement::parse(client, &message, self.query_parser())
            .await?
        {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    /// pgwire's, with the BindComplete buffered (see `on_parse`).
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::api::store::Entry;
        let statement_name = message
            .statement_name
            .as_deref()
            .unwrap_or(pgwire::api::DEFAULT_NAME);
        let portal_name = message
            .portal_name
            .as_deref()
            .unwrap_or(pgwire::api::DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) => {
                if !message.parameters.is_empty() {
                    return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                        "ERROR".to_owned(),
                        "08P01".to_owned(),
                        format!(
                            "bind message supplies {} parameters, but prepared statement {statement_name:?} requires 0",
                            message.parameters.len(),
                        ),
                    ))));
                }
                client.portal_store().put_empty_portal(portal_name);
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A cursor made by SQL DECLARE is a portal too (psycopg describes it by name).
        if message.target_type == b'P'
            && let Some(name) = message.name.as_deref()
            && client.portal_store().get_portal(name).is_none()
            && let Ok(c) = conn_of(client)
            && let Some(schema) = c.session.cursors.schema(name)
        {
            let fields = fields_for(&schema, &Format::UnifiedText)?;
            return pgwire::api::query::send_describe_response(
                &mut Buffered(client),
                &pgwire::api::results::DescribePortalResponse::new(fields),
            )
            .await;
        }
        let r = self.describe(client, message).await;
        match conn_of(client) {
            Ok(c) => noted(&c, r),
            Err(_) => r,
        }
    }

    /// ReadyForQuery reports the session's own transaction state (pgwire's tracking
    /// cannot see `ROLLBACK TO SAVEPOINT` leave a failed block).
    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let status = match conn_of(client) {
            Ok(c) => wire_status(&c),
            Err(_) => client.transaction_status(),
        };
        // The unnamed portal ends with its transaction, as in PostgreSQL: a Sync
        // outside a block ends the implicit one (and a suspended portal's query).
        if status == TransactionStatus::Idle {
            client.portal_store().rm_portal(pgwire::api::DEFAULT_NAME);
        }
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        client.flush().await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Stmt>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let c = conn_of(client)?;
        let _active = Active::new(&self.active);
        fresh_cancel(&c);
        let prepared = &portal.statement.statement.prepared;
        let types = param_types(&portal.statement.statement);
        let params = if types.is_empty() && portal.parameter_len() == 0 {
            None
        } else {
            if portal.parameter_len() != types.len() {
                return Err(to_pg(Error::sql(
                    "08P01",
                    format!(
                        "bind message supplies {} parameters, but prepared statement requires {}",
                        portal.parameter_len(),
                        types.len()
                    ),
                )));
            }
            let kinds = param_kinds(&portal.statement.statement);
            let values = params::decode(portal, &types, &kinds)?;
            Some(coerce_params(values, &types).map_err(to_pg)?)
        };
        let started = std::time::Instant::now();
        let before = reported(&c);
        c.read_only.store(
            matches!(prepared, Prepared::Plan { is_dml: false, .. }),
            std::sync::atomic::Ordering::SeqCst,
        );
        // The stored statement is shared, not copied; a panic ends the task, which
        // `on_statement_runtime` reports as an internal error.
        let stored = portal.statement.clone();
        let run = c.clone();
        let out = on_statement_runtime(&c, async move {
            Ok(
                match run
                    .session
                    .execute(&stored.statement.prepared, params)
                    .await
                {
                    Ok(o) => Ok(settled(o).await),
                    Err(e) => Err(e),
                },
            )
        })
        .await?;
        c.session
            .engine
            .metrics()
            .sql_query(started.elapsed(), out.is_err());
        report_changes(client, &c, &before).await?;
        to_response(&c, out.map_err(to_pg)?, &portal.result_column_format)
    }
}

/// A client sink whose flush waits for the next real one (Sync, Flush): pgwire's
/// describe response `send`s, which would write every message by itself.
struct Buffered<'a, C>(&'a mut C);

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for Buffered<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.0).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), C::Error> {
        Pin::new(&mut *self.0).start_send(item)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.0).poll_close(cx)
    }
}

impl Handler {
    /// Describe, as pgwire's, with the response buffered until Sync or Flush.
    async fn describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::api::query::send_describe_response;
        use pgwire::api::results::{
            DescribePortalResponse, DescribeResponse, DescribeStatementResponse,
        };
        use pgwire::api::store::Entry;
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        match message.target_type {
            b'S' => match client.portal_store().get_statement(name) {
                Some(Entry::Value(stmt)) => {
                    let r = self.do_describe_statement(client, &stmt).await?;
                    send_describe_response(&mut Buffered(client), &r).await
                }
                Some(Entry::Empty) => {
                    let r = DescribeStatementResponse::no_data();
                    send_describe_response(&mut Buffered(client), &r).await
                }
                None => Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            b'P' => match client.portal_store().get_portal(name) {
                Some(Entry::Value(portal)) => {
                    let r = self.do_describe_portal(client, &portal).await?;
                    send_describe_response(&mut Buffered(client), &r).await
                }
                Some(Entry::Empty) => {
                    let r = DescribePortalResponse::no_data();
                    send_describe_response(&mut Buffered(client), &r).await
                }
                None => Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    /// Execute: runs the portal's statement on its first Execute, then sends up to
    /// `max_rows` rows (all when 0) straight from the result stream, so a large
    /// result is never gathered in memory; a portal with rows left is suspended and
    /// the next Execute goes on from where it stopped.
    async fn execute_portal<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::api::PgWireConnectionState as State;
        use pgwire::api::portal::PortalExecutionState as Run;
        use pgwire::messages::extendedquery::PortalSuspended;
        use pgwire::messages::response::EmptyQueryResponse;
        if !matches!(client.state(), State::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let mut status = client.transaction_status();
        client.set_state(State::QueryInProgress);
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        let max_rows = usize::try_from(message.max_rows).unwrap_or(0);
        let portal = match client.portal_store().get_portal(name) {
            Some(pgwire::api::store::Entry::Value(p)) => p,
            Some(pgwire::api::store::Entry::Empty) => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
                client.set_state(State::ReadyForQuery);
                return Ok(());
            }
            None => {
                client.set_state(State::ReadyForQuery);
                return Err(PgWireError::PortalNotFound(name.to_owned()));
            }
        };
        let state = portal.state();
        let initial = matches!(*state.lock().await, Run::Initial);
        let mut has_rows = !initial;
        if initial {
            let resp = match ExtendedQueryHandler::do_query(self, client, portal.as_ref(), max_rows)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    client.set_state(State::ReadyForQuery);
                    return Err(e);
                }
            };
            match resp {
                Response::Query(results) => {
                    portal.start(results).await;
                    has_rows = true;
                }
                Response::EmptyQuery => {
                    client
                        .feed(PgWireBackendMessage::EmptyQueryResponse(
                            EmptyQueryResponse::new(),
                        ))
                        .await?;
                }
                Response::Execution(tag) => {
                    pgwire::api::query::send_execution_response(client, tag).await?;
                }
                Response::TransactionStart(tag) => {
                    pgwire::api::query::send_execution_response(client, tag).await?;
                    status = status.to_in_transaction_state();
                }
                Response::TransactionEnd(tag) => {
                    pgwire::api::query::send_execution_response(client, tag).await?;
                    status = status.to_idle_state();
                    client.portal_store().rm_portal(pgwire::api::DEFAULT_NAME);
                }
                Response::Error(err) => {
                    client
                        .send(PgWireBackendMessage::ErrorResponse((*err).into()))
                        .await?;
                    status = status.to_error_state();
                }
                Response::CopyIn(result) => {
                    client.set_state(State::CopyInProgress(true));
                    pgwire::api::copy::send_copy_in_response(client, result).await?;
                }
                Response::CopyOut(result) => {
                    pgwire::api::copy::send_copy_out_response(client, result).await?;
                }
                Response::CopyBoth(result) => {
                    client.set_state(State::CopyInProgress(true));
                    pgwire::api::copy::send_copy_both_response(client, result).await?;
                }
            }
        }
        if has_rows {
            let mut run = state.lock().await;
            let mut sent = 0usize;
            let mut suspended = false;
            let mut tag = String::from("SELECT");
            if let Run::Suspended(results) = &mut *run {
                tag = results.command_tag().to_owned();
                let rows = results.data_rows();
                loop {
                    if max_rows > 0 && sent == max_rows {
                        suspended = true;
                        break;
                    }
                    match rows.next().await {
                        Some(row) => {
                            client.feed(PgWireBackendMessage::DataRow(row?)).await?;
                            sent += 1;
                        }
                        None => break,
                    }
                }
            }
            // Buffered until Sync or Flush, as PostgreSQL does.
            if suspended {
                client
                    .feed(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()))
                    .await?;
            } else {
                *run = Run::Finished;
                let tag = Tag::new(&tag).with_rows(sent);
                client
                    .feed(PgWireBackendMessage::CommandComplete(tag.into()))
                    .await?;
            }
        }
        if !matches!(client.state(), State::CopyInProgress(_)) {
            client.set_state(State::ReadyForQuery);
            client.set_transaction_status(status);
        }
        Ok(())
    }
}

/// Casts bound values to the types the plan expects.
fn coerce_params(
    values: datafusion::common::ParamValues,
    types: &[Option<DataType>],
) -> crate::Result<datafusion::common::ParamValues> {
    use datafusion::common::ParamValues;
    match values {
        ParamValues::List(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (i, v) in list.into_iter().enumerate() {
                let target = types.get(i).cloned().flatten();
                let value = v.value;
                let value = match target {
                    Some(dt) if value.data_type() != dt => value.cast_to(&dt).map_err(|e| {
                        Error::sql(
                            "22P02",
                            format!("parameter ${} cannot be converted to {dt}: {e}", i + 1),
                        )
                    })?,
                    _ => value,
                };
                out.push(datafusion::common::metadata::ScalarAndMetadata::from(value));
            }
            Ok(ParamValues::List(out))
        }
        other => Ok(other),
    }
}

#[async_trait]
impl CopyHandler for Handler {
    async fn on_copy_data<C>(&self, client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let c = conn_of(client)?;
        // Rows are parsed on the statement runtime: a long COPY keeps no connection
        // or line-protocol thread busy.
        let state = c.copy.lock().take();
        if let Some(mut state) = state {
            let state = on_statement_runtime(&c, async move {
                state.feed(&data.data);
                Ok(state)
            })
            .await?;
            *c.copy.lock() = Some(state);
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let c = conn_of(client)?;
        let state = c.copy.lock().take();
        let Some(state) = state else {
            return Err(to_pg(Error::Internal("no COPY in progress".into())));
        };
        let _active = Active::new(&self.active);
        let table = state.table.clone();
        let targets = state.targets().to_vec();
        let written = match on_statement_runtime(&c, async move { Ok(state.finish()) }).await? {
            Ok((batch, rows)) => {
                match sql::copy::with_defaults(&c.session, &table, &targets, batch) {
                    Ok(batch) => c.session.write_rows(&table, batch).await.map(|_| rows),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        let rows = match written {
            Ok(rows) => rows,
            Err(e) => {
                c.session.note_error();
                return Err(to_pg(e));
            }
        };
        let tag = Tag::new("COPY").with_rows(rows as usize);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Ok(c) = conn_of(client) {
            c.copy.lock().take();
            c.session.note_error();
        }
        to_pg(Error::sql(
            "57014",
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

/// Accepts Postgres clients until shutdown.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let handler = Arc::new(Handler {
        engine: engine.clone(),
        manager: Arc::new(ConnectionManager::new()),
        registry: Arc::new(Mutex::new(HashMap::new())),
        pids: RandomPidSecretKeyGenerator::default(),
        parser: Arc::new(Parser),
        active: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    });
    let limit = engine.config().max_connections;
    let slots = Arc::new(tokio::sync::Semaphore::new(limit));
    let shutdown = engine.stopping().clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            acc = listener.accept() => match acc {
                Ok((sock, _)) => {
                    let _ = sock.set_nodelay(true);
                    let h = handler.clone();
                    let tls = tls.clone();
                    let slots = slots.clone();
                    tokio::spawn(async move {
                        if let Err(e) = conn::serve(sock, h.clone(), slots, tls).await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        // forget sessions whose connection is gone
                        h.registry.lock().retain(|_, (_, c)| Arc::strong_count(c) > 1);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
    // Let statements that are running finish (bounded), so their clients get answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while handler.active.load(std::sync::atomic::Ordering::SeqCst) > 0
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
