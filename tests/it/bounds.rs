//! What a statement may hold in memory: a series whose bounds are bound parameters
//! streams as one with literal bounds does, a Query message larger than the
//! configured maximum is refused before it is buffered.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{TestServer, cells};

/// `generate_series($1, $2)` in `FROM` is planned with the bound values in place:
/// a series with parameter bounds is planned as a list unnested, built whole in
/// memory (10^8 rows: 81 s and 4.5 GB before), where the series table streams.
#[tokio::test]
async fn a_series_with_parameter_bounds_streams() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    let plan: Vec<String> = c
        .query(
            "EXPLAIN SELECT count(*) FROM generate_series(1, $1::bigint)",
            &[&20_000_000i64],
        )
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<_, String>(1))
        .collect();
    let plan = plan.join("\n");
    let head: String = plan.chars().take(600).collect();
    assert!(!plan.contains("Unnest"), "{head}");
    assert!(plan.contains("generate_series"), "{head}");

    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM generate_series(1, $1::bigint)",
            &[&20_000_000i64],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 20_000_000);

    // Another execution of the same prepared statement takes its own values.
    let st = c
        .prepare("SELECT sum(v)::bigint FROM generate_series($1::bigint, $2::bigint) AS s(v)")
        .await
        .expect("prepare");
    for (lo, hi, sum) in [(1i64, 10i64, 55i64), (5, 7, 18), (3, 2, 0)] {
        let got: Option<i64> = c.query_one(&st, &[&lo, &hi]).await.expect("sum").get(0);
        assert_eq!(got.unwrap_or(0), sum, "{lo}..{hi}");
    }

    // Times, as Grafana sends a dashboard's range.
    let at = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
    let rows = c
        .query(
            "SELECT t::text FROM generate_series($1::timestamptz, $2::timestamptz, \
             interval '1 hour') AS g(t)",
            &[&at(1_704_067_200), &at(1_704_074_400)],
        )
        .await;
    let rows: Vec<Vec<String>> = match rows {
        Ok(r) => r.iter().map(|r| vec![r.get::<_, String>(0)]).collect(),
        Err(e) => panic!("time series: {e:?}"),
    };
    assert_eq!(
        rows,
        cells(vec![
            vec![Some("2024-01-01 00:00:00+00".into())],
            vec![Some("2024-01-01 01:00:00+00".into())],
            vec![Some("2024-01-01 02:00:00+00".into())],
        ])
    );

    // A time series streams too, literal bounds or parameters, the step untyped
    // (before, the EXPLAIN of a year of seconds printed the list and took 24 GB).
    for (sql, params) in [
        (
            "EXPLAIN SELECT count(*) FROM generate_series('2024-01-01'::timestamp, \
             '2024-12-31'::timestamp, interval '1 second')",
            vec![],
        ),
        (
            "EXPLAIN SELECT count(*) FROM generate_series($1::timestamptz, $2::timestamptz, \
             '1 second')",
            vec![at(1_704_067_200), at(1_735_603_200)],
        ),
    ] {
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let plan: Vec<String> = match c.query(sql, &params).await {
            Ok(rows) => rows.iter().map(|r| r.get::<_, String>(1)).collect(),
            Err(e) => panic!("{sql}: {e:?}"),
        };
        let plan = plan.join("\n");
        let head: String = plan.chars().take(600).collect();
        assert!(!plan.contains("Unnest"), "{sql}: {head}");
        assert!(plan.contains("generate_series"), "{sql}: {head}");
    }
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM generate_series($1::timestamptz, $2::timestamptz, '1 minute')",
            &[&at(1_704_067_200), &at(1_704_153_600)],
        )
        .await
        .expect("minutes of a day")
        .get(0);
    assert_eq!(n, 1441);
    // Bare parameters beside an interval step are timestamptz, as PostgreSQL
    // resolves them (DataFusion planned them as NULL: "unnest() does not support
    // null").
    for sql in [
        "SELECT count(*) FROM generate_series($1, $2, '1 minute') g",
        "SELECT count(*) FROM generate_series($1, $2, interval '1 minute') g",
    ] {
        let n: i64 = match c
            .query_one(sql, &[&at(1_704_067_200), &at(1_704_153_600)])
            .await
        {
            Ok(r) => r.get(0),
            Err(e) => panic!("{sql}: {e:?}"),
        };
        assert_eq!(n, 1441, "{sql}");
    }
    // Other functions in FROM keep their arguments as written.
    let padded: String = c
        .query_one("SELECT * FROM lpad($1::text, 5, 'x') AS p", &[&"ab"])
        .await
        .expect("lpad in FROM")
        .get(0);
    assert_eq!(padded, "xxxab");
}

/// A series or a long string over constants is built when the statement runs (in
/// the queries' pool), not folded into the plan: EXPLAIN VERBOSE of a million-element
/// series printed it once per optimizer pass (126 MB of text, 1.1 GB RSS).
#[tokio::test]
async fn explain_does_not_print_a_built_series() {
    let server = TestServer::start();
    let c = server.connect("sundial").await;
    for sql in [
        "EXPLAIN VERBOSE SELECT count(*) FROM (SELECT generate_series(1, 1000000) AS g) s",
        "EXPLAIN VERBOSE SELECT length(repeat('x', 10000000))",
        "EXPLAIN VERBOSE SELECT cardinality(range(1, 1000000))",
    ] {
        let text: usize = match c.simple_query(sql).await {
            Ok(msgs) => msgs
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some(r.get(1).map_or(0, str::len))
                    }
                    _ => None,
                })
                .sum(),
            Err(e) => panic!("{sql}: {e:?}"),
        };
        assert!(text < 200_000, "{sql}: {text} bytes of plan");
    }
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT generate_series(1, 1000000) AS g) s",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1_000_000);
}

/// Logs in as `tester` over a bare socket and reads up to ReadyForQuery.
async fn logged_in(server: &TestServer) -> TcpStream {
    let mut s = TcpStream::connect(&server.pg_addr).await.expect("connect");
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for part in ["user", "tester", "database", "sundial"] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    startup.extend(body);
    s.write_all(&startup).await.expect("startup");
    loop {
        let (kind, body) = read_message(&mut s).await.expect("login reply");
        assert_ne!(
            kind,
            b'E',
            "login failed: {}",
            String::from_utf8_lossy(&body)
        );
        if kind == b'Z' {
            return s;
        }
    }
}

/// One backend message, or `None` when the server closed the connection.
async fn read_message(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0; len.saturating_sub(4)];
    s.read_exact(&mut body).await.ok()?;
    Some((head[0], body))
}

/// The SQLSTATE of an ErrorResponse body.
fn sqlstate(body: &[u8]) -> Option<String> {
    body.split(|b| *b == 0)
        .find_map(|f| f.strip_prefix(b"C"))
        .map(|c| String::from_utf8_lossy(c).into_owned())
}

/// The first ErrorResponse the server sends, within 30 s.
async fn error_of(s: &mut TcpStream) -> Option<String> {
    let wait = async {
        while let Some((kind, body)) = read_message(s).await {
            if kind == b'E' {
                return sqlstate(&body);
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .ok()
        .flatten()
}

/// A Query message header declaring `len` bytes of text.
fn query_header(len: u32) -> Vec<u8> {
    let mut m = vec![b'Q'];
    m.extend((len + 4).to_be_bytes());
    m
}

/// A message longer than `max_message_size` is refused when its header arrives
/// (54000, the connection closed), not buffered; one within it runs. Before, a
/// client could declare 1 GiB and have the server hold what it sent of it.
#[tokio::test]
async fn a_message_past_max_message_size_is_refused_at_its_header() {
    let server = TestServer::start_with_args(&["--max-message-size", "1MiB"], &[]);
    let mut s = logged_in(&server).await;
    s.write_all(&query_header(1 << 30)).await.expect("header");
    // 4 MiB of the declared GiB: the refusal comes without the rest.
    let filler = vec![b' '; 1 << 20];
    for _ in 0..4 {
        if s.write_all(&filler).await.is_err() {
            break;
        }
    }
    assert_eq!(error_of(&mut s).await.as_deref(), Some("54000"));

    // Through a driver: 2 MiB of text is refused, 900 KiB runs.
    let c = server.connect("sundial").await;
    let long = format!("SELECT length('{}')", "x".repeat(2 << 20));
    let e = c.simple_query(&long).await.err();
    assert_eq!(
        e.as_ref().and_then(|e| e.code()).map(|c| c.code()),
        Some("54000"),
        "{e:?}"
    );
    let c = server.connect("sundial").await;
    let fits = format!("SELECT length('{}')", "x".repeat(900 << 10));
    let rows = c
        .query_one(&fits, &[])
        .await
        .expect("a message within the limit");
    assert_eq!(rows.get::<_, i32>(0), 900 << 10);
}

/// Messages over 1 MiB hold a share of `http_max_inflight_bytes` while they are
/// read: one that stalls past 5 s is cut off (08P01) and gives its share to the
/// message waiting for it, which then runs.
#[tokio::test]
async fn large_messages_share_a_budget_and_a_stalled_one_gives_it_back() {
    let server = TestServer::start_with_args(&["--http-max-inflight-bytes", "4MiB"], &[]);
    let mut stalled = logged_in(&server).await;
    stalled
        .write_all(&query_header(3 << 20))
        .await
        .expect("header");
    stalled
        .write_all(&vec![b' '; 2 << 20])
        .await
        .expect("half the message");

    let c = server.connect("sundial").await;
    let text = format!("SELECT length('{}')", "y".repeat(3 << 20));
    let rows = c
        .query_one(&text, &[])
        .await
        .expect("the waiting message runs");
    assert_eq!(rows.get::<_, i32>(0), 3 << 20);
    assert_eq!(error_of(&mut stalled).await.as_deref(), Some("08P01"));
}

/// Inside a several-statement message's implicit transaction a query's rows are read
/// before they are sent (an error in them rolls the message back): they count
/// against the queries' memory pool, so a huge result gets 53200 instead of taking
/// the server's memory, and one that fits is answered whole.
#[tokio::test]
async fn rows_held_for_an_implicit_transaction_are_bounded() {
    let server = TestServer::start_with_args(&["--query-memory-limit", "64MiB"], &[]);
    let c = server.connect("sundial").await;
    let huge = "SET application_name = 'bounds'; \
                SELECT repeat('x', 1000) FROM generate_series(1, 200000)";
    let e = c.simple_query(huge).await.err();
    assert_eq!(
        e.as_ref().and_then(|e| e.code()).map(|c| c.code()),
        Some("53200"),
        "{e:?}"
    );
    let fits = "SET application_name = 'bounds'; \
                SELECT repeat('x', 1000) FROM generate_series(1, 1000)";
    let rows = c
        .simple_query(fits)
        .await
        .expect("a result that fits")
        .into_iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 1000);

    // string_agg's string is reserved before it grows: 200 MB cannot be built in
    // a 64 MiB pool (before, its last doubling was only counted once made), and
    // what fits is answered.
    let e = c
        .simple_query(
            "SELECT length(string_agg(repeat('x', 100), ',')) FROM generate_series(1, 2000000)",
        )
        .await
        .err();
    assert_eq!(
        e.as_ref().and_then(|e| e.code()).map(|c| c.code()),
        Some("53200"),
        "{e:?}"
    );
    let n: i64 = c
        .query_one(
            "SELECT length(string_agg(repeat('x', 100), ','))::bigint FROM generate_series(1, 20000)",
            &[],
        )
        .await
        .expect("a string that fits")
        .get(0);
    assert_eq!(n, 2_019_999);
}
