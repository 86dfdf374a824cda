//! Time filters are applied by the hypertable scan itself: a chunk file whose
//! statistics put every row inside the range is read without its time column and
//! without a filter; files and memtable rows that straddle the range are filtered.

use crate::harness::{TestServer, cells, physical_plan, text_rows};

async fn one_row(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let rows = text_rows(client, sql).await;
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0]
        .iter()
        .map(|v| v.clone().unwrap_or_else(|| "NULL".into()))
        .collect()
}

#[tokio::test]
async fn files_inside_the_range_are_read_without_time_column_or_filter() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    // Three daily chunks, one file each after the flush, then one more in-memory row.
    client
        .batch_execute(
            "SET TimeZone = 'UTC';
             CREATE TABLE m (time timestamptz NOT NULL, host text, v bigint) WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
             INSERT INTO m VALUES
               ('2024-01-01 01:00:00+00', 'a', 1), ('2024-01-01 13:00:00+00', 'b', 2),
               ('2024-01-02 01:00:00+00', 'a', 10), ('2024-01-02 13:00:00+00', 'b', 20),
               ('2024-01-03 01:00:00+00', 'a', 100), ('2024-01-03 13:00:00+00', 'b', 200);
             SELECT sundial_flush();",
        )
        .await
        .expect("setup");

    // The whole of 2 January: its file lies inside the range.
    let whole = "SELECT sum(v) FROM m WHERE time >= '2024-01-02' AND time < '2024-01-03'";
    let plan = physical_plan(&client, whole).await;
    assert!(
        !plan.contains("FilterExec"),
        "no filter for a file inside the range:\n{plan}"
    );
    let scan = plan
        .lines()
        .find(|l| l.contains("DataSourceExec") && l.contains("parquet"))
        .unwrap_or_default();
    assert!(
        scan.contains("projection=[v]"),
        "the time column is not read:\n{plan}"
    );
    // Expected values below were computed by PostgreSQL 15 on the same rows.
    assert_eq!(one_row(&client, whole).await, ["30"]);

    // A range that cuts through the first and last day is filtered.
    let cut = "SELECT sum(v), count(*) FROM m WHERE time >= '2024-01-01 12:00:00+00' AND time < '2024-01-03 12:00:00+00'";
    let plan = physical_plan(&client, cut).await;
    assert!(
        plan.contains("FilterExec"),
        "straddling files are filtered:\n{plan}"
    );
    assert_eq!(one_row(&client, cut).await, ["132", "4"]);

    // count(*) alone, and a filter on another column next to the time range.
    assert_eq!(
        one_row(&client, "SELECT count(*) FROM m WHERE time >= '2024-01-02'").await,
        ["4"]
    );
    assert_eq!(
        one_row(
            &client,
            "SELECT count(*), sum(v) FROM m WHERE time >= '2024-01-01 12:00:00+00' AND host = 'b'"
        )
        .await,
        ["3", "222"]
    );
    // Expressions of the time column and OR-ed ranges.
    assert_eq!(
        one_row(
            &client,
            "SELECT sum(v) FROM m WHERE time::date = '2024-01-03'"
        )
        .await,
        ["300"]
    );
    assert_eq!(
        one_row(
            &client,
            "SELECT sum(v) FROM m WHERE time < '2024-01-01 12:00:00+00' OR time >= '2024-01-03'"
        )
        .await,
        ["301"]
    );

    // A row still in memory inside an otherwise whole day is filtered with the rest.
    client
        .batch_execute(
            "INSERT INTO m VALUES ('2024-01-02 23:00:00+00', 'c', 1000), ('2024-01-04 00:00:00+00', 'c', 5000)",
        )
        .await
        .expect("insert");
    assert_eq!(one_row(&client, whole).await, ["1030"]);
    assert_eq!(
        one_row(&client, "SELECT host, v FROM m WHERE time >= '2024-01-02 20:00:00+00' AND time < '2024-01-03 02:00:00+00' ORDER BY v LIMIT 1").await,
        ["a", "100"]
    );
}

#[tokio::test]
async fn delete_drops_files_inside_the_range_and_rewrites_the_others() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE d (time timestamptz NOT NULL, v bigint) WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
             INSERT INTO d VALUES
               ('2024-01-01 01:00:00+00', 1), ('2024-01-01 13:00:00+00', 2),
               ('2024-01-02 01:00:00+00', 10), ('2024-01-02 13:00:00+00', 20);
             SELECT sundial_flush();",
        )
        .await
        .expect("setup");
    assert_eq!(
        one_row(
            &client,
            "SELECT count(*) FROM sundial_chunk_files WHERE hypertable_name = 'd'"
        )
        .await,
        ["2"]
    );
    // The whole first day and half of the second.
    let n = client
        .execute("DELETE FROM d WHERE time < '2024-01-02 12:00:00+00'", &[])
        .await
        .expect("delete");
    assert_eq!(n, 3);
    assert_eq!(
        one_row(&client, "SELECT count(*), sum(v) FROM d").await,
        ["1", "20"]
    );
    // The first day's file went away whole; the second's was rewritten to one row.
    let left = text_rows(
        &client,
        "SELECT row_count FROM sundial_chunk_files WHERE hypertable_name = 'd'",
    )
    .await;
    assert_eq!(left, vec![vec![Some("1".to_string())]]);
}

/// A query whose scans are estimated (from the files' and memtable's time ranges)
/// at no more than `sundial.small_scan_rows` rows runs in one partition: EXPLAIN
/// shows no repartitioning and no merge, and the answer is the one the plan over
/// every core gives. Joins keep every core (their work is not bounded by the scan).
#[tokio::test]
async fn small_scans_run_in_one_partition() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    let mut values = vec![];
    for h in 0..48 {
        for host in ["a", "b", "c"] {
            values.push(format!(
                "('2024-01-01 00:00:00+00'::timestamptz + interval '{h} hours', '{host}', {h})"
            ));
        }
    }
    client
        .batch_execute(&format!(
            "SET TimeZone = 'UTC';
             CREATE TABLE m (time timestamptz NOT NULL, host text, v bigint) WITH (tsdb.hypertable, tsdb.chunk_interval = '1 day');
             INSERT INTO m VALUES {};
             SELECT sundial_flush();
             INSERT INTO m VALUES ('2024-01-02 23:30:00+00', 'a', 1000);",
            values.join(", ")
        ))
        .await
        .expect("setup");
    let q = "SELECT time_bucket('6 hours', time) AS b, host, max(v), count(*) FROM m \
             WHERE time >= '2024-01-01 10:00:00+00' AND time < '2024-01-02 23:45:00+00' \
             GROUP BY b, host ORDER BY b, host";
    let small = physical_plan(&client, q).await;
    assert!(
        !small.contains("RepartitionExec") && !small.contains("SortPreservingMergeExec"),
        "one partition for a small scan:\n{small}"
    );
    let answer = text_rows(&client, q).await;
    assert_eq!(answer.len(), 7 * 3, "{answer:?}");
    // Computed by PostgreSQL 15 on the same rows: the last bucket holds 18..23 h of
    // 2 January and the memtable row.
    assert_eq!(
        answer.last().cloned(),
        Some(vec![
            Some("2024-01-02 18:00:00+00".to_string()),
            Some("c".to_string()),
            Some("47".to_string()),
            Some("6".to_string()),
        ])
    );
    assert_eq!(
        answer[answer.len() - 3][2..],
        [Some("1000".to_string()), Some("7".to_string())]
    );

    client
        .batch_execute("SET sundial.small_scan_rows = 0")
        .await
        .expect("set");
    let wide = physical_plan(&client, q).await;
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        assert!(
            wide.contains("RepartitionExec"),
            "every core when switched off:\n{wide}"
        );
    }
    assert_eq!(
        text_rows(&client, q).await,
        answer,
        "same answer either way"
    );

    client
        .batch_execute("SET sundial.small_scan_rows = 250000")
        .await
        .expect("set");
    let join = "SELECT count(*) FROM m a JOIN m b ON a.host = b.host \
                WHERE a.time < '2024-01-01 02:00:00+00' AND b.time < '2024-01-01 02:00:00+00'";
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        let plan = physical_plan(&client, join).await;
        assert!(
            plan.contains("RepartitionExec"),
            "a join keeps every core:\n{plan}"
        );
    }
    assert_eq!(
        text_rows(&client, join).await,
        vec![vec![Some("12".to_string())]]
    );
    let err = client
        .batch_execute("SET sundial.small_scan_rows = 'many'")
        .await
        .expect_err("not a number");
    assert_eq!(err.code().map(|c| c.code()), Some("22023"));
}

/// Scans that read several columns besides their filter's apply the filter while
/// decoding (the other columns are decoded only for rows that pass). Their answers
/// must stay exact: over files that straddle the range, over the memtable, and over
/// a line-protocol table whose overlapping sources are merged (last write wins, so a
/// field filter must see the newest value of a point, not an older copy).
#[tokio::test]
async fn wide_scans_filtered_while_decoding_stay_exact() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    let mut values = vec![];
    for i in 0..200 {
        values.push(format!(
            "('2024-01-01 00:00:00+00'::timestamptz + interval '{i} minutes', 'h{}', 'r{}', {}, {}.5, 'x{i}')",
            i % 7,
            i % 3,
            i * 13 % 101,
            i % 10
        ));
    }
    client
        .batch_execute(&format!(
            "SET TimeZone = 'UTC';
             CREATE TABLE w (time timestamptz NOT NULL, host text, region text, usage bigint, f float8, note text)
               WITH (tsdb.hypertable, tsdb.chunk_interval = '1 hour');
             INSERT INTO w VALUES {};
             SELECT sundial_flush();
             INSERT INTO w VALUES ('2024-01-01 01:30:30+00', 'h9', 'r9', 99, 9.5, 'mem');",
            values.join(", ")
        ))
        .await
        .expect("setup");
    // Rows 50..=130 minutes straddle three hourly files; usage > 90 keeps few.
    let q = "SELECT * FROM w WHERE usage > 90 AND time >= '2024-01-01 00:50:00+00' \
             AND time <= '2024-01-01 02:10:00+00' ORDER BY time";
    let rows = text_rows(&client, q).await;
    // Expected: PostgreSQL 15 on the same rows (i*13 % 101 > 90 for i in 50..=130,
    // plus the memtable row).
    let minutes: Vec<String> = rows
        .iter()
        .map(|r| r[5].clone().unwrap_or_default())
        .collect();
    assert_eq!(
        minutes,
        [
            "x54", "x62", "x77", "x85", "mem", "x93", "x108", "x116", "x124"
        ]
    );
    assert_eq!(
        rows[0],
        [
            Some("2024-01-01 00:54:00+00".to_string()),
            Some("h5".to_string()),
            Some("r0".to_string()),
            Some("96".to_string()),
            Some("4.5".to_string()),
            Some("x54".to_string()),
        ]
    );

    // Line protocol: the second write of each point lowers usage below the filter.
    let db = "lp";
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .expect("db");
    let first: Vec<String> = (0..20)
        .map(|i| {
            format!(
                "m,host=a,rack=r{} usage={}i,temp=1.5,note=\"n{i}\" {}",
                i % 2,
                95 + i % 3,
                1_700_000_000 + i * 10
            )
        })
        .collect();
    let lp = |body: String| {
        let url = srv.http_url(&format!("/write?db={db}&precision=s"));
        async move {
            let resp = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client")
                .post(url)
                .body(body)
                .send()
                .await
                .expect("post");
            assert_eq!(resp.status().as_u16(), 204);
        }
    };
    lp(first.join("\n")).await;
    let c2 = srv.connect(db).await;
    c2.batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    // Points 0, 2, 4, ... rewritten with usage 10 (a file and the memtable overlap).
    let second: Vec<String> = (0..20)
        .step_by(2)
        .map(|i| {
            format!(
                "m,host=a,rack=r{} usage=10i,temp=2.5,note=\"new{i}\" {}",
                i % 2,
                1_700_000_000 + i * 10
            )
        })
        .collect();
    lp(second.join("\n")).await;
    let q = "SELECT note, usage, temp FROM m WHERE usage > 90 ORDER BY time";
    let rows = cells(text_rows(&c2, q).await);
    let notes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        notes,
        [
            "n1", "n3", "n5", "n7", "n9", "n11", "n13", "n15", "n17", "n19"
        ]
    );
    assert!(rows.iter().all(|r| r[2] == "1.5"), "{rows:?}");
    c2.batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    assert_eq!(cells(text_rows(&c2, q).await), rows, "same after the flush");

    // DataFusion's options take PostgreSQL's Boolean spellings; RESET returns one
    // to the value a new session has.
    client
        .batch_execute("SET datafusion.execution.parquet.pushdown_filters = on")
        .await
        .expect("set on");
    assert_eq!(
        text_rows(
            &client,
            "SHOW datafusion.execution.parquet.pushdown_filters"
        )
        .await,
        vec![vec![Some("true".to_string())]]
    );
    client
        .batch_execute("RESET datafusion.execution.parquet.pushdown_filters")
        .await
        .expect("reset");
    client
        .batch_execute("SET datafusion.execution.target_partitions = 1")
        .await
        .expect("set 1");
    assert!(
        !physical_plan(
            &client,
            "SELECT count(*) FROM w a JOIN w b ON a.host = b.host"
        )
        .await
        .contains("RepartitionExec"),
        "one partition when DataFusion is told so"
    );
    client.batch_execute("RESET ALL").await.expect("reset all");
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        assert!(
            physical_plan(
                &client,
                "SELECT count(*) FROM w a JOIN w b ON a.host = b.host"
            )
            .await
            .contains("RepartitionExec"),
            "every core again after RESET ALL"
        );
    }
    assert_eq!(
        cells(text_rows(&client, "SELECT count(*) FROM w WHERE usage > 90").await),
        [["21"]]
    );
    let err = client
        .batch_execute("SET datafusion.execution.target_partitions = 'many'")
        .await
        .expect_err("not a number");
    assert_eq!(err.code().map(|c| c.code()), Some("22023"));
}

/// A narrow time window over many series (TSBS iot stationary-trucks: ten minutes of
/// a fleet's trucks) is applied while decoding: files are sorted by series then
/// time, so the page index cannot narrow it. The answers stay exact with overlapping
/// line-protocol writes, before and after a flush; a window pinned to one series
/// (the leading series-key column) is left to the page index.
#[tokio::test]
async fn narrow_windows_over_many_series_filter_while_decoding() {
    let srv = TestServer::start();
    let admin = srv.connect("sundial").await;
    admin
        .batch_execute("CREATE DATABASE iot")
        .await
        .expect("db");
    let t0 = 1_700_000_000i64 - 1_700_000_000 % 86_400; // a UTC midnight
    let post = |body: String| {
        let url = srv.http_url("/write?db=iot&precision=s");
        async move {
            let resp = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client")
                .post(url)
                .body(body)
                .send()
                .await
                .expect("post");
            assert_eq!(resp.status().as_u16(), 204);
        }
    };
    // 30 trucks, a point a minute for a day.
    let mut lines = vec![];
    for i in 0..30i64 {
        for m in 0..1440i64 {
            lines.push(format!(
                "readings,name=t{i:02},fleet=f{} velocity={}i {}",
                i % 3,
                (i * 7 + m) % 50,
                t0 + m * 60
            ));
        }
    }
    post(lines.join("\n")).await;
    let c = srv.connect("iot").await;
    c.batch_execute("SET TimeZone = 'UTC'; SELECT sundial_flush()")
        .await
        .expect("flush");
    let at = |minute: i64| {
        chrono::DateTime::from_timestamp(t0 + minute * 60, 0)
            .expect("time")
            .format("%Y-%m-%d %H:%M:%S+00")
            .to_string()
    };
    let q = format!(
        "SELECT name, count(*), sum(velocity) FROM readings WHERE time >= '{}' AND time < '{}' \
         AND fleet = 'f1' GROUP BY name ORDER BY name",
        at(600),
        at(610)
    );
    let expected = |rewritten: bool| -> Vec<Vec<String>> {
        (0..30i64)
            .filter(|i| i % 3 == 1)
            .map(|i| {
                let sum: i64 = if rewritten && i == 1 {
                    10 * 1000
                } else {
                    (600..610).map(|m| (i * 7 + m) % 50).sum()
                };
                vec![format!("t{i:02}"), "10".to_string(), sum.to_string()]
            })
            .collect()
    };
    // The Parquet path is what this checks: no decoded columns kept in memory.
    c.batch_execute("SET sundial.decoded_scans = off")
        .await
        .unwrap();
    assert_eq!(cells(text_rows(&c, &q).await), expected(false));
    let analyzed = text_rows(&c, &format!("EXPLAIN ANALYZE {q}")).await;
    let plan = format!("{analyzed:?}");
    assert!(
        plan.contains("pushdown_rows_pruned=") && !plan.contains("pushdown_rows_pruned=0,"),
        "the window is applied while decoding: {plan}"
    );
    // One truck pinned: the page index narrows the read; no row filter.
    let pinned = format!(
        "SELECT count(*) FROM readings WHERE time >= '{}' AND time < '{}' AND name = 't04'",
        at(600),
        at(610)
    );
    assert_eq!(cells(text_rows(&c, &pinned).await), [["10"]]);
    let plan = format!(
        "{:?}",
        text_rows(&c, &format!("EXPLAIN ANALYZE {pinned}")).await
    );
    assert!(plan.contains("pushdown_rows_pruned=0,"), "{plan}");

    // t01's points in the window written again: the memtable overlaps the file.
    let again: Vec<String> = (600..610)
        .map(|m| format!("readings,name=t01,fleet=f1 velocity=1000i {}", t0 + m * 60))
        .collect();
    post(again.join("\n")).await;
    assert_eq!(cells(text_rows(&c, &q).await), expected(true));
    c.batch_execute("SELECT sundial_flush()")
        .await
        .expect("flush");
    assert_eq!(
        cells(text_rows(&c, &q).await),
        expected(true),
        "same after the flush"
    );
}
