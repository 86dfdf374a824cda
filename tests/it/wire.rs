//! Wire-protocol tests: a real `sundial` process driven by tokio-postgres.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};
use rust_decimal::Decimal;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::harness::{TestServer, text_rows};

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// The single text value of a single-row, single-column simple query.
async fn text_one(client: &Client, sql: &str) -> Option<String> {
    let rows = text_rows(client, sql).await;
    assert_eq!(rows.len(), 1, "{sql:?} should return one row, got {rows:?}");
    assert_eq!(
        rows[0].len(),
        1,
        "{sql:?} should return one column, got {rows:?}"
    );
    rows[0][0].clone()
}

async fn show(client: &Client, name: &str) -> String {
    text_one(client, &format!("SHOW {name}"))
        .await
        .unwrap_or_else(|| panic!("SHOW {name} returned NULL"))
}

fn ts(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

// ---------------------------------------------------------------------------
// every type, both protocols
// ---------------------------------------------------------------------------

const ALL_TYPES_DDL: &str = "CREATE TABLE all_types (
    id int4,
    c_bool bool,
    c_int2 int2,
    c_int4 int4,
    c_int8 int8,
    c_float4 float4,
    c_float8 float8,
    c_numeric numeric(10,2),
    c_text text,
    c_varchar varchar,
    c_bytea bytea,
    c_date date,
    c_ts timestamp,
    c_tstz timestamptz
)";

const ALL_COLS: &str = "id, c_bool, c_int2, c_int4, c_int8, c_float4, c_float8, c_numeric, \
                        c_text, c_varchar, c_bytea, c_date, c_ts, c_tstz";

async fn fill_all_types(client: &Client) {
    client
        .batch_execute(ALL_TYPES_DDL)
        .await
        .expect("create all_types");

    // Row 1: simple protocol, literals for every type.
    client
        .batch_execute(
            "INSERT INTO all_types VALUES (1, true, 12, 345, 6789012345, 1.5, 2.25, 12.5, \
             'hello', 'world', '\\x0102ff', '2024-01-15', '2024-01-15 10:30:00.123456', \
             '2024-01-15 10:30:00.5+02')",
        )
        .await
        .expect("insert row 1 (simple protocol)");

    // Row 2: simple protocol, explicit NULLs.
    client
        .batch_execute(
            "INSERT INTO all_types VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
             NULL, NULL, NULL, NULL, NULL, NULL)",
        )
        .await
        .expect("insert row 2 (NULLs, simple protocol)");

    // Row 3: extended protocol, parameter types inferred from the target columns.
    let insert = format!(
        "INSERT INTO all_types ({ALL_COLS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    );
    let n = client
        .execute(
            insert.as_str(),
            &[
                &3i32,
                &false,
                &-7i16,
                &-100000i32,
                &-9_000_000_000_000i64,
                &-0.25f32,
                &-1234.5678f64,
                &Decimal::new(-99_999_999, 2),
                &"ünïcødé ✓",
                &"",
                &vec![0u8, 1, 2, 255],
                &NaiveDate::from_ymd_opt(1999, 12, 31).unwrap(),
                &NaiveDate::from_ymd_opt(2000, 2, 29)
                    .unwrap()
                    .and_hms_micro_opt(23, 59, 59, 999_999)
                    .unwrap(),
                &ts(2038, 1, 19, 3, 14, 8),
            ],
        )
        .await
        .expect("insert row 3 (extended protocol)");
    assert_eq!(n, 1, "INSERT of one row reports 1");

    // Row 4: extended protocol, every parameter NULL.
    let nulls: [&(dyn ToSql + Sync); 14] = [
        &4i32,
        &None::<bool>,
        &None::<i16>,
        &None::<i32>,
        &None::<i64>,
        &None::<f32>,
        &None::<f64>,
        &None::<Decimal>,
        &None::<String>,
        &None::<String>,
        &None::<Vec<u8>>,
        &None::<NaiveDate>,
        &None::<NaiveDateTime>,
        &None::<DateTime<Utc>>,
    ];
    let n = client
        .execute(insert.as_str(), &nulls)
        .await
        .expect("insert row 4 (NULL parameters)");
    assert_eq!(n, 1);

    // Row 5: omitted columns default to NULL.
    client
        .batch_execute("INSERT INTO all_types (id) VALUES (5)")
        .await
        .expect("insert row 5 (column list)");
}

#[tokio::test]
async fn all_types_round_trip_binary() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    fill_all_types(&client).await;

    let rows = client
        .query(
            format!("SELECT {ALL_COLS} FROM all_types ORDER BY id").as_str(),
            &[],
        )
        .await
        .expect("select all_types");
    assert_eq!(rows.len(), 5);

    // Column types as PostgreSQL reports them (varchar may come back as text).
    let types: Vec<Type> = rows[0]
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    let expected = [
        Type::INT4,
        Type::BOOL,
        Type::INT2,
        Type::INT4,
        Type::INT8,
        Type::FLOAT4,
        Type::FLOAT8,
        Type::NUMERIC,
        Type::TEXT,
        Type::VARCHAR,
        Type::BYTEA,
        Type::DATE,
        Type::TIMESTAMP,
        Type::TIMESTAMPTZ,
    ];
    for (i, (got, want)) in types.iter().zip(expected.iter()).enumerate() {
        if *want == Type::VARCHAR {
            assert!(
                *got == Type::VARCHAR || *got == Type::TEXT,
                "column {i}: got {got}, want varchar or text"
            );
        } else {
            assert_eq!(got, want, "type of column {i}");
        }
    }

    let r = &rows[0];
    assert_eq!(r.get::<_, i32>(0), 1);
    assert_eq!(r.get::<_, Option<bool>>(1), Some(true));
    assert_eq!(r.get::<_, Option<i16>>(2), Some(12));
    assert_eq!(r.get::<_, Option<i32>>(3), Some(345));
    assert_eq!(r.get::<_, Option<i64>>(4), Some(6_789_012_345));
    assert_eq!(r.get::<_, Option<f32>>(5), Some(1.5));
    assert_eq!(r.get::<_, Option<f64>>(6), Some(2.25));
    let n: Decimal = r.get::<_, Option<Decimal>>(7).expect("numeric not null");
    assert_eq!(n, Decimal::new(1250, 2));
    assert_eq!(n.to_string(), "12.50", "numeric(10,2) keeps scale 2");
    assert_eq!(r.get::<_, Option<String>>(8).as_deref(), Some("hello"));
    assert_eq!(r.get::<_, Option<String>>(9).as_deref(), Some("world"));
    assert_eq!(r.get::<_, Option<Vec<u8>>>(10), Some(vec![1u8, 2, 255]));
    assert_eq!(
        r.get::<_, Option<NaiveDate>>(11),
        NaiveDate::from_ymd_opt(2024, 1, 15)
    );
    assert_eq!(
        r.get::<_, Option<NaiveDateTime>>(12),
        NaiveDate::from_ymd_opt(2024, 1, 15)
            .unwrap()
            .and_hms_micro_opt(10, 30, 0, 123_456)
    );
    assert_eq!(
        r.get::<_, Option<DateTime<Utc>>>(13),
        Some(ts(2024, 1, 15, 8, 30, 0) + chrono::Duration::milliseconds(500))
    );

    for (idx, id) in [(1usize, 2i32), (3, 4), (4, 5)] {
        let r = &rows[idx];
        assert_eq!(r.get::<_, i32>(0), id);
        assert_eq!(r.get::<_, Option<bool>>(1), None, "row {id}");
        assert_eq!(r.get::<_, Option<i16>>(2), None, "row {id}");
        assert_eq!(r.get::<_, Option<i32>>(3), None, "row {id}");
        assert_eq!(r.get::<_, Option<i64>>(4), None, "row {id}");
        assert_eq!(r.get::<_, Option<f32>>(5), None, "row {id}");
        assert_eq!(r.get::<_, Option<f64>>(6), None, "row {id}");
        assert_eq!(r.get::<_, Option<Decimal>>(7), None, "row {id}");
        assert_eq!(r.get::<_, Option<String>>(8), None, "row {id}");
        assert_eq!(r.get::<_, Option<String>>(9), None, "row {id}");
        assert_eq!(r.get::<_, Option<Vec<u8>>>(10), None, "row {id}");
        assert_eq!(r.get::<_, Option<NaiveDate>>(11), None, "row {id}");
        assert_eq!(r.get::<_, Option<NaiveDateTime>>(12), None, "row {id}");
        assert_eq!(r.get::<_, Option<DateTime<Utc>>>(13), None, "row {id}");
    }

    let r = &rows[2];
    assert_eq!(r.get::<_, i32>(0), 3);
    assert_eq!(r.get::<_, Option<bool>>(1), Some(false));
    assert_eq!(r.get::<_, Option<i16>>(2), Some(-7));
    assert_eq!(r.get::<_, Option<i32>>(3), Some(-100_000));
    assert_eq!(r.get::<_, Option<i64>>(4), Some(-9_000_000_000_000));
    assert_eq!(r.get::<_, Option<f32>>(5), Some(-0.25));
    assert_eq!(r.get::<_, Option<f64>>(6), Some(-1234.5678));
    assert_eq!(
        r.get::<_, Option<Decimal>>(7),
        Some(Decimal::new(-99_999_999, 2))
    );
    assert_eq!(r.get::<_, Option<String>>(8).as_deref(), Some("ünïcødé ✓"));
    assert_eq!(r.get::<_, Option<String>>(9).as_deref(), Some(""));
    assert_eq!(r.get::<_, Option<Vec<u8>>>(10), Some(vec![0u8, 1, 2, 255]));
    assert_eq!(
        r.get::<_, Option<NaiveDate>>(11),
        NaiveDate::from_ymd_opt(1999, 12, 31)
    );
    assert_eq!(
        r.get::<_, Option<NaiveDateTime>>(12),
        NaiveDate::from_ymd_opt(2000, 2, 29)
            .unwrap()
            .and_hms_micro_opt(23, 59, 59, 999_999)
    );
    assert_eq!(
        r.get::<_, Option<DateTime<Utc>>>(13),
        Some(ts(2038, 1, 19, 3, 14, 8))
    );
}

/// Describe announces the types execution produces: a CASE that mixes an integer
/// and a numeric branch is numeric (the unanalyzed plan typed it by its first branch,
/// bigint, and binary-format clients read the numeric bytes as 281474976710657).
#[tokio::test]
async fn described_types_are_the_coerced_ones() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE w (time timestamptz NOT NULL, bytes bigint); \
             INSERT INTO w VALUES ('2024-01-01 00:00:00+00', 1000), ('2024-01-02 00:00:00+00', 5)",
        )
        .await
        .expect("setup");
    let rows = client
        .query(
            "SELECT CASE WHEN bytes > 10 THEN 100 ELSE 523.5 END AS x, \
                    COALESCE(bytes, 2.5) AS y FROM w ORDER BY time",
            &[],
        )
        .await
        .expect("select");
    assert_eq!(rows[0].columns()[0].type_(), &Type::NUMERIC);
    assert_eq!(rows[0].columns()[1].type_(), &Type::NUMERIC);
    let x: Vec<Decimal> = rows.iter().map(|r| r.get::<_, Decimal>("x")).collect();
    assert_eq!(x, [Decimal::from(100), Decimal::new(5235, 1)]);
    let y: Vec<Decimal> = rows.iter().map(|r| r.get::<_, Decimal>("y")).collect();
    assert_eq!(y, [Decimal::from(1000), Decimal::from(5)]);
}

/// Result column names and types as PostgreSQL gives them where DataFusion would
/// name two items alike (its names leave casts out): `SELECT 1, 1::int8` is
/// `?column?` int4 and `int8` int8, also through `SELECT *` of a subquery (its
/// items' names, or the alias's column list).
#[tokio::test]
async fn items_named_alike_by_datafusion_keep_postgresql_names() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    let alike = ["?column?", "int8", "a", "a"];
    for (sql, want) in [
        ("SELECT 1, 1::int8, 2 AS a, 3 AS a", alike),
        (
            "SELECT * FROM (SELECT 1 AS \"?column?\", 1::int8 AS int8, 2 AS a, 3 AS a) t",
            alike,
        ),
        ("SELECT * FROM (SELECT 1, 1::int8, 2 AS a, 3 AS a) t", alike),
        (
            "SELECT * FROM (SELECT 1, 1::int8, 2, 3) t (w, x, y, z)",
            ["w", "x", "y", "z"],
        ),
    ] {
        let rows = client.query(sql, &[]).await.expect(sql);
        let cols = rows[0].columns();
        let names: Vec<&str> = cols.iter().map(|c| c.name()).collect();
        assert_eq!(names, want, "{sql}");
        assert_eq!(cols[0].type_(), &Type::INT4, "{sql}");
        assert_eq!(cols[1].type_(), &Type::INT8, "{sql}");
        assert_eq!(rows[0].get::<_, i64>(1), 1, "{sql}");
        assert_eq!(rows[0].get::<_, i32>(3), 3, "{sql}");
    }
}

/// A `numeric` column without a typmod reads the same in binary as in text: each
/// value with its own scale (`100`, not `100.0000000000`).
#[tokio::test]
async fn untyped_numeric_binary_equals_text() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE nu (time timestamptz NOT NULL, n numeric); \
             INSERT INTO nu VALUES ('2024-01-01 00:00:00+00', 100), ('2024-01-02 00:00:00+00', 12.5), \
             ('2024-01-03 00:00:00+00', -0.0001), ('2024-01-04 00:00:00+00', 0), \
             ('2024-01-05 00:00:00+00', 123456789.0123456789), ('2024-01-06 00:00:00+00', NULL)",
        )
        .await
        .expect("setup");
    let binary: Vec<Option<String>> = client
        .query("SELECT n FROM nu ORDER BY time", &[])
        .await
        .expect("select")
        .iter()
        .map(|r| r.get::<_, Option<Decimal>>(0).map(|d| d.to_string()))
        .collect();
    let text: Vec<Option<String>> = text_rows(&client, "SELECT n FROM nu ORDER BY time")
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(binary, text);
    assert_eq!(
        text,
        [
            s("100"),
            s("12.5"),
            s("-0.0001"),
            s("0"),
            s("123456789.0123456789"),
            None
        ]
    );
}

#[tokio::test]
async fn all_types_round_trip_text() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    fill_all_types(&client).await;
    client
        .batch_execute("SET TimeZone = 'UTC'")
        .await
        .expect("set tz");

    let rows = text_rows(
        &client,
        &format!("SELECT {ALL_COLS} FROM all_types ORDER BY id"),
    )
    .await;
    assert_eq!(rows.len(), 5);
    let nulls = |id: &str| {
        let mut v = vec![s(id)];
        v.extend(std::iter::repeat_n(None, 13));
        v
    };
    assert_eq!(
        rows[0],
        vec![
            s("1"),
            s("t"),
            s("12"),
            s("345"),
            s("6789012345"),
            s("1.5"),
            s("2.25"),
            s("12.50"),
            s("hello"),
            s("world"),
            s("\\x0102ff"),
            s("2024-01-15"),
            s("2024-01-15 10:30:00.123456"),
            s("2024-01-15 08:30:00.5+00"),
        ]
    );
    assert_eq!(rows[1], nulls("2"));
    assert_eq!(
        rows[2],
        vec![
            s("3"),
            s("f"),
            s("-7"),
            s("-100000"),
            s("-9000000000000"),
            s("-0.25"),
            s("-1234.5678"),
            s("-999999.99"),
            s("ünïcødé ✓"),
            s(""),
            s("\\x000102ff"),
            s("1999-12-31"),
            s("2000-02-29 23:59:59.999999"),
            s("2038-01-19 03:14:08+00"),
        ]
    );
    assert_eq!(rows[3], nulls("4"));
    assert_eq!(rows[4], nulls("5"));

    // NULL filtering works on both kinds of rows.
    assert_eq!(
        text_one(
            &client,
            "SELECT count(*) FROM all_types WHERE c_int8 IS NULL"
        )
        .await,
        s("3")
    );
}

#[tokio::test]
async fn interval_text_format() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    assert_eq!(
        text_one(&client, "SELECT interval '1 day 2 hours'").await,
        s("1 day 02:00:00")
    );
    assert_eq!(
        text_one(&client, "SELECT interval '90 minutes'").await,
        s("01:30:00")
    );
}

// ---------------------------------------------------------------------------
// prepared statements
// ---------------------------------------------------------------------------

#[tokio::test]
async fn prepared_statement_reused_50_times() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute("CREATE TABLE pts (time timestamptz NOT NULL, id int8, v float8)")
        .await
        .expect("create pts");

    // One named INSERT statement, executed 50 times.
    let ins = client
        .prepare("INSERT INTO pts (time, id, v) VALUES ($1, $2, $3)")
        .await
        .expect("prepare insert");
    assert_eq!(
        ins.params(),
        &[Type::TIMESTAMPTZ, Type::INT8, Type::FLOAT8],
        "INSERT parameter types inferred from the target columns"
    );
    let base = ts(2024, 3, 1, 0, 0, 0);
    for i in 0..50i64 {
        let t = base + chrono::Duration::minutes(i);
        let n = client
            .execute(&ins, &[&t, &i, &(i as f64 * 0.5)])
            .await
            .unwrap_or_else(|e| panic!("insert {i}: {e:?}"));
        assert_eq!(n, 1);
    }

    // One named SELECT with an inferred parameter type ($1 compared to int8).
    let sel = client
        .prepare("SELECT id, v, time FROM pts WHERE id = $1")
        .await
        .expect("prepare select");
    assert_eq!(
        sel.params(),
        &[Type::INT8],
        "$1 = int8 column is inferred as int8"
    );
    assert_eq!(sel.columns().len(), 3);
    for i in (0..50i64).rev() {
        let rows = client
            .query(&sel, &[&i])
            .await
            .unwrap_or_else(|e| panic!("select {i}: {e:?}"));
        assert_eq!(rows.len(), 1, "id {i}");
        assert_eq!(rows[0].get::<_, i64>(0), i);
        assert_eq!(rows[0].get::<_, f64>(1), i as f64 * 0.5);
        assert_eq!(
            rows[0].get::<_, DateTime<Utc>>(2),
            base + chrono::Duration::minutes(i)
        );
    }
    // A parameter value that matches nothing.
    assert!(client.query(&sel, &[&1000i64]).await.unwrap().is_empty());

    // Declared parameter types.
    let typed = client
        .prepare_typed(
            "SELECT count(*) FROM pts WHERE id >= $1 AND v < $2",
            &[Type::INT8, Type::FLOAT8],
        )
        .await
        .expect("prepare_typed");
    assert_eq!(typed.params(), &[Type::INT8, Type::FLOAT8]);
    let row = client.query_one(&typed, &[&10i64, &10.0f64]).await.unwrap();
    // ids 10..=19 have v = 5.0 ..= 9.5
    assert_eq!(row.get::<_, i64>(0), 10);

    // Declared int4 parameter compared with the int8 column.
    let typed4 = client
        .prepare_typed("SELECT id FROM pts WHERE id = $1", &[Type::INT4])
        .await
        .expect("prepare_typed int4");
    assert_eq!(typed4.params(), &[Type::INT4]);
    let rows = client.query(&typed4, &[&42i32]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), 42);

    // A declared text parameter cast in the query.
    let typed_text = client
        .prepare_typed(
            "SELECT $1::text || '-' || $2::text",
            &[Type::TEXT, Type::TEXT],
        )
        .await
        .expect("prepare_typed text");
    let row = client.query_one(&typed_text, &[&"a", &"b"]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "a-b");
}

// ---------------------------------------------------------------------------
// several statements in one simple query
// ---------------------------------------------------------------------------

#[tokio::test]
async fn multiple_statements_in_one_simple_query() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    let msgs = client
        .simple_query(
            "CREATE TABLE m (a int4); INSERT INTO m VALUES (1); INSERT INTO m VALUES (2), (3); \
             SELECT sum(a) FROM m; SELECT 'x' AS s, 2 AS n",
        )
        .await
        .expect("multi-statement simple query");
    let mut completes = Vec::new();
    let mut rows = Vec::new();
    for m in msgs {
        match m {
            SimpleQueryMessage::CommandComplete(n) => completes.push(n),
            SimpleQueryMessage::Row(r) => rows.push(
                (0..r.len())
                    .map(|i| r.get(i).map(str::to_string))
                    .collect::<Vec<_>>(),
            ),
            _ => {}
        }
    }
    assert_eq!(
        completes,
        vec![0, 1, 2, 1, 1],
        "one CommandComplete per statement"
    );
    assert_eq!(rows, vec![vec![s("6")], vec![s("x"), s("2")]]);

    // batch_execute with several statements, then check all of them ran.
    client
        .batch_execute("INSERT INTO m VALUES (10); INSERT INTO m VALUES (20)")
        .await
        .expect("batch_execute with two statements");
    let total = text_one(&client, "SELECT count(*) FROM m WHERE a IN (10, 20)").await;
    assert_eq!(total, s("2"));

    // An error in the middle stops the rest of the string.
    let err = client
        .simple_query(
            "INSERT INTO m VALUES (100); SELECT * FROM no_such_table; INSERT INTO m VALUES (200)",
        )
        .await
        .expect_err("a failing statement fails the query string");
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE));
    assert_eq!(
        text_one(&client, "SELECT count(*) FROM m WHERE a = 200").await,
        s("0"),
        "statements after the failing one are not executed"
    );
}

// ---------------------------------------------------------------------------
// session chatter
// ---------------------------------------------------------------------------

#[tokio::test]
async fn session_settings_set_reset_show() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;

    // TimeZone
    let tz0 = show(&client, "TimeZone").await;
    client
        .batch_execute("SET TimeZone = 'Asia/Tokyo'")
        .await
        .expect("set tz");
    assert_eq!(show(&client, "TimeZone").await, "Asia/Tokyo");
    assert_eq!(
        text_one(&client, "SELECT current_setting('TimeZone')").await,
        s("Asia/Tokyo")
    );
    assert_eq!(
        text_one(&client, "SELECT timestamptz '2024-01-01 00:00:00+00'").await,
        s("2024-01-01 09:00:00+09"),
        "timestamptz text output follows the session TimeZone"
    );
    client
        .batch_execute("SET TIME ZONE 'UTC'")
        .await
        .expect("set time zone");
    assert_eq!(show(&client, "TimeZone").await, "UTC");
    assert_eq!(
        text_one(&client, "SELECT timestamptz '2024-01-01 00:00:00+00'").await,
        s("2024-01-01 00:00:00+00")
    );
    client
        .batch_execute("RESET TimeZone")
        .await
        .expect("reset tz");
    assert_eq!(
        show(&client, "TimeZone").await,
        tz0,
        "RESET restores the default"
    );
    assert_eq!(
        text_one(&client, "SELECT current_setting('TimeZone')").await,
        Some(tz0.clone())
    );

    // DateStyle
    assert_eq!(show(&client, "DateStyle").await, "ISO, MDY");
    client
        .batch_execute("SET DateStyle = 'ISO, DMY'")
        .await
        .expect("set datestyle");
    assert_eq!(show(&client, "DateStyle").await, "ISO, DMY");
    client
        .batch_execute("RESET DateStyle")
        .await
        .expect("reset datestyle");
    assert_eq!(show(&client, "DateStyle").await, "ISO, MDY");

    // search_path
    client
        .batch_execute("SET search_path TO public")
        .await
        .expect("set search_path");
    assert_eq!(show(&client, "search_path").await, "public");
    client
        .batch_execute("RESET search_path")
        .await
        .expect("reset search_path");

    // application_name
    client
        .batch_execute("SET application_name = 'sundial-it'")
        .await
        .expect("set application_name");
    assert_eq!(show(&client, "application_name").await, "sundial-it");
    client
        .batch_execute("RESET application_name")
        .await
        .expect("reset application_name");
    assert_ne!(show(&client, "application_name").await, "sundial-it");

    // extra_float_digits
    client
        .batch_execute("SET extra_float_digits = 3")
        .await
        .expect("set efd");
    assert_eq!(show(&client, "extra_float_digits").await, "3");
    client
        .batch_execute("RESET extra_float_digits")
        .await
        .expect("reset efd");

    // client_encoding (tokio-postgres asks for UTF8 at startup)
    assert_eq!(show(&client, "client_encoding").await, "UTF8");
    client
        .batch_execute("SET client_encoding = 'UTF8'")
        .await
        .expect("set enc");
    assert_eq!(show(&client, "client_encoding").await, "UTF8");

    // statement_timeout
    client
        .batch_execute("SET statement_timeout = 0")
        .await
        .expect("set st");
    assert_eq!(show(&client, "statement_timeout").await, "0");
    client
        .batch_execute("SET statement_timeout = '30s'")
        .await
        .expect("set st 30s");
    assert_eq!(show(&client, "statement_timeout").await, "30s");
    client
        .batch_execute("RESET statement_timeout")
        .await
        .expect("reset st");
    assert_eq!(show(&client, "statement_timeout").await, "0");

    // Settings are per session: a second connection does not see ours.
    client
        .batch_execute("SET TimeZone = 'Asia/Tokyo'")
        .await
        .unwrap();
    let other = server.connect("sundial").await;
    assert_eq!(show(&other, "TimeZone").await, tz0);
    assert_eq!(show(&client, "TimeZone").await, "Asia/Tokyo");

    // SHOW through the extended protocol yields a text column.
    let row = client
        .query_one("SHOW TimeZone", &[])
        .await
        .expect("extended SHOW");
    assert_eq!(row.get::<_, String>(0), "Asia/Tokyo");
}

#[tokio::test]
async fn transactions_begin_commit_rollback() {
    let server = TestServer::start();
    let mut client = server.connect("sundial").await;
    client
        .batch_execute("CREATE TABLE tx (a int4)")
        .await
        .expect("create tx");

    client.batch_execute("BEGIN").await.expect("BEGIN");
    client
        .batch_execute("INSERT INTO tx VALUES (1)")
        .await
        .expect("insert in tx");
    client.batch_execute("COMMIT").await.expect("COMMIT");
    assert_eq!(text_one(&client, "SELECT count(*) FROM tx").await, s("1"));

    client.batch_execute("BEGIN").await.expect("BEGIN 2");
    assert_eq!(text_one(&client, "SELECT 1").await, s("1"));
    client.batch_execute("ROLLBACK").await.expect("ROLLBACK");

    client
        .batch_execute("START TRANSACTION; SELECT 1; COMMIT")
        .await
        .expect("START TRANSACTION");

    // The driver's transaction API (BEGIN / COMMIT and BEGIN / ROLLBACK).
    {
        let t = client.transaction().await.expect("transaction()");
        t.execute("INSERT INTO tx VALUES (2)", &[])
            .await
            .expect("insert");
        t.commit().await.expect("commit");
    }
    {
        let t = client.transaction().await.expect("transaction() 2");
        let r = t
            .query_one("SELECT count(*) FROM tx", &[])
            .await
            .expect("select in tx");
        assert_eq!(r.get::<_, i64>(0), 2);
        t.rollback().await.expect("rollback");
    }
    assert_eq!(text_one(&client, "SELECT count(*) FROM tx").await, s("2"));
    // COMMIT outside a transaction is a warning in PostgreSQL, not an error.
    client
        .batch_execute("COMMIT")
        .await
        .expect("COMMIT outside transaction");
    assert_eq!(text_one(&client, "SELECT 1").await, s("1"));
}

#[tokio::test]
async fn session_functions() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;

    let v: String = client
        .query_one("select version()", &[])
        .await
        .expect("version()")
        .get(0);
    assert!(v.starts_with("PostgreSQL 15"), "version() = {v:?}");
    let v_text = text_one(&client, "SELECT version()").await.unwrap();
    assert!(
        v_text.starts_with("PostgreSQL 15"),
        "version() = {v_text:?}"
    );

    let tz = show(&client, "TimeZone").await;
    let cs: String = client
        .query_one("SELECT current_setting('TimeZone')", &[])
        .await
        .expect("current_setting")
        .get(0);
    assert_eq!(cs, tz);

    let db: String = client
        .query_one("SELECT current_database()", &[])
        .await
        .expect("current_database")
        .get(0);
    assert_eq!(db, "sundial");
    let schema: String = client
        .query_one("SELECT current_schema()", &[])
        .await
        .expect("current_schema")
        .get(0);
    assert_eq!(schema, "public");

    let row = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid");
    assert_eq!(row.columns()[0].type_(), &Type::INT4);
    let pid: i32 = row.get(0);
    assert!(pid > 0, "pg_backend_pid() = {pid}");
    // Stable within a session.
    let pid2: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(pid, pid2);

    let pg = server.connect("postgres").await;
    let db: String = pg
        .query_one("SELECT current_database()", &[])
        .await
        .expect("current_database on postgres")
        .get(0);
    assert_eq!(db, "postgres");
}

// ---------------------------------------------------------------------------
// databases
// ---------------------------------------------------------------------------

#[tokio::test]
async fn databases_create_connect_drop() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    let pg = server.connect("postgres").await;
    assert_eq!(text_one(&pg, "SELECT 1").await, s("1"));

    // Missing database: 3D000.
    let err = tokio_postgres::connect(&server.conn_str("no_such_db"), NoTls)
        .await
        .err()
        .expect("connecting to a missing database fails");
    assert_eq!(err.code(), Some(&SqlState::INVALID_CATALOG_NAME), "{err:?}");

    client
        .batch_execute("CREATE DATABASE itest_x")
        .await
        .expect("CREATE DATABASE");
    {
        let x = server.connect("itest_x").await;
        assert_eq!(
            text_one(&x, "SELECT current_database()").await,
            s("itest_x")
        );
        x.batch_execute("CREATE TABLE only_in_x (a int4); INSERT INTO only_in_x VALUES (7)")
            .await
            .expect("table in itest_x");
        assert_eq!(text_one(&x, "SELECT a FROM only_in_x").await, s("7"));
    }
    // Databases are separate namespaces.
    let err = client
        .simple_query("SELECT a FROM only_in_x")
        .await
        .expect_err("table of another database is not visible");
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE));

    // Creating it again fails (42P04 duplicate_database).
    let err = client
        .batch_execute("CREATE DATABASE itest_x")
        .await
        .expect_err("duplicate CREATE DATABASE");
    assert_eq!(err.code(), Some(&SqlState::DUPLICATE_DATABASE));

    // DROP (retry while the closed connection may still be registered).
    let mut dropped = false;
    for _ in 0..50 {
        match client.batch_execute("DROP DATABASE itest_x").await {
            Ok(()) => {
                dropped = true;
                break;
            }
            Err(e) if e.code() == Some(&SqlState::OBJECT_IN_USE) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("DROP DATABASE: {e:?}"),
        }
    }
    assert!(dropped, "DROP DATABASE kept failing with object_in_use");

    let err = tokio_postgres::connect(&server.conn_str("itest_x"), NoTls)
        .await
        .err()
        .expect("dropped database can no longer be connected to");
    assert_eq!(err.code(), Some(&SqlState::INVALID_CATALOG_NAME));

    // The default databases are unaffected.
    assert_eq!(text_one(&client, "SELECT 1").await, s("1"));
    let again = server.connect("sundial").await;
    assert_eq!(
        text_one(&again, "SELECT current_database()").await,
        s("sundial")
    );
}

// ---------------------------------------------------------------------------
// hypertables
// ---------------------------------------------------------------------------

#[tokio::test]
async fn hypertable_three_creation_forms() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();

    client
        .batch_execute(
            "CREATE TABLE ht_with (time timestamptz NOT NULL, device text, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day')",
        )
        .await
        .expect("CREATE TABLE ... WITH (tsdb.hypertable ...)");

    client
        .batch_execute("CREATE TABLE ht_old (time timestamptz NOT NULL, v float8)")
        .await
        .expect("create ht_old");
    client
        .simple_query(
            "SELECT create_hypertable('ht_old', 'time', chunk_time_interval => INTERVAL '1 day')",
        )
        .await
        .expect("create_hypertable old form");

    client
        .batch_execute("CREATE TABLE ht_range (time timestamptz NOT NULL, v float8)")
        .await
        .expect("create ht_range");
    client
        .simple_query("SELECT create_hypertable('ht_range', by_range('time', INTERVAL '1 day'))")
        .await
        .expect("create_hypertable by_range form");

    // A plain table is not a hypertable.
    client
        .batch_execute("CREATE TABLE not_ht (time timestamptz NOT NULL, v float8)")
        .await
        .expect("create plain table");

    // Two rows on two different days => two 1-day chunks (a 7-day default would give one).
    for t in ["ht_with", "ht_old", "ht_range"] {
        client
            .batch_execute(&format!(
                "INSERT INTO {t} (time, v) VALUES ('2024-01-01 12:00:00+00', 1.0), \
                 ('2024-01-02 12:00:00+00', 2.0)"
            ))
            .await
            .unwrap_or_else(|e| panic!("insert into {t}: {e:?}"));
    }

    let rows = text_rows(
        &client,
        "SELECT hypertable_schema, hypertable_name, num_dimensions, num_chunks \
         FROM timescaledb_information.hypertables ORDER BY hypertable_name",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            vec![s("public"), s("ht_old"), s("1"), s("2")],
            vec![s("public"), s("ht_range"), s("1"), s("2")],
            vec![s("public"), s("ht_with"), s("1"), s("2")],
        ]
    );

    for t in ["ht_with", "ht_old", "ht_range"] {
        let rows = text_rows(
            &client,
            &format!(
                "SELECT range_start, range_end, primary_dimension FROM timescaledb_information.chunks \
                 WHERE hypertable_name = '{t}' ORDER BY range_start"
            ),
        )
        .await;
        assert_eq!(
            rows,
            vec![
                vec![
                    s("2024-01-01 00:00:00+00"),
                    s("2024-01-02 00:00:00+00"),
                    s("time")
                ],
                vec![
                    s("2024-01-02 00:00:00+00"),
                    s("2024-01-03 00:00:00+00"),
                    s("time")
                ],
            ],
            "chunks of {t}"
        );
        assert_eq!(
            text_one(&client, &format!("SELECT sum(v) FROM {t}")).await,
            s("3")
        );
    }
}

#[tokio::test]
async fn time_bucket_exact_buckets() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE tb (time timestamptz NOT NULL, device text, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', tsdb.chunk_interval='1 day')",
        )
        .await
        .expect("create tb");
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    client
        .batch_execute(
            "INSERT INTO tb VALUES \
             ('2024-01-01 00:00:00+00', 'a', 1), \
             ('2024-01-01 00:10:00+00', 'b', 2), \
             ('2024-01-01 00:14:59.999999+00', 'a', 3), \
             ('2024-01-01 00:15:00+00', 'a', 4); \
             INSERT INTO tb VALUES \
             ('2024-01-01 00:59:59+00', 'b', 5), \
             ('2024-01-01 01:00:00+00', 'a', 6), \
             ('2024-01-01 02:30:00+00', 'a', 7), \
             ('2023-12-31 23:59:59+00', 'a', 8)",
        )
        .await
        .expect("insert tb");

    let rows = client
        .query(
            "SELECT time_bucket(INTERVAL '15 minutes', time) AS bucket, count(*), sum(v) \
             FROM tb GROUP BY bucket ORDER BY bucket",
            &[],
        )
        .await
        .expect("time_bucket 15 minutes");
    let got: Vec<(DateTime<Utc>, i64, f64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            (ts(2023, 12, 31, 23, 45, 0), 1, 8.0),
            (ts(2024, 1, 1, 0, 0, 0), 3, 6.0),
            (ts(2024, 1, 1, 0, 15, 0), 1, 4.0),
            (ts(2024, 1, 1, 0, 45, 0), 1, 5.0),
            (ts(2024, 1, 1, 1, 0, 0), 1, 6.0),
            (ts(2024, 1, 1, 2, 30, 0), 1, 7.0),
        ]
    );

    // The untyped-literal form used throughout the TimescaleDB docs, with a filter.
    let rows = client
        .query(
            "SELECT time_bucket('1 hour', time) AS bucket, count(*) AS n, max(v) \
             FROM tb WHERE time >= '2024-01-01' GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .expect("time_bucket '1 hour'");
    let got: Vec<(DateTime<Utc>, i64, f64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            (ts(2024, 1, 1, 0, 0, 0), 5, 5.0),
            (ts(2024, 1, 1, 1, 0, 0), 1, 6.0),
            (ts(2024, 1, 1, 2, 0, 0), 1, 7.0),
        ]
    );

    // Grouped by bucket and device, text protocol.
    let rows = text_rows(
        &client,
        "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device, count(*) FROM tb \
         WHERE time >= '2024-01-01' AND time < '2024-01-01 01:00:00+00' \
         GROUP BY b, device ORDER BY b, device",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            vec![s("2024-01-01 00:00:00+00"), s("a"), s("3")],
            vec![s("2024-01-01 00:00:00+00"), s("b"), s("2")],
        ]
    );
}

// ---------------------------------------------------------------------------
// cancel
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_cancel() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute("CREATE TABLE big (x int8)")
        .await
        .expect("create big");
    for chunk in 0..4 {
        let values: Vec<String> = (0..500).map(|i| format!("({})", chunk * 500 + i)).collect();
        client
            .batch_execute(&format!("INSERT INTO big VALUES {}", values.join(",")))
            .await
            .expect("fill big");
    }
    assert_eq!(
        text_one(&client, "SELECT count(*) FROM big").await,
        s("2000")
    );

    // Cancel after 300ms, and again every second in case the first request
    // arrived before the query was registered.
    let token = client.cancel_token();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done2 = done.clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut sent = 0;
        while !done2.load(std::sync::atomic::Ordering::SeqCst) && sent < 60 {
            token
                .cancel_query(NoTls)
                .await
                .expect("sending the cancel request");
            sent += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        sent
    });

    // 2000^3 = 8e9 combinations; the filter keeps any statistics shortcut from
    // answering count(*) without running the join.
    let res = tokio::time::timeout(
        Duration::from_secs(120),
        client.simple_query(
            "SELECT count(*) FROM big a CROSS JOIN big b CROSS JOIN big c \
             WHERE a.x + b.x + c.x >= 0",
        ),
    )
    .await
    .expect("the cancelled query returned (within the safety timeout)");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = canceller.await.expect("canceller task");
    assert!(sent >= 1);
    let err = res.expect_err("cancelled query fails");
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err:?}");

    // The same connection keeps working, in both protocols.
    assert_eq!(text_one(&client, "SELECT 1").await, s("1"));
    let rows = client
        .query("SELECT count(*) FROM big", &[])
        .await
        .expect("after cancel");
    assert_eq!(rows[0].get::<_, i64>(0), 2000);
}
