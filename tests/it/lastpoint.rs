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
