//! Process-wide counters for `GET /metrics` (Prometheus text format): line-protocol
//! ingest, WAL, flushes, chunks and SQL queries. Counters are relaxed atomics,
//! cheap enough to bump on every request; `/metrics` renders a [`Snapshot`] of them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    /// Queries answered by a kept plan: bound to the text's own values, or kept for
    /// that exact text.
    pub plan_hits_bound: AtomicU64,
    pub plan_hits_exact: AtomicU64,
    /// Plans kept: with parameters (for every text of their shape), or for one text.
    pub plans_kept_bound: AtomicU64,
    pub plans_kept_exact: AtomicU64,
    /// Executions of prepared queries answered by a kept plan, and plans kept for
    /// prepared queries.
    pub plan_hits_prepared: AtomicU64,
    pub plans_kept_prepared: AtomicU64,
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

/// Every value `/metrics` shows, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub lp_requests: u64,
    pub lp_bytes: u64,
    pub lp_rows: u64,
    pub lp_lines_rejected: u64,
    pub rows_written: u64,
    pub wal_appends: u64,
    pub wal_fsyncs: u64,
    pub wal_bytes: u64,
    pub flushes: u64,
    pub flushed_bytes: u64,
    pub flushed_files: u64,
    /// Compaction merges (one per group of files merged into one).
    pub compaction_merges: u64,
    /// Bytes held by memtables, the one being flushed included.
    pub memtable_bytes: u64,
    pub tables: u64,
    pub chunks: u64,
    pub chunk_files: u64,
    pub chunk_bytes: u64,
    pub sql_queries: u64,
    pub sql_errors: u64,
    pub sql_micros: u64,
    pub plan_hits_bound: u64,
    pub plan_hits_exact: u64,
    pub plans_kept_bound: u64,
    pub plans_kept_exact: u64,
    pub plan_hits_prepared: u64,
    pub plans_kept_prepared: u64,
    pub uptime_secs: u64,
}

impl Metrics {
    /// Copies the counters this struct owns into `s`.
    pub fn fill(&self, s: &mut Snapshot) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.lp_requests = get(&self.lp_requests);
        s.lp_bytes = get(&self.lp_bytes);
        s.lp_rows = get(&self.lp_rows);
        s.lp_lines_rejected = get(&self.lp_lines_rejected);
        s.sql_queries = get(&self.sql_queries);
        s.sql_errors = get(&self.sql_errors);
        s.sql_micros = get(&self.sql_micros);
        s.plan_hits_bound = get(&self.plan_hits_bound);
        s.plan_hits_exact = get(&self.plan_hits_exact);
        s.plans_kept_bound = get(&self.plans_kept_bound);
        s.plans_kept_exact = get(&self.plans_kept_exact);
        s.plan_hits_prepared = get(&self.plan_hits_prepared);
        s.plans_kept_prepared = get(&self.plans_kept_prepared);
    }
}

/// The Prometheus text exposition of a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    let c = "counter";
    let g = "gauge";
    metric(
        &mut out,
        "sundial_lp_requests_total",
        c,
        "Line-protocol write requests.",
        s.lp_requests,
    );
    metric(
        &mut out,
        "sundial_lp_bytes_received_total",
        c,
        "Line-protocol bytes received (decompressed).",
        s.lp_bytes,
    );
    metric(
        &mut out,
        "sundial_lp_rows_written_total",
        c,
        "Rows written through line protocol.",
        s.lp_rows,
    );
    metric(
        &mut out,
        "sundial_lp_lines_rejected_total",
        c,
        "Line-protocol lines rejected.",
        s.lp_lines_rejected,
    );
    metric(
        &mut out,
        "sundial_rows_written_total",
        c,
        "Rows written by any front end.",
        s.rows_written,
    );
    metric(
        &mut out,
        "sundial_wal_appends_total",
        c,
        "WAL records appended.",
        s.wal_appends,
    );
    metric(
        &mut out,
        "sundial_wal_fsyncs_total",
        c,
        "WAL fsync calls.",
        s.wal_fsyncs,
    );
    metric(
        &mut out,
        "sundial_wal_bytes_total",
        c,
        "WAL bytes written.",
        s.wal_bytes,
    );
    metric(
        &mut out,
        "sundial_flushes_total",
        c,
        "Memtable flushes to Parquet.",
        s.flushes,
    );
    metric(
        &mut out,
        "sundial_flushed_bytes_total",
        c,
        "Parquet bytes written by flushes.",
        s.flushed_bytes,
    );
    metric(
        &mut out,
        "sundial_flushed_files_total",
        c,
        "Parquet files written by flushes.",
        s.flushed_files,
    );
    metric(
        &mut out,
        "sundial_compaction_merges_total",
        c,
        "Compaction merges: each merges a group of a chunk's files into one.",
        s.compaction_merges,
    );
    metric(
        &mut out,
        "sundial_memtable_bytes",
        g,
        "Bytes held by memtables, the one being flushed included.",
        s.memtable_bytes,
    );
    metric(
        &mut out,
        "sundial_tables",
        g,
        "Tables in all databases.",
        s.tables,
    );
    metric(
        &mut out,
        "sundial_chunks",
        g,
        "Chunks with at least one Parquet file.",
        s.chunks,
    );
    metric(
        &mut out,
        "sundial_chunk_files",
        g,
        "Parquet files in the catalog.",
        s.chunk_files,
    );
    metric(
        &mut out,
        "sundial_chunk_bytes",
        g,
        "Bytes of Parquet files in the catalog.",
        s.chunk_bytes,
    );
    metric(
        &mut out,
        "sundial_sql_queries_total",
        c,
        "SQL statements executed.",
        s.sql_queries,
    );
    metric(
        &mut out,
        "sundial_sql_errors_total",
        c,
        "SQL statements that failed.",
        s.sql_errors,
    );
    for (name, help, v) in [
        (
            "sundial_sql_plan_hits_bound_total",
            "Queries answered by a plan kept for their shape, bound to their literals.",
            s.plan_hits_bound,
        ),
        (
            "sundial_sql_plan_hits_exact_total",
            "Queries answered by a plan kept for their exact text.",
            s.plan_hits_exact,
        ),
        (
            "sundial_sql_plans_kept_bound_total",
            "Plans kept with parameters, for every text of their shape.",
            s.plans_kept_bound,
        ),
        (
            "sundial_sql_plans_kept_exact_total",
            "Plans kept for one exact text (their literals could not become parameters).",
            s.plans_kept_exact,
        ),
        (
            "sundial_sql_plan_hits_prepared_total",
            "Executions of prepared queries answered by the plan kept for the statement.",
            s.plan_hits_prepared,
        ),
        (
            "sundial_sql_plans_kept_prepared_total",
            "Plans kept for prepared queries, with their parameters in place.",
            s.plans_kept_prepared,
        ),
    ] {
        metric(&mut out, name, c, help, v);
    }
    let _ = writeln!(
        out,
        "# HELP sundial_sql_query_duration_seconds Time to answer SQL statements."
    );
    let _ = writeln!(out, "# TYPE sundial_sql_query_duration_seconds summary");
    let _ = writeln!(
        out,
        "sundial_sql_query_duration_seconds_sum {}",
        s.sql_micros as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "sundial_sql_query_duration_seconds_count {}",
        s.sql_queries
    );
    metric(
        &mut out,
        "sundial_uptime_seconds",
        g,
        "Seconds since start.",
        s.uptime_secs,
    );
    out
}
