//! No stale answers: every answer a session may keep (a prepared statement's plan, a
//! plan the engine keeps for a text's shape, a table function's rows, statistics)
//! follows every change made since, on the same connection and on another one:
//! writes, DELETE, compress and decompress, drop_chunks, the retention and
//! compression jobs, DDL, a continuous aggregate's refresh, TRUNCATE. Each read runs
//! plain and prepared (prepared once, before all the changes) on both connections,
//! and must equal what a new connection with no kept plans answers.

use tokio_postgres::{Client, Statement};

use crate::harness::{TestServer, text_rows};

/// Reads whose answers the changes move; each gives one text value.
const READS: [&str; 12] = [
    "SELECT count(*)::text FROM show_chunks('t')",
    "SELECT count(*)::text FROM t",
    "SELECT coalesce(sum(v), 0)::text FROM t",
    "SELECT max(time)::text FROM t WHERE time > '2000-01-01'",
    "SELECT string_agg(chunk_name || ':' || is_compressed::text, ',' ORDER BY chunk_name) \
     FROM timescaledb_information.chunks WHERE hypertable_name = 't'",
    "SELECT count(*)::text FROM chunk_compression_stats('t') \
     WHERE compression_status = 'Compressed'",
    "SELECT approximate_row_count('t')::text",
    "SELECT hypertable_size('t')::text",
    "SELECT coalesce(sum(n), 0)::text FROM t_daily",
    "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) \
     FROM information_schema.columns WHERE table_name = 't'",
    "SELECT count(*)::text FROM timescaledb_information.jobs WHERE hypertable_name = 't'",
    "SELECT count(*)::text FROM (SELECT 1 FROM t WHERE v > 2 LIMIT 1000) s",
];

struct Reader {
    a: Vec<Statement>,
    b: Vec<Statement>,
}

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e:?}"));
}

async fn plain(c: &Client, sql: &str) -> Option<String> {
    let rows = text_rows(c, sql).await;
    assert_eq!(rows.len(), 1, "{sql:?} gave {rows:?}");
    rows[0][0].clone()
}

async fn prepared(c: &Client, st: &Statement, sql: &str) -> Option<String> {
    let rows = c
        .query(st, &[])
        .await
        .unwrap_or_else(|e| panic!("prepared {sql:?} failed: {e:?}"));
    assert_eq!(rows.len(), 1, "prepared {sql:?}");
    rows[0].get(0)
}

/// Every read, plain and prepared, on both connections, against a new connection
/// that keeps no plans; returns the new connection's answers.
async fn check(
    srv: &TestServer,
    a: &Client,
    b: &Client,
    r: &Reader,
    after: &str,
) -> Vec<Option<String>> {
    let fresh = srv.connect("sundial").await;
    exec(&fresh, "SET sundial.plan_cache = off").await;
    let mut answers = vec![];
    for (i, sql) in READS.iter().enumerate() {
        let want = plain(&fresh, sql).await;
        // Twice each: a second run must not bring back a kept answer either.
        for round in 0..2 {
            let got = [
                ("plain, same connection", plain(a, sql).await),
                ("prepared, same connection", prepared(a, &r.a[i], sql).await),
                ("plain, other connection", plain(b, sql).await),
                (
                    "prepared, other connection",
                    prepared(b, &r.b[i], sql).await,
                ),
            ];
            for (how, v) in got {
                assert_eq!(
                    v, want,
                    "after {after}: {sql:?} ({how}, run {round}) is stale"
                );
            }
        }
        answers.push(want);
    }
    answers
}

#[tokio::test]
async fn answers_follow_every_change() {
    let srv = TestServer::start();
    let a = srv.connect("sundial").await;
    let b = srv.connect("sundial").await;
    exec(
        &a,
        "CREATE TABLE t (time timestamptz NOT NULL, dev text, v double precision) \
         WITH (tsdb.hypertable, tsdb.partition_column = 'time', tsdb.chunk_interval = '1 day');
         INSERT INTO t SELECT '2024-01-01'::timestamptz + i * interval '1 hour', 'd' || (i % 3), i % 7 \
         FROM generate_series(0, 119) i;
         CREATE MATERIALIZED VIEW t_daily WITH (timescaledb.continuous, timescaledb.materialized_only = true) AS \
         SELECT time_bucket('1 day', time) AS day, count(*) AS n FROM t GROUP BY 1 WITH NO DATA;",
    )
    .await;
    // Kept plans are what this test is about: both connections keep them.
    let mut r = Reader {
        a: vec![],
        b: vec![],
    };
    for sql in READS {
        r.a.push(a.prepare(sql).await.expect("prepare"));
        r.b.push(b.prepare(sql).await.expect("prepare"));
    }
    let mut last = check(&srv, &a, &b, &r, "setup").await;
    assert_eq!(last[0].as_deref(), Some("5"), "five chunks to start with");

    // Each change, and the reads it must move (by index in READS).
    let changes: [(&str, &str, &[usize]); 13] = [
        (
            "an INSERT into a new chunk",
            "INSERT INTO t VALUES (now() - interval '1 hour', 'd9', 5)",
            &[0, 1, 2, 3, 4, 6],
        ),
        (
            "a DELETE",
            "DELETE FROM t WHERE time < '2024-01-01 06:00:00'",
            &[1, 2],
        ),
        (
            "compress_chunk",
            "SELECT compress_chunk(c) FROM show_chunks('t', older_than => '2024-01-03'::timestamptz) c",
            &[4, 5],
        ),
        (
            "decompress_chunk",
            "SELECT decompress_chunk(c) FROM show_chunks('t', older_than => '2024-01-02'::timestamptz) c",
            &[4, 5],
        ),
        (
            "a continuous aggregate refresh",
            "CALL refresh_continuous_aggregate('t_daily', NULL, NULL)",
            &[8],
        ),
        (
            "drop_chunks",
            "SELECT drop_chunks('t', older_than => '2024-01-02'::timestamptz)",
            &[0, 1, 2, 4],
        ),
        (
            "ALTER TABLE ADD COLUMN",
            "ALTER TABLE t ADD COLUMN w double precision",
            &[9],
        ),
        // First run a day from now: the job runs below, when the test says.
        (
            "add_retention_policy",
            "SELECT add_retention_policy('t', INTERVAL '1000 days', initial_start => now() + INTERVAL '1 day')",
            &[10],
        ),
        ("the retention job", "DO $$ BEGIN END $$", &[0, 1, 2, 4]),
        (
            "an INSERT on the other connection's table",
            "INSERT INTO t (time, dev, v) SELECT now() - i * interval '1 minute', 'e', 100 FROM generate_series(1, 50) i",
            &[1, 2, 11],
        ),
        (
            "a continuous aggregate refresh after the retention job",
            "CALL refresh_continuous_aggregate('t_daily', NULL, NULL)",
            &[8],
        ),
        (
            "remove_retention_policy",
            "SELECT remove_retention_policy('t')",
            &[10],
        ),
        ("TRUNCATE", "TRUNCATE t", &[1, 2, 3]),
    ];
    for (what, sql, moves) in changes {
        if what == "the retention job" {
            let id = plain(
                &a,
                "SELECT job_id::text FROM timescaledb_information.jobs \
                 WHERE hypertable_name = 't' AND proc_name = 'policy_retention'",
            )
            .await
            .expect("a retention job");
            exec(&a, &format!("CALL run_job({id})")).await;
        } else {
            exec(&a, sql).await;
        }
        let now = check(&srv, &a, &b, &r, what).await;
        for i in moves {
            assert_ne!(
                now[*i], last[*i],
                "{what} should change {:?} (the test would not see a stale answer)",
                READS[*i]
            );
        }
        last = now;
    }
}
