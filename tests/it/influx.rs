//! InfluxDB-compatible line-protocol ingestion: the HTTP write endpoints (1.x `/write`,
//! CnosDB `/api/v1/write`, 2.x `/api/v2/write`, 3.x `/api/v3/write_lp`), `/ping`,
//! `/health`, `/metrics`, `/query`, and the raw TCP listener. Every write is checked by
//! reading the rows back over pgwire. Each test has its own server and its own database
//! names.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Row, SimpleQueryMessage};

use crate::harness::{Addrs, TestServer, cells, text_rows};

// ---------------------------------------------------------------------------
// HTTP helpers
// ---------------------------------------------------------------------------

/// One HTTP answer with its body read as text.
struct Resp {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// A fresh client per request: a reqwest client must not outlive the test's runtime,
/// and `no_proxy` keeps an `http_proxy` from the environment away from 127.0.0.1.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

async fn send(what: &str, req: reqwest::RequestBuilder) -> Resp {
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: request failed: {e:?}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .text()
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the body failed: {e:?}"));
    Resp {
        status,
        headers,
        body,
    }
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> Resp {
    post_with(url, &[], body).await
}

async fn post_with(url: &str, headers: &[(&str, &str)], body: impl Into<reqwest::Body>) -> Resp {
    let mut req = http_client().post(url).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(&format!("POST {url}"), req).await
}

async fn get(url: &str) -> Resp {
    send(&format!("GET {url}"), http_client().get(url)).await
}

async fn head(url: &str) -> Resp {
    send(&format!("HEAD {url}"), http_client().head(url)).await
}

/// POSTs `body` and asserts 204.
async fn write_ok(url: &str, body: &str) {
    let r = post(url, body.to_string()).await;
    assert_eq!(
        r.status, 204,
        "POST {url} with {body:?} answered {}: {}",
        r.status, r.body
    );
}

/// Checks the error body shape `{"code": "...", "message": M, "error": M}` and returns M.
fn error_message(r: &Resp) -> String {
    let v = r.json();
    let field = |k: &str| -> String {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("error body has no string {k:?}: {}", r.body))
            .to_string()
    };
    let code = field("code");
    assert!(!code.is_empty(), "empty \"code\" in {}", r.body);
    let message = field("message");
    let error = field("error");
    assert_eq!(
        message, error,
        "\"message\" and \"error\" differ: {}",
        r.body
    );
    message
}

/// The text right after `needle` in `msg` starts with a non-blank reason.
fn assert_names_bad_line(msg: &str, line: &str) {
    let needle = format!("unable to parse '{line}': ");
    let at = msg
        .find(&needle)
        .unwrap_or_else(|| panic!("message does not contain {needle:?}: {msg:?}"));
    let reason = &msg[at + needle.len()..];
    assert!(
        reason.chars().next().is_some_and(|c| !c.is_whitespace()),
        "no reason after {needle:?} in {msg:?}"
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(data).expect("gzip write");
    enc.finish().expect("gzip finish")
}

/// Percent-encodes a query-string value (spaces as %20).
fn enc(q: &str) -> String {
    url::form_urlencoded::byte_serialize(q.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// Sum of every sample of metric `name` (any labels) in Prometheus text; None if absent.
fn metric_value(body: &str, name: &str) -> Option<f64> {
    let mut total: Option<f64> = None;
    for line in body.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let rest = if let Some(labels) = rest.strip_prefix('{') {
            match labels.rfind('}') {
                Some(i) => &labels[i + 1..],
                None => continue,
            }
        } else if rest.starts_with(' ') || rest.starts_with('\t') {
            rest
        } else {
            continue; // a longer metric name with the same prefix
        };
        let Some(v) = rest.split_whitespace().next() else {
            continue;
        };
        let v: f64 = v
            .parse()
            .unwrap_or_else(|_| panic!("metric {name}: value {v:?} is not a number: {line:?}"));
        total = Some(total.unwrap_or(0.0) + v);
    }
    total
}

// ---------------------------------------------------------------------------
// SQL helpers
// ---------------------------------------------------------------------------

async fn query(client: &Client, sql: &str) -> Vec<Row> {
    client
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e:?}"))
}

/// `count(*)` of `table`, or 0 when the table does not exist (42P01).
async fn count_or_missing(client: &Client, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    match client.simple_query(&sql).await {
        Ok(msgs) => {
            let vals: Vec<String> = msgs
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                    _ => None,
                })
                .collect();
            assert_eq!(vals.len(), 1, "{sql:?} returned {vals:?}");
            vals[0]
                .parse()
                .unwrap_or_else(|_| panic!("{sql:?} returned {:?}", vals[0]))
        }
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => 0,
        Err(e) => panic!("{sql:?} failed: {e:?}"),
    }
}

/// Column name -> Postgres type name, from the row description of `SELECT * FROM table`.
async fn column_types(client: &Client, table: &str) -> BTreeMap<String, String> {
    let rows = query(client, &format!("SELECT * FROM {table}")).await;
    assert!(!rows.is_empty(), "{table} has no rows");
    rows[0]
        .columns()
        .iter()
        .map(|c| (c.name().to_string(), c.type_().name().to_string()))
        .collect()
}

fn types(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn hypertable_names(client: &Client) -> Vec<String> {
    text_rows(
        client,
        "SELECT hypertable_name FROM timescaledb_information.hypertables",
    )
    .await
    .into_iter()
    .filter_map(|r| r.into_iter().next().flatten())
    .collect()
}

fn at_micros(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).expect("timestamp in range")
}

/// `(tag, time)` of every row of `SELECT {tag}, time FROM {table}`.
async fn times_by_tag(client: &Client, table: &str, tag: &str) -> BTreeMap<String, DateTime<Utc>> {
    let rows = query(client, &format!("SELECT {tag}, time FROM {table}")).await;
    let mut out = BTreeMap::new();
    for r in &rows {
        let k: String = r.get(0);
        let t: DateTime<Utc> = r.get(1);
        assert!(
            out.insert(k.clone(), t).is_none(),
            "tag {k:?} appears twice"
        );
    }
    out
}

async fn connect_fails_with_missing_db(server: &TestServer, db: &str) {
    let err = tokio_postgres::connect(&server.conn_str(db), NoTls)
        .await
        .err()
        .unwrap_or_else(|| panic!("connecting to database {db:?} should fail"));
    assert_eq!(
        err.code(),
        Some(&SqlState::INVALID_CATALOG_NAME),
        "connect to {db:?}: {err:?}"
    );
}

// ---------------------------------------------------------------------------
// harness
// ---------------------------------------------------------------------------

#[test]
fn ready_line_tokens_parse() {
    let a = Addrs::parse("pg=127.0.0.1:1 http=127.0.0.1:2 tcp=127.0.0.1:3").expect("parses");
    assert_eq!(
        a,
        Addrs {
            pg: "127.0.0.1:1".into(),
            http: Some("127.0.0.1:2".into()),
            tcp: Some("127.0.0.1:3".into()),
        }
    );
    let a = Addrs::parse("pg=127.0.0.1:1").expect("pg alone parses");
    assert_eq!(a.http, None);
    assert_eq!(a.tcp, None);
    assert!(
        Addrs::parse("http=127.0.0.1:2").is_none(),
        "pg= is required"
    );
}

/// (path, headers, how the token is passed)
type AuthCase<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

#[tokio::test]
async fn ready_line_reports_http_and_tcp_addresses() {
    let mut server = TestServer::start_with_args(&["--tcp-addr", "127.0.0.1:0"], &[]);
    let http = server.http_addr.clone().expect("READY line has http=");
    let tcp = server
        .tcp_addr
        .clone()
        .expect("READY line has tcp= with --tcp-addr");
    assert_ne!(http, server.pg_addr);
    assert_ne!(tcp, http);
    assert_eq!(get(&server.http_url("/ping")).await.status, 204);

    // restart() keeps the extra args and refreshes every address
    server.terminate();
    server.restart();
    assert!(server.tcp_addr.is_some(), "tcp= after restart");
    assert_eq!(get(&server.http_url("/ping")).await.status, 204);

    // without --tcp-addr there is no tcp=
    let plain = TestServer::start();
    assert!(plain.http_addr.is_some());
    assert_eq!(plain.tcp_addr, None);
}

// ---------------------------------------------------------------------------
// 204 and immediate visibility, every write endpoint
// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_write_endpoint_answers_204_and_rows_are_visible_at_once() {
    let server = TestServer::start();
    let cases = [
        ("/write?db=ep_v1", "ep_v1"),
        ("/api/v1/write?db=ep_cnos", "ep_cnos"),
        ("/api/v2/write?bucket=ep_v2&org=test", "ep_v2"),
        ("/api/v3/write_lp?db=ep_v3&precision=ns", "ep_v3"),
    ];
    for (path, db) in cases {
        write_ok(
            &server.http_url(path),
            "ep,host=a v=1 1700000000000000000\nep,host=b v=2 1700000001000000000\n",
        )
        .await;
        // no waiting: visible as soon as 204 was returned
        let client = server.connect(db).await;
        let rows = query(&client, "SELECT host, v FROM ep ORDER BY time").await;
        let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(
            got,
            vec![("a".to_string(), 1.0), ("b".to_string(), 2.0)],
            "{path}"
        );
    }
}

// ---------------------------------------------------------------------------
// missing db / bucket
// ---------------------------------------------------------------------------

#[tokio::test]
async fn missing_database_or_bucket_is_400() {
    let server = TestServer::start();
    let line = "m v=1 1700000000000000000";

    let r = post(&server.http_url("/write"), line).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.contains("database is required"), "{msg:?}");
    let hdr = r
        .header("X-Influxdb-Error")
        .expect("v1 error has an X-Influxdb-Error header");
    assert!(hdr.contains("database is required"), "header {hdr:?}");

    let r = post(&server.http_url("/write?precision=s"), line).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(error_message(&r).contains("database is required"));

    let r = post(&server.http_url("/api/v1/write"), line).await;
    assert_eq!(r.status, 400, "{}", r.body);
    error_message(&r);

    let r = post(&server.http_url("/api/v2/write?org=test"), line).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.contains("bucket is required"), "{msg:?}");

    let r = post(&server.http_url("/api/v3/write_lp"), line).await;
    assert_eq!(r.status, 400, "{}", r.body);
    error_message(&r);
}

// ---------------------------------------------------------------------------
// partial writes
// ---------------------------------------------------------------------------

const PARTIAL_BODY: &str = "pw,host=a v=1 1700000000000000000\n\
                            this is not line protocol\n\
                            pw,host=b v=2 1700000001000000000\n\
                            pw,host=d v=1 notanumber\n";
const PARTIAL_BAD: [&str; 2] = ["this is not line protocol", "pw,host=d v=1 notanumber"];

async fn check_partial_write(server: &TestServer, path: &str, db: &str) -> Resp {
    let r = post(&server.http_url(path), PARTIAL_BODY).await;
    assert_eq!(r.status, 400, "{path}: {}", r.body);
    let msg = error_message(&r);
    assert!(msg.starts_with("partial write:"), "{path}: {msg:?}");
    for bad in PARTIAL_BAD {
        assert_names_bad_line(&msg, bad);
    }
    assert!(
        msg.trim_end().ends_with("dropped=2"),
        "{path}: message should end with dropped=2: {msg:?}"
    );
    // the good lines were written
    let client = server.connect(db).await;
    let rows = query(&client, "SELECT host, v FROM pw ORDER BY time").await;
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![("a".to_string(), 1.0), ("b".to_string(), 2.0)],
        "{path}"
    );
    r
}

/// A SQL table's CHECK holds for line protocol too: the failing line is
/// rejected by number with the constraint's name, the others are written.
#[tokio::test]
async fn check_constraint_rejects_only_the_failing_lines() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE ckm (time timestamptz NOT NULL, host text, v float8 CHECK (v >= 0)) \
             WITH (tsdb.hypertable, sundial.line_protocol_columns = true)",
        )
        .await
        .unwrap();
    let body = "ckm,host=a v=1 1700000000000000000\n\
                ckm,host=b v=-1 1700000001000000000\n\
                ckm,host=c v=2 1700000002000000000\n";
    let r = post(&server.http_url("/write?db=sundial"), body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.starts_with("partial write:"), "{msg:?}");
    assert!(msg.contains("line 2"), "{msg:?}");
    assert!(msg.contains("ckm_v_check"), "{msg:?}");
    assert!(msg.trim_end().ends_with("dropped=1"), "{msg:?}");
    let rows = query(&client, "SELECT host, v FROM ckm ORDER BY time").await;
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, vec![("a".to_string(), 1.0), ("c".to_string(), 2.0)]);
    // COPY: the first failing row fails the statement and nothing is written.
    let err = client
        .batch_execute(
            "CREATE TABLE ckc (id int, v int CHECK (v > 0)); \
             INSERT INTO ckc VALUES (1, 1)",
        )
        .await;
    assert!(err.is_ok(), "{err:?}");
    let sink = client
        .copy_in::<_, bytes::Bytes>("COPY ckc FROM STDIN")
        .await
        .unwrap();
    use futures::SinkExt;
    let mut sink = Box::pin(sink);
    sink.send(bytes::Bytes::from_static(b"2\t5\n3\t0\n4\t7\n"))
        .await
        .unwrap();
    let e = sink.as_mut().finish().await.unwrap_err();
    let db = e.as_db_error().expect("a database error");
    assert_eq!(db.code(), &SqlState::CHECK_VIOLATION);
    assert_eq!(
        db.message(),
        "new row for relation \"ckc\" violates check constraint \"ckc_v_check\""
    );
    assert_eq!(db.detail(), Some("Failing row contains (3, 0)."));
    let rows = query(&client, "SELECT count(*) FROM ckc").await;
    assert_eq!(rows[0].get::<_, i64>(0), 1);
}

#[tokio::test]
async fn partial_write_v1_keeps_good_lines() {
    let server = TestServer::start();
    let r = check_partial_write(&server, "/write?db=pw_v1", "pw_v1").await;
    let hdr = r
        .header("X-Influxdb-Error")
        .expect("v1 error has an X-Influxdb-Error header");
    assert!(hdr.starts_with("partial write:"), "header {hdr:?}");
}

#[tokio::test]
async fn partial_write_cnosdb_path_keeps_good_lines() {
    let server = TestServer::start();
    check_partial_write(&server, "/api/v1/write?db=pw_cnos", "pw_cnos").await;
}

#[tokio::test]
async fn partial_write_v2_keeps_good_lines() {
    let server = TestServer::start();
    check_partial_write(&server, "/api/v2/write?bucket=pw_v2&org=test", "pw_v2").await;
}

#[tokio::test]
async fn partial_write_v3_keeps_good_lines_and_lists_bad_ones() {
    let server = TestServer::start();
    let r = check_partial_write(&server, "/api/v3/write_lp?db=pw_v3&precision=ns", "pw_v3").await;
    let v = r.json();
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("v3 partial write has a \"data\" array: {}", r.body));
    assert_eq!(data.len(), 2, "{}", r.body);
    let mut line_numbers = Vec::new();
    for (item, bad) in data.iter().zip(PARTIAL_BAD) {
        assert_eq!(item["original_line"], json!(bad), "{}", r.body);
        let n = item["line_number"]
            .as_u64()
            .unwrap_or_else(|| panic!("line_number is a number: {item}"));
        line_numbers.push(n);
        let e = item["error_message"].as_str().unwrap_or("");
        assert!(!e.is_empty(), "error_message is set: {item}");
    }
    // bad lines are the 2nd and 4th of the body (1-based; 0-based would be 1 and 3)
    assert!(
        line_numbers == vec![2, 4] || line_numbers == vec![1, 3],
        "line numbers {line_numbers:?}"
    );
}

#[tokio::test]
async fn all_lines_bad_is_400_and_writes_nothing() {
    let server = TestServer::start();
    // the database exists beforehand so "nothing written" can be checked
    write_ok(
        &server.http_url("/write?db=allbad"),
        "other v=1 1700000000000000000",
    )
    .await;
    let client = server.connect("allbad").await;
    for path in [
        "/write?db=allbad",
        "/api/v2/write?bucket=allbad&org=test",
        "/api/v3/write_lp?db=allbad&precision=ns",
    ] {
        let r = post(
            &server.http_url(path),
            "ab v=1 notanumber\nab,host=x\nab,host=y v=\n",
        )
        .await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        error_message(&r);
        assert_eq!(count_or_missing(&client, "ab").await, 0, "{path}");
    }
    assert_eq!(count_or_missing(&client, "other").await, 1);
}

#[tokio::test]
async fn v3_accept_partial_false_writes_nothing() {
    let server = TestServer::start();
    let base = "/api/v3/write_lp?db=ap_db&precision=ns";
    write_ok(&server.http_url(base), "ap v=0 1700000000000000000").await;
    let client = server.connect("ap_db").await;
    let body = "ap v=1 1700000001000000000\nnot valid\nap v=2 1700000002000000000\n";

    let r = post(
        &server.http_url(&format!("{base}&accept_partial=false")),
        body,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    error_message(&r);
    assert_eq!(
        count_or_missing(&client, "ap").await,
        1,
        "accept_partial=false must not write any line of a body with a bad line"
    );

    // the same body with accept_partial=true keeps the good lines
    let r = post(
        &server.http_url(&format!("{base}&accept_partial=true")),
        body,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(error_message(&r).starts_with("partial write:"));
    let rows = query(&client, "SELECT v FROM ap ORDER BY time").await;
    let got: Vec<f64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![0.0, 1.0, 2.0]);
}

// ---------------------------------------------------------------------------
// type conflicts
// ---------------------------------------------------------------------------

#[tokio::test]
async fn field_type_conflict_rejects_only_the_conflicting_lines() {
    let server = TestServer::start();
    let url = server.http_url("/write?db=tc_db");
    write_ok(&url, "conflict_meas temp_val=1.5 1700000000000000000").await;

    let r = post(
        &url,
        "conflict_meas temp_val=2i 1700000001000000000\n\
         conflict_meas temp_val=3.5 1700000002000000000\n\
         conflict_meas temp_val=\"hot\" 1700000003000000000\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.starts_with("partial write:"), "{msg:?}");
    assert!(msg.contains("field type conflict"), "{msg:?}");
    for word in ["temp_val", "conflict_meas", "integer", "string", "float"] {
        assert!(
            msg.contains(word),
            "message should mention {word:?}: {msg:?}"
        );
    }
    assert!(msg.trim_end().ends_with("dropped=2"), "{msg:?}");

    let client = server.connect("tc_db").await;
    let rows = query(&client, "SELECT temp_val FROM conflict_meas ORDER BY time").await;
    let got: Vec<f64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, vec![1.5, 3.5]);
    assert_eq!(
        column_types(&client, "conflict_meas").await["temp_val"],
        "float8"
    );
}

// ---------------------------------------------------------------------------
// precision
// ---------------------------------------------------------------------------

/// 2023-11-14T22:00:00Z, a whole hour.
const T_S: i64 = 1_699_999_200;

#[tokio::test]
async fn precision_v1() {
    let server = TestServer::start();
    let us = T_S * 1_000_000;
    let cases: [(&str, String, i64); 9] = [
        ("n", format!("{T_S}123456789"), us + 123_456),
        ("ns", format!("{T_S}123456789"), us + 123_456),
        ("u", format!("{T_S}123456"), us + 123_456),
        ("us", format!("{T_S}123456"), us + 123_456),
        ("ms", format!("{T_S}123"), us + 123_000),
        ("s", format!("{T_S}"), us),
        ("m", format!("{}", T_S / 60), us),
        ("h", format!("{}", T_S / 3600), us),
        ("", format!("{T_S}987654321"), us + 987_654), // default: ns
    ];
    let mut want = BTreeMap::new();
    for (p, ts, micros) in &cases {
        let tag: &str = if p.is_empty() { "default" } else { p };
        let path = if p.is_empty() {
            "/write?db=prec_v1".to_string()
        } else {
            format!("/write?db=prec_v1&precision={p}")
        };
        write_ok(&server.http_url(&path), &format!("prec,p={tag} v=1 {ts}")).await;
        want.insert(tag.to_string(), at_micros(*micros));
    }
    let client = server.connect("prec_v1").await;
    assert_eq!(times_by_tag(&client, "prec", "p").await, want);

    let r = post(
        &server.http_url("/write?db=prec_v1&precision=x"),
        format!("prec,p=bad v=1 {T_S}"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.contains("invalid precision"), "{msg:?}");
    assert!(r.header("X-Influxdb-Error").is_some());
    assert_eq!(count_or_missing(&client, "prec").await, 9);
}

#[tokio::test]
async fn precision_v2() {
    let server = TestServer::start();
    let us = T_S * 1_000_000;
    let cases: [(&str, String, i64); 5] = [
        ("ns", format!("{T_S}123456789"), us + 123_456),
        ("us", format!("{T_S}123456"), us + 123_456),
        ("ms", format!("{T_S}123"), us + 123_000),
        ("s", format!("{T_S}"), us),
        ("", format!("{T_S}987654321"), us + 987_654), // default: ns
    ];
    let mut want = BTreeMap::new();
    for (p, ts, micros) in &cases {
        let tag: &str = if p.is_empty() { "default" } else { p };
        let mut path = "/api/v2/write?bucket=prec_v2&org=test".to_string();
        if !p.is_empty() {
            path.push_str(&format!("&precision={p}"));
        }
        write_ok(&server.http_url(&path), &format!("prec,p={tag} v=1 {ts}")).await;
        want.insert(tag.to_string(), at_micros(*micros));
    }
    let client = server.connect("prec_v2").await;
    assert_eq!(times_by_tag(&client, "prec", "p").await, want);

    // v2 does not accept the 1.x-only units
    for bad in ["h", "x"] {
        let r = post(
            &server.http_url(&format!(
                "/api/v2/write?bucket=prec_v2&org=test&precision={bad}"
            )),
            format!("prec,p=bad_{bad} v=1 1"),
        )
        .await;
        assert_eq!(r.status, 400, "precision={bad}: {}", r.body);
    }
    assert_eq!(count_or_missing(&client, "prec").await, 5);
}

#[tokio::test]
async fn precision_v3() {
    let server = TestServer::start();
    let us = T_S * 1_000_000;
    let ns = format!("{T_S}123456789");
    let usv = format!("{T_S}123456");
    let ms = format!("{T_S}123");
    let s = format!("{T_S}");
    let cases: Vec<(&str, &str, &String, i64)> = vec![
        // (tag, precision param, timestamp, expected micros)
        ("auto_s", "auto", &s, us),
        ("auto_ms", "auto", &ms, us + 123_000),
        ("auto_us", "auto", &usv, us + 123_456),
        ("auto_ns", "auto", &ns, us + 123_456),
        ("default_s", "", &s, us), // default is auto
        ("default_ns", "", &ns, us + 123_456),
        ("second", "second", &s, us),
        ("s", "s", &s, us),
        ("millisecond", "millisecond", &ms, us + 123_000),
        ("ms", "ms", &ms, us + 123_000),
        ("microsecond", "microsecond", &usv, us + 123_456),
        ("us", "us", &usv, us + 123_456),
        ("u", "u", &usv, us + 123_456),
        ("nanosecond", "nanosecond", &ns, us + 123_456),
        ("ns", "ns", &ns, us + 123_456),
        ("n", "n", &ns, us + 123_456),
    ];
    let mut want = BTreeMap::new();
    for (tag, p, ts, micros) in &cases {
        let mut path = "/api/v3/write_lp?db=prec_v3".to_string();
        if !p.is_empty() {
            path.push_str(&format!("&precision={p}"));
        }
        write_ok(&server.http_url(&path), &format!("prec,p={tag} v=1 {ts}")).await;
        want.insert(tag.to_string(), at_micros(*micros));
    }
    let client = server.connect("prec_v3").await;
    assert_eq!(times_by_tag(&client, "prec", "p").await, want);

    let r = post(
        &server.http_url("/api/v3/write_lp?db=prec_v3&precision=fortnight"),
        format!("prec,p=bad v=1 {T_S}"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(count_or_missing(&client, "prec").await, cases.len() as i64);
}

#[tokio::test]
async fn line_without_timestamp_gets_the_current_time() {
    let server = TestServer::start();
    let before = Utc::now();
    write_ok(
        &server.http_url("/write?db=nots_db&precision=s"),
        "nots,ep=v1 v=1",
    )
    .await;
    write_ok(&server.http_url("/write?db=nots_db"), "nots,ep=v1ns v=1").await;
    write_ok(
        &server.http_url("/api/v2/write?bucket=nots_db&org=test"),
        "nots,ep=v2 v=2",
    )
    .await;
    write_ok(
        &server.http_url("/api/v3/write_lp?db=nots_db"),
        "nots,ep=v3 v=3",
    )
    .await;
    let after = Utc::now();
    let client = server.connect("nots_db").await;
    let got = times_by_tag(&client, "nots", "ep").await;
    assert_eq!(got.len(), 4, "{got:?}");
    // Slack for precision truncation (up to 1 s) and clock granularity; this is a
    // plausibility bound on the stored value, not a speed check.
    let slack = chrono::Duration::seconds(5);
    for (ep, t) in &got {
        assert!(
            *t >= before - slack && *t <= after + slack,
            "{ep}: stored time {t} is not the server's current time ({before} .. {after})"
        );
    }
}

// ---------------------------------------------------------------------------
// gzip and size limits
// ---------------------------------------------------------------------------

#[tokio::test]
async fn gzip_bodies_are_accepted_and_corrupt_gzip_is_400() {
    let server = TestServer::start();
    let gz = [("Content-Encoding", "gzip")];
    let cases = [
        (
            "/write?db=gz_db",
            "gz,host=a v=1 1700000000000000000\ngz,host=b v=2 1700000001000000000\n",
        ),
        (
            "/api/v2/write?bucket=gz_db&org=test",
            "gz,host=c v=3 1700000002000000000\n",
        ),
        (
            "/api/v3/write_lp?db=gz_db&precision=ns",
            "gz,host=d v=4 1700000003000000000\n",
        ),
    ];
    for (path, lines) in cases {
        let r = post_with(&server.http_url(path), &gz, gzip(lines.as_bytes())).await;
        assert_eq!(r.status, 204, "{path}: {}", r.body);
    }
    let client = server.connect("gz_db").await;
    let rows = query(&client, "SELECT host, v FROM gz ORDER BY time").await;
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![
            ("a".to_string(), 1.0),
            ("b".to_string(), 2.0),
            ("c".to_string(), 3.0),
            ("d".to_string(), 4.0)
        ]
    );

    // not gzip at all
    for path in ["/write?db=gz_db", "/api/v2/write?bucket=gz_db&org=test"] {
        let r = post_with(
            &server.http_url(path),
            &gz,
            b"gz,host=z v=9 1700000009000000000\n".to_vec(),
        )
        .await;
        assert_eq!(
            r.status, 400,
            "{path} with a plain body labelled gzip: {}",
            r.body
        );
    }
    // a truncated gzip stream
    let full = gzip(b"gz,host=y v=8 1700000008000000000\ngz,host=x v=7 1700000007000000000\n");
    let truncated = full[..full.len() / 2].to_vec();
    let r = post_with(&server.http_url("/write?db=gz_db"), &gz, truncated).await;
    assert_eq!(r.status, 400, "truncated gzip: {}", r.body);
    assert_eq!(count_or_missing(&client, "gz").await, 4);
}

#[tokio::test]
async fn body_over_the_limit_is_413_plain_and_gzip_bomb() {
    const LIMIT: usize = 4096;
    let limit = LIMIT.to_string();
    let server = TestServer::start_with_env(&[("SUNDIAL_HTTP_MAX_BODY_SIZE", limit.as_str())]);
    let url = server.http_url("/write?db=big_db");
    write_ok(&url, "big,host=a v=0i 1700000000000000000").await;
    let client = server.connect("big_db").await;

    // plain body over the limit (kept small so the server has read it all)
    let mut plain = String::new();
    let mut i = 1i64;
    while plain.len() <= LIMIT + 1500 {
        plain.push_str(&format!(
            "big,host=a v={i}i {}\n",
            1_700_000_000_000_000_000 + i
        ));
        i += 1;
    }
    let r = post(&url, plain).await;
    assert_eq!(r.status, 413, "plain body over the limit: {}", r.body);

    // gzip bomb: small on the wire, far over the limit once decompressed
    let line = "big,host=bomb v=1i 1700000000000000000\n";
    let inflated = line.repeat(256 * 1024 / line.len());
    let bomb = gzip(inflated.as_bytes());
    assert!(
        bomb.len() < LIMIT,
        "test precondition: compressed bomb ({} bytes) is under the limit",
        bomb.len()
    );
    let r = post_with(&url, &[("Content-Encoding", "gzip")], bomb).await;
    assert_eq!(r.status, 413, "gzip bomb: {}", r.body);
    assert_eq!(count_or_missing(&client, "big").await, 1);

    // a gzip body that stays under the limit decompressed is fine
    let small = gzip(b"big,host=b v=2i 1700000000000000000\n");
    let r = post_with(&url, &[("Content-Encoding", "gzip")], small).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(count_or_missing(&client, "big").await, 2);
}

// ---------------------------------------------------------------------------
// auth
// ---------------------------------------------------------------------------

#[tokio::test]
async fn auth_token_is_required_for_writes() {
    let server = TestServer::start_with_env(&[
        ("SUNDIAL_HTTP_AUTH_TOKEN", "secret"),
        ("SUNDIAL_SUPERUSER_PASSWORD", "pw"),
    ]);
    let line = |via: &str, n: i64| format!("auth,via={via} v=1 {}", 1_700_000_000_000_000_000 + n);

    let denied: [AuthCase; 7] = [
        ("/write?db=auth_db", vec![], "none_v1"),
        ("/api/v2/write?bucket=auth_db&org=test", vec![], "none_v2"),
        ("/api/v3/write_lp?db=auth_db", vec![], "none_v3"),
        ("/write?db=auth_db&u=any&p=wrong", vec![], "wrong_p"),
        (
            "/api/v2/write?bucket=auth_db&org=test",
            vec![("Authorization", "Token wrong")],
            "wrong_token",
        ),
        (
            "/api/v3/write_lp?db=auth_db",
            vec![("Authorization", "Bearer wrong")],
            "wrong_bearer",
        ),
        (
            "/write?db=auth_db",
            vec![("Authorization", "secret")],
            "no_scheme",
        ),
    ];
    for (i, (path, headers, via)) in denied.iter().enumerate() {
        let r = post_with(&server.http_url(path), headers, line(via, i as i64)).await;
        assert_eq!(r.status, 401, "{path} {headers:?}: {}", r.body);
    }

    let allowed: [AuthCase; 5] = [
        ("/write?db=auth_db&u=any&p=secret", vec![], "v1_param"),
        (
            "/write?db=auth_db",
            vec![("Authorization", "Token secret")],
            "v1_token",
        ),
        (
            "/api/v1/write?db=auth_db",
            vec![("Authorization", "Bearer secret")],
            "cnos_bearer",
        ),
        (
            "/api/v2/write?bucket=auth_db&org=test",
            vec![("Authorization", "Token secret")],
            "v2_token",
        ),
        (
            "/api/v3/write_lp?db=auth_db&precision=ns",
            vec![("Authorization", "Bearer secret")],
            "v3_bearer",
        ),
    ];
    for (i, (path, headers, via)) in allowed.iter().enumerate() {
        let r = post_with(&server.http_url(path), headers, line(via, 100 + i as i64)).await;
        assert_eq!(r.status, 204, "{path} {headers:?}: {}", r.body);
    }

    // /ping and /health stay open
    assert_eq!(get(&server.http_url("/ping")).await.status, 204);
    assert_eq!(get(&server.http_url("/health")).await.status, 200);

    // exactly the authorised writes landed
    let (client, conn) = tokio_postgres::connect(
        &format!("{} user=sundial password=pw", server.conn_str("auth_db")),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect with the superuser's password");
    tokio::spawn(conn);
    let rows = text_rows(&client, "SELECT via FROM auth").await;
    let mut got: Vec<String> = rows.into_iter().filter_map(|r| r[0].clone()).collect();
    got.sort();
    let mut want: Vec<String> = allowed.iter().map(|a| a.2.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------
// databases
// ---------------------------------------------------------------------------

#[tokio::test]
async fn first_write_creates_the_database() {
    let server = TestServer::start();
    connect_fails_with_missing_db(&server, "telegraf").await;
    write_ok(
        &server.http_url("/write?db=telegraf"),
        "cpu,host=a usage=12.5 1700000000000000000",
    )
    .await;
    let client = server.connect("telegraf").await;
    let rows = query(&client, "SELECT host, usage FROM cpu").await;
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, vec![("a".to_string(), 12.5)]);
}

#[tokio::test]
async fn write_to_missing_database_is_404_when_creation_is_off() {
    let server = TestServer::start_with_env(&[("SUNDIAL_LP_CREATE_DATABASES", "false")]);
    let line = "m v=1 1700000000000000000";
    for path in [
        "/write?db=nodb",
        "/api/v1/write?db=nodb",
        "/api/v2/write?bucket=nodb&org=test",
        "/api/v3/write_lp?db=nodb",
    ] {
        let r = post(&server.http_url(path), line).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        let msg = error_message(&r);
        assert!(msg.contains("database not found"), "{path}: {msg:?}");
    }
    connect_fails_with_missing_db(&server, "nodb").await;

    // a database made over SQL can be written to
    server
        .connect("sundial")
        .await
        .batch_execute("CREATE DATABASE made_by_sql")
        .await
        .expect("CREATE DATABASE");
    write_ok(&server.http_url("/write?db=made_by_sql"), line).await;
    let client = server.connect("made_by_sql").await;
    assert_eq!(count_or_missing(&client, "m").await, 1);
}

// ---------------------------------------------------------------------------
// schema on write
// ---------------------------------------------------------------------------

#[tokio::test]
async fn schema_on_write_creates_a_hypertable_and_adds_columns() {
    let server = TestServer::start();
    let url = server.http_url("/api/v3/write_lp?db=sch_db&precision=ns");
    write_ok(
        &url,
        "sch,host=a f=1.5,i=2i,u=3u,s=\"x\",b=true 1700000000000000000",
    )
    .await;
    let client = server.connect("sch_db").await;
    assert_eq!(
        column_types(&client, "sch").await,
        types(&[
            ("time", "timestamptz"),
            ("host", "text"),
            ("f", "float8"),
            ("i", "int8"),
            ("u", "numeric"),
            ("s", "text"),
            ("b", "bool"),
        ])
    );
    assert!(
        hypertable_names(&client).await.contains(&"sch".to_string()),
        "sch is a hypertable"
    );

    // a new tag and a new field add columns; older rows read NULL there
    write_ok(&url, "sch,host=a,dc=eu f=2.5,extra=7i 1700000001000000000").await;
    assert_eq!(
        column_types(&client, "sch").await,
        types(&[
            ("time", "timestamptz"),
            ("host", "text"),
            ("dc", "text"),
            ("f", "float8"),
            ("i", "int8"),
            ("u", "numeric"),
            ("s", "text"),
            ("b", "bool"),
            ("extra", "int8"),
        ])
    );
    let rows = query(&client, "SELECT * FROM sch ORDER BY time").await;
    assert_eq!(rows.len(), 2);
    let (r0, r1) = (&rows[0], &rows[1]);
    assert_eq!(
        r0.get::<_, DateTime<Utc>>("time"),
        at_micros(1_700_000_000_000_000)
    );
    assert_eq!(r0.get::<_, Option<String>>("host").as_deref(), Some("a"));
    assert_eq!(r0.get::<_, Option<String>>("dc"), None);
    assert_eq!(r0.get::<_, Option<f64>>("f"), Some(1.5));
    assert_eq!(r0.get::<_, Option<i64>>("i"), Some(2));
    assert_eq!(r0.get::<_, Option<Decimal>>("u"), Some(Decimal::from(3)));
    assert_eq!(r0.get::<_, Option<String>>("s").as_deref(), Some("x"));
    assert_eq!(r0.get::<_, Option<bool>>("b"), Some(true));
    assert_eq!(r0.get::<_, Option<i64>>("extra"), None);

    assert_eq!(
        r1.get::<_, DateTime<Utc>>("time"),
        at_micros(1_700_000_001_000_000)
    );
    assert_eq!(r1.get::<_, Option<String>>("host").as_deref(), Some("a"));
    assert_eq!(r1.get::<_, Option<String>>("dc").as_deref(), Some("eu"));
    assert_eq!(r1.get::<_, Option<f64>>("f"), Some(2.5));
    assert_eq!(r1.get::<_, Option<i64>>("i"), None);
    assert_eq!(r1.get::<_, Option<Decimal>>("u"), None);
    assert_eq!(r1.get::<_, Option<String>>("s"), None);
    assert_eq!(r1.get::<_, Option<bool>>("b"), None);
    assert_eq!(r1.get::<_, Option<i64>>("extra"), Some(7));
}

// ---------------------------------------------------------------------------
// dedup
// ---------------------------------------------------------------------------

type DdRow = (String, DateTime<Utc>, Option<f64>, Option<f64>, Option<f64>);

async fn dd_rows(client: &Client) -> Vec<DdRow> {
    query(
        client,
        "SELECT host, time, x, y, z FROM dd ORDER BY host, time",
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

#[tokio::test]
async fn duplicate_points_merge_field_wise_last_write_wins() {
    let mut server = TestServer::start();
    let url = |s: &TestServer| s.http_url("/write?db=dd_db");
    let t = at_micros(1_700_000_000_000_000);
    let t1 = at_micros(1_700_000_001_000_000);

    // within one body: the later line wins, fields are united
    write_ok(
        &url(&server),
        "dd,host=a x=1,y=10 1700000000000000000\n\
         dd,host=a x=2 1700000000000000000\n\
         dd,host=b x=1,y=10 1700000000000000000\n\
         dd,host=c x=5 1700000000000000000\n\
         dd,host=c x=6 1700000001000000000\n",
    )
    .await;
    // across bodies, with a field that is new to the table
    write_ok(&url(&server), "dd,host=b x=3,z=30 1700000000000000000").await;

    let mut want: Vec<DdRow> = vec![
        ("a".into(), t, Some(2.0), Some(10.0), None),
        ("b".into(), t, Some(3.0), Some(10.0), Some(30.0)),
        ("c".into(), t, Some(5.0), None, None),
        ("c".into(), t1, Some(6.0), None, None),
    ];
    let client = server.connect("dd_db").await;
    assert_eq!(dd_rows(&client).await, want, "right after the writes");

    let flushed = text_rows(&client, "SELECT sundial_flush()").await;
    assert_eq!(flushed.len(), 1, "{flushed:?}");
    assert_eq!(dd_rows(&client).await, want, "after sundial_flush()");

    // overwrite flushed points
    write_ok(
        &url(&server),
        "dd,host=b y=11 1700000000000000000\ndd,host=c x=7 1700000001000000000\n",
    )
    .await;
    want[1].3 = Some(11.0);
    want[3].2 = Some(7.0);
    assert_eq!(
        dd_rows(&client).await,
        want,
        "after overwriting flushed points"
    );
    // A time range over overlapping sources: merged first, then filtered by time
    // (the time column is not among the selected ones).
    let in_range: Vec<(String, Option<f64>, Option<f64>)> = query(
        &client,
        "SELECT host, x, y FROM dd WHERE time < '2023-11-14 22:13:21+00' ORDER BY host",
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect();
    assert_eq!(
        in_range,
        vec![
            ("a".to_string(), Some(2.0), Some(10.0)),
            ("b".to_string(), Some(3.0), Some(11.0)),
            ("c".to_string(), Some(5.0), None),
        ],
        "time range over merged points"
    );
    drop(client);

    server.terminate();
    server.restart();
    let client = server.connect("dd_db").await;
    assert_eq!(dd_rows(&client).await, want, "after a restart");

    // Two overlapping files now hold copies of the same points; compaction merges
    // them physically into one file with one row per point.
    let files = query(
        &client,
        "SELECT row_count FROM sundial_chunk_files WHERE hypertable_name = 'dd'",
    )
    .await;
    assert_eq!(files.len(), 2, "one file per flush before compaction");
    let compacted = text_rows(&client, "SELECT sundial_compact()").await;
    assert_eq!(
        compacted,
        vec![vec![Some("1".to_string())]],
        "one chunk compacted"
    );
    let files: Vec<i64> = query(
        &client,
        "SELECT row_count FROM sundial_chunk_files WHERE hypertable_name = 'dd'",
    )
    .await
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(files, vec![4], "one file, one row per point");
    assert_eq!(dd_rows(&client).await, want, "after compaction");
}

/// Compaction merges a chunk's files in rounds within `compaction_memory`: 40
/// flushed files of one chunk (5,000 points each, the same points every time) under a
/// 4 MiB budget, where one pass over all of them holds a batch of every file at once
/// (about 24 MB), become one file with every point once: each field keeps its last
/// written value, a field written only in the first file survives every round.
#[tokio::test]
async fn compaction_merges_many_files_in_rounds_within_its_budget() {
    let server = TestServer::start_with_args(&["--compaction-memory", "4MiB"], &[]);
    let url = server.http_url("/write?db=rounds&precision=s");
    const FILES: usize = 40;
    const POINTS: usize = 5000;
    let client = server.connect("sundial").await;
    for file in 0..FILES {
        let mut body = String::with_capacity(POINTS * 120);
        for p in 0..POINTS {
            let fields: Vec<String> = (0..10).map(|f| format!("f{f}={}", file * 10 + f)).collect();
            let first = if file == 0 { ",g=7i" } else { "" };
            body.push_str(&format!(
                "m,host=h{} {}{first} {}\n",
                p % 50,
                fields.join(","),
                1_700_000_000 + (p / 50) as i64
            ));
        }
        write_ok(&url, &body).await;
        client
            .batch_execute("SELECT sundial_flush()")
            .await
            .expect("flush");
    }
    let db = server.connect("rounds").await;
    // (The background compactor may have begun meanwhile: it merges the same way.)
    text_rows(&db, "SELECT sundial_compact()").await;
    let after = text_rows(
        &db,
        "SELECT count(*), sum(row_count) FROM sundial_chunk_files WHERE hypertable_name = 'm'",
    )
    .await;
    assert_eq!(
        after,
        vec![vec![Some("1".to_string()), Some(POINTS.to_string())]],
        "one file, one row per point"
    );
    let last = (FILES - 1) * 10;
    let values = text_rows(
        &db,
        "SELECT count(*), min(f0), max(f0), min(f9), max(f9), min(g), max(g), count(g) FROM m",
    )
    .await;
    assert_eq!(
        cells(values),
        vec![vec![
            POINTS.to_string(),
            last.to_string(),
            last.to_string(),
            (last + 9).to_string(),
            (last + 9).to_string(),
            "7".to_string(),
            "7".to_string(),
            POINTS.to_string(),
        ]],
        "the last write of every field, and the field only the first file had"
    );
    // Each merge takes two files (a file's share of the budget is over half of it),
    // so the 40 files took 39 merges; one pass would have been one.
    let metrics = get(&server.http_url("/metrics")).await.body;
    assert!(
        metrics.contains(&format!("sundial_compaction_merges_total {}", FILES - 1)),
        "{metrics}"
    );
}

// ---------------------------------------------------------------------------
// ping, health, metrics
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ping_and_health() {
    let server = TestServer::start();
    let r = get(&server.http_url("/ping")).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(r.header("X-Influxdb-Version").is_some(), "GET /ping header");

    let r = head(&server.http_url("/ping")).await;
    assert_eq!(r.status, 204);
    assert!(
        r.header("X-Influxdb-Version").is_some(),
        "HEAD /ping header"
    );

    let r = get(&server.http_url("/health")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], json!("pass"), "{}", r.body);
}

#[tokio::test]
async fn metrics_count_written_rows_and_rejected_lines() {
    let server = TestServer::start();
    let r = get(&server.http_url("/metrics")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for name in [
        "sundial_lp_rows_written_total",
        "sundial_lp_lines_rejected_total",
        "sundial_wal_appends_total",
        "sundial_wal_fsyncs_total",
        "sundial_flushes_total",
        "sundial_sql_queries_total",
    ] {
        assert!(r.body.contains(name), "/metrics lacks {name}:\n{}", r.body);
    }

    write_ok(
        &server.http_url("/write?db=met_db"),
        "met,host=a v=1 1700000000000000000\n\
         met,host=b v=2 1700000000000000000\n\
         met,host=c v=3 1700000000000000000\n",
    )
    .await;
    let r = post(
        &server.http_url("/write?db=met_db"),
        "met,host=d v=4 1700000000000000000\nnot line protocol\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);

    let r = get(&server.http_url("/metrics")).await;
    assert_eq!(r.status, 200);
    let written = metric_value(&r.body, "sundial_lp_rows_written_total")
        .unwrap_or_else(|| panic!("no sample of sundial_lp_rows_written_total:\n{}", r.body));
    assert!(written >= 3.0, "rows written {written}");
    let rejected = metric_value(&r.body, "sundial_lp_lines_rejected_total")
        .unwrap_or_else(|| panic!("no sample of sundial_lp_lines_rejected_total:\n{}", r.body));
    assert!(rejected >= 1.0, "lines rejected {rejected}");
}

// ---------------------------------------------------------------------------
// /query
// ---------------------------------------------------------------------------

#[tokio::test]
async fn query_endpoint_create_and_show_databases() {
    let server = TestServer::start();
    connect_fails_with_missing_db(&server, "q_one").await;

    let r = post(
        &server.http_url(&format!("/query?q={}", enc("CREATE DATABASE q_one"))),
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"results": [{"statement_id": 0}]}));
    let c = server.connect("q_one").await;
    assert_eq!(
        text_rows(&c, "SELECT 1").await,
        vec![vec![Some("1".to_string())]]
    );

    let r = get(&server.http_url(&format!("/query?q={}", enc("CREATE DATABASE q_two")))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"results": [{"statement_id": 0}]}));
    let _q_two = server.connect("q_two").await;

    let r = get(&server.http_url(&format!("/query?q={}", enc("SHOW DATABASES")))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let series = &v["results"][0]["series"][0];
    assert_eq!(series["name"], json!("databases"), "{}", r.body);
    assert_eq!(series["columns"], json!(["name"]), "{}", r.body);
    let values = series["values"]
        .as_array()
        .unwrap_or_else(|| panic!("values is an array: {}", r.body));
    for db in ["q_one", "q_two"] {
        assert!(values.contains(&json!([db])), "{db} missing in {}", r.body);
    }
    assert!(!values.contains(&json!(["q_three"])), "{}", r.body);

    let r = post(
        &server.http_url(&format!("/query?q={}", enc("SELECT * FROM cpu"))),
        "",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("Postgres"), "{}", r.body);
}

// ---------------------------------------------------------------------------
// raw TCP
// ---------------------------------------------------------------------------

#[tokio::test]
async fn raw_tcp_listener_writes_good_lines_and_counts_bad_ones() {
    let server = TestServer::start_with_args(
        &["--tcp-addr", "127.0.0.1:0"],
        &[("SUNDIAL_TCP_DATABASE", "tcp_db")],
    );
    // made beforehand (IF NOT EXISTS: the listener may create it itself) so this test
    // does not depend on auto-creation
    server
        .connect("sundial")
        .await
        .batch_execute("CREATE DATABASE IF NOT EXISTS tcp_db")
        .await
        .expect("CREATE DATABASE tcp_db");
    let addr = server.tcp_addr.clone().expect("READY line has tcp=");
    let mut sock = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .expect("connect to the TCP listener");
    sock.write_all(
        b"tcp_m,host=a v=1 1700000000000000000\n\
          tcp_m,host=b v=2 1700000001000000000\n\
          this line is bad\n\
          tcp_m,host=c v=3 1700000002000000000\n",
    )
    .await
    .expect("write lines");
    sock.shutdown().await.expect("shutdown");
    drop(sock);

    // no reply on TCP: wait (bounded) until the rows show up
    let client = server.connect("tcp_db").await;
    let mut n = 0;
    for _ in 0..100 {
        n = count_or_missing(&client, "tcp_m").await;
        if n >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(n, 3, "rows from the TCP listener");
    let rows = query(&client, "SELECT host, v FROM tcp_m ORDER BY time").await;
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![
            ("a".to_string(), 1.0),
            ("b".to_string(), 2.0),
            ("c".to_string(), 3.0)
        ]
    );

    let mut rejected = 0.0;
    for _ in 0..100 {
        let r = get(&server.http_url("/metrics")).await;
        assert_eq!(r.status, 200);
        rejected = metric_value(&r.body, "sundial_lp_lines_rejected_total").unwrap_or(0.0);
        if rejected >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rejected >= 1.0, "the bad TCP line is counted as rejected");
}

// ---------------------------------------------------------------------------
// exact round trip
// ---------------------------------------------------------------------------

#[tokio::test]
async fn values_round_trip_exactly() {
    let server = TestServer::start();
    let float = 1.0 + f64::EPSILON; // 1.0000000000000002
    let line = format!(
        r#"rt,host=server\,01,region=us\ west,eq=a\=b f={float},g=-1.5e-7,i=-42i,imin=-9223372036854775808i,u=18446744073709551615u,s="say \"hi\" and C:\\dir\\",b=true,b2=F 1700000000123456789"#
    );
    assert!(line.contains("f=1.0000000000000002,"), "{line}");
    write_ok(
        &server.http_url("/api/v2/write?bucket=rt_db&org=test"),
        &line,
    )
    .await;

    let client = server.connect("rt_db").await;
    let rows = query(&client, "SELECT * FROM rt").await;
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    let names: Vec<&str> = r.columns().iter().map(|c| c.name()).collect();
    let mut names_sorted = names.clone();
    names_sorted.sort_unstable();
    assert_eq!(
        names_sorted,
        vec![
            "b", "b2", "eq", "f", "g", "host", "i", "imin", "region", "s", "time", "u"
        ],
        "columns {names:?}"
    );

    assert_eq!(r.get::<_, String>("host"), "server,01");
    assert_eq!(r.get::<_, String>("region"), "us west");
    assert_eq!(r.get::<_, String>("eq"), "a=b");
    assert_eq!(r.get::<_, f64>("f").to_bits(), float.to_bits());
    assert_eq!(r.get::<_, f64>("g").to_bits(), (-1.5e-7f64).to_bits());
    assert_eq!(r.get::<_, i64>("i"), -42);
    assert_eq!(r.get::<_, i64>("imin"), i64::MIN);
    assert_eq!(r.get::<_, Decimal>("u"), Decimal::from(u64::MAX));
    assert_eq!(r.get::<_, String>("s"), r#"say "hi" and C:\dir\"#);
    assert!(r.get::<_, bool>("b"));
    assert!(!r.get::<_, bool>("b2"));
    let t: DateTime<Utc> = r.get("time");
    assert_eq!(t, at_micros(1_700_000_000_123_456));
    assert_eq!(
        t.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        "2023-11-14 22:13:20.123456"
    );

    // the text (simple) protocol agrees
    let text = text_rows(&client, "SELECT s, host FROM rt").await;
    assert_eq!(
        text,
        vec![vec![
            Some(r#"say "hi" and C:\dir\"#.to_string()),
            Some("server,01".to_string()),
        ]]
    );
}

/// Line-protocol floats written into a SQL table's `numeric` column keep the
/// float's significant digits, as PostgreSQL's float8 → numeric does (`0.1`, not the
/// binary fraction's 38 digits).
#[tokio::test]
async fn floats_into_a_numeric_column_keep_their_significant_digits() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE lpn (time timestamptz NOT NULL, host text, v numeric, p numeric(10,2)) \
             WITH (tsdb.hypertable, tsdb.partition_column='time')",
        )
        .await
        .expect("create");
    write_ok(
        &server.http_url("/write?db=sundial"),
        "lpn,host=a v=0.1,p=2.345 1700000000000000000\nlpn,host=b v=123456.789,p=-1.005 1700000001000000000\n",
    )
    .await;
    let rows = crate::harness::text_rows(&client, "SELECT host, v, p FROM lpn ORDER BY time").await;
    assert_eq!(
        rows,
        vec![
            vec![Some("a".into()), Some("0.1".into()), Some("2.35".into())],
            vec![
                Some("b".into()),
                Some("123456.789".into()),
                Some("-1.01".into())
            ],
        ]
    );
}

/// Names a line gives a new table or column are at most 63 bytes (PostgreSQL's
/// identifier limit): a longer measurement, tag key or field key rejects its line
/// with a 400 naming it, and the other lines are written.
#[tokio::test]
async fn names_longer_than_63_bytes_reject_their_line() {
    let server = TestServer::start();
    let long = "m".repeat(100);
    let body = format!(
        "ok,host=a v=1 1000000000\n{long},host=a v=1 1000000000\nok,{long}=x v=2 2000000000\nok,host=b {long}=3 3000000000\nok,host=c v=4 4000000000\n"
    );
    let r = post(&server.http_url("/write?db=names&precision=ns"), body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(
        msg.contains("line 2") && msg.contains("measurement"),
        "{msg}"
    );
    assert!(msg.contains("line 3") && msg.contains("tag key"), "{msg}");
    assert!(msg.contains("line 4") && msg.contains("field key"), "{msg}");
    assert!(msg.contains("at most 63 bytes"), "{msg}");
    let client = server.connect("names").await;
    let rows = query(&client, "SELECT host FROM ok ORDER BY time").await;
    let hosts: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(hosts, vec!["a", "c"]);
}

/// Line protocol does not change the schema of a table made with SQL (an LP writer
/// could otherwise add columns to any table), and a measurement cannot take the name
/// of a system view: such lines are rejected with a 400, the others written.
#[tokio::test]
async fn line_protocol_keeps_to_sql_tables_columns_and_reserved_names() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE acct (time timestamptz NOT NULL, host text, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time')",
        )
        .await
        .expect("create");
    let body = "acct,host=a v=1 1700000000000000000\n\
                acct,host=b v=2,injected=3 1700000001000000000\n\
                acct,host=c,injected_tag=x v=4 1700000002000000000\n\
                sundial_chunk_files v=1 1700000003000000000\n";
    let r = post(&server.http_url("/write?db=sundial"), body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(
        msg.contains("line 2") && msg.contains("created with SQL"),
        "{msg}"
    );
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("line 4") && msg.contains("reserved"), "{msg}");
    let cols = column_types(&client, "acct").await;
    assert_eq!(
        cols.keys().cloned().collect::<Vec<_>>(),
        vec!["host", "time", "v"]
    );
    let rows = query(&client, "SELECT host FROM acct").await;
    let hosts: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(hosts, vec!["a"]);

    // A SQL table created to take line protocol's columns does.
    client
        .batch_execute(
            "CREATE TABLE open_acct (time timestamptz NOT NULL, host text, v float8) \
             WITH (tsdb.hypertable, tsdb.partition_column='time', \
                   sundial.line_protocol_columns = true)",
        )
        .await
        .expect("create open_acct");
    write_ok(
        &server.http_url("/write?db=sundial"),
        "open_acct,host=b v=2,added=3 1700000001000000000\n",
    )
    .await;
    let cols = column_types(&client, "open_acct").await;
    assert_eq!(
        cols.keys().cloned().collect::<Vec<_>>(),
        vec!["added", "host", "time", "v"]
    );
}

/// Line protocol creates databases and tables up to caps (`--lp-max-databases`,
/// `--lp-max-tables`): past them the new names are refused with a 400 that says why,
/// and writes to what exists go on.
#[tokio::test]
async fn line_protocol_stops_creating_databases_and_tables_at_the_caps() {
    let server =
        TestServer::start_with_args(&["--lp-max-tables", "2", "--lp-max-databases", "4"], &[]);
    let body = "t1 v=1 1000000000\nt2 v=2 2000000000\nt3 v=3 3000000000\nt1 v=4 4000000000\n";
    let r = post(&server.http_url("/write?db=capped&precision=ns"), body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = error_message(&r);
    assert!(msg.contains("t3") && msg.contains("2 tables"), "{msg}");
    let client = server.connect("capped").await;
    assert_eq!(count_or_missing(&client, "t1").await, 2);
    assert_eq!(count_or_missing(&client, "t2").await, 1);
    // databases: the two a server starts with and "capped" exist; one more may be
    // made, then no more
    write_ok(&server.http_url("/write?db=third"), "m v=1\n").await;
    let r = post(&server.http_url("/write?db=fourth"), "m v=1\n").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(error_message(&r).contains("databases"), "{}", r.body);
}

/// SQL changes to a line-protocol table keep InfluxDB's point rules: an UPDATE of a
/// tag moves the point to the new series (where a later write of that series and
/// time merges into it), and a DELETE by a field value the newest write set removes
/// the point whole, older writes of it included.
#[tokio::test]
async fn update_and_delete_on_line_protocol_points() {
    let server = TestServer::start();
    let url = server.http_url("/write?db=lpupd");
    write_ok(
        &url,
        "m,host=a,dc=x v=1,w=10 1700000000000000000\n\
         m,host=b,dc=x v=2 1700000000000000000\n\
         m,host=a,dc=x v=3 1700000060000000000\n",
    )
    .await;
    let client = server.connect("lpupd").await;
    let upd = client
        .execute("UPDATE m SET host = 'c' WHERE host = 'a' AND v = 1", &[])
        .await
        .expect("update tag");
    assert_eq!(upd, 1);
    // A later write to the new series and the same time merges field by field.
    write_ok(&url, "m,host=c,dc=x w=20 1700000000000000000\n").await;
    let rows = query(&client, "SELECT host, v, w FROM m ORDER BY host, time").await;
    let got: Vec<(String, Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".into(), Some(3.0), None),
            ("b".into(), Some(2.0), None),
            ("c".into(), Some(1.0), Some(20.0)),
        ]
    );
    // The point of b written twice; DELETE by the newest value removes it whole.
    write_ok(&url, "m,host=b,dc=x v=5 1700000000000000000\n").await;
    let del = client
        .execute("DELETE FROM m WHERE host = 'b' AND v = 5", &[])
        .await
        .expect("delete");
    assert_eq!(del, 1);
    assert_eq!(
        query(&client, "SELECT count(*) FROM m WHERE host = 'b'").await[0].get::<_, i64>(0),
        0
    );
}
