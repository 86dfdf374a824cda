//! Differential test: the same ~100k-row data set is loaded into Sundial (hypertable, partly
//! flushed to Parquet, partly in memtables) and into a scratch PostgreSQL 15 (plain table); a
//! list of aggregate queries must give the same text results on both.
//!
//! PostgreSQL 15 must be installed in /usr/lib/postgresql/15/bin (CI installs it); the test
//! fails, rather than skips, when it is missing.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::harness::TestServer;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

// ---------------------------------------------------------------------------
// scratch PostgreSQL server
// ---------------------------------------------------------------------------

/// A PostgreSQL server running on a temporary cluster; stopped (and the cluster deleted) on drop.
pub(crate) struct PgServer {
    child: Option<Child>,
    port: u16,
    log_path: PathBuf,
    // dropped after `Drop::drop` has stopped the server
    _tmp: tempfile::TempDir,
}

impl PgServer {
    pub(crate) fn start() -> PgServer {
        let postgres = Path::new(PG_BIN).join("postgres");
        let initdb = Path::new(PG_BIN).join("initdb");
        assert!(
            postgres.exists() && initdb.exists(),
            "PostgreSQL 15 is required for this test but {} / {} do not exist; \
             install it (Debian: apt-get install postgresql-15)",
            postgres.display(),
            initdb.display()
        );

        // PostgreSQL refuses to run as root: when we are root, run it as the `postgres` user.
        let as_root = unsafe { libc::geteuid() } == 0;
        let ids = if as_root {
            Some(postgres_user_ids())
        } else {
            None
        };

        // /tmp is traversable by every user (a root-only TMPDIR might not be).
        let tmp = if as_root {
            tempfile::Builder::new()
                .prefix("sundial-pgcmp")
                .tempdir_in("/tmp")
        } else {
            tempfile::Builder::new().prefix("sundial-pgcmp").tempdir()
        }
        .expect("tempdir for PostgreSQL");
        let dir = tmp.path().to_path_buf();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("chown PostgreSQL tempdir to postgres");
        }
        let data = dir.join("data");
        let log_path = dir.join("postgres.log");

        let mut cmd = Command::new(&initdb);
        cmd.arg("-D")
            .arg(&data)
            .args([
                "--auth=trust",
                "-U",
                "postgres",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ])
            .current_dir(&dir)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some((uid, gid)) = ids {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let port = free_port();
        let log = std::fs::File::create(&log_path).expect("create postgres log");
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&log_path, Some(uid), Some(gid)).expect("chown log");
        }
        let mut cmd = Command::new(&postgres);
        cmd.arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-c", "fsync=off"])
            .current_dir(&dir)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        if let Some((uid, gid)) = ids {
            // set-uid directly in the child so that the child *is* the postmaster
            // (no su/runuser in between) and can be signalled on drop.
            cmd.uid(uid).gid(gid);
        }
        let child = cmd.spawn().expect("spawn postgres");
        PgServer {
            child: Some(child),
            port,
            log_path,
            _tmp: tmp,
        }
    }

    fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits (up to 30 s) until the server accepts connections, then returns a client.
    pub(crate) async fn connect(&mut self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "PostgreSQL exited during start-up ({status}); log:\n{}",
                    self.log()
                );
            }
            match tokio_postgres::connect(&self.conn_str(), NoTls).await {
                Ok((client, conn)) => {
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    return client;
                }
                Err(e) => {
                    if Instant::now() >= deadline {
                        panic!(
                            "PostgreSQL did not accept connections within 30 s: {e}; log:\n{}",
                            self.log()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGINT = "fast" shutdown; fall back to SIGKILL.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGINT);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return;
                    }
                }
            }
        }
    }
}

/// uid and gid of the `postgres` system user, creating the user if it does not exist.
fn postgres_user_ids() -> (u32, u32) {
    let exists = Command::new("id")
        .arg("postgres")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !exists {
        let out = Command::new("useradd")
            .args(["-r", "-M", "postgres"])
            .output()
            .expect("run useradd");
        assert!(
            out.status.success(),
            "useradd -r -M postgres failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run id");
        assert!(out.status.success(), "id {flag} postgres failed");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("id {flag} postgres: {e}"))
    };
    (id("-u"), id("-g"))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

// ---------------------------------------------------------------------------
// deterministic data set
// ---------------------------------------------------------------------------

const N_ROWS: usize = 100_000;
const BATCH_ROWS: usize = 2_000;
/// 2024-03-01 00:00:00 UTC in microseconds since the Unix epoch.
const START_MICROS: i64 = 1_709_251_200_000_000;
const REGIONS: [&str; 4] = ["us-east", "us-west", "eu-central", "ap-south"];

const TABLE_COLS: &str = "time timestamptz NOT NULL, host text, region text, \
                          cpu double precision, mem bigint, ok boolean";

/// xorshift64* — tiny, deterministic, good enough for test data.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// One row as SQL literal text: `(time, host, region, cpu, mem, ok)`.
fn row_literal(rng: &mut XorShift, micros: i64) -> String {
    // skewed host distribution (host_0 most frequent), so counts per host differ
    let host = rng.below(20).min(rng.below(20) + rng.below(8));
    let region = REGIONS[((host + rng.below(2) * rng.below(4)) % 4) as usize];
    let cpu = if rng.below(100) < 6 {
        "NULL".to_string()
    } else {
        // in [0.01, 100): `{:?}` prints the shortest round-trip decimal, never an exponent here
        format!("{:?}", 0.01 + rng.unit() * 99.99)
    };
    let mem = 1_000_000 + rng.below(16_000_000_000) as i64;
    let ok = if rng.below(10) < 9 { "true" } else { "false" };
    format!(
        "('{}', 'host_{host}', '{region}', {cpu}, {mem}, {ok})",
        format_ts(micros)
    )
}

/// `YYYY-MM-DD HH:MM:SS.ffffff+00` for microseconds since the Unix epoch (UTC).
pub(crate) fn format_ts(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // civil_from_days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{frac:06}+00",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The INSERT statements (each ~BATCH_ROWS rows), in load order.
///
/// Rows span ~10 days from 2024-03-01 with irregular steps (some duplicate timestamps). The
/// first 40% of rows (by time) are loaded in time order (shuffled within each batch); the rest
/// are shuffled across batches, so after the mid-load flush the early chunks are entirely in
/// Parquet while the later ones are split between Parquet files and memtables.
fn insert_statements() -> Vec<String> {
    let mut rng = XorShift(0x5EED_1234_ABCD_0001);
    let mut t = START_MICROS;
    let mut rows = Vec::with_capacity(N_ROWS);
    for _ in 0..N_ROWS {
        rows.push(row_literal(&mut rng, t));
        // mean step ~8.6 s => ~10 days; every so often a longer gap, sometimes no step at all
        let step = match rng.below(50) {
            0 => 0,
            1 => 30_000_000 + rng.below(120_000_000) as i64,
            2..=24 => rng.below(17_000) as i64 * 1000,
            _ => rng.below(10_000_000) as i64,
        };
        t += step;
    }
    let ordered = N_ROWS * 2 / 5;
    let (head, tail) = rows.split_at_mut(ordered);
    for batch in head.chunks_mut(BATCH_ROWS) {
        rng.shuffle(batch);
    }
    rng.shuffle(tail);
    rows.chunks(BATCH_ROWS)
        .map(|batch| format!("INSERT INTO readings VALUES\n{}", batch.join(",\n")))
        .collect()
}

// ---------------------------------------------------------------------------
// queries: (sundial_sql, postgres_sql); None = same text on both
// ---------------------------------------------------------------------------

const QUERIES: &[(&str, Option<&str>)] = &[
    // 1 plain counts
    ("SELECT count(*) FROM readings", None),
    (
        "SELECT count(*), count(cpu), count(host), count(mem), count(ok) FROM readings",
        None,
    ),
    // 3 IS NULL / IS NOT NULL counts
    (
        "SELECT count(*) - count(cpu) AS missing, sum(CASE WHEN cpu IS NULL THEN 1 ELSE 0 END) AS nulls \
         FROM readings",
        None,
    ),
    ("SELECT count(*) FROM readings WHERE cpu IS NULL", None),
    (
        "SELECT host, count(*) FROM readings WHERE cpu IS NULL GROUP BY host ORDER BY host",
        None,
    ),
    // 6 min/max(time)
    ("SELECT min(time), max(time) FROM readings", None),
    // 7 sum/min/max/avg over a time range
    (
        "SELECT count(*), count(cpu), sum(cpu), min(cpu), max(cpu), avg(cpu), sum(mem), min(mem), max(mem) \
         FROM readings WHERE time >= '2024-03-02 06:00:00+00' AND time < '2024-03-05 18:30:00+00'",
        None,
    ),
    (
        "SELECT count(*), min(time), max(time), sum(cpu), avg(cpu) FROM readings \
         WHERE time >= '2024-03-06 23:59:30+00' AND time < '2024-03-07 00:02:00.800268+00'",
        None,
    ),
    // an empty range: count 0, NULL sum/min/max
    (
        "SELECT count(*), count(cpu), sum(cpu), min(mem), max(time) FROM readings \
         WHERE time >= '2024-04-01' AND time < '2024-04-02'",
        None,
    ),
    // 9 GROUP BY host / region / both
    (
        "SELECT host, count(*), count(cpu), sum(cpu), avg(cpu), min(cpu), max(cpu), sum(mem), min(mem), max(mem) \
         FROM readings GROUP BY host ORDER BY host",
        None,
    ),
    (
        "SELECT region, count(*), avg(cpu), max(cpu), min(time), max(time) \
         FROM readings GROUP BY region ORDER BY region",
        None,
    ),
    (
        "SELECT host, region, count(*), sum(mem), avg(cpu) FROM readings \
         WHERE time >= '2024-03-03' AND time < '2024-03-09' \
         GROUP BY host, region ORDER BY host, region",
        None,
    ),
    // 12 ORDER BY ... LIMIT
    (
        "SELECT host, count(*) AS n FROM readings GROUP BY host ORDER BY n DESC, host LIMIT 5",
        None,
    ),
    (
        "SELECT date_trunc('hour', time) AS h, max(cpu) AS m FROM readings \
         GROUP BY h ORDER BY m DESC, h LIMIT 10",
        None,
    ),
    (
        "SELECT time, host, region, cpu, mem, ok FROM readings \
         WHERE time >= '2024-03-04 12:00:00+00' \
         ORDER BY time, host, mem, region, cpu, ok LIMIT 20",
        None,
    ),
    // 15 HAVING
    (
        "SELECT host, count(*), avg(cpu) FROM readings GROUP BY host \
         HAVING count(*) > 4000 AND max(mem) > 15000000000 ORDER BY host",
        None,
    ),
    (
        "SELECT region, host, sum(cpu) FROM readings GROUP BY region, host \
         HAVING count(cpu) >= 1000 ORDER BY region, host",
        None,
    ),
    // 17 date_trunc
    (
        "SELECT date_trunc('hour', time) AS h, count(*), sum(cpu), min(mem) FROM readings \
         WHERE time >= '2024-03-05 00:00:00+00' AND time < '2024-03-06 12:00:00+00' \
         GROUP BY h ORDER BY h",
        None,
    ),
    (
        "SELECT date_trunc('day', time) AS d, count(*), count(cpu), avg(cpu), max(mem), min(time), max(time) \
         FROM readings GROUP BY d ORDER BY d",
        None,
    ),
    // 19 time_bucket vs date_bin
    (
        "SELECT time_bucket('15 minutes', time) AS b, count(*), sum(cpu), max(cpu), sum(mem) FROM readings \
         WHERE time >= '2024-03-06 00:00:00+00' AND time < '2024-03-06 06:00:00+00' \
         GROUP BY b ORDER BY b",
        Some(
            "SELECT date_bin('15 minutes', time, '2000-01-03') AS b, count(*), sum(cpu), max(cpu), sum(mem) \
             FROM readings \
             WHERE time >= '2024-03-06 00:00:00+00' AND time < '2024-03-06 06:00:00+00' \
             GROUP BY b ORDER BY b",
        ),
    ),
    (
        "SELECT time_bucket('1 hour', time) AS b, host, count(*), avg(cpu) FROM readings \
         WHERE host IN ('host_1', 'host_7', 'host_19') AND time < '2024-03-03' \
         GROUP BY b, host ORDER BY b, host",
        Some(
            "SELECT date_bin('1 hour', time, '2000-01-03') AS b, host, count(*), avg(cpu) FROM readings \
             WHERE host IN ('host_1', 'host_7', 'host_19') AND time < '2024-03-03' \
             GROUP BY b, host ORDER BY b, host",
        ),
    ),
    (
        "SELECT time_bucket('1 day', time) AS b, region, count(*), sum(cpu), min(cpu), max(mem) \
         FROM readings GROUP BY b, region ORDER BY b, region",
        Some(
            "SELECT date_bin('1 day', time, '2000-01-03') AS b, region, count(*), sum(cpu), min(cpu), max(mem) \
             FROM readings GROUP BY b, region ORDER BY b, region",
        ),
    ),
    (
        "SELECT time_bucket('7 days', time) AS b, count(*), count(cpu), avg(cpu), min(time), max(time) \
         FROM readings GROUP BY b ORDER BY b",
        Some(
            "SELECT date_bin('7 days', time, '2000-01-03') AS b, count(*), count(cpu), avg(cpu), min(time), max(time) \
             FROM readings GROUP BY b ORDER BY b",
        ),
    ),
    // 23 count(DISTINCT)
    (
        "SELECT count(DISTINCT host), count(DISTINCT region) FROM readings \
         WHERE time >= '2024-03-08 03:00:00+00' AND time < '2024-03-08 04:00:00+00'",
        None,
    ),
    (
        "SELECT region, count(DISTINCT host), count(*) FROM readings \
         WHERE time >= '2024-03-04 09:00:00+00' AND time < '2024-03-04 10:00:00+00' \
         GROUP BY region ORDER BY region",
        None,
    ),
    // 25 boolean filters
    (
        "SELECT region, count(*), sum(cpu), max(mem) FROM readings WHERE ok = true \
         GROUP BY region ORDER BY region",
        None,
    ),
    (
        "SELECT host, count(*), count(cpu) FROM readings WHERE NOT ok GROUP BY host ORDER BY host",
        None,
    ),
    (
        "SELECT ok, count(*), avg(cpu) FROM readings GROUP BY ok ORDER BY ok",
        None,
    ),
    // 28 equality on a tag
    (
        "SELECT count(*), count(cpu), min(time), max(time), sum(mem), avg(cpu), max(cpu) \
         FROM readings WHERE host = 'host_3'",
        None,
    ),
    // 29 IN list
    (
        "SELECT region, host, count(*), min(cpu), max(cpu) FROM readings \
         WHERE region IN ('us-east', 'eu-central') AND time >= '2024-03-02' AND time < '2024-03-04' \
         GROUP BY region, host ORDER BY region, host",
        None,
    ),
    // 30 CASE WHEN
    (
        "SELECT CASE WHEN cpu IS NULL THEN 'none' WHEN cpu > 90 THEN 'high' \
         WHEN cpu > 50 THEN 'mid' ELSE 'low' END AS level, count(*), sum(mem) \
         FROM readings GROUP BY level ORDER BY level",
        None,
    ),
    (
        "SELECT host, sum(CASE WHEN ok THEN 1 ELSE 0 END) AS oks, \
         sum(CASE WHEN cpu > 75 THEN cpu ELSE 0 END) AS hot, count(*) - count(cpu) AS nulls \
         FROM readings GROUP BY host ORDER BY host",
        None,
    ),
];

// ---------------------------------------------------------------------------
// comparison
// ---------------------------------------------------------------------------

type TextRow = Vec<Option<String>>;

async fn text_rows(client: &Client, who: &str, sql: &str) -> Vec<TextRow> {
    let msgs = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{who}: query failed: {e:?}\n  query: {sql}"));
    msgs.into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// Equal text, or both floats equal within a relative 1e-9 (integers must be exactly equal).
pub(crate) fn values_match(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            if a == b {
                return true;
            }
            if a.parse::<i128>().is_ok() && b.parse::<i128>().is_ok() {
                return false;
            }
            match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => {
                    if x.is_nan() || y.is_nan() {
                        return x.is_nan() && y.is_nan();
                    }
                    if x.is_infinite() || y.is_infinite() {
                        return x == y;
                    }
                    (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn rows_match(a: &TextRow, b: &TextRow) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_match(x, y))
}

fn compare(idx: usize, sundial_sql: &str, pg_sql: &str, s: &[TextRow], p: &[TextRow]) {
    for (i, (sr, pr)) in s.iter().zip(p).enumerate() {
        assert!(
            rows_match(sr, pr),
            "query #{idx} differs at row {i} (of {} sundial / {} postgres rows)\n  \
             sundial query:  {sundial_sql}\n  postgres query: {pg_sql}\n  \
             sundial row:  {sr:?}\n  postgres row: {pr:?}",
            s.len(),
            p.len()
        );
    }
    assert_eq!(
        s.len(),
        p.len(),
        "query #{idx} returns {} rows on sundial but {} on postgres\n  \
         sundial query:  {sundial_sql}\n  postgres query: {pg_sql}\n  \
         first extra sundial row: {:?}\n  first extra postgres row: {:?}",
        s.len(),
        p.len(),
        s.get(p.len()),
        p.get(s.len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_match_postgresql() {
    let mut pg_server = PgServer::start();
    let pg = pg_server.connect().await;
    let server = TestServer::start();
    let sd = server.connect("sundial").await;

    for (who, c) in [("sundial", &sd), ("postgres", &pg)] {
        c.batch_execute("SET TimeZone = 'UTC'")
            .await
            .unwrap_or_else(|e| panic!("{who}: SET TimeZone: {e:?}"));
    }
    sd.batch_execute(&format!(
        "CREATE TABLE readings ({TABLE_COLS}) WITH (tsdb.hypertable, \
         tsdb.partition_column='time', tsdb.chunk_interval='1 day')"
    ))
    .await
    .expect("sundial: CREATE TABLE");
    pg.batch_execute(&format!("CREATE TABLE readings ({TABLE_COLS})"))
        .await
        .expect("postgres: CREATE TABLE");

    let inserts = insert_statements();
    let half = inserts.len() / 2;
    for (i, sql) in inserts.iter().enumerate() {
        if i == half {
            let flushed = text_rows(&sd, "sundial", "SELECT sundial_flush()").await;
            assert_eq!(flushed.len(), 1, "sundial_flush() returns one row");
        }
        sd.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("sundial: INSERT batch {i} failed: {e:?}"));
        pg.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("postgres: INSERT batch {i} failed: {e:?}"));
    }

    assert!(QUERIES.len() >= 22);
    for (idx, (sundial_sql, pg_sql)) in QUERIES.iter().enumerate() {
        let idx = idx + 1;
        let pg_sql = pg_sql.unwrap_or(sundial_sql);
        let s = text_rows(&sd, "sundial", sundial_sql).await;
        let p = text_rows(&pg, "postgres", pg_sql).await;
        assert!(
            !p.is_empty(),
            "query #{idx} returns no rows on postgres: {pg_sql}"
        );
        compare(idx, sundial_sql, pg_sql, &s, &p);
    }
}
