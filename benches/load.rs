//! Load benchmark: starts the real server (this build's `sundial` binary) on a
//! temporary data directory and inserts rows into a 10-column hypertable over pgwire
//! with multi-row INSERTs from several workers, printing rows/s, server peak RSS,
//! bytes on disk, and the latency of a few time-range queries.
//!
//! `cargo bench --bench load` (env: LOAD_ROWS, LOAD_WORKERS, LOAD_BATCH).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) used so far by process `pid`.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn dir_size(p: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                total += dir_size(&path);
            } else if let Ok(m) = e.metadata() {
                total += m.len();
            }
        }
    }
    total
}

const HOSTS: u64 = 1000;
const STEP_US: i64 = 10_000_000; // 10 s per host, TSBS log-interval

fn insert_sql(start_row: u64, rows: u64) -> String {
    let mut s = String::with_capacity(rows as usize * 120);
    s.push_str("INSERT INTO cpu VALUES ");
    for r in start_row..start_row + rows {
        let host = r % HOSTS;
        let t = 1_704_067_200_000_000i64 + (r / HOSTS) as i64 * STEP_US;
        let secs = t / 1_000_000;
        let dt = chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default();
        if r > start_row {
            s.push(',');
        }
        let f = |k: u64| ((r * 31 + k * 17) % 10_000) as f64 / 100.0;
        s.push_str(&format!(
            "('{}+00','host_{host}',{},{},{},{},{},{},{},{})",
            dt.format("%Y-%m-%d %H:%M:%S"),
            f(1),
            f(2),
            f(3),
            f(4),
            f(5),
            f(6),
            f(7),
            f(8)
        ));
    }
    s
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / nextest probing: nothing to list
    }
    let rows = env_or("LOAD_ROWS", 10_000_000);
    let workers = env_or("LOAD_WORKERS", 4);
    let batch = env_or("LOAD_BATCH", 1000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["serve", "--pg-addr", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path())
        .env("SUNDIAL_LOG_LEVEL", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("server starts");
    let pid = child.id();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("ready line");
    let addr = line
        .trim()
        .trim_start_matches("SUNDIAL READY pg=")
        .to_string();
    let (host, port) = addr.rsplit_once(':').expect("addr");
    let conn = format!("host={host} port={port} user=bench dbname=sundial");
    let (client, c) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(c);
    client
        .batch_execute(
            "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, usage_user float8, \
             usage_system float8, usage_idle float8, usage_nice float8, usage_iowait float8, \
             usage_irq float8, usage_softirq float8, usage_steal float8) \
             WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day')",
        )
        .await
        .expect("create");

    let next = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let started = Instant::now();
    let mut tasks = vec![];
    for _ in 0..workers {
        let next = next.clone();
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let (client, c) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(c);
            loop {
                let start = next.fetch_add(batch, Ordering::Relaxed);
                if start >= rows {
                    break;
                }
                let n = batch.min(rows - start);
                let sql = tokio::task::spawn_blocking(move || insert_sql(start, n))
                    .await
                    .expect("gen");
                client.batch_execute(&sql).await.expect("insert");
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let secs = started.elapsed().as_secs_f64();
    sampler.abort();
    println!(
        "load: {rows} rows, {workers} workers, batch {batch}: {:.1} s, {:.0} rows/s, {:.0} metrics/s",
        secs,
        rows as f64 / secs,
        rows as f64 * 8.0 / secs
    );
    println!(
        "cpu: server {:.1} s, load generator {:.1} s",
        cpu_secs(pid),
        cpu_secs(std::process::id())
    );
    println!(
        "server RSS: peak {} MiB (VmHWM {} MiB)",
        peak.load(Ordering::Relaxed) / 1024,
        rss_kib(pid, "VmHWM:") / 1024
    );
    client
        .batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    println!(
        "data directory after flush: {} MiB",
        dir_size(tmp.path()) / (1 << 20)
    );
    for (name, q) in [
        ("count(*)", "SELECT count(*) FROM cpu"),
        (
            "1h range avg",
            "SELECT avg(usage_user) FROM cpu WHERE time >= '2024-01-01 01:00:00+00' AND time < '2024-01-01 02:00:00+00'",
        ),
        (
            "single-groupby 1h",
            "SELECT time_bucket('1 minute', time) AS m, max(usage_user) FROM cpu WHERE hostname = 'host_7' AND time >= '2024-01-01 01:00:00+00' AND time < '2024-01-01 02:00:00+00' GROUP BY 1 ORDER BY 1",
        ),
    ] {
        let t = Instant::now();
        client.simple_query(q).await.expect("query");
        println!("query {name}: {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = child.kill();
    let _ = child.wait();
}
