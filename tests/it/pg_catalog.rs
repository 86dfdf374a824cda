//! The PostgreSQL catalogs over the wire: table and database oids survive a restart,
//! catalog columns are described with PostgreSQL's types (`oid`, `"char"`), and the
//! catalog queries also run over the extended protocol (as pgjdbc sends them).

use tokio_postgres::types::Type;

use crate::harness::{TestServer, text_rows};

const OIDS: &str = "SELECT c.oid::text, c.relname, d.oid::text, d.datname \
    FROM pg_class c, pg_database d \
    WHERE c.relname IN ('a', 'b') AND d.datname IN ('sundial', 'other') ORDER BY 2, 4";

#[tokio::test]
async fn oids_are_stable_across_restarts() {
    let mut server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE DATABASE other; \
             CREATE TABLE a (time timestamptz NOT NULL, v double precision); \
             CREATE TABLE b (time timestamptz NOT NULL, v double precision)",
        )
        .await
        .expect("setup");
    let before = text_rows(&client, OIDS).await;
    assert_eq!(before.len(), 4, "{before:?}");
    // user objects get oids from 16384 up, distinct from each other
    let mut oids: Vec<i64> = before
        .iter()
        .flat_map(|r| [r[0].clone(), r[2].clone()])
        .map(|o| o.and_then(|o| o.parse().ok()).unwrap_or(0))
        .collect();
    assert!(oids.iter().all(|o| *o > 16384), "{before:?}");
    oids.sort();
    oids.dedup();
    assert_eq!(oids.len(), 4, "{before:?}");
    // the psql/pgjdbc lookup by name agrees with regclass
    let by_name = text_rows(
        &client,
        "SELECT 'a'::regclass::oid::text, to_regclass('public.b')::text, 'pg_class'::regclass::oid::text",
    )
    .await;
    assert_eq!(by_name[0][0], before[0][0]);
    assert_eq!(by_name[0][1], before[2][0]);
    assert_eq!(by_name[0][2].as_deref(), Some("1259"));
    drop(client);

    server.terminate();
    server.restart();
    let client = server.connect("sundial").await;
    assert_eq!(text_rows(&client, OIDS).await, before);
}

#[tokio::test]
async fn catalog_columns_have_postgres_types() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute("CREATE TABLE cpu (time timestamptz NOT NULL, host text)")
        .await
        .expect("setup");
    let stmt = client
        .prepare(
            "SELECT c.oid, c.relname, c.relkind, c.relnatts, c.relhasindex, a.attnum \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid \
             WHERE c.relname = $1 ORDER BY a.attnum",
        )
        .await
        .expect("prepare");
    let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(
        types,
        [
            Type::OID,
            Type::TEXT,
            Type::CHAR,
            Type::INT2,
            Type::BOOL,
            Type::INT2
        ]
    );
    // binary results (tokio-postgres asks for them): oid is u32, "char" is i8
    let rows = client.query(&stmt, &[&"cpu"]).await.expect("query");
    assert_eq!(rows.len(), 2);
    let oid: u32 = rows[0].get(0);
    assert!(oid > 16384);
    let kind: i8 = rows[0].get(2);
    assert_eq!(kind as u8, b'r');
    let attnum: i16 = rows[1].get(5);
    assert_eq!(attnum, 2);
}
