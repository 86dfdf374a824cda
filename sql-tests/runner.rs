//! sqllogictest runner for Sundial.
//!
//! Starts ONE `sundial` server (temporary data directory, ephemeral port) for the whole
//! run, then runs every `.slt` file under `sql-tests/` (recursively) twice: once over the
//! PostgreSQL simple query protocol and once over the extended protocol. Each trial gets a
//! fresh database `slt_<file>_<proto>`, created over an admin connection.
//!
//! Usage: `cargo test --test sqllogictests [-- FILTER] [--test-threads N]`.
//! Trials run one at a time unless `--test-threads` says otherwise.
//!
//! Labels usable in `skipif` / `onlyif`: `sundial`, `simple`, `extended` (plus the engine
//! names `postgres` and `postgres-extended`).

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use sqllogictest::Runner;
use sqllogictest_engines::postgres::{PostgresConfig, PostgresExtended, PostgresSimple};

/// How long one .slt file may take before the trial is failed.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Simple,
    Extended,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "simple",
            Protocol::Extended => "extended",
        }
    }
}

/// The one server shared by all trials. `addr` is `Err(stderr)` if it failed to start.
struct Server {
    child: Mutex<Option<Child>>,
    addr: Result<String, String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    fn start() -> Server {
        let tmp = match tempfile::Builder::new().prefix("sundial-slt").tempdir() {
            Ok(t) => t,
            Err(e) => {
                return Server {
                    child: Mutex::new(None),
                    addr: Err(format!("cannot create temp dir: {e}")),
                    _tmp: None,
                };
            }
        };
        match spawn(tmp.path()) {
            Ok((child, addr)) => Server {
                child: Mutex::new(Some(child)),
                addr: Ok(addr),
                _tmp: Some(tmp),
            },
            Err(e) => Server {
                child: Mutex::new(None),
                addr: Err(format!("sundial server failed to start:\n{e}")),
                _tmp: Some(tmp),
            },
        }
    }

    fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The server start-up shared with the integration tests.
#[allow(dead_code)]
#[path = "../tests/it/harness.rs"]
mod harness;

fn spawn(dir: &Path) -> Result<(Child, String), String> {
    harness::spawn(dir, &[])
}

fn collect_slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_slt_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "slt") {
            out.push(p);
        }
    }
}

/// `ddl`, `sub/dir/file` ... : the path relative to sql-tests/, without `.slt`.
fn test_stem(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let s = rel.to_string_lossy().replace('\\', "/");
    s.strip_suffix(".slt").unwrap_or(&s).to_string()
}

/// A database name made of `[a-z0-9_]` only, at most 63 bytes.
fn db_name(stem: &str, proto: Protocol) -> String {
    let mut s = String::from("slt_");
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else {
            s.push('_');
        }
    }
    s.push('_');
    s.push_str(proto.name());
    if s.len() > 63 {
        // keep it unique-ish: the tail (which has the protocol) plus a hash of the whole
        let h = s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        let tail = &s[s.len() - 40..];
        s = format!("slt_{:08x}_{}", h as u32, tail.trim_start_matches('_'));
    }
    s
}

fn pg_config(addr: &str, db: &str) -> Result<PostgresConfig, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("bad server address {addr:?}"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
    let mut config = PostgresConfig::new();
    config
        .host(host)
        .port(port)
        .user("sqllogictest")
        .dbname(db)
        .application_name("sundial-sqllogictest")
        .connect_timeout(Duration::from_secs(10));
    Ok(config)
}

/// Creates the trial's database over an admin connection to the `postgres` database.
async fn create_database(addr: &str, db: &str) -> Result<(), String> {
    let config = pg_config(addr, "postgres")?;
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("admin connect to {addr}: {e}"))?;
    let conn_task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .map_err(|e| format!("CREATE DATABASE {db}: {}", describe_pg_error(&e)));
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn_task).await;
    result
}

fn describe_pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

async fn run_file(addr: &str, file: &Path, stem: &str, proto: Protocol) -> Result<(), String> {
    let db = db_name(stem, proto);
    create_database(addr, &db).await?;
    let config = pg_config(addr, &db)?;
    match proto {
        Protocol::Simple => {
            let mut runner = Runner::new(move || {
                let config = config.clone();
                async move { PostgresSimple::connect(config).await }
            });
            run_with(&mut runner, file, proto).await
        }
        Protocol::Extended => {
            let mut runner = Runner::new(move || {
                let config = config.clone();
                async move {
                    Ok::<_, tokio_postgres::Error>(Extended(
                        PostgresExtended::connect(config).await?,
                    ))
                }
            });
            run_with(&mut runner, file, proto).await
        }
    }
}

/// The extended-protocol engine, for results of types `sqllogictest-engines` cannot
/// show (`name`, `void`, `json`, `jsonb`, ...): such a result's values are shown as the
/// server's text for them, as the simple protocol shows them; others go to the engine.
struct Extended(PostgresExtended);

/// A value of any type as the server sent it (binary), to send back as it came.
#[derive(Debug)]
struct Raw(Option<Vec<u8>>);

impl<'a> tokio_postgres::types::FromSql<'a> for Raw {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw.to_vec())))
    }
    fn from_sql_null(
        _: &tokio_postgres::types::Type,
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }
}

impl tokio_postgres::types::ToSql for Raw {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Some(b) => {
                out.extend_from_slice(b);
                Ok(tokio_postgres::types::IsNull::No)
            }
            None => Ok(tokio_postgres::types::IsNull::Yes),
        }
    }
    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }
    tokio_postgres::types::to_sql_checked!();
}

/// Types whose binary form is their text (UTF-8), after a version byte for jsonb.
fn text_in_binary(t: &tokio_postgres::types::Type) -> Option<usize> {
    use tokio_postgres::types::Type;
    match *t {
        Type::NAME | Type::VOID | Type::JSON | Type::UNKNOWN | Type::BPCHAR => Some(0),
        Type::JSONB => Some(1),
        _ => None,
    }
}

/// A value of another type as the server's text shows it: decoded here, then (for
/// times and numbers whose text depends on the session) read back as a literal.
async fn shown(
    client: &tokio_postgres::Client,
    row: &tokio_postgres::Row,
    i: usize,
    ty: &tokio_postgres::types::Type,
) -> Result<Option<String>, tokio_postgres::Error> {
    use sundial::sql::functions::pgtext;
    use tokio_postgres::types::Type;
    let literal = |lit: Option<String>, ty: &'static str| async move {
        let Some(lit) = lit else { return Ok(None) };
        let msgs = client
            .simple_query(&format!("SELECT '{lit}'::{ty}"))
            .await?;
        Ok::<_, tokio_postgres::Error>(msgs.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        }))
    };
    Ok(match *ty {
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)?
            .map(|b| if b { "t" } else { "f" }.into()),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(|v| v.to_string()),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(|v| v.to_string()),
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(|v| v.to_string()),
        Type::TEXT | Type::VARCHAR => row.try_get::<_, Option<String>>(i)?,
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(i)?
            .map(|v| pgtext::float(v, 15)),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| pgtext::float(f64::from(v), 6)),
        Type::INTERVAL => {
            let Raw(v) = row.try_get::<_, Raw>(i)?;
            v.filter(|b| b.len() == 16).map(|b| {
                let n = |r: std::ops::Range<usize>| {
                    b[r].iter().fold(0i64, |a, x| (a << 8) | i64::from(*x))
                };
                let micros = n(0..8);
                let days = n(8..12) as i32;
                let months = n(12..16) as i32;
                pgtext::interval(months, days, micros)
            })
        }
        Type::TIMESTAMPTZ => {
            let v = row.try_get::<_, Option<chrono::DateTime<chrono::Utc>>>(i)?;
            literal(v.map(|t| t.to_rfc3339()), "timestamptz").await?
        }
        Type::TIMESTAMP => {
            let v = row.try_get::<_, Option<chrono::NaiveDateTime>>(i)?;
            literal(v.map(|t| t.to_string()), "timestamp").await?
        }
        Type::DATE => {
            let v = row.try_get::<_, Option<chrono::NaiveDate>>(i)?;
            literal(v.map(|t| t.to_string()), "date").await?
        }
        Type::NUMERIC => row
            .try_get::<_, Option<rust_decimal::Decimal>>(i)?
            .map(|d| d.to_string()),
        _ => Some(format!("<type {} not shown by the runner>", ty.name())),
    })
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for Extended {
    type Error = tokio_postgres::Error;
    type ColumnType = sqllogictest::DefaultColumnType;

    async fn run(
        &mut self,
        sql: &str,
    ) -> Result<sqllogictest::DBOutput<Self::ColumnType>, Self::Error> {
        let client = self.0.client();
        let stmt = client.prepare(sql).await?;
        if !stmt
            .columns()
            .iter()
            .any(|c| text_in_binary(c.type_()).is_some())
        {
            return self.0.run(sql).await;
        }
        let rows = client.query(&stmt, &[]).await?;
        let mut out = vec![];
        for row in &rows {
            let mut vals = vec![];
            for (i, col) in row.columns().iter().enumerate() {
                let text = match text_in_binary(col.type_()) {
                    Some(skip) => {
                        let Raw(v) = row.try_get::<_, Raw>(i)?;
                        v.map(|b| String::from_utf8_lossy(&b[skip.min(b.len())..]).into_owned())
                    }
                    None => shown(client, row, i, col.type_()).await?,
                };
                vals.push(match text {
                    None => "NULL".to_string(),
                    Some(t) if t.is_empty() => "(empty)".to_string(),
                    Some(t) => t,
                });
            }
            out.push(vals);
        }
        Ok(sqllogictest::DBOutput::Rows {
            types: vec![sqllogictest::DefaultColumnType::Any; stmt.columns().len()],
            rows: out,
        })
    }

    async fn shutdown(&mut self) {
        self.0.shutdown().await
    }

    fn engine_name(&self) -> &str {
        self.0.engine_name()
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        PostgresExtended::error_sql_state(err)
    }
}

async fn run_with<D, M>(
    runner: &mut Runner<D, M>,
    file: &Path,
    proto: Protocol,
) -> Result<(), String>
where
    D: sqllogictest::AsyncDB,
    M: sqllogictest::MakeConnection<Conn = D>,
{
    runner.add_label("sundial");
    runner.add_label(proto.name());
    let result = runner
        .run_file_async(file)
        .await
        .map_err(|e| e.display(false).to_string());
    let _ = tokio::time::timeout(Duration::from_secs(5), runner.shutdown_async()).await;
    result
}

fn run_trial(server: &Server, file: &Path, stem: &str, proto: Protocol) -> Result<(), Failed> {
    let addr = server.addr.as_ref().map_err(|e| Failed::from(e.as_str()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("tokio runtime: {e}")))?;
    rt.block_on(async {
        match tokio::time::timeout(TRIAL_TIMEOUT, run_file(addr, file, stem, proto)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "{} ({}) did not finish within {:?}",
                file.display(),
                proto.name(),
                TRIAL_TIMEOUT
            )),
        }
    })
    .map_err(Failed::from)
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        // One server, one file at a time: keeps the output readable and the server's
        // global state (e.g. sundial_flush(), which flushes every database) predictable.
        args.test_threads = Some(1);
    }

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
    let mut files = Vec::new();
    collect_slt_files(&root, &mut files);

    // Listing trials must not start a server.
    let server = if args.list {
        Arc::new(Server {
            child: Mutex::new(None),
            addr: Err("not started (--list)".into()),
            _tmp: None,
        })
    } else {
        Arc::new(Server::start())
    };

    let mut trials = Vec::new();
    for file in &files {
        let stem = test_stem(&root, file);
        for proto in [Protocol::Simple, Protocol::Extended] {
            let server = Arc::clone(&server);
            let file = file.clone();
            let stem2 = stem.clone();
            trials.push(Trial::test(
                format!("{stem}::{}", proto.name()),
                move || run_trial(&server, &file, &stem2, proto),
            ));
        }
    }

    let conclusion = libtest_mimic::run(&args, trials);
    server.stop();
    drop(server);
    conclusion.exit_code()
}
