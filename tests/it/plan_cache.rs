//! Reused query plans (simple protocol, same text) stay correct: another session's DDL
//! invalidates them, and queries calling `now()` are planned afresh every time.

use crate::harness::{TestServer, text_rows};

fn cells(rows: Vec<Vec<Option<String>>>) -> Vec<Vec<String>> {
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn another_sessions_ddl_invalidates_a_cached_plan() {
    let srv = TestServer::start();
    let a = srv.connect("sundial").await;
    let b = srv.connect("sundial").await;
    a.batch_execute(
        "CREATE TABLE t (time timestamptz NOT NULL, v bigint) WITH (tsdb.hypertable);
         INSERT INTO t VALUES ('2024-01-01 00:00:00+00', 1), ('2024-01-02 00:00:00+00', 2)",
    )
    .await
    .expect("setup");
    let q = "SELECT * FROM t ORDER BY time";
    assert_eq!(
        cells(text_rows(&a, q).await)[1],
        ["2024-01-02 00:00:00+00", "2"]
    );
    assert_eq!(cells(text_rows(&a, q).await).len(), 2);

    b.batch_execute("ALTER TABLE t ADD COLUMN host text")
        .await
        .expect("alter");
    assert_eq!(
        cells(text_rows(&a, q).await)[1],
        ["2024-01-02 00:00:00+00", "2", "NULL"]
    );

    b.batch_execute(
        "DROP TABLE t;
         CREATE TABLE t (time timestamptz NOT NULL, v double precision, note text);
         INSERT INTO t VALUES ('2024-02-01 00:00:00+00', 0.5, 'new')",
    )
    .await
    .expect("recreate");
    assert_eq!(
        cells(text_rows(&a, q).await),
        [["2024-02-01 00:00:00+00", "0.5", "new"]]
    );

    b.batch_execute("DROP TABLE t").await.expect("drop");
    let err = a.simple_query(q).await.expect_err("dropped table");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    );
}

#[tokio::test]
async fn now_is_evaluated_on_every_run() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    let q = "SELECT now()::text";
    let first = cells(text_rows(&client, q).await);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = cells(text_rows(&client, q).await);
    assert_ne!(first, second, "now() must not be frozen into a reused plan");
}
