//! `sundial bench query`, after TSBS's `tsbs_run_queries`: runs the generated queries over
//! one pgwire connection (simple query protocol), times them, optionally runs them on a
//! second server too and checks that both give the same answers, and prints a summary table.

use std::fmt::Write as _;
use std::time::Instant;

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::UseCase;
use super::queries::{self, GenerateError, Query, QueryGenerator, QueryType};

/// Run TSBS's queries against a server (and optionally compare with another one).
#[derive(clap::Args, Debug, Clone)]
pub struct QueryArgs {
    /// Connection string (libpq key=value or postgresql:// URL) of the server to measure
    #[arg(
        long,
        default_value = "host=127.0.0.1 port=5432 user=postgres dbname=benchmark"
    )]
    pub dsn: String,
    /// Other servers with the same data (PostgreSQL, TimescaleDB compressed, ...) to
    /// run the same queries on and check the answers against; may be repeated
    #[arg(long)]
    pub compare_dsn: Vec<String>,
    /// Names of the `--compare-dsn` servers in the table, in their order (default:
    /// cmp1, cmp2, ...)
    #[arg(long)]
    pub compare_name: Vec<String>,
    /// Data set the queries are for, as TSBS's `--use-case`
    #[arg(long, value_enum, default_value = "cpu-only")]
    pub use_case: UseCase,
    /// Query types: `all` or a comma-separated list (e.g. lastpoint,high-cpu-1)
    #[arg(long, default_value = "all")]
    pub types: String,
    /// Queries generated per type
    #[arg(long, default_value_t = 20)]
    pub queries: usize,
    /// Timed runs of every query (after one warm-up run)
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Seed of the query generator: the same seed gives the same queries
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of hosts (cpu-only) or trucks (iot) in the data
    #[arg(long, default_value_t = 100)]
    pub scale: u64,
    /// First timestamp of the data (RFC 3339), as given to `bench load`
    #[arg(long, default_value = "2016-01-01T00:00:00Z")]
    pub timestamp_start: String,
    /// End of the data (RFC 3339, exclusive), as given to `bench load`
    #[arg(long, default_value = "2016-01-02T00:00:00Z")]
    pub timestamp_end: String,
    /// Print the generated queries (as SQL statements) instead of running them
    #[arg(long)]
    pub print: bool,
    /// SQL of the iot queries: `sundial` (tags as columns) or `timescaledb` (TSBS's
    /// TimescaleDB text over a `tags` table, created from `readings` on both servers
    /// when missing)
    #[arg(long, value_enum, default_value = "sundial")]
    pub dialect: queries::Dialect,
}

impl Default for QueryArgs {
    fn default() -> Self {
        QueryArgs {
            dsn: "host=127.0.0.1 port=5432 user=postgres dbname=benchmark".into(),
            compare_dsn: vec![],
            compare_name: vec![],
            use_case: UseCase::CpuOnly,
            types: "all".into(),
            queries: 20,
            runs: 3,
            seed: 1,
            scale: 100,
            timestamp_start: "2016-01-01T00:00:00Z".into(),
            timestamp_end: "2016-01-02T00:00:00Z".into(),
            print: false,
            dialect: queries::Dialect::Sundial,
        }
    }
}

/// Why a query benchmark could not be carried out, or what it found wrong.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("invalid --{flag} {value:?}: {reason}")]
    InvalidArg {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error("cannot connect to {side} ({dsn}): {detail}")]
    Connect {
        side: Side,
        dsn: String,
        detail: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("cannot create the tags table on {side}: {detail}")]
    Setup { side: Side, detail: String },
    #[error("{failures} queries failed and {mismatches} answers differed")]
    Check { failures: usize, mismatches: usize },
}

impl QueryError {
    fn arg(flag: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        QueryError::InvalidArg {
            flag,
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// Which server: the one measured (`--dsn`) or a reference (the n-th `--compare-dsn`,
/// from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Dsn,
    Compare(usize),
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Side::Dsn => f.write_str("--dsn"),
            Side::Compare(i) => write!(f, "--compare-dsn #{}", i + 1),
        }
    }
}

/// A text result: rows of nullable cells, in the server's order.
pub type Rows = Vec<Vec<Option<String>>>;

/// Wall-clock times of the timed runs of one type on one server, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    pub samples_ms: Vec<f64>,
}

impl Timings {
    fn sorted(&self) -> Vec<f64> {
        let mut s = self.samples_ms.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    /// The `q` quantile by nearest rank (0 when there are no samples).
    pub fn quantile(&self, q: f64) -> f64 {
        let s = self.sorted();
        if s.is_empty() {
            return 0.0;
        }
        let rank = (q * s.len() as f64).ceil() as usize;
        s[rank.clamp(1, s.len()) - 1]
    }

    /// The middle sample (mean of the two middle ones for an even count).
    pub fn median(&self) -> f64 {
        let s = self.sorted();
        match s.len() {
            0 => 0.0,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }

    pub fn p95(&self) -> f64 {
        self.quantile(0.95)
    }

    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(0.0)
    }

    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(0.0)
    }
}

/// What one query type gave.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeResult {
    pub query_type: &'static str,
    /// Rows each query returned on `--dsn` (in generation order; empty when it failed).
    pub rows: Vec<usize>,
    /// Timed runs on `--dsn` (`None` when a query of the type failed there).
    pub dsn: Option<Timings>,
    /// Timed runs per `--compare-dsn` (`None` where a query of the type failed there).
    pub compare: Vec<Option<Timings>>,
}

impl TypeResult {
    /// Median on `--dsn` over median on the `i`-th `--compare-dsn`.
    pub fn ratio(&self, i: usize) -> Option<f64> {
        let a = self.dsn.as_ref()?.median();
        let b = self.compare.get(i)?.as_ref()?.median();
        (a > 0.0 && b > 0.0).then(|| a / b)
    }

    /// Median on `--dsn` over the fastest `--compare-dsn` median.
    pub fn ratio_to_fastest(&self) -> Option<f64> {
        let a = self.dsn.as_ref()?.median();
        let b = self
            .compare
            .iter()
            .flatten()
            .map(Timings::median)
            .filter(|m| *m > 0.0)
            .min_by(f64::total_cmp)?;
        (a > 0.0).then(|| a / b)
    }
}

/// A query that returned an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub query_type: &'static str,
    pub side: Side,
    pub sql: String,
    pub error: String,
}

/// A query whose answers differ between `--dsn` and a `--compare-dsn`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub query_type: &'static str,
    /// Which `--compare-dsn` (from 0).
    pub compare: usize,
    pub sql: String,
    pub diff: RowDiff,
}

/// The first row where two answers differ (`None`: that answer has no such row).
#[derive(Debug, Clone, PartialEq)]
pub struct RowDiff {
    pub row: usize,
    pub dsn_rows: usize,
    pub compare_rows: usize,
    pub dsn: Option<Vec<Option<String>>>,
    pub compare: Option<Vec<Option<String>>>,
}

/// Everything a run found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryReport {
    pub types: Vec<TypeResult>,
    pub failures: Vec<Failure>,
    pub mismatches: Vec<Mismatch>,
    /// Queries run per type and timed runs per query.
    pub queries: usize,
    pub runs: usize,
    /// Names of the `--compare-dsn` servers.
    pub compare_names: Vec<String>,
}

/// Geometric mean of `ratios` (`None` without any).
fn geometric_mean(ratios: Vec<f64>) -> Option<f64> {
    if ratios.is_empty() {
        return None;
    }
    let log_sum: f64 = ratios.iter().map(|r| r.ln()).sum();
    Some((log_sum / ratios.len() as f64).exp())
}

impl QueryReport {
    /// Geometric mean of the per-type ratios dsn / the `i`-th compare server.
    pub fn geometric_mean_ratio(&self, i: usize) -> Option<f64> {
        geometric_mean(self.types.iter().filter_map(|t| t.ratio(i)).collect())
    }

    /// Geometric mean of the per-type ratios dsn / the fastest compare server.
    pub fn geometric_mean_to_fastest(&self) -> Option<f64> {
        geometric_mean(
            self.types
                .iter()
                .filter_map(TypeResult::ratio_to_fastest)
                .collect(),
        )
    }

    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.mismatches.is_empty()
    }
}

fn parse_time_us(flag: &'static str, value: &str) -> Result<i64, QueryError> {
    let t = chrono::DateTime::parse_from_rfc3339(value)
        .map_err(|e| QueryError::arg(flag, value, e.to_string()))?;
    Ok(t.timestamp_micros())
}

/// The selected types and their queries, as `args` asks.
pub fn generate(args: &QueryArgs) -> Result<Vec<(&'static QueryType, Vec<Query>)>, QueryError> {
    if args.queries == 0 {
        return Err(QueryError::arg("queries", "0", "must be at least 1"));
    }
    let start = parse_time_us("timestamp-start", &args.timestamp_start)?;
    let end = parse_time_us("timestamp-end", &args.timestamp_end)?;
    if end <= start {
        return Err(QueryError::arg(
            "timestamp-end",
            &args.timestamp_end,
            "must be after --timestamp-start",
        ));
    }
    let generator =
        QueryGenerator::new(start, end, args.scale, args.seed)?.with_dialect(args.dialect);
    let types = queries::select_types(args.use_case, &args.types)?;
    types
        .into_iter()
        .map(|ty| Ok((ty, generator.generate(ty, args.queries)?)))
        .collect()
}

/// The generated queries as a SQL script, each after a `--` comment naming it.
pub fn script(batches: &[(&'static QueryType, Vec<Query>)]) -> String {
    let mut out = String::new();
    for (ty, queries) in batches {
        for (i, q) in queries.iter().enumerate() {
            let _ = writeln!(
                out,
                "-- {} #{}: {}\n{};\n",
                ty.name,
                i + 1,
                q.description,
                q.sql
            );
        }
    }
    out
}

/// A database error's SQLSTATE and message, or the error with its causes.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}", db.code().code(), db.message());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
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

/// Connects, spawns the connection task and sets the session time zone to UTC so
/// timestamps print and truncate alike on every server.
pub async fn connect(dsn: &str, side: Side) -> Result<Client, QueryError> {
    let (client, connection) =
        tokio_postgres::connect(dsn, NoTls)
            .await
            .map_err(|e| QueryError::Connect {
                side,
                dsn: dsn.to_string(),
                detail: describe(&e),
                source: e,
            })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(%side, "connection closed: {}", describe(&e));
        }
    });
    if let Err(e) = client.simple_query("SET TIME ZONE 'UTC'").await {
        tracing::warn!(%side, "SET TIME ZONE 'UTC' failed: {}", describe(&e));
    }
    Ok(client)
}

/// Runs `sql` once with the simple query protocol: its rows as text, and the wall
/// clock from sending it to the last row, in milliseconds.
pub async fn run_once(client: &Client, sql: &str) -> Result<(Rows, f64), tokio_postgres::Error> {
    let started = Instant::now();
    let messages = client.simple_query(sql).await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let rows = messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect();
    Ok((rows, ms))
}

/// Two cells are equal when their text is, or when both parse as floats within a
/// relative 1e-9 (averages and sums print differently across engines).
fn cells_equal(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => {
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
            }
            _ => false,
        },
        _ => false,
    }
}

/// The first row where `a` and `b` differ, if any (order matters).
pub fn compare_rows(a: &Rows, b: &Rows) -> Option<RowDiff> {
    let same = |x: &Vec<Option<String>>, y: &Vec<Option<String>>| {
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| cells_equal(p, q))
    };
    let row = (0..a.len().max(b.len())).find(|&i| match (a.get(i), b.get(i)) {
        (Some(x), Some(y)) => !same(x, y),
        _ => true,
    })?;
    Some(RowDiff {
        row,
        dsn_rows: a.len(),
        compare_rows: b.len(),
        dsn: a.get(row).cloned(),
        compare: b.get(row).cloned(),
    })
}

/// Warm-up answers of a type's queries on one server, or the first failure.
async fn warm_up(
    client: &Client,
    ty: &'static QueryType,
    queries: &[Query],
    side: Side,
) -> Result<Vec<Rows>, Failure> {
    let mut answers = Vec::with_capacity(queries.len());
    for q in queries {
        match run_once(client, &q.sql).await {
            Ok((rows, _)) => answers.push(rows),
            Err(e) => {
                let error = describe(&e);
                tracing::warn!(query_type = ty.name, %side, "query failed: {error}");
                return Err(Failure {
                    query_type: ty.name,
                    side,
                    sql: q.sql.clone(),
                    error,
                });
            }
        }
    }
    Ok(answers)
}

/// `runs` timed runs of every query.
async fn timed(
    client: &Client,
    ty: &'static QueryType,
    queries: &[Query],
    runs: usize,
    side: Side,
) -> Result<Timings, Failure> {
    let mut timings = Timings::default();
    for q in queries {
        for _ in 0..runs {
            match run_once(client, &q.sql).await {
                Ok((_, ms)) => timings.samples_ms.push(ms),
                Err(e) => {
                    return Err(Failure {
                        query_type: ty.name,
                        side,
                        sql: q.sql.clone(),
                        error: describe(&e),
                    });
                }
            }
        }
    }
    Ok(timings)
}

/// Runs the benchmark: per type a warm-up run of every query on each server (whose
/// answers are compared), then `runs` timed runs. Failures and differing answers are
/// collected in the report, not returned as errors.
pub async fn bench(args: &QueryArgs) -> Result<QueryReport, QueryError> {
    if args.runs == 0 {
        return Err(QueryError::arg("runs", "0", "must be at least 1"));
    }
    let batches = generate(args)?;
    let dsn = connect(&args.dsn, Side::Dsn).await?;
    let mut compare = Vec::with_capacity(args.compare_dsn.len());
    for (i, c) in args.compare_dsn.iter().enumerate() {
        compare.push(connect(c, Side::Compare(i)).await?);
    }
    if args.use_case == super::UseCase::Iot && args.dialect == queries::Dialect::Timescaledb {
        let sides = std::iter::once((&dsn, Side::Dsn)).chain(
            compare
                .iter()
                .enumerate()
                .map(|(i, c)| (c, Side::Compare(i))),
        );
        for (client, side) in sides {
            for sql in queries::IOT_TAGS_SETUP {
                client
                    .batch_execute(sql)
                    .await
                    .map_err(|e| QueryError::Setup {
                        side,
                        detail: e.to_string(),
                    })?;
            }
        }
    }
    let mut report = QueryReport {
        queries: args.queries,
        runs: args.runs,
        compare_names: (0..compare.len())
            .map(|i| {
                args.compare_name
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("cmp{}", i + 1))
            })
            .collect(),
        ..QueryReport::default()
    };
    for (ty, queries) in &batches {
        tracing::info!(query_type = ty.name, queries = queries.len(), "running");
        let mut result = TypeResult {
            query_type: ty.name,
            rows: Vec::new(),
            dsn: None,
            compare: vec![None; compare.len()],
        };
        let main_answers = match warm_up(&dsn, ty, queries, Side::Dsn).await {
            Ok(a) => Some(a),
            Err(f) => {
                report.failures.push(f);
                None
            }
        };
        let mut compare_answers = Vec::with_capacity(compare.len());
        for (i, c) in compare.iter().enumerate() {
            compare_answers.push(match warm_up(c, ty, queries, Side::Compare(i)).await {
                Ok(a) => Some(a),
                Err(f) => {
                    report.failures.push(f);
                    None
                }
            });
        }
        for (i, answers) in compare_answers.iter().enumerate() {
            let (Some(a), Some(b)) = (&main_answers, answers) else {
                continue;
            };
            for ((q, x), y) in queries.iter().zip(a).zip(b) {
                if let Some(diff) = compare_rows(x, y) {
                    report.mismatches.push(Mismatch {
                        query_type: ty.name,
                        compare: i,
                        sql: q.sql.clone(),
                        diff,
                    });
                }
            }
        }
        if let Some(answers) = &main_answers {
            result.rows = answers.iter().map(Vec::len).collect();
            match timed(&dsn, ty, queries, args.runs, Side::Dsn).await {
                Ok(t) => result.dsn = Some(t),
                Err(f) => report.failures.push(f),
            }
        }
        for (i, (c, answers)) in compare.iter().zip(&compare_answers).enumerate() {
            if answers.is_none() {
                continue;
            }
            match timed(c, ty, queries, args.runs, Side::Compare(i)).await {
                Ok(t) => result.compare[i] = Some(t),
                Err(f) => report.failures.push(f),
            }
        }
        report.types.push(result);
    }
    Ok(report)
}

fn render_row(row: &Option<Vec<Option<String>>>) -> String {
    match row {
        None => "(no row)".to_string(),
        Some(cells) => {
            let cells: Vec<String> = cells
                .iter()
                .map(|c| c.clone().unwrap_or_else(|| "NULL".into()))
                .collect();
            format!("({})", cells.join(", "))
        }
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The summary table (and the failures and mismatches) as printed by `run`: per type
/// the `--dsn` times, then per compare server its median and the ratio, and with
/// several compare servers the ratio to the fastest of them.
pub fn render(report: &QueryReport) -> String {
    let mut out = String::new();
    let names = &report.compare_names;
    let name = |i: usize| names.get(i).map_or("?", String::as_str);
    for f in &report.failures {
        let side = match f.side {
            Side::Compare(i) => format!("{} ({})", f.side, name(i)),
            Side::Dsn => f.side.to_string(),
        };
        let _ = writeln!(
            out,
            "FAILED {} on {}: {}\n  query: {}\n",
            f.query_type,
            side,
            f.error,
            f.sql.replace('\n', "\n         ")
        );
    }
    for m in &report.mismatches {
        let d = &m.diff;
        let _ = writeln!(
            out,
            "MISMATCH {} ({}): answers differ at row {} ({} rows on --dsn, {} on {})\n  \
             query:         {}\n  dsn row:       {}\n  compare row:   {}\n",
            m.query_type,
            name(m.compare),
            d.row + 1,
            d.dsn_rows,
            d.compare_rows,
            name(m.compare),
            m.sql.replace('\n', "\n                 "),
            render_row(&d.dsn),
            render_row(&d.compare),
        );
    }
    let _ = writeln!(
        out,
        "{} queries per type, {} timed runs each (after one warm-up), times in ms",
        report.queries, report.runs
    );
    let _ = write!(
        out,
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "query type", "rows/q", "min", "median", "p95", "max"
    );
    for n in names {
        let _ = write!(out, " {:>13} {:>7}", format!("{n} med"), "ratio");
    }
    let several = names.len() > 1;
    if several {
        let _ = write!(out, " {:>10}", "vs fastest");
    }
    out.push('\n');
    let ratio = |r: Option<f64>| r.map_or_else(|| "-".into(), |r| format!("{r:.2}"));
    for t in &report.types {
        let rows = if t.rows.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.1}",
                t.rows.iter().sum::<usize>() as f64 / t.rows.len() as f64
            )
        };
        let d = t.dsn.as_ref();
        let _ = write!(
            out,
            "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9}",
            t.query_type,
            rows,
            ms(d.map(Timings::min)),
            ms(d.map(Timings::median)),
            ms(d.map(Timings::p95)),
            ms(d.map(Timings::max)),
        );
        for i in 0..names.len() {
            let c = t.compare.get(i).and_then(Option::as_ref);
            let _ = write!(
                out,
                " {:>13} {:>7}",
                ms(c.map(Timings::median)),
                ratio(t.ratio(i))
            );
        }
        if several {
            let _ = write!(out, " {:>10}", ratio(t.ratio_to_fastest()));
        }
        out.push('\n');
    }
    for (i, n) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "geometric mean of the ratios (dsn/{n} median): {}",
            report
                .geometric_mean_ratio(i)
                .map_or_else(|| "-".into(), |r| format!("{r:.3}"))
        );
    }
    if several {
        let _ = writeln!(
            out,
            "geometric mean of the ratios to the fastest: {}",
            report
                .geometric_mean_to_fastest()
                .map_or_else(|| "-".into(), |r| format!("{r:.3}"))
        );
    }
    if !names.is_empty() {
        let _ = writeln!(
            out,
            "answers: {} differing, {} failed queries",
            report.mismatches.len(),
            report.failures.len()
        );
    } else if !report.failures.is_empty() {
        let _ = writeln!(out, "failed queries: {}", report.failures.len());
    }
    out
}

/// `sundial bench query`: prints the queries (`--print`) or runs them and prints the
/// summary; an error when any query failed or any answer differed.
pub async fn run(args: QueryArgs) -> Result<QueryReport, QueryError> {
    if args.print {
        print!("{}", script(&generate(&args)?));
        return Ok(QueryReport::default());
    }
    let report = bench(&args).await?;
    print!("{}", render(&report));
    if report.ok() {
        Ok(report)
    } else {
        Err(QueryError::Check {
            failures: report.failures.len(),
            mismatches: report.mismatches.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(cells: &[&[Option<&str>]]) -> Rows {
        cells
            .iter()
            .map(|r| r.iter().map(|c| c.map(str::to_string)).collect())
            .collect()
    }

    #[test]
    fn answers_compare_text_and_floats_with_tolerance() {
        let a = rows(&[&[Some("2016-01-01 00:00:00+00"), Some("45.1666666666666667")]]);
        let b = rows(&[&[Some("2016-01-01 00:00:00+00"), Some("45.166666666666664")]]);
        assert_eq!(compare_rows(&a, &b), None);
        let c = rows(&[&[Some("2016-01-01 00:00:00+00"), Some("45.1667")]]);
        let diff = compare_rows(&a, &c).unwrap();
        assert_eq!((diff.row, diff.dsn_rows, diff.compare_rows), (0, 1, 1));
        // NULL only equals NULL; timestamps compare as text.
        assert!(compare_rows(&rows(&[&[None]]), &rows(&[&[Some("0")]])).is_some());
        assert_eq!(compare_rows(&rows(&[&[None]]), &rows(&[&[None]])), None);
        assert!(
            compare_rows(
                &rows(&[&[Some("2016-01-01 00:00:00+00")]]),
                &rows(&[&[Some("2016-01-01 00:00:00")]])
            )
            .is_some()
        );
        assert_eq!(
            compare_rows(&rows(&[&[Some("3")]]), &rows(&[&[Some("3.0")]])),
            None
        );
    }

    #[test]
    fn row_order_and_count_matter() {
        let a = rows(&[&[Some("1")], &[Some("2")]]);
        let b = rows(&[&[Some("2")], &[Some("1")]]);
        assert_eq!(compare_rows(&a, &b).unwrap().row, 0);
        let short = rows(&[&[Some("1")]]);
        let d = compare_rows(&a, &short).unwrap();
        assert_eq!((d.row, d.compare.clone()), (1, None));
        assert_eq!(render_row(&d.dsn), "(2)");
        assert!(compare_rows(&rows(&[&[Some("1"), None]]), &rows(&[&[Some("1")]])).is_some());
    }

    #[test]
    fn timing_statistics() {
        let t = Timings {
            samples_ms: (1..=20).rev().map(f64::from).collect(),
        };
        assert_eq!(
            (t.min(), t.max(), t.median(), t.p95()),
            (1.0, 20.0, 10.5, 19.0)
        );
        let one = Timings {
            samples_ms: vec![4.0],
        };
        assert_eq!((one.median(), one.p95()), (4.0, 4.0));
        assert_eq!(Timings::default().median(), 0.0);
        let ms = |v: f64| {
            Some(Timings {
                samples_ms: vec![v],
            })
        };
        let report = QueryReport {
            types: vec![
                TypeResult {
                    query_type: "a",
                    rows: vec![1],
                    dsn: ms(2.0),
                    compare: vec![ms(1.0), ms(4.0)],
                },
                TypeResult {
                    query_type: "b",
                    rows: vec![1],
                    dsn: ms(1.0),
                    compare: vec![ms(8.0), ms(0.5)],
                },
            ],
            compare_names: vec!["postgres".into(), "timescaledb".into()],
            ..QueryReport::default()
        };
        let g = report.geometric_mean_ratio(0).unwrap();
        assert!((g - 0.5).abs() < 1e-12, "{g}");
        // To the fastest: a 2/1, b 1/0.5.
        assert_eq!(report.types[1].ratio_to_fastest(), Some(2.0));
        let f = report.geometric_mean_to_fastest().unwrap();
        assert!((f - 2.0).abs() < 1e-12, "{f}");
        let table = render(&report);
        assert!(
            table.contains("timescaledb med")
                && table.contains("vs fastest")
                && table.contains("(dsn/postgres median): 0.500")
                && table.contains("to the fastest: 2.000"),
            "{table}"
        );
    }

    #[test]
    fn arguments_are_checked_and_print_mode_writes_statements() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            query: QueryArgs,
        }
        let parsed = Cli::try_parse_from(["query"]).unwrap().query;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", QueryArgs::default()));
        let bad = |f: fn(&mut QueryArgs)| {
            let mut a = QueryArgs::default();
            f(&mut a);
            match generate(&a) {
                Err(QueryError::InvalidArg { flag, .. }) => flag,
                other => panic!("expected an argument error, got {other:?}"),
            }
        };
        assert_eq!(bad(|a| a.queries = 0), "queries");
        assert_eq!(
            bad(|a| a.timestamp_start = "soon".into()),
            "timestamp-start"
        );
        assert_eq!(
            bad(|a| a.timestamp_end = "2015-01-01T00:00:00Z".into()),
            "timestamp-end"
        );
        let unknown = QueryArgs {
            types: "lastpoint,nope".into(),
            ..QueryArgs::default()
        };
        assert!(matches!(
            generate(&unknown),
            Err(QueryError::Generate(GenerateError::UnknownType { .. }))
        ));
        let iot = QueryArgs {
            use_case: UseCase::Iot,
            queries: 2,
            ..QueryArgs::default()
        };
        let text = script(&generate(&iot).unwrap());
        assert_eq!(text.matches(";\n").count(), 24);
        assert!(text.starts_with("-- last-loc #1: "), "{text}");
    }
}
