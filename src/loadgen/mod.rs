//! TSBS-style benchmark tools. This file is the load tool (`tsbs_generate_data` +
//! `tsbs_load_influx`): devops or iot data (or a file) POSTed in batches to `/write` by
//! concurrent workers; `queries` and `query_run` are the query benchmark (`bench query`).

mod devops;
mod iot;
mod queries;
mod query_run;
mod source;

#[cfg(test)]
mod e2e_tests;

use std::collections::HashSet;
use std::fmt::Display;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flate2::Compression;
use flate2::write::GzEncoder;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE};
use tokio::sync::mpsc;

pub use queries::{
    DEVOPS_TYPES, Dialect, GenerateError, IOT_TAGS_SETUP, IOT_TYPES, Query, QueryGenerator,
    QueryShape, QueryType, query_types, select_types,
};
pub use query_run::{
    Failure, Mismatch, QueryArgs, QueryError, QueryReport, RowDiff, Rows, Side, Timings,
    TypeResult, bench, compare_rows, connect, generate as generate_queries,
    render as render_report, run as run_queries, run_once, script,
};

use devops::CpuOnly;
use iot::Iot;
use source::{Batch, Batcher, FileSource, LineSource};

/// Load TSBS-style line protocol into the line-protocol port, like tsbs_load_influx.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Base URL of the line-protocol port
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    pub url: String,
    /// Database to write into (the `db` query parameter)
    #[arg(long, default_value = "benchmark")]
    pub db: String,
    /// Data set to generate, as TSBS's `--use-case`
    #[arg(long, value_enum, default_value = "cpu-only")]
    pub use_case: UseCase,
    /// Read line protocol from this file instead of generating (`.gz` is gunzipped)
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Number of hosts (cpu-only) or trucks (iot)
    #[arg(long, default_value_t = 100)]
    pub scale: u64,
    /// First timestamp generated (RFC 3339), inclusive
    #[arg(long, default_value = "2016-01-01T00:00:00Z")]
    pub timestamp_start: String,
    /// Timestamps stop before this one (RFC 3339)
    #[arg(long, default_value = "2016-01-02T00:00:00Z")]
    pub timestamp_end: String,
    /// Time between two readings of one host or truck (e.g. 10s, 1m)
    #[arg(long, default_value = "10s")]
    pub log_interval: String,
    /// Seed of the data generator: the same seed gives the same data
    #[arg(long, default_value_t = 123)]
    pub seed: u64,
    /// Concurrent HTTP writers
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Lines per request
    #[arg(long, default_value_t = 5000)]
    pub batch_size: usize,
    /// Stop after this many rows (lines)
    #[arg(long)]
    pub limit: Option<u64>,
    /// Print a progress line this often (0s: never)
    #[arg(long, default_value = "10s")]
    pub reporting_period: String,
    /// gzip request bodies
    #[arg(long)]
    pub gzip: bool,
    /// Credentials as USER:PASSWORD, sent as HTTP Basic auth
    #[arg(long)]
    pub auth: Option<String>,
    /// Write the generated line protocol to this file instead of posting (like
    /// tsbs_generate_data); a name ending in `.gz` is gzipped
    #[arg(long)]
    pub output: Option<PathBuf>,
}

impl Default for LoadArgs {
    fn default() -> Self {
        LoadArgs {
            url: "http://127.0.0.1:8086".into(),
            db: "benchmark".into(),
            use_case: UseCase::CpuOnly,
            file: None,
            scale: 100,
            timestamp_start: "2016-01-01T00:00:00Z".into(),
            timestamp_end: "2016-01-02T00:00:00Z".into(),
            log_interval: "10s".into(),
            seed: 123,
            workers: 4,
            batch_size: 5000,
            limit: None,
            reporting_period: "10s".into(),
            gzip: false,
            auth: None,
            output: None,
        }
    }
}

/// Which TSBS data set to generate.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseCase {
    /// `cpu` lines: 10 tags, 10 integer fields per host and interval
    CpuOnly,
    /// `readings` and `diagnostics` lines of trucks, with gaps and late rows
    Iot,
}

/// What a run loaded (or, with `--output`, wrote).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Lines accepted by the server (or written).
    pub rows: u64,
    /// Field values in those lines.
    pub metrics: u64,
    /// Raw, uncompressed line-protocol bytes of those lines.
    pub bytes: u64,
    /// Wall-clock time from the first batch to the last answer.
    pub seconds: f64,
    /// Requests answered with a non-2xx status (their lines are not counted above).
    pub errors: u64,
}

/// Why a load run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid --{flag} {value:?}: {reason}")]
    InvalidArg {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("POST {url} failed {attempts} times, giving up: {detail}")]
    Connection {
        url: String,
        attempts: u32,
        detail: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{0} task failed: {1}")]
    Task(&'static str, String),
}

impl LoadError {
    fn arg(flag: &'static str, value: impl Display, reason: impl Into<String>) -> Self {
        LoadError::InvalidArg {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LoadError::Io {
            context: context.into(),
            source,
        }
    }
}

/// The first `lines` lines of TSBS devops cpu-only data for `scale` hosts from
/// 2016-01-01, 10 s apart (what `sundial bench load` sends); for benchmarks.
pub fn tsbs_cpu_body(scale: u64, lines: usize, seed: u64) -> Result<Vec<u8>, LoadError> {
    const START_NS: i64 = 1_451_606_400_000_000_000;
    const STEP_NS: i64 = 10_000_000_000;
    let epochs = (lines as u64).div_ceil(scale.max(1)) as i64 + 1;
    let timeline = Timeline::new(START_NS, START_NS + epochs * STEP_NS, STEP_NS);
    let mut src = devops::CpuOnly::new(scale, timeline, seed)?;
    let mut body = Vec::with_capacity(lines * 350);
    for _ in 0..lines {
        if src.next_line(&mut body)?.is_none() {
            break;
        }
    }
    Ok(body)
}

/// Timestamps of the generated data: `epochs` steps of `interval_ns` from `start_ns`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeline {
    start_ns: i64,
    interval_ns: i64,
    epochs: u64,
}

impl Timeline {
    /// Every step from `start_ns` (inclusive) to `end_ns` (exclusive); like TSBS, a
    /// last partial interval is dropped.
    pub fn new(start_ns: i64, end_ns: i64, interval_ns: i64) -> Self {
        let span = i128::from(end_ns) - i128::from(start_ns);
        let epochs = if span > 0 && interval_ns > 0 {
            (span / i128::from(interval_ns)) as u64
        } else {
            0
        };
        Timeline {
            start_ns,
            interval_ns,
            epochs,
        }
    }

    /// The timestamp of step `epoch` (< `epochs`, so it lies before the end).
    pub fn at(&self, epoch: u64) -> i64 {
        self.start_ns + epoch as i64 * self.interval_ns
    }
}

/// The data a run sends.
enum Source {
    Cpu(CpuOnly),
    Iot(Iot),
    File(FileSource),
}

impl Source {
    fn open(args: &LoadArgs) -> Result<Self, LoadError> {
        if let Some(path) = &args.file {
            return Ok(Source::File(FileSource::open(path)?));
        }
        let start = parse_time("timestamp-start", &args.timestamp_start)?;
        let end = parse_time("timestamp-end", &args.timestamp_end)?;
        if end <= start {
            return Err(LoadError::arg(
                "timestamp-end",
                &args.timestamp_end,
                "must be after --timestamp-start",
            ));
        }
        let interval = parse_duration("log-interval", &args.log_interval)?;
        let interval_ns = i64::try_from(interval.as_nanos())
            .ok()
            .filter(|&ns| ns > 0)
            .ok_or_else(|| {
                LoadError::arg(
                    "log-interval",
                    &args.log_interval,
                    "must be between 1ns and ~292 years",
                )
            })?;
        let timeline = Timeline::new(start, end, interval_ns);
        Ok(match args.use_case {
            UseCase::CpuOnly => Source::Cpu(CpuOnly::new(args.scale, timeline, args.seed)?),
            UseCase::Iot => Source::Iot(Iot::new(args.scale, timeline, args.seed)?),
        })
    }

    /// Cuts the source into batches and hands each to `sink` until either runs out
    /// (`sink` answers `false` to stop early).
    fn drive(
        self,
        batch_size: usize,
        limit: Option<u64>,
        sink: impl FnMut(Batch) -> Result<bool, LoadError>,
    ) -> Result<(), LoadError> {
        fn pump<S: LineSource>(
            mut batcher: Batcher<S>,
            mut sink: impl FnMut(Batch) -> Result<bool, LoadError>,
        ) -> Result<(), LoadError> {
            while let Some(batch) = batcher.next_batch()? {
                if !sink(batch)? {
                    break;
                }
            }
            Ok(())
        }
        match self {
            Source::Cpu(s) => pump(Batcher::new(s, batch_size, limit), sink),
            Source::Iot(s) => pump(Batcher::new(s, batch_size, limit), sink),
            Source::File(s) => pump(Batcher::new(s, batch_size, limit), sink),
        }
    }
}

fn parse_time(flag: &'static str, value: &str) -> Result<i64, LoadError> {
    let t = chrono::DateTime::parse_from_rfc3339(value)
        .map_err(|e| LoadError::arg(flag, value, e.to_string()))?;
    t.timestamp_nanos_opt()
        .ok_or_else(|| LoadError::arg(flag, value, "outside the nanosecond range (1677..2262)"))
}

fn parse_duration(flag: &'static str, value: &str) -> Result<Duration, LoadError> {
    humantime::parse_duration(value).map_err(|e| LoadError::arg(flag, value, e.to_string()))
}

/// `{url}/write?db={db}&precision=ns`, checked.
fn write_url(base: &str, db: &str) -> Result<String, LoadError> {
    let mut url = format!("{}/write?db=", base.trim_end_matches('/'));
    for b in db.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url.push_str("&precision=ns");
    let parsed =
        reqwest::Url::parse(&url).map_err(|e| LoadError::arg("url", base, e.to_string()))?;
    if parsed.scheme() != "http" {
        return Err(LoadError::arg(
            "url",
            base,
            "only http:// is supported (this build has no TLS)",
        ));
    }
    Ok(url)
}

/// Runs the load (or, with `--output`, writes the data to a file) and prints TSBS's
/// progress lines and summary to stdout.
pub async fn run(args: LoadArgs) -> Result<Summary, LoadError> {
    if args.workers == 0 {
        return Err(LoadError::arg("workers", 0, "must be at least 1"));
    }
    if args.batch_size == 0 {
        return Err(LoadError::arg("batch-size", 0, "must be at least 1"));
    }
    let period = parse_duration("reporting-period", &args.reporting_period)?;
    let url = match args.output {
        Some(_) => String::new(),
        None => write_url(&args.url, &args.db)?,
    };
    let opener = args.clone();
    let source = tokio::task::spawn_blocking(move || Source::open(&opener))
        .await
        .map_err(|e| LoadError::Task("generator setup", e.to_string()))??;
    match &args.output {
        Some(path) => write_file(source, &args, path.clone()).await,
        None => post_all(source, &args, url, period).await,
    }
}

/// Counters shared by the workers and the progress reporter.
#[derive(Default)]
struct Stats {
    rows: AtomicU64,
    metrics: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    fn summary(&self, seconds: f64) -> Summary {
        Summary {
            rows: self.rows.load(Ordering::Relaxed),
            metrics: self.metrics.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            seconds,
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_ERROR_MESSAGES: usize = 100;
const MAX_ERROR_BODY: usize = 1000;

/// What every worker shares.
struct Shared {
    client: reqwest::Client,
    url: String,
    gzip: bool,
    /// `Authorization` header value, when credentials were given.
    auth: Option<String>,
    stats: Stats,
    stop: AtomicBool,
    seen_errors: std::sync::Mutex<HashSet<String>>,
}

impl Shared {
    /// POSTs one body, retrying connection failures; `Ok(false)` when the server
    /// answered with a non-2xx status.
    async fn post(&self, body: Vec<u8>) -> Result<bool, LoadError> {
        let mut builder = self
            .client
            .post(&self.url)
            .header(CONTENT_TYPE, "text/plain; charset=utf-8");
        if self.gzip {
            builder = builder.header(CONTENT_ENCODING, "gzip");
        }
        if let Some(a) = &self.auth {
            builder = builder.header(reqwest::header::AUTHORIZATION, a);
        }
        let request = builder.body(body).build().map_err(LoadError::Client)?;
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            // An in-memory body clones by reference count.
            let this = request
                .try_clone()
                .ok_or_else(|| LoadError::Task("worker", "request body cannot be resent".into()))?;
            match self.client.execute(this).await {
                Ok(response) if response.status().is_success() => {
                    // Drain the (normally empty) body so the connection is reused.
                    let _ = response.bytes().await;
                    return Ok(true);
                }
                Ok(response) => {
                    let status = response.status();
                    let text = match response.text().await {
                        Ok(t) => t,
                        Err(e) => format!("<unreadable body: {}>", error_chain(&e)),
                    };
                    self.print_rejection(status, &text);
                    return Ok(false);
                }
                Err(e) if attempt < ATTEMPTS => {
                    eprintln!(
                        "write attempt {attempt} of {ATTEMPTS} failed, retrying in {backoff:?}: {}",
                        error_chain(&e)
                    );
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(e) => {
                    return Err(LoadError::Connection {
                        url: self.url.clone(),
                        attempts: attempt,
                        detail: error_chain(&e),
                        source: e,
                    });
                }
            }
        }
        Err(LoadError::Task(
            "worker",
            "no write attempt was made".into(),
        ))
    }

    /// Prints a rejection to stderr the first time its message is seen.
    fn print_rejection(&self, status: reqwest::StatusCode, body: &str) {
        let body: String = body.trim().chars().take(MAX_ERROR_BODY).collect();
        let message = format!("write rejected: HTTP {status}: {body}");
        let mut seen = self.seen_errors.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() < MAX_ERROR_MESSAGES && seen.insert(message.clone()) {
            eprintln!("{message}");
            if seen.len() == MAX_ERROR_MESSAGES {
                eprintln!("(further distinct write errors are counted but not printed)");
            }
        }
    }
}

/// An error with its causes, `a: b: c`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn gzip(raw: &[u8]) -> Result<Vec<u8>, LoadError> {
    let mut enc = GzEncoder::new(Vec::with_capacity(raw.len() / 4), Compression::fast());
    enc.write_all(raw).map_err(|e| LoadError::io("gzip", e))?;
    enc.finish().map_err(|e| LoadError::io("gzip", e))
}

type Queue = Arc<tokio::sync::Mutex<mpsc::Receiver<Batch>>>;

async fn worker(shared: Arc<Shared>, queue: Queue) -> Result<(), LoadError> {
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let next = queue.lock().await.recv().await;
        let Some(batch) = next else { return Ok(()) };
        let raw_len = batch.body.len() as u64;
        let body = if shared.gzip {
            let raw = batch.body;
            tokio::task::spawn_blocking(move || gzip(&raw))
                .await
                .map_err(|e| LoadError::Task("gzip", e.to_string()))??
        } else {
            batch.body
        };
        let stats = &shared.stats;
        if shared.post(body).await? {
            stats.rows.fetch_add(batch.rows, Ordering::Relaxed);
            stats.metrics.fetch_add(batch.metrics, Ordering::Relaxed);
            stats.bytes.fetch_add(raw_len, Ordering::Relaxed);
        } else {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn post_all(
    source: Source,
    args: &LoadArgs,
    url: String,
    period: Duration,
) -> Result<Summary, LoadError> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.workers)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(LoadError::Client)?;
    let shared = Arc::new(Shared {
        client,
        url,
        gzip: args.gzip,
        auth: args.auth.as_ref().map(|a| {
            use base64::Engine as _;
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(a)
            )
        }),
        stats: Stats::default(),
        stop: AtomicBool::new(false),
        seen_errors: std::sync::Mutex::new(HashSet::new()),
    });

    // A few ready batches per worker bound the memory in flight.
    let (tx, rx) = mpsc::channel::<Batch>(args.workers * 2);
    let started = Instant::now();
    let (batch_size, limit) = (args.batch_size, args.limit);
    let gen_shared = Arc::clone(&shared);
    let generator = tokio::task::spawn_blocking(move || {
        source.drive(batch_size, limit, |batch| {
            Ok(!gen_shared.stop.load(Ordering::Relaxed) && tx.blocking_send(batch).is_ok())
        })
    });

    let queue: Queue = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.workers {
        workers.spawn(worker(Arc::clone(&shared), Arc::clone(&queue)));
    }
    // Only the workers hold the queue: when they are all gone the generator stops.
    drop(queue);

    let reporter = (!period.is_zero()).then(|| {
        println!(
            "time,per. metric/s,metric total,overall metric/s,per. row/s,row total,overall row/s"
        );
        tokio::spawn(report(Arc::clone(&shared), period, started))
    });

    let mut failure = None;
    while let Some(joined) = workers.join_next().await {
        let result = joined
            .map_err(|e| LoadError::Task("worker", e.to_string()))
            .and_then(|r| r);
        if let Err(e) = result {
            shared.stop.store(true, Ordering::Relaxed);
            failure.get_or_insert(e);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    let generated = generator
        .await
        .map_err(|e| LoadError::Task("generator", e.to_string()))?;
    if let Some(e) = failure {
        return Err(e);
    }
    generated?;

    let summary = shared.stats.summary(seconds);
    print_summary(&summary, args.workers);
    Ok(summary)
}

/// Prints a progress line every `period`, as tsbs_load does.
async fn report(shared: Arc<Shared>, period: Duration, started: Instant) {
    let mut ticker = tokio::time::interval_at((started + period).into(), period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut prev_time, mut prev_metrics, mut prev_rows) = (started, 0u64, 0u64);
    loop {
        let now = ticker.tick().await.into_std();
        let metrics = shared.stats.metrics.load(Ordering::Relaxed);
        let rows = shared.stats.rows.load(Ordering::Relaxed);
        let took = now.duration_since(prev_time).as_secs_f64().max(1e-9);
        let since_start = now.duration_since(started).as_secs_f64().max(1e-9);
        println!(
            "{}",
            progress_line(
                unix_now(),
                metrics - prev_metrics,
                metrics,
                rows - prev_rows,
                rows,
                took,
                since_start
            )
        );
        (prev_time, prev_metrics, prev_rows) = (now, metrics, rows);
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One `time,per. metric/s,metric total,overall metric/s,per. row/s,row total,overall row/s` line.
fn progress_line(
    unix: u64,
    new_metrics: u64,
    metrics: u64,
    new_rows: u64,
    rows: u64,
    took: f64,
    since_start: f64,
) -> String {
    let metric_part = format!(
        "{unix},{:.2},{},{:.2}",
        new_metrics as f64 / took,
        go_exp(metrics as f64),
        metrics as f64 / since_start
    );
    if rows == 0 {
        return format!("{metric_part},-,-,-");
    }
    format!(
        "{metric_part},{:.2},{},{:.2}",
        new_rows as f64 / took,
        go_exp(rows as f64),
        rows as f64 / since_start
    )
}

/// Go's `%E`: `1.234560E+06`.
fn go_exp(x: f64) -> String {
    let text = format!("{x:.6E}");
    match text.split_once('E') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}E{sign}{digits:0>2}")
        }
        None => text,
    }
}

fn print_summary(s: &Summary, workers: usize) {
    let secs = s.seconds.max(1e-9);
    println!("\nSummary:");
    println!(
        "loaded {} metrics in {:.3}sec with {workers} workers (mean rate {:.2} metrics/sec)",
        s.metrics,
        s.seconds,
        s.metrics as f64 / secs
    );
    println!(
        "loaded {} rows in {:.3}sec with {workers} workers (mean rate {:.2} rows/sec)",
        s.rows,
        s.seconds,
        s.rows as f64 / secs
    );
    println!("raw line protocol: {} bytes", s.bytes);
    if s.errors > 0 {
        println!(
            "rejected requests: {} (their rows are not counted above)",
            s.errors
        );
    }
}

/// The `--output` file, plain or gzipped.
enum OutFile {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
}

impl OutFile {
    fn create(path: &Path) -> Result<Self, LoadError> {
        let file = File::create(path)
            .map_err(|e| LoadError::io(format!("create {}", path.display()), e))?;
        let buffered = BufWriter::with_capacity(1 << 20, file);
        Ok(if path.extension().is_some_and(|e| e == "gz") {
            OutFile::Gzip(GzEncoder::new(buffered, Compression::default()))
        } else {
            OutFile::Plain(buffered)
        })
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            OutFile::Plain(w) => w.write_all(bytes),
            OutFile::Gzip(w) => w.write_all(bytes),
        }
    }

    fn finish(self) -> std::io::Result<()> {
        match self {
            OutFile::Plain(mut w) => w.flush(),
            OutFile::Gzip(w) => w.finish()?.flush(),
        }
    }
}

async fn write_file(source: Source, args: &LoadArgs, path: PathBuf) -> Result<Summary, LoadError> {
    let (batch_size, limit) = (args.batch_size, args.limit);
    let started = Instant::now();
    let target = path.clone();
    let mut summary = tokio::task::spawn_blocking(move || {
        let mut out = OutFile::create(&target)?;
        let mut summary = Summary {
            rows: 0,
            metrics: 0,
            bytes: 0,
            seconds: 0.0,
            errors: 0,
        };
        let context = || format!("write {}", target.display());
        source.drive(batch_size, limit, |batch| {
            out.write_all(&batch.body)
                .map_err(|e| LoadError::io(context(), e))?;
            summary.rows += batch.rows;
            summary.metrics += batch.metrics;
            summary.bytes += batch.body.len() as u64;
            Ok(true)
        })?;
        out.finish().map_err(|e| LoadError::io(context(), e))?;
        Ok::<_, LoadError>(summary)
    })
    .await
    .map_err(|e| LoadError::Task("generator", e.to_string()))??;
    summary.seconds = started.elapsed().as_secs_f64();
    println!(
        "wrote {} rows ({} metrics, {} bytes of line protocol) to {} in {:.3}sec ({:.2} rows/sec)",
        summary.rows,
        summary.metrics,
        summary.bytes,
        path.display(),
        summary.seconds,
        summary.rows as f64 / summary.seconds.max(1e-9)
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_command_line_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            load: LoadArgs,
        }
        let parsed = Cli::try_parse_from(["load"]).unwrap().load;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", LoadArgs::default()));
        let iot =
            Cli::try_parse_from(["load", "--use-case", "iot", "--gzip", "--limit", "5"]).unwrap();
        assert_eq!(
            (iot.load.use_case, iot.load.gzip, iot.load.limit),
            (UseCase::Iot, true, Some(5))
        );
        assert!(Cli::try_parse_from(["load", "--use-case", "devops"]).is_err());
    }

    #[test]
    fn go_exponent_format() {
        assert_eq!(go_exp(1234560.0), "1.234560E+06");
        assert_eq!(go_exp(0.0), "0.000000E+00");
        assert_eq!(go_exp(1e100), "1.000000E+100");
        assert_eq!(go_exp(0.00012), "1.200000E-04");
    }

    #[test]
    fn progress_line_matches_tsbs_columns() {
        assert_eq!(
            progress_line(1700000000, 500, 1000, 50, 100, 2.0, 4.0),
            "1700000000,250.00,1.000000E+03,250.00,25.00,1.000000E+02,25.00"
        );
        assert_eq!(
            progress_line(1, 0, 0, 0, 0, 1.0, 1.0),
            "1,0.00,0.000000E+00,0.00,-,-,-"
        );
    }

    #[test]
    fn write_url_encodes_db_and_rejects_https() {
        assert_eq!(
            write_url("http://127.0.0.1:8086/", "bench mark").unwrap(),
            "http://127.0.0.1:8086/write?db=bench%20mark&precision=ns"
        );
        assert!(write_url("https://x", "db").is_err());
        assert!(write_url("not a url", "db").is_err());
    }

    #[test]
    fn timeline_counts_whole_intervals() {
        assert_eq!(Timeline::new(0, 100, 10).epochs, 10);
        assert_eq!(Timeline::new(0, 99, 10).epochs, 9);
        assert_eq!(Timeline::new(0, 0, 10).epochs, 0);
        assert_eq!(Timeline::new(i64::MIN, i64::MAX, i64::MAX).epochs, 2);
        assert_eq!(Timeline::new(5, 100, 10).at(3), 35);
    }

    #[test]
    fn bad_arguments_are_reported_by_flag() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bad = |f: fn(&mut LoadArgs)| {
            let mut args = LoadArgs {
                output: Some(std::env::temp_dir().join("loadgen-never-written.lp")),
                ..LoadArgs::default()
            };
            f(&mut args);
            match rt.block_on(run(args)) {
                Err(LoadError::InvalidArg { flag, .. }) => flag,
                other => panic!("expected an argument error, got {other:?}"),
            }
        };
        assert_eq!(
            bad(|a| a.timestamp_start = "yesterday".into()),
            "timestamp-start"
        );
        assert_eq!(
            bad(|a| a.timestamp_end = "2015-01-01T00:00:00Z".into()),
            "timestamp-end"
        );
        assert_eq!(bad(|a| a.log_interval = "0s".into()), "log-interval");
        assert_eq!(
            bad(|a| a.log_interval = "10 parsecs".into()),
            "log-interval"
        );
        assert_eq!(
            bad(|a| a.reporting_period = "often".into()),
            "reporting-period"
        );
        assert_eq!(bad(|a| a.workers = 0), "workers");
        assert_eq!(bad(|a| a.batch_size = 0), "batch-size");
        assert!(
            !std::env::temp_dir()
                .join("loadgen-never-written.lp")
                .exists()
        );
    }

    #[test]
    fn output_file_holds_the_generated_lines() {
        let dir = std::env::temp_dir().join(format!("loadgen-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for name in ["cpu.lp", "cpu.lp.gz"] {
            let path = dir.join(name);
            let args = LoadArgs {
                scale: 10,
                timestamp_end: "2016-01-01T01:00:00Z".into(),
                limit: Some(3001),
                output: Some(path.clone()),
                ..LoadArgs::default()
            };
            let s = rt.block_on(run(args)).unwrap();
            assert_eq!((s.rows, s.metrics, s.errors), (3001, 30010, 0));
            // Reading it back as --file gives the same rows and metrics.
            let copy = dir.join(format!("copy-{name}"));
            let back = LoadArgs {
                file: Some(path.clone()),
                output: Some(copy.clone()),
                ..LoadArgs::default()
            };
            let t = rt.block_on(run(back)).unwrap();
            assert_eq!((t.rows, t.metrics, t.bytes), (s.rows, s.metrics, s.bytes));
            if name.ends_with(".lp") {
                assert_eq!(std::fs::metadata(&path).unwrap().len(), s.bytes);
                assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&copy).unwrap());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
