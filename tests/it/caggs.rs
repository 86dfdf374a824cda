//! Continuous aggregates over the wire: after inserts, late and out-of-order
//! writes, line-protocol writes, deletes, drop_chunks and a kill -9, the refreshed
//! materialized view and the real-time view equal the GROUP BY over the raw rows,
//! on Sundial and on PostgreSQL 15 holding the same rows; a refresh after a 1% late
//! write recomputes only the buckets it touched.

use tokio_postgres::Client;

use crate::harness::{TestServer, text_rows};
use crate::pg_compare::{PgServer, values_match};

const HOSTS: i64 = 10;
/// One point per host every 10 minutes for 10 days: 1440 hourly buckets per host.
const STEPS: i64 = 6 * 24 * 10;
const START: &str = "2024-01-01 00:00:00+00";

/// The raw aggregate the views must equal (TimescaleDB's time_bucket has origin
/// 2000-01-03; for hours that is date_bin from midnight).
fn raw_sql(bucket_fn: &str) -> String {
    format!(
        "SELECT {bucket_fn} AS bucket, host, avg(v) AS avg_v, max(v) AS max_v, count(*) AS n \
         FROM cpu GROUP BY 1, 2 ORDER BY 1, 2"
    )
}

const SUNDIAL_RAW_BUCKET: &str = "time_bucket('1 hour', time)";
const PG_RAW_BUCKET: &str = "date_bin('1 hour', time, '2000-01-03')";

/// A point `secs` seconds after START.
fn line(host: i64, secs: i64, v: i64) -> String {
    let base = 1_704_067_200i64; // 2024-01-01T00:00:00Z
    format!("cpu,host=h{host} v={v} {}\n", (base + secs) * 1_000_000_000)
}

fn value(host: i64, step: i64, salt: i64) -> i64 {
    (host * 7 + step * 13 + salt * 31) % 1000
}

async fn write_lp(server: &TestServer, body: String) {
    let url = server.http_url("/write?db=sundial");
    let r = reqwest::Client::new()
        .post(&url)
        .body(body)
        .send()
        .await
        .expect("line-protocol write");
    assert_eq!(
        r.status().as_u16(),
        204,
        "write answered {:?}",
        r.text().await
    );
}

/// Writes the same points (host, seconds after START, value) to Sundial (line
/// protocol) and to PostgreSQL.
async fn write_both(server: &TestServer, pg: &Client, points: &[(i64, i64, i64)]) {
    let mut body = String::new();
    let mut values = vec![];
    for &(host, secs, v) in points {
        body.push_str(&line(host, secs, v));
        values.push(format!(
            "(timestamptz '{START}' + interval '1 second' * {secs}, 'h{host}', {v})"
        ));
    }
    write_lp(server, body).await;
    for chunk in values.chunks(2000) {
        pg.batch_execute(&format!("INSERT INTO cpu VALUES {}", chunk.join(", ")))
            .await
            .expect("PostgreSQL insert");
    }
}

async fn sql(c: &Client, q: &str) {
    c.batch_execute(q)
        .await
        .unwrap_or_else(|e| panic!("{q}: {e:?}"));
}

fn assert_same(what: &str, a: &[Vec<Option<String>>], b: &[Vec<Option<String>>], exact: bool) {
    assert_eq!(a.len(), b.len(), "{what}: {} rows vs {}", a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let same = if exact {
            x == y
        } else {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_match(p, q))
        };
        assert!(same, "{what}: row {i} differs: {x:?} vs {y:?}");
    }
}

/// Both views equal the raw GROUP BY on Sundial (exactly) and on PostgreSQL.
async fn check(c: &Client, pg: &Client, realtime: &str, materialized: Option<&str>, what: &str) {
    let raw = text_rows(c, &raw_sql(SUNDIAL_RAW_BUCKET)).await;
    let theirs = text_rows(pg, &raw_sql(PG_RAW_BUCKET)).await;
    assert_same(
        &format!("{what}: Sundial raw vs PostgreSQL"),
        &raw,
        &theirs,
        false,
    );
    let rt = text_rows(c, &format!("SELECT * FROM {realtime} ORDER BY 1, 2")).await;
    assert_same(&format!("{what}: real-time view vs raw"), &rt, &raw, true);
    if let Some(m) = materialized {
        let mv = text_rows(c, &format!("SELECT * FROM {m} ORDER BY 1, 2")).await;
        assert_same(
            &format!("{what}: materialized view vs raw"),
            &mv,
            &raw,
            true,
        );
    }
}

async fn last_refresh(c: &Client, view: &str) -> (i64, i64) {
    let rows = text_rows(
        c,
        &format!(
            "SELECT buckets, refreshes FROM sundial_cagg_refreshes WHERE view_name = '{view}'"
        ),
    )
    .await;
    let p = |i: usize| -> i64 {
        rows[0][i]
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("sundial_cagg_refreshes: {rows:?}"))
    };
    (p(0), p(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_the_raw_group_by_through_every_kind_of_change() {
    let mut server = TestServer::start();
    let mut pgs = PgServer::start();
    let pg = pgs.connect().await;
    sql(
        &pg,
        "SET TimeZone = 'UTC'; CREATE TABLE cpu (time timestamptz NOT NULL, host text, v double precision)",
    )
    .await;

    // Ten days of points, over line protocol, in order.
    let mut points = vec![];
    for step in 0..STEPS {
        for host in 0..HOSTS {
            points.push((host, step * 600, value(host, step, 0)));
        }
    }
    write_both(&server, &pg, &points).await;

    let c = server.connect("sundial").await;
    sql(&c, "SET TimeZone = 'UTC'").await;
    sql(
        &c,
        "CREATE MATERIALIZED VIEW cpu_hourly WITH (timescaledb.continuous) AS \
         SELECT time_bucket('1 hour', time) AS bucket, host, avg(v) AS avg_v, max(v) AS max_v, count(*) AS n \
         FROM cpu GROUP BY bucket, host",
    )
    .await;
    sql(
        &c,
        "CREATE MATERIALIZED VIEW cpu_live WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS \
         SELECT time_bucket('1 hour', time) AS bucket, host, avg(v) AS avg_v, max(v) AS max_v, count(*) AS n \
         FROM cpu GROUP BY bucket, host WITH NO DATA",
    )
    .await;
    check(&c, &pg, "cpu_live", Some("cpu_hourly"), "after creation").await;
    let (buckets, _) = last_refresh(&c, "cpu_hourly").await;
    assert_eq!(
        buckets,
        24 * 10,
        "the first refresh covers all 240 hourly buckets"
    );

    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_live', NULL, NULL)",
    )
    .await;

    // Late writes: one more point per host in hours 10 and 11 of the second day
    // (2 of the 240 hourly buckets, under 1%), between the existing points.
    let mut late = vec![];
    for host in 0..HOSTS {
        for step in [24 * 6 + 61, 24 * 6 + 67] {
            late.push((host, step * 600 + 300, value(host, step, 1)));
        }
    }
    write_both(&server, &pg, &late).await;
    check(&c, &pg, "cpu_live", None, "late writes, before refresh").await;
    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)",
    )
    .await;
    let (buckets, _) = last_refresh(&c, "cpu_hourly").await;
    assert_eq!(
        buckets, 2,
        "a refresh after the late writes recomputes their 2 buckets only"
    );
    check(
        &c,
        &pg,
        "cpu_live",
        Some("cpu_hourly"),
        "late writes, after refresh",
    )
    .await;

    // Out-of-order SQL inserts into older and newer hours.
    sql(
        &c,
        "INSERT INTO cpu (time, host, v) VALUES ('2024-01-05 03:05:00+00', 'h3', 5), ('2024-01-11 01:00:00+00', 'h1', 7), ('2024-01-01 00:01:00+00', 'h9', 9)",
    )
    .await;
    sql(
        &pg,
        "INSERT INTO cpu (time, host, v) VALUES ('2024-01-05 03:05:00+00', 'h3', 5), ('2024-01-11 01:00:00+00', 'h1', 7), ('2024-01-01 00:01:00+00', 'h9', 9)",
    )
    .await;
    check(&c, &pg, "cpu_live", None, "out-of-order inserts").await;

    // Deletes.
    let del = "DELETE FROM cpu WHERE host = 'h2' AND time >= '2024-01-04 00:00:00+00' AND time < '2024-01-04 06:00:00+00'";
    sql(&c, del).await;
    sql(&pg, del).await;
    check(&c, &pg, "cpu_live", None, "delete").await;
    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)",
    )
    .await;
    check(
        &c,
        &pg,
        "cpu_live",
        Some("cpu_hourly"),
        "delete, after refresh",
    )
    .await;

    // drop_chunks of the first (1-week, the default) chunk: rows before 2024-01-04.
    let rows = text_rows(&c, "SELECT count(*) FROM show_chunks('cpu', older_than => '2024-01-08 00:00:00+00'::timestamptz)").await;
    assert_ne!(
        rows[0][0].as_deref(),
        Some("0"),
        "the first chunk must be old enough to drop"
    );
    sql(
        &c,
        "SELECT drop_chunks('cpu', older_than => '2024-01-08 00:00:00+00'::timestamptz)",
    )
    .await;
    let range = text_rows(&c, "SELECT min(time) FROM cpu").await;
    let min = range[0][0]
        .clone()
        .unwrap_or_else(|| "2100-01-01 00:00:00+00".into());
    sql(&pg, &format!("DELETE FROM cpu WHERE time < '{min}'")).await;
    // As in TimescaleDB, the views keep the dropped range's buckets (aggregates
    // outlive raw data) ...
    for view in ["cpu_live", "cpu_hourly"] {
        let kept = text_rows(
            &c,
            &format!("SELECT count(*) FROM {view} WHERE bucket < '{min}'"),
        )
        .await;
        assert_ne!(
            kept[0][0].as_deref(),
            Some("0"),
            "{view} lost the dropped range's buckets"
        );
    }
    // ... until a refresh covers it.
    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_live', NULL, NULL)",
    )
    .await;
    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)",
    )
    .await;
    check(
        &c,
        &pg,
        "cpu_live",
        Some("cpu_hourly"),
        "drop_chunks, after refresh",
    )
    .await;

    // Unflushed writes survive kill -9 as invalidations too.
    let mut more = vec![];
    for host in 0..HOSTS {
        more.push((host, (24 * 6 * 8 + 5) * 600 + 60, value(host, 5, 2)));
    }
    write_both(&server, &pg, &more).await;
    drop(c);
    server.kill9();
    server.restart();
    let c = server.connect("sundial").await;
    sql(&c, "SET TimeZone = 'UTC'").await;
    check(&c, &pg, "cpu_live", None, "after kill -9").await;
    sql(
        &c,
        "CALL refresh_continuous_aggregate('cpu_hourly', NULL, NULL)",
    )
    .await;
    check(
        &c,
        &pg,
        "cpu_live",
        Some("cpu_hourly"),
        "after kill -9 and refresh",
    )
    .await;

    let rows = text_rows(
        &c,
        "SELECT view_name, materialized_only FROM timescaledb_information.continuous_aggregates ORDER BY 1",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            vec![Some("cpu_hourly".to_string()), Some("t".to_string())],
            vec![Some("cpu_live".to_string()), Some("f".to_string())],
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_time_view_shows_both_sides_in_explain() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    sql(
        &c,
        "CREATE TABLE m (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable); \
         INSERT INTO m VALUES ('2024-01-01 00:00:00+00', 1), ('2024-01-02 00:00:00+00', 2); \
         CREATE MATERIALIZED VIEW m_daily WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS \
         SELECT time_bucket('1 day', time) AS day, sum(v) AS s FROM m GROUP BY day",
    )
    .await;
    let plan: Vec<String> = text_rows(&c, "EXPLAIN SELECT * FROM m_daily")
        .await
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    let text = plan.join("\n");
    assert!(text.contains("Union"), "no UNION in the plan:\n{text}");
    assert!(
        text.contains("table=_materialized_hypertable_") && text.contains("table=m,"),
        "both the materialization and the raw table must be scanned:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_refreshes_without_a_manual_call() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    sql(
        &c,
        "CREATE TABLE p (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable); \
         INSERT INTO p VALUES ('2024-01-01 00:00:00+00', 1), ('2024-01-01 01:00:00+00', 2), ('2024-01-02 00:00:00+00', 3); \
         CREATE MATERIALIZED VIEW p_daily WITH (timescaledb.continuous) AS \
         SELECT time_bucket('1 day', time) AS day, sum(v) AS s FROM p GROUP BY day WITH NO DATA",
    )
    .await;
    let empty = text_rows(&c, "SELECT count(*) FROM p_daily").await;
    assert_eq!(empty, vec![vec![Some("0".to_string())]]);
    let job = text_rows(
        &c,
        "SELECT add_continuous_aggregate_policy('p_daily', NULL, NULL, INTERVAL '1 hour')",
    )
    .await;
    let job = job[0][0].clone().expect("a job id");
    // The policy runs once when added; wait for it (bounded), without a manual call.
    let mut rows = vec![];
    for _ in 0..300 {
        rows = text_rows(&c, "SELECT day, s FROM p_daily ORDER BY day").await;
        if !rows.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows,
        vec![
            vec![
                Some("2024-01-01 00:00:00+00".to_string()),
                Some("3".to_string())
            ],
            vec![
                Some("2024-01-02 00:00:00+00".to_string()),
                Some("3".to_string())
            ],
        ]
    );
    let stats = text_rows(
        &c,
        &format!("SELECT total_runs >= 1, last_run_status FROM timescaledb_information.job_stats WHERE job_id = {job}"),
    )
    .await;
    assert_eq!(
        stats,
        vec![vec![Some("t".to_string()), Some("Success".to_string())]]
    );
    // run_job runs it by hand too.
    sql(&c, &format!("CALL run_job({job})")).await;
}

/// Bucket kinds whose widths vary (time zones across daylight saving, months) and
/// origins and offsets: after late writes on both sides of a fall-back hour, the
/// real-time view equals the raw GROUP BY at once, and the materialized view after a
/// refresh of part of the range and then of all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn varying_buckets_stay_equal_to_the_raw_group_by() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    sql(
        &c,
        "SET TimeZone = 'UTC'; \
         CREATE TABLE d (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day'); \
         INSERT INTO d SELECT t, (extract(epoch FROM t)::bigint / 600) % 97 FROM generate_series(timestamptz '2024-10-30 00:00:00+00', timestamptz '2024-11-08 00:00:00+00', interval '10 minutes') AS t",
    )
    .await;
    let buckets = [
        ("tz_hour", "time_bucket('1 hour', time, 'America/New_York')"),
        ("tz_3h", "time_bucket('3 hours', time, 'America/New_York')"),
        ("tz_day", "time_bucket('1 day', time, 'America/New_York')"),
        ("month", "time_bucket('1 month', time)"),
        (
            "origin",
            "time_bucket('1 day', time, '2000-01-01 06:30:00+00'::timestamptz)",
        ),
        (
            "offset",
            "time_bucket('1 day', time, INTERVAL '90 minutes')",
        ),
    ];
    for (name, bucket) in buckets {
        for (suffix, mo) in [("rt", "false"), ("mo", "true")] {
            sql(
                &c,
                &format!(
                    "CREATE MATERIALIZED VIEW {name}_{suffix} WITH (timescaledb.continuous, timescaledb.materialized_only = {mo}) AS \
                     SELECT {bucket} AS b, count(*) AS n, sum(v) AS s, min(v) AS lo FROM d GROUP BY b WITH NO DATA"
                ),
            )
            .await;
        }
    }
    let check = |name: &'static str, bucket: &'static str, refreshed: bool| {
        let c = &c;
        async move {
            let raw = text_rows(
                c,
                &format!("SELECT {bucket} AS b, count(*) AS n, sum(v) AS s, min(v) AS lo FROM d GROUP BY b ORDER BY b"),
            )
            .await;
            let rt = text_rows(c, &format!("SELECT * FROM {name}_rt ORDER BY b")).await;
            assert_eq!(rt, raw, "{name}: real-time view vs raw");
            if refreshed {
                let mo = text_rows(c, &format!("SELECT * FROM {name}_mo ORDER BY b")).await;
                assert_eq!(mo, raw, "{name}: materialized view vs raw");
            }
        }
    };
    for (name, bucket) in buckets {
        check(name, bucket, false).await;
        // Part of the range first: buckets wholly inside it.
        for suffix in ["rt", "mo"] {
            sql(
                &c,
                &format!("CALL refresh_continuous_aggregate('{name}_{suffix}', '2024-10-01', '2024-11-05')"),
            )
            .await;
        }
        check(name, bucket, false).await;
    }
    // Late rows on both sides of the New York fall-back hour (05:00-07:00 UTC on
    // 2024-11-03 is 01:00-02:00 local twice) and at a month's edge.
    sql(
        &c,
        "INSERT INTO d VALUES ('2024-11-03 05:30:00+00', 1000), ('2024-11-03 06:05:00+00', 2000), \
         ('2024-10-31 23:59:59+00', 3000), ('2024-11-01 00:00:00+00', 4000), ('2024-11-04 06:29:59+00', 5000)",
    )
    .await;
    for (name, bucket) in buckets {
        check(name, bucket, false).await;
        for suffix in ["rt", "mo"] {
            sql(
                &c,
                &format!("CALL refresh_continuous_aggregate('{name}_{suffix}', NULL, NULL)"),
            )
            .await;
        }
        check(name, bucket, true).await;
    }
}

/// A statement prepared over the extended protocol reads the real-time view as it
/// is at each execution, not as it was when it was parsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_see_new_rows_in_a_real_time_view() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    sql(
        &c,
        "CREATE TABLE e (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable); \
         INSERT INTO e VALUES ('2024-01-01 00:00:00+00', 1), ('2024-01-02 00:00:00+00', 2); \
         CREATE MATERIALIZED VIEW e_daily WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS \
         SELECT time_bucket('1 day', time) AS day, sum(v) AS s FROM e GROUP BY day",
    )
    .await;
    let stmt = c
        .prepare("SELECT s::text FROM e_daily ORDER BY day")
        .await
        .expect("prepare");
    let sums = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
        rows.iter().map(|r| r.get::<_, String>(0)).collect()
    };
    assert_eq!(sums(c.query(&stmt, &[]).await.expect("query")), ["1", "2"]);
    // Below the watermark and past it.
    sql(
        &c,
        "INSERT INTO e VALUES ('2024-01-01 12:00:00+00', 10), ('2024-01-03 00:00:00+00', 3)",
    )
    .await;
    assert_eq!(
        sums(c.query(&stmt, &[]).await.expect("query")),
        ["11", "2", "3"]
    );
}

/// Rows from year 1 to year 9999 (outside what nanosecond timestamps hold): the views
/// refresh them, one step per materialization chunk that holds data, and equal the
/// raw GROUP BY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_years_refresh_where_the_data_is() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    sql(
        &c,
        "CREATE TABLE far (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable); \
         INSERT INTO far VALUES ('0001-01-01 00:00:00+00', 1), ('2024-01-01 00:00:00+00', 2), ('9999-12-31 00:00:00+00', 3); \
         CREATE MATERIALIZED VIEW far_rt WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS \
         SELECT time_bucket('1 day', time) AS b, count(*) AS n FROM far GROUP BY b; \
         CREATE MATERIALIZED VIEW far_mo WITH (timescaledb.continuous) AS \
         SELECT time_bucket('1 day', time) AS b, count(*) AS n FROM far GROUP BY b; \
         INSERT INTO far VALUES ('5000-06-01 12:00:00+00', 4), ('2024-01-01 05:00:00+00', 5)",
    )
    .await;
    let raw = text_rows(
        &c,
        "SELECT time_bucket('1 day', time) AS b, count(*) AS n FROM far GROUP BY b ORDER BY b",
    )
    .await;
    assert_eq!(raw.len(), 4);
    let rt = text_rows(&c, "SELECT * FROM far_rt ORDER BY b").await;
    assert_eq!(rt, raw, "real-time view vs raw");
    sql(
        &c,
        "CALL refresh_continuous_aggregate('far_mo', NULL, NULL)",
    )
    .await;
    let mo = text_rows(&c, "SELECT * FROM far_mo ORDER BY b").await;
    assert_eq!(mo, raw, "materialized view vs raw");
    let (buckets, _) = last_refresh(&c, "far_mo").await;
    assert_eq!(buckets, 2, "only the two buckets written after creation");
}
