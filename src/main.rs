//! `sundial` command line: `sundial serve` (the default) starts the server with
//! settings from flags, `SUNDIAL_*` environment variables and an optional TOML file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sundial::config::Settings;
use sundial::{Config, Engine};

/// mimalloc returns freed memory to the OS far better than glibc malloc under the
/// ingest pattern (many large, short-lived Arrow buffers on several threads): with
/// glibc the server's RSS kept growing to over 2 GiB during a 10M-row load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "sundial", version, about = "Sundial time-series SQL database")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
// Parsed once at start: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run the server (the default).
    Serve(ServeArgs),
    /// Benchmark tools.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Generate TSBS-style data (or read a line-protocol file) and post it over HTTP
    /// with several workers, printing the TSBS loaders' summary.
    Load(sundial::loadgen::LoadArgs),
    /// Generate TSBS's queries for the loaded data and time them (simple query
    /// protocol, one connection); with --compare-dsn also check the answers against a
    /// second server (e.g. PostgreSQL holding the same rows).
    Query(sundial::loadgen::QueryArgs),
}

#[derive(clap::Args, Debug, Default, Clone)]
struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "SUNDIAL_CONFIG")]
    config: Option<PathBuf>,
    /// Data directory (default ./sundial-data).
    #[arg(long, env = "SUNDIAL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Postgres wire protocol address (default 127.0.0.1:5432).
    #[arg(long, env = "SUNDIAL_PG_ADDR")]
    pg_addr: Option<String>,
    /// Line-protocol HTTP address (default 127.0.0.1:8086).
    #[arg(long, env = "SUNDIAL_HTTP_ADDR")]
    http_addr: Option<String>,
    /// Raw TCP line-protocol address (off unless given).
    #[arg(long, env = "SUNDIAL_TCP_ADDR")]
    tcp_addr: Option<String>,
    /// Database written by the raw TCP listener (default sundial).
    #[arg(long, env = "SUNDIAL_TCP_DATABASE")]
    tcp_database: Option<String>,
    /// Largest line-protocol body, compressed or not (default 32MiB).
    #[arg(long, env = "SUNDIAL_HTTP_MAX_BODY_SIZE")]
    http_max_body_size: Option<String>,
    /// Longest Postgres protocol message, refused before it is buffered (default 64MiB).
    #[arg(long, env = "SUNDIAL_MAX_MESSAGE_SIZE")]
    max_message_size: Option<String>,
    /// Body bytes all line-protocol requests may hold at once (default memory_limit / 8).
    #[arg(long, env = "SUNDIAL_HTTP_MAX_INFLIGHT_BYTES")]
    http_max_inflight_bytes: Option<String>,
    /// API token the HTTP port accepts as the superuser (needs password auth).
    #[arg(long, env = "SUNDIAL_HTTP_AUTH_TOKEN", hide_env_values = true)]
    http_auth_token: Option<String>,
    /// HTTP endpoints open without credentials (default health,ping).
    #[arg(long, env = "SUNDIAL_HTTP_OPEN_ENDPOINTS")]
    http_open_endpoints: Option<String>,
    /// Authentication: trust (default without a password), md5 or scram-sha-256.
    #[arg(long, env = "SUNDIAL_AUTH")]
    auth: Option<String>,
    /// Role created at start-up with SUPERUSER and LOGIN (default sundial).
    #[arg(long, env = "SUNDIAL_SUPERUSER")]
    superuser: Option<String>,
    /// The superuser's password (prefer the environment or a file).
    #[arg(long, env = "SUNDIAL_SUPERUSER_PASSWORD", hide_env_values = true)]
    superuser_password: Option<String>,
    /// File whose first line is the superuser's password.
    #[arg(long, env = "SUNDIAL_SUPERUSER_PASSWORD_FILE")]
    superuser_password_file: Option<PathBuf>,
    /// Allow trust authentication on a non-loopback address (default false).
    #[arg(long, env = "SUNDIAL_ALLOW_REMOTE_TRUST")]
    allow_remote_trust: Option<String>,
    /// PEM certificate chain for TLS on the Postgres and HTTP ports.
    #[arg(long, env = "SUNDIAL_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "SUNDIAL_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS (default false).
    #[arg(long, env = "SUNDIAL_TLS_REQUIRE")]
    tls_require: Option<String>,
    /// Create databases on their first line-protocol write (default true).
    #[arg(long, env = "SUNDIAL_LP_CREATE_DATABASES")]
    lp_create_databases: Option<String>,
    /// Databases line protocol may create, at most (default 1000).
    #[arg(long, env = "SUNDIAL_LP_MAX_DATABASES")]
    lp_max_databases: Option<String>,
    /// Tables per database line protocol may create, at most (default 10000).
    #[arg(long, env = "SUNDIAL_LP_MAX_TABLES")]
    lp_max_tables: Option<String>,
    /// WAL durability: `fsync` (default) or `none`.
    #[arg(long, env = "SUNDIAL_WAL_FSYNC")]
    wal_fsync: Option<String>,
    /// Start even when WAL records are missing, logging the loss (default false).
    #[arg(long, env = "SUNDIAL_WAL_ACCEPT_LOSS")]
    wal_accept_loss: Option<String>,
    /// The memory budget all parts share (default 2GiB, or a quarter of RAM if less).
    #[arg(long, env = "SUNDIAL_MEMORY_LIMIT")]
    memory_limit: Option<String>,
    /// Memory of a compaction merge (default memory_limit / 8).
    #[arg(long, env = "SUNDIAL_COMPACTION_MEMORY")]
    compaction_memory: Option<String>,
    /// Flush memtables at this size (default memory_limit / 16).
    #[arg(long, env = "SUNDIAL_FLUSH_SIZE")]
    flush_size: Option<String>,
    /// Flush memtables at this age (e.g. 5m).
    #[arg(long, env = "SUNDIAL_FLUSH_AGE")]
    flush_age: Option<String>,
    /// Default chunk interval of hypertables (e.g. '7 days').
    #[arg(long, env = "SUNDIAL_CHUNK_INTERVAL")]
    chunk_interval: Option<String>,
    /// Query engine memory limit (default: what the other parts leave of memory_limit).
    #[arg(long, env = "SUNDIAL_QUERY_MEMORY_LIMIT")]
    query_memory_limit: Option<String>,
    /// Postgres connections served at once (default 100); more get 53300.
    #[arg(long, env = "SUNDIAL_MAX_CONNECTIONS")]
    max_connections: Option<String>,
    /// Line-protocol connections per port (default 1000); more get HTTP 503.
    #[arg(long, env = "SUNDIAL_LP_MAX_CONNECTIONS")]
    lp_max_connections: Option<String>,
    /// Close line-protocol connections idle this long (default 5m).
    #[arg(long, env = "SUNDIAL_LP_IDLE_TIMEOUT")]
    lp_idle_timeout: Option<String>,
    /// Log level or tracing filter (default info).
    #[arg(long, env = "SUNDIAL_LOG_LEVEL")]
    log_level: Option<String>,
}

impl ServeArgs {
    fn settings(&self) -> Settings {
        Settings {
            data_dir: self.data_dir.clone(),
            pg_addr: self.pg_addr.clone(),
            http_addr: self.http_addr.clone(),
            tcp_addr: self.tcp_addr.clone(),
            tcp_database: self.tcp_database.clone(),
            http_max_body_size: self.http_max_body_size.clone().map(toml::Value::String),
            max_message_size: self.max_message_size.clone().map(toml::Value::String),
            http_max_inflight_bytes: self
                .http_max_inflight_bytes
                .clone()
                .map(toml::Value::String),
            http_auth_token: self.http_auth_token.clone(),
            http_open_endpoints: self.http_open_endpoints.clone(),
            auth: self.auth.clone(),
            superuser: self.superuser.clone(),
            superuser_password: self.superuser_password.clone(),
            superuser_password_file: self.superuser_password_file.clone(),
            allow_remote_trust: self.allow_remote_trust.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_require: self.tls_require.clone(),
            lp_create_databases: self.lp_create_databases.clone(),
            lp_max_databases: self.lp_max_databases.clone().map(toml::Value::String),
            lp_max_tables: self.lp_max_tables.clone().map(toml::Value::String),
            wal_fsync: self.wal_fsync.clone(),
            wal_accept_loss: self.wal_accept_loss.clone(),
            memory_limit: self.memory_limit.clone().map(toml::Value::String),
            compaction_memory: self.compaction_memory.clone().map(toml::Value::String),
            flush_size: self.flush_size.clone().map(toml::Value::String),
            flush_age: self.flush_age.clone(),
            chunk_interval: self.chunk_interval.clone(),
            query_memory_limit: self.query_memory_limit.clone().map(toml::Value::String),
            max_connections: self.max_connections.clone().map(toml::Value::String),
            lp_max_connections: self.lp_max_connections.clone().map(toml::Value::String),
            lp_idle_timeout: self.lp_idle_timeout.clone(),
            log_level: self.log_level.clone(),
        }
    }
}

fn load(args: &ServeArgs) -> sundial::Result<Config> {
    let file = match &args.config {
        Some(p) => Settings::from_file(p)?,
        None => Settings::default(),
    };
    file.overlay(args.settings()).into_config()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(a)) => a,
        None => cli.serve,
        Some(Command::Bench(BenchCommand::Load(a))) => return bench_load(a),
        Some(Command::Bench(BenchCommand::Query(a))) => return bench_query(a),
    };
    let mut config = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sundial: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(limit) = raise_fd_limit() {
        match config.fit_connections(limit) {
            Some(change) => tracing::warn!("{change}"),
            None => tracing::info!(
                open_files = limit,
                max_connections = config.max_connections,
                lp_max_connections = config.lp_max_connections,
                "connection limits fit the open file limit"
            ),
        }
    }
    run_to_exit(run(config))
}

fn bench_load(args: sundial::loadgen::LoadArgs) -> ExitCode {
    run_to_exit(sundial::loadgen::run(args))
}

fn bench_query(args: sundial::loadgen::QueryArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    run_to_exit(sundial::loadgen::run_queries(args))
}

/// Runs `fut` on a multi-threaded runtime; an error is one `sundial: error:` line.
fn run_to_exit<T, E: std::fmt::Display>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(sundial::STATEMENT_STACK_BYTES)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sundial: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(fut) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sundial: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open files to the hard limit: every connection, WAL
/// segment and chunk file needs a descriptor, and 1,024 is a common default.
/// Returns the limit, None when it cannot be read.
fn raise_fd_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => {
            tracing::info!(limit = n, "open file limit");
            Some(n)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .ok()
                .map(|(soft, _)| soft)
        }
    }
}

async fn run(config: Config) -> sundial::Result<()> {
    let engine = Engine::open(config).await?;
    let listeners = sundial::server::bind(&engine).await?;
    let mut ready = format!("SUNDIAL READY pg={}", listeners.pg_addr);
    if let Some(a) = listeners.http_addr {
        ready.push_str(&format!(" http={a}"));
    }
    if let Some(a) = listeners.tcp_addr {
        ready.push_str(&format!(" tcp={a}"));
    }
    println!("{ready}");
    tracing::info!(pg = %listeners.pg_addr, data_dir = %engine.config().data_dir.display(), "sundial is ready");
    let server = tokio::spawn(sundial::server::serve(engine.clone(), listeners));
    wait_for_signal().await;
    tracing::info!("shutting down: finishing running statements, then flushing memtables");
    engine.shutdown();
    let _ = server.await;
    engine.close().await
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
