//! count/min/max without GROUP BY answered from file statistics give the answer the
//! full scan gives and PostgreSQL's: files cut by the time filter, memtable rows,
//! NULLs, a column added later, deleted rows, a session time zone, a transaction's
//! own rows, and line-protocol points written twice.

use crate::harness::{TestServer, cells, text_rows};

type Rows = Vec<Vec<String>>;

/// The answer with the statistics path on and with it off (the full scan).
async fn both_ways(c: &tokio_postgres::Client, q: &str) -> (Rows, Rows) {
    let on = cells(text_rows(c, q).await);
    c.batch_execute("SET sundial.stats_answers = off")
        .await
        .expect("off");
    let off = cells(text_rows(c, q).await);
    c.batch_execute("SET sundial.stats_answers = on")
        .await
        .expect("on");
    (on, off)
}

async fn explain(c: &tokio_postgres::Client, q: &str) -> String {
    text_rows(c, &format!("EXPLAIN {q}"))
        .await
        .into_iter()
        .filter_map(|r| r.get(1).cloned().flatten())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The number after `key=` in an EXPLAIN text, 0 when absent.
fn explained(text: &str, key: &str) -> u64 {
    text.split(&format!("{key}="))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn aggregates_from_statistics_equal_the_scan_and_postgresql() {
    let srv = TestServer::start();
    let c = srv.connect("sundial").await;
    let mut pg = crate::pg_compare::PgServer::start();
    let pgc = pg.connect().await;
    let ddl = "CREATE TABLE m (time timestamptz NOT NULL, host text, v double precision, n bigint)";
    let rows = |from: i64, to: i64| {
        (from..to)
            .map(|i| {
                let v = match i % 11 {
                    0 => "NULL".to_string(),
                    3 => "1e300".to_string(),
                    4 => "-2.5e-300".to_string(),
                    _ => format!("{}.25", (i * 37) % 1000 - 500),
                };
                let n = if i % 5 == 0 {
                    "NULL".to_string()
                } else {
                    (i * 1_000_000_007 % 9_999_999_967).to_string()
                };
                format!(
                    "('2024-01-01 00:00:00+00'::timestamptz + interval '{} minutes', 'h{}', {v}, {n})",
                    i * 20,
                    i % 3
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Six days at 20-minute steps (72 rows a day), in two flushes.
    let (a, b) = (rows(0, 216), rows(216, 432));
    c.batch_execute(&format!(
        "{ddl} WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
         INSERT INTO m VALUES {a}; SELECT sundial_flush();
         INSERT INTO m VALUES {b}; SELECT sundial_flush();"
    ))
    .await
    .expect("sundial setup");
    pgc.batch_execute(&format!(
        "SET TIME ZONE 'UTC'; {ddl}; INSERT INTO m VALUES {a}; INSERT INTO m VALUES {b};"
    ))
    .await
    .expect("postgres setup");
    // A column added later (NULL in the older files), rows deleted from one day (its
    // file is written again), rows still in memory in an old and a new chunk.
    let later = "ALTER TABLE m ADD COLUMN w integer;
        DELETE FROM m WHERE host = 'h2' AND time >= '2024-01-02 00:00:00+00' AND time < '2024-01-03 00:00:00+00';
        INSERT INTO m VALUES ('2024-01-03 07:00:00+00', 'h9', 7.5, 70, 7), ('2024-01-08 00:00:00+00', 'h0', NULL, NULL, -3), ('2024-01-08 01:00:00+00', 'a', -1, -1, NULL);";
    c.batch_execute(later).await.expect("sundial later");
    pgc.batch_execute(later).await.expect("postgres later");

    let queries = [
        "SELECT count(*), count(v), min(v), max(v) FROM m",
        "SELECT count(*), count(v), min(v), max(v), count(n), min(n), max(n) FROM m WHERE time >= '2024-01-02' AND time < '2024-01-05'",
        "SELECT count(*), min(time), max(time) FROM m WHERE time > '2024-01-02 13:00:00+00'",
        "SELECT min(host), max(host), count(w), min(w), max(w), min(time), max(time) FROM m WHERE time < '2024-01-04'",
        "SELECT count(*), max(v) FROM m WHERE time >= '2030-01-01'",
        "SELECT count(1) AS c, max(n) AS top FROM m WHERE time BETWEEN '2024-01-02 00:00:00+00' AND '2024-01-06 23:59:59+00'",
        "SELECT count(*) FROM m WHERE time >= '2024-01-03' AND time < '2024-01-04' AND time <> '2024-01-03 12:00:00+00'",
    ];
    for q in queries {
        let (on, off) = both_ways(&c, q).await;
        assert_eq!(on, off, "{q}: statistics vs scan");
        assert_eq!(on, cells(text_rows(&pgc, q).await), "{q}: vs PostgreSQL");
    }
    // sum/avg of float8 (on a table without 1e300, whose avg PostgreSQL refuses as
    // its sum of squares overflows). Sums may be added in another order: equal to
    // 1e-9 relative.
    let fddl = "CREATE TABLE f (time timestamptz NOT NULL, x double precision)";
    let frows = |from: i64, to: i64| {
        (from..to)
            .map(|i| {
                let x = match i % 13 {
                    0 => "NULL".to_string(),
                    _ => format!("{}.125", (i * 37) % 1000 - 500),
                };
                format!(
                    "('2024-01-01 00:00:00+00'::timestamptz + interval '{} minutes', {x})",
                    i * 45
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (fa, fb) = (frows(0, 100), frows(100, 140));
    c.batch_execute(&format!(
        "{fddl} WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
         INSERT INTO f VALUES {fa}; SELECT sundial_flush(); INSERT INTO f VALUES {fb};"
    ))
    .await
    .expect("sundial f");
    pgc.batch_execute(&format!(
        "{fddl}; INSERT INTO f VALUES {fa}; INSERT INTO f VALUES {fb};"
    ))
    .await
    .expect("postgres f");
    let float_queries = [
        "SELECT sum(x), avg(x), count(x) FROM f",
        "SELECT avg(x), sum(x), min(x), count(*) FROM f WHERE time >= '2024-01-02' AND time < '2024-01-04 12:00:00+00'",
        "SELECT sum(x), avg(x) FROM f WHERE time >= '2030-01-01'",
    ];
    for q in float_queries {
        let (on, off) = both_ways(&c, q).await;
        let pg_rows = cells(text_rows(&pgc, q).await);
        for (name, other) in [("scan", &off), ("PostgreSQL", &pg_rows)] {
            let same = on.len() == other.len()
                && on.iter().zip(other.iter()).all(|(a, b)| {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|(x, y)| {
                            crate::pg_compare::values_match(&Some(x.clone()), &Some(y.clone()))
                        })
                });
            assert!(same, "{q}: statistics {on:?} vs {name} {other:?}");
        }
    }
    let text = explain(&c, float_queries[1]).await;
    assert!(
        explained(&text, "files_answered_from_statistics") >= 1,
        "{text}"
    );
    // The whole-day files are answered from their statistics.
    let text = explain(&c, queries[1]).await;
    assert!(
        explained(&text, "files_answered_from_statistics") >= 2,
        "{text}"
    );

    // One shape with new windows each time (the plan kept for the shape, bound to
    // each text's values), and a prepared statement executed with new values.
    let stmt = c
        .prepare("SELECT count(*), min(n), max(n) FROM m WHERE time >= $1 AND time < $2")
        .await
        .expect("prepare");
    let pstmt = pgc
        .prepare("SELECT count(*), min(n), max(n) FROM m WHERE time >= $1 AND time < $2")
        .await
        .expect("prepare");
    let hits_before = crate::plan_cache::counter(&srv, "sundial_sql_plan_hits_bound_total").await;
    for (from, to) in [(1, 3), (2, 6), (1, 9), (3, 4), (5, 7)] {
        let q = format!(
            "SELECT count(*), min(n), max(n) FROM m WHERE time >= '2024-01-0{from}' AND time < '2024-01-0{to} 06:00:00+00'"
        );
        assert_eq!(
            cells(text_rows(&c, &q).await),
            cells(text_rows(&pgc, &q).await),
            "{q}"
        );
        let at = |d: i32| {
            chrono::DateTime::parse_from_rfc3339(&format!("2024-01-0{d}T06:00:00Z"))
                .expect("time")
                .with_timezone(&chrono::Utc)
        };
        let (a, b) = (at(from), at(to));
        let row = |r: &tokio_postgres::Row| {
            (
                r.get::<_, i64>(0),
                r.get::<_, Option<i64>>(1),
                r.get::<_, Option<i64>>(2),
            )
        };
        let mine: Vec<_> = c
            .query(&stmt, &[&a, &b])
            .await
            .expect("query")
            .iter()
            .map(row)
            .collect();
        let theirs: Vec<_> = pgc
            .query(&pstmt, &[&a, &b])
            .await
            .expect("query")
            .iter()
            .map(row)
            .collect();
        assert_eq!(mine, theirs, "prepared, {a} .. {b}");
    }
    // The shape's plan (with the statistics path) was kept with parameters: the
    // texts after the first bound their windows into it.
    let hits = crate::plan_cache::counter(&srv, "sundial_sql_plan_hits_bound_total").await;
    assert!(
        hits >= hits_before + 4,
        "bound hits {hits_before} -> {hits}: the statistics-path shape was not kept"
    );

    // Another time zone: a literal without an offset is another instant.
    let q =
        "SELECT count(*), min(v), max(n) FROM m WHERE time >= '2024-01-03' AND time < '2024-01-05'";
    c.batch_execute("SET TIME ZONE 'America/New_York'")
        .await
        .expect("tz");
    pgc.batch_execute("SET TIME ZONE 'America/New_York'")
        .await
        .expect("tz");
    let (on, off) = both_ways(&c, q).await;
    assert_eq!(on, off, "{q} in New York");
    assert_eq!(on, cells(text_rows(&pgc, q).await), "{q} in New York");

    // A transaction sees its own rows.
    let q = "SELECT count(*), max(v) FROM m WHERE time >= '2024-01-02' AND time < '2024-01-04'";
    c.batch_execute("SET TIME ZONE 'UTC'").await.expect("tz");
    let before = cells(text_rows(&c, q).await);
    c.batch_execute("BEGIN; INSERT INTO m VALUES ('2024-01-02 05:00:00+00', 'hx', 1e301, 1, 1)")
        .await
        .expect("begin");
    let inside = cells(text_rows(&c, q).await);
    let count: i64 = before[0][0].parse().expect("count");
    assert_eq!(inside, [[(count + 1).to_string(), "1e+301".to_string()]]);
    c.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(cells(text_rows(&c, q).await), before);

    // A table with no rows at all.
    c.batch_execute(&format!(
        "{} WITH (tsdb.hypertable)",
        ddl.replace(" m ", " e ")
    ))
    .await
    .expect("empty table");
    assert_eq!(
        cells(text_rows(&c, "SELECT count(*), count(v), max(v) FROM e").await),
        [["0", "0", "NULL"]]
    );
}

/// Line-protocol points written twice (last write wins) are merged before counting:
/// files holding a point that another source holds again are read, not counted.
#[tokio::test]
async fn line_protocol_rewrites_are_counted_once() {
    let srv = TestServer::start();
    let c = srv.connect("sundial").await;
    let write = |body: &'static str| {
        let url = srv.http_url("/write?db=sundial&precision=s");
        async move {
            let resp = reqwest::Client::new()
                .post(url)
                .body(body)
                .send()
                .await
                .expect("post");
            assert_eq!(resp.status().as_u16(), 204, "{body}");
        }
    };
    // 2024-01-01, -02 and -03 at midnight; the -02 point is written again.
    write("cpu,host=a v=1 1704067200\ncpu,host=a v=2 1704153600\ncpu,host=b v=3 1704240000").await;
    c.batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    write("cpu,host=a v=50 1704153600").await;
    let q = "SELECT count(*), min(v), max(v), count(v), sum(v), avg(v) FROM cpu";
    let want = [["3", "1", "50", "3", "54", "18"]];
    let (on, off) = both_ways(&c, q).await;
    assert_eq!(on, off);
    assert_eq!(on, want);
    c.batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    let (on, off) = both_ways(&c, q).await;
    assert_eq!(on, off);
    assert_eq!(on, want);
    let q = "SELECT count(*), max(v) FROM cpu WHERE time >= '2024-01-02' AND time < '2024-01-03'";
    let (on, off) = both_ways(&c, q).await;
    assert_eq!(on, off);
    assert_eq!(on, [["1", "50"]]);
}
