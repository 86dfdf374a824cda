//! Scans served from columns kept decoded in memory (`CachedScanExec`) give the
//! answers the Parquet path gives: NULLs, NaN, strings, narrow windows that prune
//! granules, LIMIT, memtable rows beside the files, and files rewritten by DELETE.

use std::time::Duration;

use crate::harness::{TestServer, cells, physical_plan, text_rows};

const QUERIES: &[&str] = &[
    "SELECT count(*), count(host), count(v), sum(n) FROM m",
    "SELECT host, count(*), max(v), min(n) FROM m GROUP BY host ORDER BY host NULLS FIRST",
    "SELECT time, host, v, n FROM m WHERE time >= '2024-01-02 03:00:00+00' AND time < '2024-01-02 03:20:00+00' ORDER BY time, host",
    "SELECT count(*), sum(n) FROM m WHERE host IN ('h1', 'h7') AND time >= '2024-01-01 20:00:00+00' AND time < '2024-01-02 02:00:00+00'",
    "SELECT count(*) FROM m WHERE v > 0.9",
    "SELECT count(*) FROM m WHERE v = 'NaN'::float8",
    "SELECT count(*) FROM m WHERE host IS NULL",
    "SELECT time, host, n FROM m ORDER BY time DESC, host LIMIT 7",
    "SELECT time_bucket('6 hours', time) AS b, count(*), avg(n) FROM m GROUP BY b ORDER BY b",
    "SELECT * FROM m WHERE n % 997 = 0 ORDER BY time, host",
    "SELECT host, n FROM m WHERE time = '2024-01-03 12:00:00+00' ORDER BY host",
    // windows inside the first day, which has no memtable rows: the decoded scan
    // applies the time filter itself
    "SELECT count(*), sum(n), max(v), count(host) FROM m WHERE time >= '2024-01-01 05:00:00+00' AND time < '2024-01-01 07:30:00+00'",
    "SELECT time, n FROM m WHERE time >= '2024-01-01 05:00:00+00' AND time < '2024-01-01 09:00:00+00' AND host = 'h2' ORDER BY time DESC LIMIT 3",
    "SELECT count(*) FROM (SELECT n FROM m WHERE time > '2024-01-01 10:00:00+00' AND time <= '2024-01-01 10:25:00+00' LIMIT 10) s",
    "SELECT count(*) FROM m WHERE time >= '2024-01-01 10:00:00+00' AND time < '2024-01-01 10:00:00+00'",
];

/// The query of [`QUERIES`] whose decoded scan filters its rows itself.
const FILTERED: usize = 11;

#[tokio::test]
async fn decoded_scans_answer_as_parquet_scans() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    // Three daily chunks of 4,320 rows (ten hosts, one row a minute spread over them),
    // NULL hosts and values, a NaN; flushed to files, then rows still in memory.
    client
        .batch_execute(
            "SET TimeZone = 'UTC';
             CREATE TABLE m (time timestamptz NOT NULL, host text, v double precision, n bigint)
               WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
             INSERT INTO m
               SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' + i * INTERVAL '1 minute',
                      CASE WHEN i % 101 = 0 THEN NULL ELSE 'h' || (i % 10) END,
                      CASE WHEN i = 777 THEN 'NaN'::float8 WHEN i % 53 = 0 THEN NULL
                           ELSE (i % 1000) / 1000.0 END,
                      i
               FROM generate_series(0, 3 * 1440 - 1) AS i;
             SELECT sundial_flush();
             INSERT INTO m VALUES ('2024-01-03 12:00:00+00', 'h-mem', 0.5, -1),
                                  ('2024-01-02 03:10:00+00', 'h-mem', 0.95, -2);",
        )
        .await
        .expect("setup");

    client
        .batch_execute("SET sundial.decoded_scans = off")
        .await
        .unwrap();
    let mut want = vec![];
    for q in QUERIES {
        want.push(cells(text_rows(&client, q).await));
        assert!(
            !physical_plan(&client, q).await.contains("CachedScanExec"),
            "off: {q}"
        );
    }
    assert!(!want[2].is_empty() && !want[3].is_empty() && !want[10].is_empty());
    assert_eq!(want[13], vec![vec!["10".to_string()]]);

    client
        .batch_execute("SET sundial.decoded_scans = on")
        .await
        .unwrap();
    // A file's columns load in the background once a scan asked for them twice.
    let mut cached = false;
    for _ in 0..200 {
        for q in QUERIES {
            text_rows(&client, q).await;
        }
        if physical_plan(&client, "SELECT * FROM m")
            .await
            .contains("CachedScanExec")
        {
            cached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cached, "columns never kept decoded");
    for (q, w) in QUERIES.iter().zip(&want) {
        // Every scan of the files is served decoded (some queries take other paths:
        // newest rows, statistics).
        let plan = physical_plan(&client, q).await;
        assert!(
            !plan.contains("HypertableScanExec") || plan.contains("CachedScanExec"),
            "{q}:\n{plan}"
        );
        assert_eq!(&cells(text_rows(&client, q).await), w, "{q}");
    }
    let plan = physical_plan(&client, QUERIES[FILTERED]).await;
    assert!(
        plan.contains("CachedScanExec") && plan.contains("filter=") && !plan.contains("FilterExec"),
        "{plan}"
    );
    // A narrow window keeps a few granules of one file.
    let plan = physical_plan(&client, QUERIES[2]).await;
    let granules = plan
        .split("granules=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or_default()
        .to_string();
    let (kept, total) = granules.split_once('/').unwrap_or(("", ""));
    let (kept, total): (usize, usize) = (kept.parse().unwrap(), total.parse().unwrap());
    assert!(kept >= 1 && kept < total, "{granules}:\n{plan}");

    // A DELETE rewrites files under new paths: the kept columns of the old files
    // never answer again.
    client
        .batch_execute("DELETE FROM m WHERE host = 'h3'")
        .await
        .unwrap();
    client
        .batch_execute("SET sundial.decoded_scans = off")
        .await
        .unwrap();
    let mut after = vec![];
    for q in QUERIES {
        after.push(cells(text_rows(&client, q).await));
    }
    assert_ne!(after[1], want[1], "the delete changed the groups");
    client
        .batch_execute("SET sundial.decoded_scans = on")
        .await
        .unwrap();
    for _ in 0..3 {
        for (q, w) in QUERIES.iter().zip(&after) {
            assert_eq!(&cells(text_rows(&client, q).await), w, "after delete: {q}");
        }
    }
}
