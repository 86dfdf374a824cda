//! Server configuration: defaults, an optional TOML file, `SUNDIAL_*` environment
//! variables and command-line flags, merged in that order of increasing precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

/// When a WAL append counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// fsync before acknowledging; concurrent writers share one fsync (group commit).
    Fsync,
    /// Write to the OS page cache only (survives a process crash, not a power loss).
    None,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "fsync" | "always" | "on" | "true" => Ok(FsyncPolicy::Fsync),
            "none" | "off" | "false" | "no" => Ok(FsyncPolicy::None),
            other => Err(Error::Config(format!(
                "wal_fsync must be `fsync` or `none`, not `{other}`"
            ))),
        }
    }
}

/// How Postgres clients (and line-protocol writers) prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// Anyone may connect as any user (loopback only unless allowed).
    Trust,
    /// PostgreSQL's md5 challenge (for old clients).
    Md5,
    /// SCRAM-SHA-256, PostgreSQL's default since 14.
    ScramSha256,
}

impl std::str::FromStr for AuthMethod {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trust" => Ok(AuthMethod::Trust),
            "md5" => Ok(AuthMethod::Md5),
            "scram-sha-256" | "scram" => Ok(AuthMethod::ScramSha256),
            other => Err(Error::Config(format!(
                "auth must be `trust`, `md5` or `scram-sha-256`, not `{other}`"
            ))),
        }
    }
}

impl AuthMethod {
    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::Trust => "trust",
            AuthMethod::Md5 => "md5",
            AuthMethod::ScramSha256 => "scram-sha-256",
        }
    }
}

/// The certificate chain and private key (PEM files) both ports serve TLS with.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The effective configuration of one server.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub pg_addr: SocketAddr,
    /// Line-protocol HTTP port; `None` when disabled (`off`).
    pub http_addr: Option<SocketAddr>,
    /// Raw TCP line-protocol listener; off unless set.
    pub tcp_addr: Option<SocketAddr>,
    /// Database that raw TCP line protocol writes to.
    pub tcp_database: String,
    /// Largest line-protocol request body, compressed or decompressed, in bytes.
    pub http_max_body_size: u64,
    /// Request bodies (and their gunzipped form) held at once by all line-protocol
    /// HTTP requests together; past it requests wait, then get 503.
    pub http_max_inflight_bytes: u64,
    /// Longest Postgres protocol message (a Query's text, a Bind's values, one
    /// CopyData), refused at its header before it is buffered.
    pub max_message_size: u64,
    /// An API token the HTTP port accepts as the superuser's credentials
    /// (`Token`/`Bearer`, or `p=`); needs password authentication.
    pub http_auth_token: Option<String>,
    /// HTTP endpoints that answer without credentials when authentication is on.
    pub http_open_endpoints: Vec<String>,
    /// Authentication on the Postgres port and the HTTP port.
    pub auth: AuthMethod,
    /// The role created (or kept) at start-up with SUPERUSER and LOGIN.
    pub superuser: String,
    /// The superuser's password (from `SUNDIAL_SUPERUSER_PASSWORD` or a file).
    pub superuser_password: Option<String>,
    /// Allow `trust` on an address other than loopback.
    pub allow_remote_trust: bool,
    /// TLS on the Postgres and HTTP ports.
    pub tls: Option<TlsFiles>,
    /// Refuse clients that do not use TLS.
    pub tls_require: bool,
    /// Create a database on its first line-protocol write (else 404).
    pub lp_create_databases: bool,
    /// Databases past which line protocol creates no more.
    pub lp_max_databases: usize,
    /// Tables per database past which line protocol creates no more.
    pub lp_max_tables: usize,
    pub wal_fsync: FsyncPolicy,
    /// Start even when WAL records are missing (a deleted segment), logging the loss.
    pub wal_accept_loss: bool,
    /// The one memory budget: memtables (twice `flush_size`), in-flight request
    /// bodies, compaction and queries are parts of it and add up to at most this.
    pub memory_limit: u64,
    /// Flush memtables once they hold this many bytes in total; writers wait while
    /// memtables (the one being flushed included) hold twice this.
    pub flush_size: u64,
    /// Flush a memtable once its oldest row is this old.
    pub flush_age: Duration,
    /// Chunk interval of hypertables that do not name one, in microseconds.
    pub chunk_interval_micros: i64,
    /// Memory limit of the query engine, in bytes.
    pub query_memory_limit: u64,
    /// Memory of a compaction: its merge's memory pool, and how many file bytes one
    /// merge round reads.
    pub compaction_memory: u64,
    /// Postgres connections served at once; more get FATAL 53300.
    pub max_connections: usize,
    /// Line-protocol connections served at once on each of the HTTP and TCP ports;
    /// more get HTTP 503 (TCP: closed at once).
    pub lp_max_connections: usize,
    /// A line-protocol connection that sends nothing for this long is closed.
    pub lp_idle_timeout: Duration,
    pub log_level: String,
}

/// Open files kept for everything but client connections: WAL segments, the
/// catalog, chunk files read by queries and compactions, listeners, TLS files.
pub const RESERVED_FDS: u64 = 256;

impl Config {
    /// Lowers the connection limits so that every connection they allow (Postgres,
    /// and line protocol on both the HTTP and the TCP port) plus [`RESERVED_FDS`]
    /// fits in `limit` open files: Postgres keeps its limit up to half the room, line
    /// protocol shares the rest. Returns what changed, None when they already fit.
    pub fn fit_connections(&mut self, limit: u64) -> Option<String> {
        let room = limit.saturating_sub(RESERVED_FDS);
        let pg = self.max_connections as u64;
        let lp = self.lp_max_connections as u64;
        if pg + 2 * lp <= room {
            return None;
        }
        let new_pg = pg.min(room / 2).max(1);
        let new_lp = lp.min(room.saturating_sub(new_pg) / 2).max(1);
        let said = format!(
            "the open file limit {limit} leaves room for {room} client connections: \
             max_connections {pg} -> {new_pg}, lp_max_connections {lp} -> {new_lp} (per line-protocol port); \
             raise the limit (ulimit -n) to keep the configured ones"
        );
        self.max_connections = usize::try_from(new_pg).unwrap_or(1);
        self.lp_max_connections = usize::try_from(new_lp).unwrap_or(1);
        Some(said)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./sundial-data"),
            pg_addr: "127.0.0.1:5432".parse().expect("static address"),
            http_addr: Some("127.0.0.1:8086".parse().expect("static address")),
            tcp_addr: None,
            tcp_database: "sundial".to_string(),
            http_max_body_size: 32 * 1024 * 1024,
            max_message_size: 64 * 1024 * 1024,
            http_max_inflight_bytes: DEFAULT_MEMORY_LIMIT / 8,
            http_auth_token: None,
            http_open_endpoints: vec!["health".into(), "ping".into()],
            auth: AuthMethod::Trust,
            superuser: "sundial".into(),
            superuser_password: None,
            allow_remote_trust: false,
            tls: None,
            tls_require: false,
            lp_create_databases: true,
            lp_max_databases: 1_000,
            lp_max_tables: 10_000,
            wal_fsync: FsyncPolicy::Fsync,
            wal_accept_loss: false,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            flush_size: DEFAULT_MEMORY_LIMIT / 16,
            flush_age: Duration::from_secs(300),
            chunk_interval_micros: 7 * 86_400 * 1_000_000,
            query_memory_limit: DEFAULT_MEMORY_LIMIT / 8 * 5,
            compaction_memory: DEFAULT_MEMORY_LIMIT / 8,
            max_connections: 100,
            lp_max_connections: 1000,
            lp_idle_timeout: Duration::from_secs(300),
            log_level: "info".to_string(),
        }
    }
}

/// Raw settings as they come from a TOML file or the command line: all optional strings
/// so that every source goes through the same parsing.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub data_dir: Option<PathBuf>,
    pub pg_addr: Option<String>,
    pub http_addr: Option<String>,
    pub tcp_addr: Option<String>,
    pub tcp_database: Option<String>,
    pub http_max_body_size: Option<toml::Value>,
    pub max_message_size: Option<toml::Value>,
    pub http_max_inflight_bytes: Option<toml::Value>,
    pub http_auth_token: Option<String>,
    pub http_open_endpoints: Option<String>,
    pub auth: Option<String>,
    pub superuser: Option<String>,
    pub superuser_password: Option<String>,
    pub superuser_password_file: Option<PathBuf>,
    pub allow_remote_trust: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_require: Option<String>,
    pub lp_create_databases: Option<String>,
    pub lp_max_databases: Option<toml::Value>,
    pub lp_max_tables: Option<toml::Value>,
    pub wal_fsync: Option<String>,
    pub wal_accept_loss: Option<String>,
    pub memory_limit: Option<toml::Value>,
    pub compaction_memory: Option<toml::Value>,
    pub flush_size: Option<toml::Value>,
    pub flush_age: Option<String>,
    pub chunk_interval: Option<String>,
    pub query_memory_limit: Option<toml::Value>,
    pub max_connections: Option<toml::Value>,
    pub lp_max_connections: Option<toml::Value>,
    pub lp_idle_timeout: Option<String>,
    pub log_level: Option<String>,
}

impl Settings {
    /// Reads a TOML settings file.
    pub fn from_file(path: &Path) -> Result<Settings> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        toml::from_str(&text)
            .map_err(|e| Error::Config(format!("bad config file {}: {e}", path.display())))
    }

    /// Overlays `other` on `self`: values present in `other` win.
    pub fn overlay(mut self, other: Settings) -> Settings {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            data_dir,
            pg_addr,
            http_addr,
            tcp_addr,
            tcp_database,
            http_max_body_size,
            max_message_size,
            http_max_inflight_bytes,
            http_auth_token,
            http_open_endpoints,
            auth,
            superuser,
            superuser_password,
            superuser_password_file,
            allow_remote_trust,
            tls_cert,
            tls_key,
            tls_require,
            lp_create_databases,
            lp_max_databases,
            lp_max_tables,
            wal_fsync,
            wal_accept_loss,
            memory_limit,
            compaction_memory,
            flush_size,
            flush_age,
            chunk_interval,
            query_memory_limit,
            max_connections,
            lp_max_connections,
            lp_idle_timeout,
            log_level
        );
        self
    }

    /// Turns settings into a validated configuration.
    pub fn into_config(self) -> Result<Config> {
        let mut c = Config::default();
        if let Some(d) = self.data_dir {
            c.data_dir = d;
        }
        if let Some(a) = self.pg_addr {
            c.pg_addr = parse_addr("pg_addr", &a)?;
        }
        if let Some(a) = self.http_addr {
            c.http_addr = match a.trim().to_ascii_lowercase().as_str() {
                "" | "off" | "none" | "disabled" => None,
                _ => Some(parse_addr("http_addr", &a)?),
            };
        }
        if let Some(a) = self.tcp_addr {
            c.tcp_addr = match a.trim().to_ascii_lowercase().as_str() {
                "" | "off" | "none" | "disabled" => None,
                _ => Some(parse_addr("tcp_addr", &a)?),
            };
        }
        if let Some(d) = self.tcp_database {
            c.tcp_database = d;
        }
        if let Some(v) = self.http_max_body_size {
            c.http_max_body_size = parse_bytes("http_max_body_size", &v)?;
        }
        if let Some(v) = self.max_message_size {
            c.max_message_size = match parse_bytes("max_message_size", &v)? {
                n if n < 1024 => {
                    return Err(Error::Config(
                        "max_message_size must be at least 1KiB".into(),
                    ));
                }
                n => n,
            };
        }
        if let Some(t) = self.http_auth_token {
            if t.trim().is_empty() {
                return Err(Error::Config(
                    "http_auth_token is empty: give a secret or leave the setting out".into(),
                ));
            }
            c.http_auth_token = Some(t);
        }
        if let Some(v) = self.http_open_endpoints {
            c.http_open_endpoints = parse_endpoints(&v)?;
        }
        c.superuser_password = match (self.superuser_password, self.superuser_password_file) {
            (Some(_), Some(_)) => {
                return Err(Error::Config(
                    "give the superuser password or a password file, not both".into(),
                ));
            }
            (Some(p), None) => Some(p),
            (None, Some(f)) => Some(read_password_file(&f)?),
            (None, None) => None,
        };
        if c.superuser_password.as_deref().is_some_and(str::is_empty) {
            return Err(Error::Config("the superuser password is empty".into()));
        }
        // Configuring a password turns authentication on unless `auth` says otherwise.
        c.auth = match (self.auth, &c.superuser_password) {
            (Some(a), _) => a.parse()?,
            (None, Some(_)) => AuthMethod::ScramSha256,
            (None, None) => AuthMethod::Trust,
        };
        if let Some(u) = self.superuser {
            if u.is_empty() || u.len() > 63 {
                return Err(Error::Config(
                    "superuser must be a role name of 1 to 63 bytes".into(),
                ));
            }
            c.superuser = u;
        }
        if let Some(v) = self.allow_remote_trust {
            c.allow_remote_trust = parse_bool("allow_remote_trust", &v)?;
        }
        c.tls = match (self.tls_cert, self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "tls_cert and tls_key go together: give both or neither".into(),
                ));
            }
        };
        if let Some(v) = self.tls_require {
            c.tls_require = parse_bool("tls_require", &v)?;
            if c.tls_require && c.tls.is_none() {
                return Err(Error::Config(
                    "tls_require needs tls_cert and tls_key".into(),
                ));
            }
        }
        if c.auth == AuthMethod::Trust && c.http_auth_token.is_some() {
            return Err(Error::Config(
                "http_auth_token needs auth = scram-sha-256 or md5: with trust the Postgres port would stay open".into(),
            ));
        }
        if let Some(v) = self.lp_create_databases {
            c.lp_create_databases = parse_bool("lp_create_databases", &v)?;
        }
        if let Some(v) = self.lp_max_databases {
            c.lp_max_databases = parse_count("lp_max_databases", &v)?;
        }
        if let Some(v) = self.lp_max_tables {
            c.lp_max_tables = parse_count("lp_max_tables", &v)?;
        }
        if let Some(v) = self.wal_accept_loss {
            c.wal_accept_loss = parse_bool("wal_accept_loss", &v)?;
        }
        if let Some(f) = self.wal_fsync {
            c.wal_fsync = f.parse()?;
        }
        if let Some(v) = self.flush_age {
            c.flush_age = humantime::parse_duration(&v)
                .map_err(|e| Error::Config(format!("flush_age `{v}`: {e}")))?;
        }
        if let Some(v) = self.chunk_interval {
            let micros = crate::interval::parse_interval_micros(&v)
                .map_err(|e| Error::Config(format!("chunk_interval `{v}`: {e}")))?;
            if micros <= 0 {
                return Err(Error::Config("chunk_interval must be positive".into()));
            }
            c.chunk_interval_micros = micros;
        }
        split_memory(
            &mut c,
            &MemorySettings {
                memory_limit: self.memory_limit,
                flush_size: self.flush_size,
                http_max_inflight_bytes: self.http_max_inflight_bytes,
                compaction_memory: self.compaction_memory,
                query_memory_limit: self.query_memory_limit,
            },
        )?;
        if let Some(v) = self.max_connections {
            c.max_connections = parse_count("max_connections", &v)?;
        }
        if let Some(v) = self.lp_max_connections {
            c.lp_max_connections = parse_count("lp_max_connections", &v)?;
        }
        if let Some(v) = self.lp_idle_timeout {
            c.lp_idle_timeout = humantime::parse_duration(&v)
                .map_err(|e| Error::Config(format!("lp_idle_timeout `{v}`: {e}")))?;
            if c.lp_idle_timeout.is_zero() {
                return Err(Error::Config("lp_idle_timeout must be positive".into()));
            }
        }
        if let Some(v) = self.log_level {
            c.log_level = v;
        }
        if let Some(tcp) = c.tcp_addr
            && c.auth != AuthMethod::Trust
            && !tcp.ip().is_loopback()
        {
            return Err(Error::Config(format!(
                "tcp_addr {tcp}: raw TCP line protocol has no credentials, so with auth = {} it may only listen on a loopback address (use the HTTP port, which checks them)",
                c.auth.name()
            )));
        }
        if c.auth == AuthMethod::Trust && !c.allow_remote_trust && !c.pg_addr.ip().is_loopback() {
            return Err(Error::Config(format!(
                "auth is trust but pg_addr {} is not a loopback address: anyone who can reach it could connect as any user. Set auth = scram-sha-256 and a superuser password, or allow_remote_trust = true",
                c.pg_addr
            )));
        }
        Ok(c)
    }
}

/// The memory budget when none is configured: 2 GiB, or a quarter of the machine's
/// memory when that is less (at least 256 MiB). The TSBS loads peak under 1 GiB with
/// it; 1 GiB would shrink the decoded-columns cache below TSBS cpu-only's columns
/// and slow its small queries 1.3–2× (BENCHMARKS.md, "Resource bounds, second pass").
pub const DEFAULT_MEMORY_LIMIT: u64 = 2 * 1024 * 1024 * 1024;
const MIN_MEMORY_LIMIT: u64 = 256 * 1024 * 1024;
/// Queries need at least this much of the budget.
const MIN_QUERY_MEMORY: u64 = 64 * 1024 * 1024;

/// The memory settings as given (each may be missing).
struct MemorySettings {
    memory_limit: Option<toml::Value>,
    flush_size: Option<toml::Value>,
    http_max_inflight_bytes: Option<toml::Value>,
    compaction_memory: Option<toml::Value>,
    query_memory_limit: Option<toml::Value>,
}

/// Splits `memory_limit` into its parts: memtables (twice the flush size) an eighth,
/// in-flight request bodies an eighth, compaction an eighth and queries the rest.
/// A part given explicitly is taken as is; the parts must fit in the budget.
fn split_memory(c: &mut Config, m: &MemorySettings) -> Result<()> {
    let positive = |name: &str, v: &Option<toml::Value>| -> Result<Option<u64>> {
        match v {
            None => Ok(None),
            Some(v) => match parse_bytes(name, v)? {
                0 => Err(Error::Config(format!("{name} must be positive"))),
                n => Ok(Some(n)),
            },
        }
    };
    let limit = match positive("memory_limit", &m.memory_limit)? {
        Some(l) => l,
        None => default_memory_limit(),
    };
    let eighth = limit / 8;
    c.memory_limit = limit;
    c.flush_size = positive("flush_size", &m.flush_size)?.unwrap_or(eighth / 2);
    c.http_max_inflight_bytes =
        positive("http_max_inflight_bytes", &m.http_max_inflight_bytes)?.unwrap_or(eighth);
    c.compaction_memory = positive("compaction_memory", &m.compaction_memory)?.unwrap_or(eighth);
    let others = c
        .flush_size
        .saturating_mul(2)
        .saturating_add(c.http_max_inflight_bytes)
        .saturating_add(c.compaction_memory);
    c.query_memory_limit = match positive("query_memory_limit", &m.query_memory_limit)? {
        Some(q) => q,
        None => limit.saturating_sub(others),
    };
    let total = others.saturating_add(c.query_memory_limit);
    if total > limit || c.query_memory_limit < MIN_QUERY_MEMORY.min(limit / 4) {
        return Err(Error::Config(format!(
            "memory_limit is {}: memtables (2 x flush_size = {}), http_max_inflight_bytes ({}), compaction_memory ({}) and query_memory_limit ({}) must fit in it, leaving queries at least {} — raise memory_limit or lower a part",
            show_bytes(limit),
            show_bytes(c.flush_size.saturating_mul(2)),
            show_bytes(c.http_max_inflight_bytes),
            show_bytes(c.compaction_memory),
            show_bytes(c.query_memory_limit),
            show_bytes(MIN_QUERY_MEMORY.min(limit / 4)),
        )));
    }
    Ok(())
}

/// 2 GiB, or a quarter of physical memory when that is less (at least 256 MiB).
fn default_memory_limit() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return DEFAULT_MEMORY_LIMIT;
    }
    let quarter = (pages as u64).saturating_mul(page as u64) / 4;
    quarter.clamp(MIN_MEMORY_LIMIT, DEFAULT_MEMORY_LIMIT)
}

/// `1.5GiB`-style text for sizes in messages.
pub fn show_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

/// `health,metrics` → the endpoint names (`none` for none).
fn parse_endpoints(v: &str) -> Result<Vec<String>> {
    let mut out = vec![];
    for e in v
        .split(',')
        .map(|e| e.trim().trim_start_matches('/').to_ascii_lowercase())
    {
        match e.as_str() {
            "" | "none" => {}
            "health" | "ping" | "metrics" => out.push(e),
            other => {
                return Err(Error::Config(format!(
                    "http_open_endpoints: `{other}` is not one of health, ping, metrics"
                )));
            }
        }
    }
    Ok(out)
}

/// The first line of a password file.
fn read_password_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(format!(
            "cannot read superuser password file {}: {e}",
            path.display()
        ))
    })?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

fn parse_bool(name: &str, v: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        other => Err(Error::Config(format!(
            "{name} must be true or false, not `{other}`"
        ))),
    }
}

/// A positive count, from a TOML integer or a string.
fn parse_count(name: &str, v: &toml::Value) -> Result<usize> {
    let n = match v {
        toml::Value::Integer(i) => usize::try_from(*i).ok(),
        toml::Value::String(s) => s.trim().parse::<usize>().ok(),
        _ => None,
    };
    n.filter(|n| *n > 0)
        .ok_or_else(|| Error::Config(format!("{name} must be a positive integer, not `{v}`")))
}

fn parse_addr(name: &str, s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Config(format!("{name} `{s}` is not a HOST:PORT address")))
}

/// Parses `1048576`, `64MiB`, `64MB`, `2GiB`, `512k`.
pub fn parse_bytes(name: &str, v: &toml::Value) -> Result<u64> {
    let s = match v {
        toml::Value::Integer(i) if *i >= 0 => return Ok(*i as u64),
        toml::Value::String(s) => s.trim().to_string(),
        other => {
            return Err(Error::Config(format!(
                "{name}: expected a size, got {other}"
            )));
        }
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| Error::Config(format!("{name}: `{s}` is not a size")))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        other => {
            return Err(Error::Config(format!(
                "{name}: unknown size unit `{other}`"
            )));
        }
    };
    Ok((num * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limits_fit_the_open_file_limit() {
        // The defaults fit a generous limit untouched.
        let mut c = Config::default();
        assert_eq!(c.fit_connections(65_536), None);
        assert_eq!((c.max_connections, c.lp_max_connections), (100, 1000));
        // 1,024 descriptors: Postgres keeps its 100, line protocol shares the rest
        // over its two ports, and the total leaves the reserve.
        let said = c.fit_connections(1024).expect("lowered");
        assert!(said.contains("lp_max_connections 1000 -> 334"), "{said}");
        assert_eq!((c.max_connections, c.lp_max_connections), (100, 334));
        let used = c.max_connections as u64 + 2 * c.lp_max_connections as u64;
        assert!(used + RESERVED_FDS <= 1024, "{used}");
        // Almost none: one of each, never zero.
        let mut c = Config::default();
        c.fit_connections(100);
        assert_eq!((c.max_connections, c.lp_max_connections), (1, 1));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(
            parse_bytes("x", &toml::Value::String("64MiB".into())).unwrap(),
            64 << 20
        );
        assert_eq!(parse_bytes("x", &toml::Value::Integer(10)).unwrap(), 10);
        assert!(parse_bytes("x", &toml::Value::String("12 parsecs".into())).is_err());
    }

    #[test]
    fn overlay_prefers_later() {
        let a = Settings {
            log_level: Some("info".into()),
            pg_addr: Some("127.0.0.1:1".into()),
            ..Default::default()
        };
        let b = Settings {
            pg_addr: Some("127.0.0.1:2".into()),
            ..Default::default()
        };
        let c = a.overlay(b).into_config().unwrap();
        assert_eq!(c.pg_addr.port(), 2);
        assert_eq!(c.log_level, "info");
    }

    fn sized(pairs: &[(&str, &str)]) -> Result<Config> {
        let mut s = Settings::default();
        for (k, v) in pairs {
            let v = Some(toml::Value::String(v.to_string()));
            match *k {
                "memory_limit" => s.memory_limit = v,
                "flush_size" => s.flush_size = v,
                "http_max_inflight_bytes" => s.http_max_inflight_bytes = v,
                "compaction_memory" => s.compaction_memory = v,
                "query_memory_limit" => s.query_memory_limit = v,
                other => panic!("no size setting {other}"),
            }
        }
        s.into_config()
    }

    #[test]
    fn one_memory_limit_is_split_into_its_parts() {
        let c = sized(&[("memory_limit", "1GiB")]).unwrap();
        assert_eq!(c.memory_limit, 1 << 30);
        assert_eq!(c.flush_size, 64 << 20);
        assert_eq!(c.http_max_inflight_bytes, 128 << 20);
        assert_eq!(c.compaction_memory, 128 << 20);
        assert_eq!(c.query_memory_limit, 640 << 20);
        // A part given explicitly is kept; queries get what is left.
        let c = sized(&[("memory_limit", "1GiB"), ("flush_size", "256KiB")]).unwrap();
        assert_eq!(c.flush_size, 256 << 10);
        assert_eq!(c.query_memory_limit, (1 << 30) - (512 << 10) - (256 << 20));
        // Parts that do not fit are a start-up error naming the budget.
        let e = sized(&[("memory_limit", "1GiB"), ("query_memory_limit", "2GiB")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory_limit is 1GiB"), "{e}");
        let e = sized(&[("memory_limit", "512MiB"), ("flush_size", "200MiB")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("raise memory_limit"), "{e}");
        assert!(sized(&[("memory_limit", "0")]).is_err());
        // The default budget is at most 2 GiB and its parts add up within it.
        let c = sized(&[]).unwrap();
        assert!(c.memory_limit <= DEFAULT_MEMORY_LIMIT && c.memory_limit >= MIN_MEMORY_LIMIT);
        assert!(
            2 * c.flush_size
                + c.http_max_inflight_bytes
                + c.compaction_memory
                + c.query_memory_limit
                <= c.memory_limit
        );
    }
}
