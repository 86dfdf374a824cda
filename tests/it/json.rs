//! `json` and `jsonb` over the wire: type OIDs 114 and 3802, PostgreSQL's text of
//! each (jsonb normalized, json as written), binary results (jsonb with its version
//! byte), binary jsonb parameters, COPY into JSON columns, and the values after a
//! restart.

use bytes::{BufMut, Bytes, BytesMut};
use futures::SinkExt;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::harness::{TestServer, text_rows};

/// A column's bytes as the server sent them in binary format.
#[derive(Debug)]
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A jsonb parameter in binary format, as drivers send it (version byte 1, text).
#[derive(Debug)]
struct Jsonb(&'static str);

impl ToSql for Jsonb {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.put_u8(1);
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
    fn accepts(t: &Type) -> bool {
        *t == Type::JSONB
    }
    to_sql_checked!();
}

/// COPY `data` (text format) into table `r`.
async fn copy_r(
    client: &tokio_postgres::Client,
    data: &'static [u8],
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in::<_, Bytes>("COPY r FROM STDIN").await?;
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(data)).await?;
    sink.finish().await
}

const WRITTEN: &str = r#"{"b" :  [1,  2], "a": {"x" : 1}, "b": 3}"#;

#[tokio::test]
async fn json_types_on_the_wire() {
    let mut server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE dev (id int NOT NULL, meta jsonb, raw json);
             CREATE TABLE r (ts timestamptz NOT NULL, attrs jsonb) WITH (tsdb.hypertable)",
        )
        .await
        .expect("create");
    client
        .execute(
            "INSERT INTO dev VALUES (1, $1::text::jsonb, $1::text::json)",
            &[&WRITTEN],
        )
        .await
        .expect("insert");

    // Described as json and jsonb.
    let stmt = client
        .prepare("SELECT meta, raw, meta -> 'a', raw -> 'b', meta ->> 'b' FROM dev")
        .await
        .expect("prepare");
    let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(
        types,
        vec![Type::JSONB, Type::JSON, Type::JSONB, Type::JSON, Type::TEXT]
    );

    // Text: jsonb normalized (last duplicate wins, keys by length then bytes),
    // json exactly as written; `->` on json answers the text as written.
    let rows = text_rows(&client, "SELECT meta, raw, raw -> 'b', raw -> 'a' FROM dev").await;
    assert_eq!(
        rows,
        vec![vec![
            Some(r#"{"a": {"x": 1}, "b": 3}"#.to_string()),
            Some(WRITTEN.to_string()),
            Some("3".to_string()),
            Some(r#"{"x" : 1}"#.to_string()),
        ]]
    );

    // Binary: jsonb is a version byte then the text; json is the text.
    let row = client.query_one(&stmt, &[]).await.expect("binary row");
    let meta: Raw = row.get(0);
    let raw: Raw = row.get(1);
    let mut want = vec![1u8];
    want.extend_from_slice(br#"{"a": {"x": 1}, "b": 3}"#);
    assert_eq!(meta.0, want);
    assert_eq!(raw.0, WRITTEN.as_bytes());

    // A binary jsonb parameter (as psycopg and pgjdbc send it) is read as its text.
    client
        .execute(
            "INSERT INTO dev (id, meta) VALUES (2, $1)",
            &[&Jsonb(r#"{"z": 1, "a": [true, null]}"#)],
        )
        .await
        .expect("binary jsonb parameter");
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM dev WHERE meta @> $1",
            &[&Jsonb(r#"{"a": [true]}"#)],
        )
        .await
        .expect("containment with parameter")
        .get(0);
    assert_eq!(n, 1);

    // Bad JSON is refused with 22P02 and stores nothing.
    let err = client
        .execute("INSERT INTO dev VALUES (3, '{\"a\": }', NULL)", &[])
        .await
        .expect_err("bad json");
    assert_eq!(err.code().map(|c| c.code()), Some("22P02"));

    // COPY into a jsonb column normalizes; a bad row fails the whole COPY.
    let n = copy_r(
        &client,
        b"2024-01-01 00:00:00+00\t{\"temp\":20.50,\"ok\":true}\n2024-01-01 01:00:00+00\t{\"temp\": 1e1}\n",
    )
    .await
    .expect("copy");
    assert_eq!(n, 2);
    let err = copy_r(
        &client,
        b"2024-01-02 00:00:00+00\t{\"ok\":false}\n2024-01-02 01:00:00+00\t{oops}\n",
    )
    .await
    .expect_err("bad json in COPY");
    assert_eq!(err.code().map(|c| c.code()), Some("22P02"));

    // Binary COPY of a JSON column is refused (0A000), in and out, never stored or
    // sent without jsonb's version byte.
    let other = server.connect("sundial").await;
    let Err(err) = other.copy_out("COPY r TO STDOUT (FORMAT binary)").await else {
        panic!("binary COPY of a jsonb column was accepted");
    };
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err:?}");
    let Err(err) = other
        .copy_in::<_, Bytes>("COPY r FROM STDIN (FORMAT binary)")
        .await
    else {
        panic!("binary COPY into a jsonb column was accepted");
    };
    assert_eq!(err.code().map(|c| c.code()), Some("0A000"));
    drop(other);

    let check = |client: tokio_postgres::Client| async move {
        assert_eq!(
            text_rows(&client, "SELECT attrs FROM r ORDER BY ts").await,
            vec![
                vec![Some(r#"{"ok": true, "temp": 20.50}"#.to_string())],
                vec![Some(r#"{"temp": 10}"#.to_string())],
            ]
        );
        assert_eq!(
            text_rows(&client, "SELECT id, meta::text, raw FROM dev ORDER BY id").await,
            vec![
                vec![
                    Some("1".to_string()),
                    Some(r#"{"a": {"x": 1}, "b": 3}"#.to_string()),
                    Some(WRITTEN.to_string()),
                ],
                vec![
                    Some("2".to_string()),
                    Some(r#"{"a": [true, null], "z": 1}"#.to_string()),
                    None,
                ],
            ]
        );
        // information_schema and pg_typeof name the types.
        assert_eq!(
            text_rows(
                &client,
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'dev' ORDER BY ordinal_position",
            )
            .await,
            vec![
                vec![Some("id".to_string()), Some("integer".to_string())],
                vec![Some("meta".to_string()), Some("jsonb".to_string())],
                vec![Some("raw".to_string()), Some("json".to_string())],
            ]
        );
        assert_eq!(
            text_rows(&client, "SELECT pg_typeof(meta)::text, pg_typeof(raw -> 'a')::text, pg_typeof(meta ->> 'a')::text FROM dev WHERE id = 1").await,
            vec![vec![
                Some("jsonb".to_string()),
                Some("json".to_string()),
                Some("text".to_string()),
            ]]
        );
    };
    check(client).await;
    // The same after a restart (from the WAL and from Parquet alike).
    server.terminate();
    server.restart();
    check(server.connect("sundial").await).await;
}

#[tokio::test]
async fn jobs_config_is_jsonb() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE m (ts timestamptz NOT NULL, v float8) WITH (tsdb.hypertable);
             SELECT add_retention_policy('m', INTERVAL '30 days')",
        )
        .await
        .expect("policy");
    let row = client
        .query_one(
            "SELECT config, config ->> 'drop_after' FROM timescaledb_information.jobs WHERE hypertable_name = 'm' AND proc_name = 'policy_retention'",
            &[],
        )
        .await
        .expect("jobs");
    assert_eq!(row.columns()[0].type_(), &Type::JSONB);
    let after: String = row.get(1);
    assert_eq!(after, "30 days");
}
