//! Errors carry the right SQLSTATE and leave the connection usable; broken
//! clients do not take the server down.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::harness::TestServer;

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// The connection still answers, in both protocols.
async fn assert_usable(client: &Client) {
    let msgs = client
        .simple_query("SELECT 1")
        .await
        .expect("simple SELECT 1 after an error");
    let vals: Vec<String> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(vals, vec!["1".to_string()]);
    let rows = client
        .query("SELECT 1", &[])
        .await
        .expect("extended SELECT 1 after an error");
    assert_eq!(rows.len(), 1);
}

fn check_code(err: &tokio_postgres::Error, sql: &str, proto: &str, codes: &[SqlState]) {
    let got = err.code();
    assert!(
        got.is_some_and(|c| codes.contains(c)),
        "{proto} {sql:?}: want SQLSTATE {:?}, got {:?} ({err:?})",
        codes.iter().map(|c| c.code()).collect::<Vec<_>>(),
        got.map(|c| c.code())
    );
}

/// `sql` fails with one of `codes` through the simple and the extended protocol,
/// and the connection keeps working after each failure.
async fn expect_sqlstate(client: &Client, sql: &str, codes: &[SqlState]) {
    let err = client
        .simple_query(sql)
        .await
        .err()
        .unwrap_or_else(|| panic!("simple {sql:?} should fail"));
    check_code(&err, sql, "simple", codes);
    assert_usable(client).await;

    let err = client
        .query(sql, &[])
        .await
        .err()
        .unwrap_or_else(|| panic!("extended {sql:?} should fail"));
    check_code(&err, sql, "extended", codes);
    assert_usable(client).await;
}

async fn server_with_table() -> (TestServer, Client) {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE t (time timestamptz NOT NULL, id int4, name text); \
             INSERT INTO t VALUES ('2024-01-01 00:00:00+00', 1, 'one')",
        )
        .await
        .expect("setup table t");
    (server, client)
}

// ---------------------------------------------------------------------------
// SQLSTATEs
// ---------------------------------------------------------------------------

#[tokio::test]
async fn syntax_error_42601() {
    let (_server, client) = server_with_table().await;
    expect_sqlstate(&client, "SELEC 1", &[SqlState::SYNTAX_ERROR]).await;
    expect_sqlstate(&client, "SELECT FROM WHERE", &[SqlState::SYNTAX_ERROR]).await;
    expect_sqlstate(&client, "SELECT (1", &[SqlState::SYNTAX_ERROR]).await;
}

#[tokio::test]
async fn undefined_table_42p01() {
    let (_server, client) = server_with_table().await;
    expect_sqlstate(
        &client,
        "SELECT * FROM no_such_table",
        &[SqlState::UNDEFINED_TABLE],
    )
    .await;
    expect_sqlstate(
        &client,
        "INSERT INTO no_such_table VALUES (1)",
        &[SqlState::UNDEFINED_TABLE],
    )
    .await;
}

#[tokio::test]
async fn undefined_column_42703() {
    let (_server, client) = server_with_table().await;
    expect_sqlstate(
        &client,
        "SELECT no_such_col FROM t",
        &[SqlState::UNDEFINED_COLUMN],
    )
    .await;
    expect_sqlstate(
        &client,
        "SELECT id FROM t WHERE no_such_col = 1",
        &[SqlState::UNDEFINED_COLUMN],
    )
    .await;
}

#[tokio::test]
async fn undefined_function_42883() {
    let (_server, client) = server_with_table().await;
    expect_sqlstate(
        &client,
        "SELECT no_such_fn(1)",
        &[SqlState::UNDEFINED_FUNCTION],
    )
    .await;
    expect_sqlstate(
        &client,
        "SELECT no_such_fn(id) FROM t",
        &[SqlState::UNDEFINED_FUNCTION],
    )
    .await;
}

#[tokio::test]
async fn invalid_text_representation_22p02() {
    let (_server, client) = server_with_table().await;
    expect_sqlstate(
        &client,
        "SELECT 'abc'::int",
        &[SqlState::INVALID_TEXT_REPRESENTATION],
    )
    .await;
    // Text into an int column.
    expect_sqlstate(
        &client,
        "INSERT INTO t (time, id, name) VALUES ('2024-01-01 00:00:00+00', 'abc', 'x')",
        &[SqlState::INVALID_TEXT_REPRESENTATION],
    )
    .await;
    // The failed INSERT wrote nothing.
    let msgs = client.simple_query("SELECT count(*) FROM t").await.unwrap();
    let n = msgs
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .expect("a count row");
    assert_eq!(n, "1");
}

#[tokio::test]
async fn bad_timestamp_22007() {
    let (_server, client) = server_with_table().await;
    let codes = [
        SqlState::INVALID_DATETIME_FORMAT,
        SqlState::DATETIME_FIELD_OVERFLOW,
    ];
    expect_sqlstate(&client, "SELECT 'not a date'::timestamptz", &codes).await;
    expect_sqlstate(&client, "SELECT '2024-13-45 10:00:00'::timestamptz", &codes).await;
}

#[tokio::test]
async fn wrong_parameter_count_leaves_connection_usable() {
    let (_server, client) = server_with_table().await;
    let stmt = client
        .prepare_typed("SELECT id FROM t WHERE id = $1", &[Type::INT4])
        .await
        .expect("prepare");
    assert!(
        client.query(&stmt, &[]).await.is_err(),
        "too few parameters"
    );
    assert_usable(&client).await;
    assert!(
        client.query(&stmt, &[&1i32, &2i32]).await.is_err(),
        "too many parameters"
    );
    assert_usable(&client).await;
    // The statement itself still works.
    let rows = client
        .query(&stmt, &[&1i32])
        .await
        .expect("right parameter count");
    assert_eq!(rows.len(), 1);
}

#[tokio::test]
async fn create_hypertable_errors() {
    let (_server, client) = server_with_table().await;
    client
        .batch_execute("CREATE TABLE plain (time timestamptz NOT NULL, v float8)")
        .await
        .expect("create plain");
    // A column that does not exist.
    assert!(
        client
            .simple_query("SELECT create_hypertable('plain', 'no_such_column')")
            .await
            .is_err(),
        "create_hypertable on a missing column must fail"
    );
    assert_usable(&client).await;
    assert!(
        client
            .simple_query("SELECT create_hypertable('plain', by_range('no_such_column'))")
            .await
            .is_err(),
        "create_hypertable(by_range) on a missing column must fail"
    );
    assert_usable(&client).await;
    // A table that does not exist.
    assert!(
        client
            .simple_query("SELECT create_hypertable('no_such_table', 'time')")
            .await
            .is_err(),
        "create_hypertable on a missing table must fail"
    );
    assert_usable(&client).await;
    // The WITH form naming a missing partition column.
    assert!(
        client
            .batch_execute(
                "CREATE TABLE bad_ht (time timestamptz NOT NULL, v float8) \
                 WITH (tsdb.hypertable, tsdb.partition_column='no_such_column')",
            )
            .await
            .is_err(),
        "tsdb.partition_column naming a missing column must fail"
    );
    assert_usable(&client).await;
    // After the failures, the table can still become a hypertable.
    client
        .simple_query("SELECT create_hypertable('plain', 'time')")
        .await
        .expect("create_hypertable on the right column");
    let msgs = client
        .simple_query("SELECT hypertable_name FROM timescaledb_information.hypertables ORDER BY 1")
        .await
        .unwrap();
    let names: Vec<String> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["plain".to_string()]);
}

#[tokio::test]
async fn many_errors_in_a_row_on_one_connection() {
    let (_server, client) = server_with_table().await;
    for i in 0..20 {
        let sql = match i % 4 {
            0 => "SELEC 1",
            1 => "SELECT * FROM nope",
            2 => "SELECT 'x'::int",
            _ => "SELECT nope FROM t",
        };
        assert!(client.simple_query(sql).await.is_err());
        assert!(client.query(sql, &[]).await.is_err());
    }
    assert_usable(&client).await;
}

// ---------------------------------------------------------------------------
// a tiny raw frontend, for what tokio-postgres will not send
// ---------------------------------------------------------------------------

struct Raw {
    s: TcpStream,
}

fn startup_packet(db: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608u32.to_be_bytes());
    for (k, v) in [("user", "tester"), ("database", db)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut pkt = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    pkt.extend(body);
    pkt
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// SQLSTATE (`C` field) of an ErrorResponse body.
fn error_code(body: &[u8]) -> String {
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let field = body[i];
        let end = i + 1 + body[i + 1..].iter().position(|&b| b == 0).unwrap_or(0);
        if field == b'C' {
            return String::from_utf8_lossy(&body[i + 1..end]).to_string();
        }
        i = end + 1;
    }
    String::new()
}

impl Raw {
    async fn connect(addr: &str) -> Raw {
        Raw {
            s: TcpStream::connect(addr).await.expect("tcp connect"),
        }
    }

    /// Full startup; returns once ReadyForQuery arrived.
    async fn startup(addr: &str, db: &str) -> Raw {
        let mut r = Raw::connect(addr).await;
        r.s.write_all(&startup_packet(db)).await.unwrap();
        let msgs = r.until_ready().await;
        assert!(
            msgs.iter()
                .any(|(t, b)| *t == b'R' && b.len() >= 4 && b[..4] == [0, 0, 0, 0]),
            "AuthenticationOk expected: {msgs:?}"
        );
        r
    }

    async fn send(&mut self, tag: u8, body: &[u8]) {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        self.s.write_all(&m).await.unwrap();
    }

    async fn read_msg(&mut self) -> (u8, Vec<u8>) {
        let fut = async {
            let tag = self.s.read_u8().await?;
            let len = self.s.read_u32().await? as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            self.s.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>((tag, body))
        };
        tokio::time::timeout(Duration::from_secs(30), fut)
            .await
            .expect("server answered within the safety timeout")
            .expect("read a backend message")
    }

    /// Messages up to ReadyForQuery, or up to the end of the stream (after a FATAL).
    async fn until_error_or_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let mut head = [0u8; 5];
            if self.s.read_exact(&mut head).await.is_err() {
                return out;
            }
            let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            if self.s.read_exact(&mut body).await.is_err() {
                return out;
            }
            let done = head[0] == b'Z';
            out.push((head[0], body));
            if done {
                return out;
            }
        }
    }

    async fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let m = self.read_msg().await;
            let done = m.0 == b'Z';
            out.push(m);
            if done {
                return out;
            }
        }
    }

    /// Simple query; returns the text of the first column of each DataRow.
    async fn simple(&mut self, sql: &str) -> Vec<Option<String>> {
        self.send(b'Q', &cstr(sql)).await;
        let msgs = self.until_ready().await;
        assert!(
            !msgs.iter().any(|(t, _)| *t == b'E'),
            "{sql:?} failed: {msgs:?}"
        );
        msgs.iter()
            .filter(|(t, _)| *t == b'D')
            .map(|(_, b)| {
                let n = i32::from_be_bytes(b[2..6].try_into().unwrap());
                if n < 0 {
                    None
                } else {
                    Some(String::from_utf8_lossy(&b[6..6 + n as usize]).to_string())
                }
            })
            .collect()
    }
}

#[tokio::test]
async fn bind_with_wrong_parameter_count_is_an_error_not_a_hangup() {
    let (server, _client) = server_with_table().await;
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;

    // Parse a statement declaring one int8 parameter, Bind it with none.
    let mut parse = cstr("");
    parse.extend(cstr("SELECT $1::int8"));
    parse.extend_from_slice(&1i16.to_be_bytes());
    parse.extend_from_slice(&20u32.to_be_bytes());
    raw.send(b'P', &parse).await;
    let mut bind = cstr("");
    bind.extend(cstr(""));
    bind.extend_from_slice(&0i16.to_be_bytes()); // parameter formats
    bind.extend_from_slice(&0i16.to_be_bytes()); // parameter values
    bind.extend_from_slice(&0i16.to_be_bytes()); // result formats
    raw.send(b'B', &bind).await;
    let mut exec = cstr("");
    exec.extend_from_slice(&0i32.to_be_bytes());
    raw.send(b'E', &exec).await;
    raw.send(b'S', &[]).await;

    let msgs = raw.until_ready().await;
    let err = msgs
        .iter()
        .find(|(t, _)| *t == b'E')
        .unwrap_or_else(|| panic!("Bind with 0 of 1 parameters must fail: {msgs:?}"));
    assert!(
        !error_code(&err.1).is_empty(),
        "ErrorResponse carries a SQLSTATE"
    );
    assert!(
        !msgs.iter().any(|(t, _)| *t == b'D'),
        "no row for a failed Bind: {msgs:?}"
    );

    // The same connection goes on: simple query ...
    assert_eq!(raw.simple("SELECT 1").await, vec![Some("1".to_string())]);
    // ... and a correct Parse/Bind/Execute with a text parameter.
    raw.send(b'P', &parse).await;
    let mut bind = cstr("");
    bind.extend(cstr(""));
    bind.extend_from_slice(&0i16.to_be_bytes());
    bind.extend_from_slice(&1i16.to_be_bytes());
    bind.extend_from_slice(&2i32.to_be_bytes());
    bind.extend_from_slice(b"42");
    bind.extend_from_slice(&0i16.to_be_bytes());
    raw.send(b'B', &bind).await;
    raw.send(b'E', &exec).await;
    raw.send(b'S', &[]).await;
    let msgs = raw.until_ready().await;
    assert!(!msgs.iter().any(|(t, _)| *t == b'E'), "{msgs:?}");
    let row = msgs
        .iter()
        .find(|(t, _)| *t == b'D')
        .expect("a DataRow for the correct Bind");
    assert_eq!(&row.1[6..], b"42");

    raw.send(b'X', &[]).await;
}

#[tokio::test]
async fn error_in_extended_protocol_skips_to_sync() {
    // After an error, the server discards messages until Sync, then answers
    // ReadyForQuery; the next batch works.
    let (server, _client) = server_with_table().await;
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
    let mut parse = cstr("");
    parse.extend(cstr("SELECT * FROM no_such_table"));
    parse.extend_from_slice(&0i16.to_be_bytes());
    raw.send(b'P', &parse).await;
    let mut bind = cstr("");
    bind.extend(cstr(""));
    bind.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    raw.send(b'B', &bind).await;
    let mut exec = cstr("");
    exec.extend_from_slice(&0i32.to_be_bytes());
    raw.send(b'E', &exec).await;
    raw.send(b'S', &[]).await;
    let msgs = raw.until_ready().await;
    let errors: Vec<String> = msgs
        .iter()
        .filter(|(t, _)| *t == b'E')
        .map(|(_, b)| error_code(b))
        .collect();
    assert_eq!(
        errors,
        vec!["42P01".to_string()],
        "exactly one error: {msgs:?}"
    );
    assert_eq!(raw.simple("SELECT 1").await, vec![Some("1".to_string())]);
}

#[tokio::test]
async fn ssl_request_is_declined_then_startup_works() {
    let server = TestServer::start();
    let mut raw = Raw::connect(&server.pg_addr).await;
    let mut ssl = 8u32.to_be_bytes().to_vec();
    ssl.extend_from_slice(&80877103u32.to_be_bytes());
    raw.s.write_all(&ssl).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), raw.s.read_u8())
        .await
        .expect("answer to SSLRequest")
        .expect("read SSLRequest answer");
    assert_eq!(
        answer, b'N',
        "no TLS configured: SSLRequest is declined with 'N'"
    );
    raw.s.write_all(&startup_packet("sundial")).await.unwrap();
    let msgs = raw.until_ready().await;
    assert!(msgs.iter().any(|(t, _)| *t == b'R'), "{msgs:?}");
    assert!(
        msgs.iter().any(|(t, _)| *t == b'K'),
        "BackendKeyData (needed for cancel) is sent: {msgs:?}"
    );
    assert_eq!(raw.simple("SELECT 1").await, vec![Some("1".to_string())]);
}

#[tokio::test]
async fn missing_database_in_raw_startup_is_3d000() {
    let server = TestServer::start();
    let mut raw = Raw::connect(&server.pg_addr).await;
    raw.s
        .write_all(&startup_packet("no_such_db"))
        .await
        .unwrap();
    let (tag, body) = raw.read_msg().await;
    let (tag, body) = if tag == b'R' {
        // Some servers authenticate first; the error must still follow.
        let mut m = (tag, body);
        while m.0 != b'E' {
            assert_ne!(
                m.0, b'Z',
                "startup to a missing database reached ReadyForQuery"
            );
            m = raw.read_msg().await;
        }
        m
    } else {
        (tag, body)
    };
    assert_eq!(tag, b'E');
    assert_eq!(error_code(&body), "3D000");
}

// ---------------------------------------------------------------------------
// half-sent messages
// ---------------------------------------------------------------------------

#[tokio::test]
async fn half_sent_startup_packet_does_not_hurt_the_server() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;

    // 1. A startup packet that announces 40 bytes but sends 6, left open.
    let mut partial = Raw::connect(&server.pg_addr).await;
    partial.s.write_all(&[0, 0, 0, 40, 0, 3]).await.unwrap();
    partial.s.flush().await.unwrap();

    // Other clients are served while it dangles.
    let other = server.connect("sundial").await;
    assert_usable(&other).await;
    assert_usable(&client).await;

    // 2. Close it mid-packet.
    drop(partial);

    // 3. A half-sent startup packet, closed at once.
    {
        let mut s = TcpStream::connect(&server.pg_addr).await.unwrap();
        let pkt = startup_packet("sundial");
        s.write_all(&pkt[..pkt.len() / 2]).await.unwrap();
    }
    // 4. An absurd length, then close.
    {
        let mut s = TcpStream::connect(&server.pg_addr).await.unwrap();
        s.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0])
            .await
            .unwrap();
    }
    // 5. A complete packet with an unknown protocol version; the server may
    //    answer with an error or close, but must not crash.
    {
        let mut s = TcpStream::connect(&server.pg_addr).await.unwrap();
        s.write_all(&[0, 0, 0, 8, 0x12, 0x34, 0x56, 0x78])
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    }
    // 6. Connect and close without sending anything.
    drop(TcpStream::connect(&server.pg_addr).await.unwrap());

    assert_usable(&client).await;
    assert_usable(&other).await;
    let fresh = server.connect("sundial").await;
    assert_usable(&fresh).await;
}

#[tokio::test]
async fn half_sent_query_message_does_not_hurt_the_server() {
    let (server, client) = server_with_table().await;

    // A Query message announcing 100 bytes, only the first few sent, then close.
    {
        let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
        let mut m = vec![b'Q'];
        m.extend_from_slice(&100u32.to_be_bytes());
        m.extend_from_slice(b"SELE");
        raw.s.write_all(&m).await.unwrap();
        raw.s.flush().await.unwrap();
        // Meanwhile others are served.
        assert_usable(&client).await;
    }
    // A connection that stops after a Parse without Sync.
    {
        let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
        let mut parse = cstr("s1");
        parse.extend(cstr("SELECT 1"));
        parse.extend_from_slice(&0i16.to_be_bytes());
        raw.send(b'P', &parse).await;
    }
    // An unknown message type on an established connection.
    {
        let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
        raw.send(b'~', b"junk").await;
        let mut buf = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_secs(5), raw.s.read(&mut buf)).await;
    }

    assert_usable(&client).await;
    let fresh = server.connect("sundial").await;
    assert_usable(&fresh).await;
    let rows = fresh
        .query("SELECT name FROM t WHERE id = 1", &[])
        .await
        .expect("query on a fresh connection");
    assert_eq!(rows[0].get::<_, String>(0), "one");
}

#[tokio::test]
async fn comment_only_queries_get_empty_query_response() {
    // Grafana's health check: lib/pq pings with `;`, pgx with `-- ping`.
    let server = TestServer::start();
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
    for q in [";", "-- ping", "/* ping */"] {
        raw.send(b'Q', &cstr(q)).await;
        let tags: Vec<u8> = raw.until_ready().await.iter().map(|(t, _)| *t).collect();
        assert_eq!(tags, [b'I', b'Z'], "{q:?}");
    }
}

/// A message too short for its type (an empty Parse, Bind, Execute or Describe body)
/// is a protocol violation: FATAL 08P01 and the connection closes; pgwire's decoder
/// used to panic on them, leaving the client without an answer.
#[tokio::test]
async fn malformed_messages_get_08p01_and_the_server_keeps_serving() {
    let server = TestServer::start();
    for tag in [b'P', b'B', b'E', b'D', b'C'] {
        let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
        raw.send(tag, &[]).await;
        let (t, body) = raw.read_msg().await;
        assert_eq!(
            t, b'E',
            "message {:?}: an ErrorResponse expected",
            tag as char
        );
        assert_eq!(error_code(&body), "08P01", "message {:?}", tag as char);
        // then the server closes the connection
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(30), raw.s.read_to_end(&mut rest))
            .await
            .expect("closed within the safety timeout")
            .expect("read to end");
        assert_eq!(n, 0, "nothing after the FATAL error: {rest:?}");
    }
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
    assert_eq!(raw.simple("SELECT 41 + 1").await, vec![Some("42".into())]);
}

/// Asserts that `msgs` hold an 08P01 ErrorResponse whose text contains `text`.
fn assert_protocol_error(msgs: &[(u8, Vec<u8>)], text: &str) {
    let (_, body) = msgs
        .iter()
        .find(|(t, _)| *t == b'E')
        .unwrap_or_else(|| panic!("no error: {msgs:?}"));
    assert_eq!(error_code(body), "08P01");
    let message = String::from_utf8_lossy(body);
    assert!(message.contains(text), "{message}");
}

/// A Bind whose format codes do not match its parameters or the query's columns
/// (neither 0, 1 nor one each) gets PostgreSQL's 08P01, not a panic: pgwire read the
/// codes by position (found by the `pg_messages` fuzz target).
#[tokio::test]
async fn bind_format_codes_that_do_not_match_get_08p01() {
    let server = TestServer::start();
    let parse = |sql: &str| {
        let mut b = cstr("");
        b.extend(cstr(sql));
        b.extend(0i16.to_be_bytes());
        b
    };
    // Bind: unnamed portal and statement, `formats` parameter codes, `params` text
    // values "1", then `results` result codes (all text).
    let bind = |formats: i16, params: i16, results: i16| {
        let mut b = cstr("");
        b.extend(cstr(""));
        b.extend(formats.to_be_bytes());
        for _ in 0..formats {
            b.extend(0i16.to_be_bytes());
        }
        b.extend(params.to_be_bytes());
        for _ in 0..params {
            b.extend(1i32.to_be_bytes());
            b.push(b'1');
        }
        b.extend(results.to_be_bytes());
        for _ in 0..results {
            b.extend(0i16.to_be_bytes());
        }
        b
    };
    let execute = {
        let mut b = cstr("");
        b.extend(0i32.to_be_bytes());
        b
    };

    // Two parameter formats for three parameters: FATAL 08P01, connection closed.
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
    raw.send(b'P', &parse("SELECT $1::int + $2::int + $3::int"))
        .await;
    raw.send(b'B', &bind(2, 3, 0)).await;
    raw.send(b'S', &[]).await;
    let msgs = raw.until_error_or_ready().await;
    assert_protocol_error(&msgs, "2 parameter formats but 3 parameters");

    // Two result formats for a one-column query: an error, the session goes on.
    let mut raw = Raw::startup(&server.pg_addr, "sundial").await;
    raw.send(b'P', &parse("SELECT 42")).await;
    raw.send(b'B', &bind(0, 0, 2)).await;
    raw.send(b'E', &execute).await;
    raw.send(b'S', &[]).await;
    let msgs = raw.until_ready().await;
    assert_protocol_error(&msgs, "2 result formats but query has 1 columns");
    assert_eq!(raw.simple("SELECT 41 + 1").await, vec![Some("42".into())]);
}
