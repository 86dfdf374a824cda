//! Process-wide counters for `GET /metrics` (Prometheus text format): line-protocol
//! ingest, WAL, flushes, chunks and SQL queries. Counters are relaxed atomics,
//! cheap enough to bump on every request.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::Engine;

/// Counters not owned by the WAL or the write service.
#[derive(Debug, Default)]
pub struct Metrics {
    pub lp_requests: AtomicU64,
    pub lp_bytes: AtomicU64,
    pub lp_rows: AtomicU64,
    pub lp_lines_rejected: AtomicU64,
    pub sql_queries: AtomicU64,
    pub sql_errors: AtomicU64,
    pub sql_micros: AtomicU64,
}

impl Metrics {
    /// Records one SQL statement and how long it took to answer.
    pub fn sql_query(&self, took: Duration, failed: bool) {
        self.sql_queries.fetch_add(1, Ordering::Relaxed);
        self.sql_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        if failed {
            self.sql_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// The Prometheus text exposition of every counter.
pub fn render(engine: &Engine) -> String {
    let m = &engine.metrics;
    let w = &engine.writer.stats;
    let wal = &engine.writer.wal().stats;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let manifest = engine.catalog.snapshot();
    let (mut tables, mut files, mut chunks, mut disk) = (0u64, 0u64, 0u64, 0u64);
    for d in manifest.databases.values() {
        for t in d.tables.values() {
            tables += 1;
            files += t.files.len() as u64;
            disk += t.files.iter().map(|f| f.bytes).sum::<u64>();
            let mut starts: Vec<i64> = t.files.iter().map(|f| f.chunk_start).collect();
            starts.sort_unstable();
            starts.dedup();
            chunks += starts.len() as u64;
        }
    }
    let mut out = String::with_capacity(4096);
    let c = "counter";
    let g = "gauge";
    metric(
        &mut out,
        "sundial_lp_requests_total",
        c,
        "Line-protocol write requests.",
        get(&m.lp_requests),
    );
    metric(
        &mut out,
        "sundial_lp_bytes_received_total",
        c,
        "Line-protocol bytes received (decompressed).",
        get(&m.lp_bytes),
    );
    metric(
        &mut out,
        "sundial_lp_rows_written_total",
        c,
        "Rows written through line protocol.",
        get(&m.lp_rows),
    );
    metric(
        &mut out,
        "sundial_lp_lines_rejected_total",
        c,
        "Line-protocol lines rejected.",
        get(&m.lp_lines_rejected),
    );
    metric(
        &mut out,
        "sundial_rows_written_total",
        c,
        "Rows written by any front end.",
        get(&w.rows_written),
    );
    metric(
        &mut out,
        "sundial_wal_appends_total",
        c,
        "WAL records appended.",
        get(&wal.appends),
    );
    metric(
        &mut out,
        "sundial_wal_fsyncs_total",
        c,
        "WAL fsync calls.",
        get(&wal.fsyncs),
    );
    metric(
        &mut out,
        "sundial_wal_bytes_total",
        c,
        "WAL bytes written.",
        get(&wal.bytes),
    );
    metric(
        &mut out,
        "sundial_flushes_total",
        c,
        "Memtable flushes to Parquet.",
        get(&w.flushes),
    );
    metric(
        &mut out,
        "sundial_flushed_bytes_total",
        c,
        "Parquet bytes written by flushes.",
        get(&w.flushed_bytes),
    );
    metric(
        &mut out,
        "sundial_flushed_files_total",
        c,
        "Parquet files written by flushes.",
        get(&w.flushed_files),
    );
    metric(
        &mut out,
        "sundial_tables",
        g,
        "Tables in all databases.",
        tables,
    );
    metric(
        &mut out,
        "sundial_chunks",
        g,
        "Chunks with at least one Parquet file.",
        chunks,
    );
    metric(
        &mut out,
        "sundial_chunk_files",
        g,
        "Parquet files in the catalog.",
        files,
    );
    metric(
        &mut out,
        "sundial_chunk_bytes",
        g,
        "Bytes of Parquet files in the catalog.",
        disk,
    );
    metric(
        &mut out,
        "sundial_sql_queries_total",
        c,
        "SQL statements executed.",
        get(&m.sql_queries),
    );
    metric(
        &mut out,
        "sundial_sql_errors_total",
        c,
        "SQL statements that failed.",
        get(&m.sql_errors),
    );
    let _ = writeln!(
        out,
        "# HELP sundial_sql_query_duration_seconds Time to answer SQL statements."
    );
    let _ = writeln!(out, "# TYPE sundial_sql_query_duration_seconds summary");
    let _ = writeln!(
        out,
        "sundial_sql_query_duration_seconds_sum {}",
        get(&m.sql_micros) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "sundial_sql_query_duration_seconds_count {}",
        get(&m.sql_queries)
    );
    metric(
        &mut out,
        "sundial_uptime_seconds",
        g,
        "Seconds since start.",
        engine.started.elapsed().as_secs(),
    );
    out
}
