//! What a hostile or careless client sends must get an answer or a clear error, and
//! never take the server down or hold up other clients: statements nested past any
//! stack, `statement_timeout`, a cancel of a statement that computes without pause.

use std::time::Duration;

use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::harness::{TestServer, cells, text_rows};

/// The server still answers a fresh connection.
async fn alive(server: &TestServer) {
    let c = server.connect("sundial").await;
    assert_eq!(
        cells(text_rows(&c, "SELECT 41 + 1").await),
        vec![vec!["42"]]
    );
}

fn code(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(SqlState::code)
}

#[tokio::test]
async fn operator_chains_answer_or_are_too_complex_never_abort() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;

    // 200 terms: PostgreSQL answers it, so does Sundial (1,000 overflowed a 2 MB stack).
    let terms = vec!["1"; 200].join("+");
    let rows = cells(text_rows(&client, &format!("SELECT {terms}")).await);
    assert_eq!(rows, vec![vec!["200"]]);

    // Far past the limit: a clear 54001 in both protocols, nothing else happens.
    for sql in [
        format!("SELECT {}", vec!["1"; 20_000].join("+")),
        vec!["SELECT 1"; 20_000].join(" UNION ALL "),
        format!("SELECT 1 WHERE {}", vec!["true"; 100_000].join(" AND ")),
    ] {
        let e = client.simple_query(&sql).await.err();
        assert_eq!(e.as_ref().and_then(code), Some("54001"), "{e:?}");
        let e = client.query(&sql, &[]).await.err();
        assert_eq!(e.as_ref().and_then(code), Some("54001"), "{e:?}");
    }
    assert_eq!(cells(text_rows(&client, "SELECT 2").await), vec![vec!["2"]]);
    alive(&server).await;
}

#[tokio::test]
async fn statement_timeout_stops_a_long_query() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute("SET statement_timeout = '300ms'")
        .await
        .expect("set statement_timeout");
    // 10^12 combinations: runs for hours unless the timeout stops it.
    let long = "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";
    let e = client.simple_query(long).await.err();
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");
    assert!(
        e.as_ref()
            .and_then(|e| e.as_db_error())
            .is_some_and(|d| d.message().contains("statement timeout")),
        "{e:?}"
    );
    let e = client.query(long, &[]).await.err();
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");

    // Quick statements are unaffected, and 0 turns the limit off.
    assert_eq!(cells(text_rows(&client, "SELECT 3").await), vec![vec!["3"]]);
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .expect("reset statement_timeout");
    assert_eq!(
        cells(text_rows(&client, "SELECT count(*) FROM generate_series(1, 1000)").await),
        vec![vec!["1000"]]
    );
    alive(&server).await;
}

#[tokio::test]
async fn cancel_stops_a_query_that_computes_without_pause() {
    let server = TestServer::start();
    let (client, conn) = tokio_postgres::connect(&server.conn_str("sundial"), NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let token = client.cancel_token();
    let long = "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";
    let running = tokio::spawn(async move { client.simple_query(long).await.err() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(NoTls).await.expect("send cancel");
    let e = running.await.expect("query task");
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");
    // The other connections were served all along, and still are.
    alive(&server).await;
}

/// Other clients are served while a long query runs, and their connections coming
/// and going do not lose the long query's cancel key (every connection used to get
/// the same backend pid, so the last one to close dropped the others' keys).
#[tokio::test]
async fn a_long_query_does_not_hold_up_other_clients_or_lose_its_cancel_key() {
    let server = TestServer::start();
    let (client, conn) = tokio_postgres::connect(&server.conn_str("sundial"), NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let busy_pid = cells(text_rows(&client, "SELECT pg_backend_pid()").await);
    let token = client.cancel_token();
    let long = "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";
    let running = tokio::spawn(async move { client.simple_query(long).await.err() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..2 {
        let other = server.connect("sundial").await;
        assert_eq!(
            cells(text_rows(&other, "SELECT 41 + 1").await),
            vec![vec!["42"]]
        );
        assert_ne!(
            cells(text_rows(&other, "SELECT pg_backend_pid()").await),
            busy_pid,
            "each connection has its own backend pid"
        );
    }
    // the two connections above are closed now
    tokio::time::sleep(Duration::from_millis(100)).await;
    token.cancel_query(NoTls).await.expect("send cancel");
    let e = running.await.expect("query task");
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");
    alive(&server).await;
}
