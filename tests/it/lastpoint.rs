//! The TSBS lastpoint query (`DISTINCT ON (host) ... ORDER BY host, time DESC`) gives
//! PostgreSQL's answer and is planned as a per-group aggregate: no sort of the table.

use crate::harness::{TestServer, text_rows};

#[tokio::test]
async fn lastpoint_is_an_aggregate_not_a_table_sort() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, region text, usage double precision) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day');
             INSERT INTO cpu VALUES
               ('2024-01-01 00:00:00+00', 'h1', 'eu', 1), ('2024-01-02 00:00:00+00', 'h1', 'eu', 2),
               ('2024-01-01 12:00:00+00', 'h2', 'us', 3), ('2024-01-03 00:00:00+00', 'h2', 'us', 4),
               ('2024-01-02 06:00:00+00', 'h3', 'eu', 5);
             SELECT sundial_flush();
             INSERT INTO cpu VALUES ('2024-01-04 00:00:00+00', 'h3', 'ap', 6);",
        )
        .await
        .expect("setup");
    let sql = "SELECT DISTINCT ON (hostname) hostname, time, region, usage FROM cpu ORDER BY hostname, time DESC";
    let rows = text_rows(&client, sql).await;
    // Computed by PostgreSQL 15 on the same rows.
    let want = [
        ["h1", "2024-01-02 00:00:00+00", "eu", "2"],
        ["h2", "2024-01-03 00:00:00+00", "us", "4"],
        ["h3", "2024-01-04 00:00:00+00", "ap", "6"],
    ];
    let got: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| v.clone().unwrap_or_default()).collect())
        .collect();
    assert_eq!(
        got,
        want.iter()
            .map(|r| r.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );

    let plan = text_rows(&client, &format!("EXPLAIN {sql}")).await;
    let physical: Vec<String> = plan
        .iter()
        .filter(|r| r[0].as_deref() == Some("physical_plan"))
        .filter_map(|r| r[1].clone())
        .collect();
    let text = physical.join("\n");
    let below_aggregate = text
        .split_once("AggregateExec")
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_default();
    assert!(
        text.contains("AggregateExec"),
        "lastpoint should aggregate per host:\n{text}"
    );
    assert!(
        !below_aggregate.contains("SortExec"),
        "lastpoint must not sort the table:\n{text}"
    );
}

/// One line-protocol write to database `db`; panics unless it is accepted.
async fn write_lp(srv: &TestServer, db: &str, body: &str) {
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(srv.http_url(&format!("/write?db={db}&precision=s")))
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 204, "write {body:?}");
}

async fn explain(client: &tokio_postgres::Client, sql: &str) -> String {
    text_rows(client, &format!("EXPLAIN {sql}"))
        .await
        .iter()
        .filter_map(|r| r.get(1).cloned().flatten())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The queries that need only each series' newest rows, over a line-protocol table
/// with out-of-order, late and duplicate points (in files and in the memtable),
/// partial duplicates, a NULL tag and a deletion: each answers the same with the
/// newest-rows path as with a scan of every row, says in EXPLAIN that it took the
/// path, and equals PostgreSQL's answer on the same (merged) rows.
#[tokio::test]
async fn newest_rows_path_gives_the_full_scans_answer() {
    let srv = TestServer::start();
    let db = "lp";
    let t0 = 1_704_067_200; // 2024-01-01 00:00:00 UTC
    let line = |tags: &str, fields: &str, s: i64| format!("cpu,{tags} {fields} {}\n", t0 + s);
    let mut a = String::new();
    for (tags, times) in [
        ("hostname=h1,region=eu", vec![0, 10, 20]),
        ("hostname=h2,region=us", vec![0, 10, 20, 30]),
        ("hostname=h3", vec![5, 15]),
        ("hostname=h4,region=eu", vec![0, 10, 20, 30, 40]),
        ("hostname=h5,region=ap", vec![0, 10, 20]),
    ] {
        for s in times {
            a += &line(tags, &format!("usage={}.5,idle={}", s, 100 - s), s);
        }
    }
    write_lp(&srv, db, &a).await;
    let client = srv.connect(db).await;
    client
        .batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    // Late and out-of-order points, a rewrite of h2's newest point (one field), a new host.
    let b = [
        line("hostname=h1,region=eu", "usage=1.25,idle=7", 5),
        line("hostname=h2,region=us", "usage=70", 30),
        line("hostname=h3", "usage=25.5,idle=75", 25),
        line("hostname=h6,region=us", "usage=1,idle=2", 100),
    ]
    .concat();
    write_lp(&srv, db, &b).await;
    client
        .batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    client
        .batch_execute("DELETE FROM cpu WHERE hostname = 'h5' AND time = '2024-01-01 00:00:20+00'")
        .await
        .expect("delete");
    // In the memtable: a point written twice in one body, a partial rewrite of h1's
    // newest point.
    let c = [
        line("hostname=h4,region=eu", "usage=9,idle=9", 50),
        line("hostname=h4,region=eu", "usage=10", 50),
        line("hostname=h1,region=eu", "idle=99", 20),
    ]
    .concat();
    write_lp(&srv, db, &c).await;

    let queries = [
        "SELECT DISTINCT ON (hostname) hostname, region, time, usage, idle FROM cpu ORDER BY hostname, time DESC",
        "SELECT DISTINCT ON (hostname) hostname, time, usage FROM cpu WHERE region = 'eu' OR region IS NULL ORDER BY hostname, time DESC",
        "SELECT DISTINCT ON (region) region, hostname, time FROM cpu ORDER BY region, time DESC",
        "SELECT hostname, max(time) FROM cpu WHERE time >= '2024-01-01 00:00:20+00' GROUP BY hostname ORDER BY hostname",
        "SELECT max(time) FROM cpu",
        "SELECT time, hostname, usage, idle FROM cpu ORDER BY time DESC, hostname LIMIT 4",
        "SELECT hostname, time, idle FROM (SELECT hostname, time, idle, row_number() OVER (PARTITION BY hostname ORDER BY time DESC) AS rn FROM cpu) s WHERE rn <= 2 ORDER BY hostname, time DESC",
        "SELECT h.name, l.time, l.usage FROM (VALUES ('h1'), ('h2'), ('h9')) AS h(name) LEFT JOIN LATERAL (SELECT time, usage FROM cpu c WHERE c.hostname = h.name ORDER BY time DESC LIMIT 2) l ON true ORDER BY 1, 2 DESC",
        // TSBS's low-fuel shape: a tags table, INNER JOIN LATERAL, and a filter on
        // the newest row's field outside it.
        "SELECT t.name, t.fleet, l.usage FROM (VALUES ('h1', 'x'), ('h2', 'y'), ('h4', 'x'), ('h3', 'x'), ('h9', 'x')) AS t(name, fleet) INNER JOIN LATERAL (SELECT usage FROM cpu c WHERE c.hostname = t.name ORDER BY time DESC LIMIT 1) l ON true WHERE t.name IS NOT NULL AND l.usage > 5 AND t.fleet = 'x' ORDER BY 1",
        "SELECT hostname, time FROM (SELECT hostname, time, row_number() OVER (PARTITION BY hostname ORDER BY time DESC) AS rn FROM cpu) s WHERE rn = 1 AND time > '2024-01-01 00:00:15+00' ORDER BY hostname",
    ];
    // Sundial-only spelling (TimescaleDB's last()).
    let last = "SELECT hostname, last(usage, time), last(idle, time), max(time) FROM cpu GROUP BY hostname ORDER BY hostname";
    let mut answers = vec![];
    for sql in queries.iter().chain([&last]) {
        let plan = explain(&client, sql).await;
        assert!(
            plan.contains("LatestRowsExec"),
            "{sql} should read only newest rows:\n{plan}"
        );
        let fast = text_rows(&client, sql).await;
        let again = text_rows(&client, sql).await;
        client
            .batch_execute("SET sundial.latest_rows = off")
            .await
            .expect("set");
        assert!(!explain(&client, sql).await.contains("LatestRowsExec"));
        let full = text_rows(&client, sql).await;
        client
            .batch_execute("SET sundial.latest_rows = on")
            .await
            .expect("set");
        assert!(!full.is_empty(), "{sql}");
        assert_eq!(
            fast, full,
            "{sql}: newest-rows path differs from the full scan"
        );
        assert_eq!(
            again, full,
            "{sql}: second run (rows kept per file) differs"
        );
        answers.push(full);
    }
    // What the merging must have produced.
    assert_eq!(
        answers[0],
        [
            ["h1", "eu", "2024-01-01 00:00:20+00", "20.5", "99"],
            ["h2", "us", "2024-01-01 00:00:30+00", "70", "70"],
            ["h3", "", "2024-01-01 00:00:25+00", "25.5", "75"],
            ["h4", "eu", "2024-01-01 00:00:50+00", "10", "9"],
            ["h5", "ap", "2024-01-01 00:00:10+00", "10.5", "90"],
            ["h6", "us", "2024-01-01 00:01:40+00", "1", "2"],
        ]
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| (!v.is_empty()).then(|| v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
    );

    // Filters on a field or an upper time bound change which rows are newest: the
    // plain plan answers.
    for sql in [
        "SELECT DISTINCT ON (hostname) hostname, time FROM cpu WHERE usage > 2 ORDER BY hostname, time DESC",
        "SELECT DISTINCT ON (hostname) hostname, time FROM cpu WHERE time < '2024-01-01 00:00:20+00' ORDER BY hostname, time DESC",
        "SELECT hostname, first_value(usage ORDER BY usage DESC) FROM cpu GROUP BY hostname",
    ] {
        assert!(
            !explain(&client, sql).await.contains("LatestRowsExec"),
            "{sql}"
        );
    }

    // Another time zone renders the same rows.
    client
        .batch_execute("SET timezone = 'America/New_York'")
        .await
        .expect("tz");
    let ny = text_rows(&client, queries[0]).await;
    assert_eq!(ny[0][2].as_deref(), Some("2023-12-31 19:00:20-05"));

    // PostgreSQL 15 on the merged rows.
    client
        .batch_execute("SET timezone = 'UTC'")
        .await
        .expect("tz");
    let rows = text_rows(
        &client,
        "SELECT time, hostname, region, usage, idle FROM cpu",
    )
    .await;
    let mut pg = crate::pg_compare::PgServer::start();
    let pgc = pg.connect().await;
    let q = |v: &Option<String>| v.as_ref().map_or("NULL".to_string(), |s| format!("'{s}'"));
    let values: Vec<String> = rows
        .iter()
        .map(|r| format!("({})", r.iter().map(q).collect::<Vec<_>>().join(", ")))
        .collect();
    pgc.batch_execute(&format!(
        "SET TIME ZONE 'UTC';
         CREATE TABLE cpu (time timestamptz NOT NULL, hostname text, region text, usage float8, idle float8);
         INSERT INTO cpu VALUES {};",
        values.join(", ")
    ))
    .await
    .expect("load PostgreSQL");
    for (sql, want) in queries.iter().zip(&answers) {
        assert_eq!(
            &text_rows(&pgc, sql).await,
            want,
            "{sql}: PostgreSQL differs"
        );
    }
}

/// The same path over a SQL (append) hypertable: several chunks, flushed and in
/// memory, newest rows per device and newest overall.
#[tokio::test]
async fn newest_rows_of_an_append_hypertable() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE m (time timestamptz NOT NULL, dev text, v double precision) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day');
             INSERT INTO m VALUES ('2024-01-01 01:00:00+00', 'a', 1), ('2024-01-02 01:00:00+00', 'a', 2),
               ('2024-01-01 02:00:00+00', 'b', 3), (('2024-01-03 00:00:00+00'), NULL, 4);
             SELECT sundial_flush();
             INSERT INTO m VALUES ('2024-01-02 03:00:00+00', 'b', 5), ('2023-12-31 00:00:00+00', 'c', 6);",
        )
        .await
        .expect("setup");
    for (sql, want) in [
        (
            "SELECT DISTINCT ON (dev) dev, time, v FROM m ORDER BY dev, time DESC",
            vec![
                ["a", "2024-01-02 01:00:00+00", "2"],
                ["b", "2024-01-02 03:00:00+00", "5"],
                ["c", "2023-12-31 00:00:00+00", "6"],
                ["", "2024-01-03 00:00:00+00", "4"],
            ],
        ),
        (
            "SELECT dev, time, v FROM m ORDER BY time DESC LIMIT 2",
            vec![
                ["", "2024-01-03 00:00:00+00", "4"],
                ["b", "2024-01-02 03:00:00+00", "5"],
            ],
        ),
    ] {
        assert!(
            explain(&client, sql).await.contains("LatestRowsExec"),
            "{sql}"
        );
        let got = text_rows(&client, sql).await;
        let want: Vec<Vec<Option<String>>> = want
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| (!v.is_empty()).then(|| v.to_string()))
                    .collect()
            })
            .collect();
        assert_eq!(got, want, "{sql}");
    }
    // A transaction's own rows are seen.
    client
        .batch_execute("BEGIN; INSERT INTO m VALUES ('2024-01-05 00:00:00+00', 'a', 7)")
        .await
        .expect("begin");
    let got = text_rows(&client, "SELECT max(time) FROM m").await;
    assert_eq!(got[0][0].as_deref(), Some("2024-01-05 00:00:00+00"));
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let got = text_rows(&client, "SELECT max(time) FROM m").await;
    assert_eq!(got[0][0].as_deref(), Some("2024-01-03 00:00:00+00"));
}

/// `GROUP BY bucket ORDER BY bucket DESC LIMIT k` reads the newest window holding k
/// whole buckets: over sparse rows (the first window is too short and widens), in
/// files and memtable, with time_bucket and date_trunc, in another time zone, the
/// answer equals the full scan's and PostgreSQL's.
#[tokio::test]
async fn newest_buckets_path_gives_the_full_scans_answer() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE m (time timestamptz NOT NULL, dev text, v double precision) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')",
        )
        .await
        .expect("create");
    // Rows every 7 s for an hour on day one, then a few sparse ones on day two.
    let mut rows = vec![];
    for i in 0..514 {
        rows.push(format!(
            "('2024-01-01 10:00:00+00'::timestamptz + interval '{} seconds', 'd{}', {})",
            i * 7,
            i % 3,
            (i * 37) % 101
        ));
    }
    client
        .batch_execute(&format!(
            "INSERT INTO m VALUES {}; SELECT sundial_flush();",
            rows.join(", ")
        ))
        .await
        .expect("insert");
    client
        .batch_execute(
            "INSERT INTO m VALUES ('2024-01-02 03:04:05+00', 'd1', 5), ('2024-01-02 03:04:59+00', 'd2', 6),
               ('2024-01-02 07:00:00+00', 'd0', 7), ('2024-01-02 23:59:59+00', 'd1', 8)",
        )
        .await
        .expect("insert late");
    let queries = [
        "SELECT date_trunc('minute', time) AS minute, max(v) FROM m GROUP BY minute ORDER BY minute DESC LIMIT 5",
        "SELECT date_trunc('minute', time) AS minute, count(*), avg(v) FROM m WHERE time < '2024-01-01 10:33:30+00' GROUP BY minute ORDER BY minute DESC LIMIT 4",
        "SELECT date_trunc('hour', time) AS h, min(v) FROM m WHERE time <= '2024-01-02 07:00:00+00' GROUP BY 1 ORDER BY 1 DESC LIMIT 3",
        "SELECT date_trunc('minute', time) AS minute, sum(v) FROM m WHERE time > '2024-01-01 10:50:00+00' AND time < '2024-01-03 00:00:00+00' GROUP BY minute ORDER BY minute DESC LIMIT 20",
    ];
    let sundial_only = [
        "SELECT time_bucket('10 minutes', time) AS b, max(v) FROM m GROUP BY b ORDER BY b DESC LIMIT 6",
        "SELECT time_bucket('90 seconds', time) AS b, count(*) FROM m WHERE time < '2024-01-01 10:40:00+00' GROUP BY b ORDER BY b DESC LIMIT 7",
    ];
    let mut answers = vec![];
    for sql in queries.iter().chain(&sundial_only) {
        let plan = explain(&client, sql).await;
        assert!(plan.contains("NewestBucketsExec"), "{sql}:\n{plan}");
        let fast = text_rows(&client, sql).await;
        client
            .batch_execute("SET sundial.newest_buckets = off")
            .await
            .expect("set");
        assert!(!explain(&client, sql).await.contains("NewestBucketsExec"));
        let full = text_rows(&client, sql).await;
        client
            .batch_execute("SET sundial.newest_buckets = on")
            .await
            .expect("set");
        assert!(!full.is_empty(), "{sql}");
        assert_eq!(
            fast, full,
            "{sql}: newest-window path differs from the full scan"
        );
        answers.push(full);
    }
    assert_eq!(answers[0].len(), 5);
    assert_eq!(answers[0][0][0].as_deref(), Some("2024-01-02 23:59:00+00"));
    // A filter on another column, or HAVING, may empty buckets: the plain plan answers.
    for sql in [
        "SELECT date_trunc('minute', time) AS minute, max(v) FROM m WHERE dev = 'd1' GROUP BY minute ORDER BY minute DESC LIMIT 5",
        "SELECT date_trunc('minute', time) AS minute, max(v) FROM m GROUP BY minute HAVING max(v) > 50 ORDER BY minute DESC LIMIT 5",
        "SELECT date_trunc('minute', time) AS minute, dev, max(v) FROM m GROUP BY 1, 2 ORDER BY 1 DESC LIMIT 5",
    ] {
        assert!(
            !explain(&client, sql).await.contains("NewestBucketsExec"),
            "{sql}"
        );
    }
    // In a zone with a half-hour offset, hours start at :30 UTC.
    client
        .batch_execute("SET timezone = 'Asia/Kolkata'")
        .await
        .expect("tz");
    let sql = queries[2];
    let fast = text_rows(&client, sql).await;
    client
        .batch_execute("SET sundial.newest_buckets = off")
        .await
        .expect("set");
    let full = text_rows(&client, sql).await;
    client
        .batch_execute("SET sundial.newest_buckets = on")
        .await
        .expect("set");
    assert_eq!(fast, full);
    assert_eq!(fast[0][0].as_deref(), Some("2024-01-02 12:00:00+05:30"));

    // PostgreSQL 15 on the same rows.
    client
        .batch_execute("SET timezone = 'UTC'")
        .await
        .expect("tz");
    let all = text_rows(&client, "SELECT time, dev, v FROM m").await;
    let mut pg = crate::pg_compare::PgServer::start();
    let pgc = pg.connect().await;
    let values: Vec<String> = all
        .iter()
        .map(|r| {
            format!(
                "('{}', '{}', {})",
                r[0].as_deref().unwrap_or_default(),
                r[1].as_deref().unwrap_or_default(),
                r[2].as_deref().unwrap_or("NULL")
            )
        })
        .collect();
    pgc.batch_execute(&format!(
        "SET TIME ZONE 'UTC'; CREATE TABLE m (time timestamptz NOT NULL, dev text, v float8);
         INSERT INTO m VALUES {};",
        values.join(", ")
    ))
    .await
    .expect("load PostgreSQL");
    for (sql, want) in queries.iter().zip(&answers) {
        let got = text_rows(&pgc, sql).await;
        assert_eq!(got.len(), want.len(), "{sql}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                g.iter()
                    .zip(w)
                    .all(|(a, b)| crate::pg_compare::values_match(a, b)),
                "{sql}: PostgreSQL {g:?}, Sundial {w:?}"
            );
        }
    }
}
