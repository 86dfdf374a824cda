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

/// SQLAlchemy 2's `Inspector.get_pk_constraint` query (psycopg dialect), over the
/// extended protocol: it reads empty catalogs and repeats `$4` in two inferred types.
const SQLALCHEMY_PK: &str = "SELECT attr.conrelid, array_agg(CAST(attr.attname AS TEXT) ORDER BY attr.ord) AS cols, attr.conname, min(attr.description) AS description, min(attr.indnkeyatts) AS indnkeyatts, bool_and(attr.indnullsnotdistinct) AS indnullsnotdistinct \
FROM (SELECT con.conrelid AS conrelid, con.conname AS conname, con.description AS description, con.ord AS ord, con.indnkeyatts AS indnkeyatts, con.indnullsnotdistinct AS indnullsnotdistinct, pg_catalog.pg_attribute.attname AS attname \
FROM pg_catalog.pg_attribute JOIN (SELECT pg_catalog.pg_constraint.conrelid AS conrelid, pg_catalog.pg_constraint.conname AS conname, unnest(pg_catalog.pg_index.indkey) AS attnum, generate_subscripts(pg_catalog.pg_index.indkey, $1::INTEGER) AS ord, pg_catalog.pg_index.indnkeyatts AS indnkeyatts, pg_catalog.pg_index.indnullsnotdistinct AS indnullsnotdistinct, pg_catalog.pg_description.description AS description \
FROM pg_catalog.pg_constraint JOIN pg_catalog.pg_index ON pg_catalog.pg_constraint.conindid = pg_catalog.pg_index.indexrelid LEFT OUTER JOIN pg_catalog.pg_description ON pg_catalog.pg_description.objoid = pg_catalog.pg_constraint.oid AND pg_catalog.pg_description.classoid = CAST($2 AS REGCLASS) \
WHERE pg_catalog.pg_constraint.contype = $3::VARCHAR AND pg_catalog.pg_constraint.conrelid IN ($4)) AS con ON pg_catalog.pg_attribute.attnum = con.attnum AND pg_catalog.pg_attribute.attrelid = con.conrelid \
WHERE con.conrelid IN ($4)) AS attr GROUP BY attr.conrelid, attr.conname ORDER BY attr.conrelid, attr.conname";

/// SQLAlchemy's `Inspector.get_schema_names`: a parameter pattern with `ESCAPE '/'`.
const SQLALCHEMY_SCHEMAS: &str = "SELECT pg_catalog.pg_namespace.nspname \
FROM pg_catalog.pg_namespace \
WHERE (pg_catalog.pg_namespace.nspname NOT LIKE $1::VARCHAR || '%' ESCAPE '/') ORDER BY pg_catalog.pg_namespace.nspname";

#[tokio::test]
async fn sqlalchemy_reflection_queries_over_the_extended_protocol() {
    use tokio_postgres::types::ToSql;
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute("CREATE TABLE cpu (time timestamptz NOT NULL, host text)")
        .await
        .expect("setup");
    let oid: i64 = client
        .query_one("SELECT 'cpu'::regclass::oid::int8", &[])
        .await
        .expect("oid")
        .get(0);

    let stmt = client.prepare(SQLALCHEMY_PK).await.expect("prepare");
    assert_eq!(stmt.params().len(), 4, "{:?}", stmt.params());
    let ints = [1i32, 0, 0, i32::try_from(oid).unwrap_or(0)];
    let texts = ["1", "pg_catalog.pg_constraint", "p", &oid.to_string()];
    let (mut i32s, mut i64s, mut strs) = (vec![], vec![], vec![]);
    for (i, t) in stmt.params().iter().enumerate() {
        match *t {
            Type::INT4 => i32s.push((i, ints[i])),
            Type::INT8 => i64s.push((i, i64::from(ints[i]))),
            _ => strs.push((i, texts[i].to_string())),
        }
    }
    let mut params: Vec<(usize, &(dyn ToSql + Sync))> = vec![];
    params.extend(i32s.iter().map(|(i, v)| (*i, v as &(dyn ToSql + Sync))));
    params.extend(i64s.iter().map(|(i, v)| (*i, v as &(dyn ToSql + Sync))));
    params.extend(strs.iter().map(|(i, v)| (*i, v as &(dyn ToSql + Sync))));
    params.sort_by_key(|(i, _)| *i);
    let values: Vec<&(dyn ToSql + Sync)> = params.into_iter().map(|(_, v)| v).collect();
    let rows = client.query(&stmt, &values).await.expect("query");
    assert!(rows.is_empty(), "no primary keys in Sundial");

    let rows = client
        .query(SQLALCHEMY_SCHEMAS, &[&"pg/_"])
        .await
        .expect("schemas");
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        names,
        [
            "_timescaledb_internal",
            "information_schema",
            "public",
            "timescaledb_information"
        ]
    );
}
