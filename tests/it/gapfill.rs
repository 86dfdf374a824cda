//! Gap filling as a plan node: EXPLAIN shows it, it works inside views, CTEs,
//! subqueries and prepared statements, kept plans keep it, and a 10M-bucket fill
//! streams within a small query memory limit.

use crate::harness::{TestServer, cells, text_rows};

const SETUP: &str = "SET TimeZone = 'UTC';
    CREATE TABLE m (ts timestamptz NOT NULL, host text, reqs int, lat float8) WITH (tsdb.hypertable);
    INSERT INTO m VALUES ('2024-01-01 00:10:00+00', 'a', 1, 0.5), ('2024-01-01 02:10:00+00', 'a', 3, 1.5),
                         ('2024-01-01 02:20:00+00', 'b', 5, 2.5)";

const Q: &str = "SELECT time_bucket_gapfill('1 hour', ts) b, host, sum(reqs) s, locf(avg(lat)) l
    FROM m WHERE ts >= '2024-01-01' AND ts < '2024-01-01 04:00' GROUP BY 1, 2 ORDER BY 2, 1";

#[tokio::test]
async fn gapfill_is_a_plan_node_in_explain_views_ctes_and_kept_plans() {
    let srv = TestServer::start();
    let c = srv.connect("sundial").await;
    c.batch_execute(SETUP).await.expect("setup");

    let explain = cells(text_rows(&c, &format!("EXPLAIN {Q}")).await);
    let text = format!("{explain:?}");
    assert!(text.contains("GapFill: bucket="), "{text}");
    assert!(text.contains("GapFillExec"), "{text}");

    let direct = cells(text_rows(&c, Q).await);
    assert_eq!(direct.len(), 8, "{direct:?}");
    assert_eq!(direct[1], ["2024-01-01 01:00:00+00", "a", "NULL", "0.5"]);
    assert_eq!(direct[4], ["2024-01-01 00:00:00+00", "b", "NULL", "NULL"]);

    // A kept plan answers the second run the same.
    let again = cells(text_rows(&c, Q).await);
    assert_eq!(again, direct);
    let explain = cells(text_rows(&c, &format!("EXPLAIN {Q}")).await);
    let cache = explain
        .iter()
        .find(|r| r[0] == "plan_cache")
        .map(|r| r[1].clone())
        .unwrap_or_default();
    assert!(cache.starts_with("hit"), "plan cache: {cache}");

    // In a view, a CTE and a subquery.
    c.batch_execute(&format!("CREATE VIEW gv AS {Q}"))
        .await
        .expect("view");
    let from_view = cells(text_rows(&c, "SELECT * FROM gv ORDER BY host, b").await);
    assert_eq!(from_view, direct);
    let cte = cells(
        text_rows(
            &c,
            &format!("WITH f AS ({Q}) SELECT host, count(*), count(s), max(l) FROM f GROUP BY host ORDER BY host"),
        )
        .await,
    );
    assert_eq!(cte, [["a", "4", "2", "1.5"], ["b", "4", "1", "2.5"]]);

    // Prepared, with the range as parameters (extended protocol).
    let stmt = c
        .prepare(
            "SELECT time_bucket_gapfill('1 hour', ts) b, count(*) FROM m
             WHERE ts >= $1::timestamptz AND ts < $2::timestamptz GROUP BY 1 ORDER BY 1",
        )
        .await
        .expect("prepare");
    let at = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
    let (from, to) = (at(1_704_067_200), at(1_704_067_200 + 5 * 3600));
    let rows = c.query(&stmt, &[&from, &to]).await.expect("query");
    let counts: Vec<Option<i64>> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(counts, [Some(1), None, Some(2), None, None]);
}

#[tokio::test]
async fn ten_million_buckets_stream_within_the_query_memory_limit() {
    let srv = TestServer::start_with_args(&["--query-memory-limit", "64MiB"], &[]);
    let c = srv.connect("sundial").await;
    c.batch_execute(SETUP).await.expect("setup");
    // 10,000,000 one-second buckets (115.74 days), every column filled.
    let q = "SELECT count(*), count(l), count(i), max(b) FROM (
        SELECT time_bucket_gapfill('1 second', ts) b, locf(avg(lat)) l, interpolate(avg(lat)) i
        FROM m WHERE ts >= '2024-01-01' AND ts < timestamptz '2024-01-01' + interval '10000000 seconds'
        GROUP BY 1) s";
    let rows = cells(text_rows(&c, q).await);
    // locf has a value from the first row (00:10) on; interpolate between 00:10 and 02:20.
    assert_eq!(
        rows,
        [[
            "10000000",
            (10_000_000 - 600).to_string().as_str(),
            (2 * 3600 + 10 * 60 + 1).to_string().as_str(),
            "2024-04-25 17:46:39+00"
        ]]
    );
}
