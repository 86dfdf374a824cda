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

/// Connects once the server has a free connection slot again (it frees one when it
/// has seen a connection end), trying for up to 30 s.
async fn connect_when_free(server: &TestServer, what: &str) -> tokio_postgres::Client {
    for _ in 0..300 {
        if let Ok((c, conn)) = tokio_postgres::connect(&server.conn_str("sundial"), NoTls).await {
            tokio::spawn(conn);
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no connection within 30 s: {what}");
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
        // sqlparser's time doubles with each nested call (found by fuzzing).
        format!("SELECT {}1{}", "abs(".repeat(40), ")".repeat(40)),
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
async fn wide_select_lists_get_postgres_limit() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    // PostgreSQL's limit is 1,664 entries; DataFusion's planner compares each item
    // with every other one, so 100,000 of them planned for hours after a cancel.
    let at_limit = format!("SELECT {}", vec!["1"; 1664].join(","));
    let rows = text_rows(&client, &at_limit).await;
    assert_eq!(rows[0].len(), 1664);
    for sql in [
        format!("SELECT {}", vec!["1"; 100_000].join(",")),
        format!("SELECT * FROM (SELECT {}) s", vec!["1"; 1665].join(",")),
        format!("VALUES ({})", vec!["1"; 1665].join(",")),
    ] {
        let e = client.simple_query(&sql).await.err();
        assert_eq!(e.as_ref().and_then(code), Some("54011"), "{e:?}");
        let e = client.query(&sql, &[]).await.err();
        assert_eq!(e.as_ref().and_then(code), Some("54011"), "{e:?}");
    }
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

/// PostgreSQL 13 on times each statement of a Query message by itself, with the
/// setting the statements before it left; the timeout rolls back the message's
/// implicit transaction, its SET with it.
#[tokio::test]
async fn statement_timeout_set_earlier_in_the_same_message_stops_the_query() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    let e = client
        .simple_query(
            "SET statement_timeout = '300ms'; \
             SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b",
        )
        .await
        .err();
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");
    // The message ran as one transaction: the error undid its SET.
    assert_eq!(
        cells(text_rows(&client, "SHOW statement_timeout").await),
        vec![vec!["0"]]
    );
    // A later statement of the message is timed from its own start.
    let e = client
        .simple_query(
            "SELECT 1; SET statement_timeout = '300ms'; SELECT 2; \
             SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b",
        )
        .await
        .err();
    assert_eq!(e.as_ref().and_then(code), Some("57014"), "{e:?}");
    assert_eq!(cells(text_rows(&client, "SELECT 3").await), vec![vec!["3"]]);
    // A message that succeeds keeps its SET.
    client
        .simple_query("SET statement_timeout = '7s'; SELECT 4")
        .await
        .expect("set and select");
    assert_eq!(
        cells(text_rows(&client, "SHOW statement_timeout").await),
        vec![vec!["7s"]]
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

/// Joins are wrapped in DataFusion's `CooperativeExec`, so the task computing a
/// cross join yields every few batches and a cancel or timeout takes effect at once
/// (without it, an aggregate over a cross join ran on for seconds after the cancel:
/// BENCHMARKS.md, "CPU after a cancel").
#[tokio::test]
async fn joins_yield_so_a_canceled_statement_stops_computing() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    let plan = text_rows(
        &client,
        "EXPLAIN SELECT count(*) FROM generate_series(1, 10) a, generate_series(1, 10) b",
    )
    .await;
    let text: Vec<String> = plan.into_iter().flatten().flatten().collect();
    let physical = text.join("\n");
    let lines: Vec<&str> = physical.lines().map(str::trim).collect();
    let join = lines
        .iter()
        .position(|l| l.starts_with("CrossJoinExec"))
        .unwrap_or_else(|| panic!("no CrossJoinExec in {physical}"));
    assert!(
        join > 0 && lines[join - 1].starts_with("CooperativeExec"),
        "the join is not under a CooperativeExec: {physical}"
    );
    assert_eq!(
        cells(
            text_rows(
                &client,
                "SELECT count(*) FROM generate_series(1, 300) a, generate_series(1, 300) b"
            )
            .await
        ),
        vec![vec!["90000"]]
    );
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

/// Past `--max-connections` a startup gets FATAL 53300 (PostgreSQL's "too many
/// clients"); a cancel request is still served, and a closed connection frees its slot.
#[tokio::test]
async fn postgres_connections_past_the_limit_get_53300() {
    let server = TestServer::start_with_args(&["--max-connections", "2"], &[]);
    let first = server.connect("sundial").await;
    let second = server.connect("sundial").await;
    let err = match tokio_postgres::connect(&server.conn_str("sundial"), NoTls).await {
        Ok(_) => panic!("a third connection was accepted past max_connections 2"),
        Err(e) => e,
    };
    assert_eq!(code(&err), Some("53300"), "{err:?}");
    // A cancel request needs no slot.
    first
        .cancel_token()
        .cancel_query(NoTls)
        .await
        .expect("cancel request served at the limit");
    assert_eq!(cells(text_rows(&second, "SELECT 1").await), vec![vec!["1"]]);
    drop(first);
    // The slot comes back once the server has seen the close.
    let again = connect_when_free(&server, "a connection after one closed").await;
    assert_eq!(cells(text_rows(&again, "SELECT 2").await), vec![vec!["2"]]);
}

/// Sockets that never send a startup packet hold no place under the connection
/// limit (real logins get in beside them), and are closed after a few seconds.
#[tokio::test]
async fn silent_sockets_hold_no_connection_slot_and_are_cut_off() {
    use tokio::io::AsyncReadExt;
    let server = TestServer::start_with_args(&["--max-connections", "2"], &[]);
    let addr = server.pg_addr.clone();
    let mut silent = vec![];
    for _ in 0..20 {
        silent.push(
            tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect a silent socket"),
        );
    }
    let first = server.connect("sundial").await;
    let second = server.connect("sundial").await;
    assert_eq!(cells(text_rows(&first, "SELECT 1").await), vec![vec!["1"]]);
    assert_eq!(cells(text_rows(&second, "SELECT 2").await), vec![vec!["2"]]);
    // The limit still holds for logins.
    let err = match tokio_postgres::connect(&server.conn_str("sundial"), NoTls).await {
        Ok(_) => panic!("a third login was accepted past max_connections 2"),
        Err(e) => e,
    };
    assert_eq!(code(&err), Some("53300"), "{err:?}");
    // The server closes a silent socket: reading it ends (0 bytes), it never hangs.
    let mut buf = [0u8; 16];
    let n = silent[0].read(&mut buf).await.unwrap_or(0);
    assert_eq!(n, 0, "a silent socket got {n} bytes");
}

/// Past `--lp-max-connections` the HTTP port answers 503 with Retry-After, and a
/// connection idle for `--lp-idle-timeout` is closed, freeing its slot.
#[tokio::test]
async fn http_connections_past_the_limit_get_503_and_idle_ones_are_closed() {
    let server = TestServer::start_with_args(
        &["--lp-max-connections", "2", "--lp-idle-timeout", "1s"],
        &[],
    );
    let addr = server.http_addr.clone().expect("http port");
    let mut idle1 = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let _idle2 = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = reqwest::Client::new()
        .post(server.http_url("/write?db=lim"))
        .body("m v=1 1")
        .send()
        .await
        .expect("a refusal is an HTTP answer");
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    // The idle connections are closed by the server (read returns end of stream).
    assert_eq!(http_head(&mut idle1).await, "");
    assert!(
        write_accepted_soon(&server, "lim").await,
        "writes are accepted once idle connections are gone"
    );
}

/// When every HTTP slot is taken, connections idle for a second or more (here:
/// never sent anything) give theirs up to a new connection, which gets in instead
/// of a 503 for as long as `lp_idle_timeout` (300 s by default) would have kept them.
#[tokio::test]
async fn idle_http_connections_give_up_their_slots_when_slots_run_out() {
    let server = TestServer::start_with_args(&["--lp-max-connections", "2"], &[]);
    let addr = server.http_addr.clone().expect("http port");
    let mut idle1 = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let mut idle2 = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resp = reqwest::Client::new()
        .post(server.http_url("/write?db=evict"))
        .body("m v=1 1")
        .send()
        .await
        .expect("an answer");
    assert_eq!(resp.status().as_u16(), 204);
    for idle in [&mut idle1, &mut idle2] {
        assert_eq!(http_head(idle).await, "");
    }
}

/// A body that stops arriving part-way gets 408 after a short pause, not after the
/// whole body deadline, so its share of the body budget goes back to other writers.
#[tokio::test]
async fn a_stalled_request_body_gets_408_after_a_short_pause() {
    let server = TestServer::start();
    let addr = server.http_addr.clone().expect("http port");
    let mut sock = http_send(
        &addr,
        b"POST /write?db=stall HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nm v=1 1\n",
    )
    .await;
    let head = http_head(&mut sock).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(write_accepted_soon(&server, "stall").await);
}

/// A body that keeps coming a few bytes at a time (never pausing 5 s) gets 408 once
/// it falls under 500 bytes a second, not at the 60 s body deadline: a trickler
/// gives its share of the body budget back early.
#[tokio::test]
async fn a_trickling_request_body_gets_408_under_the_minimum_rate() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start();
    let addr = server.http_addr.clone().expect("http port");
    let sock = http_send(
        &addr,
        b"POST /write?db=trickle HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nm v=1 1\n",
    )
    .await;
    let (mut read, mut write) = sock.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if write.write_all(b"m v=1 1\n").await.is_err() {
                break;
            }
        }
    });
    let head = http_head(&mut read).await;
    trickle.abort();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

/// A body that declares 8 MB and sends 4 KB a second (above 500 bytes a second,
/// far under the 145 KB a second that would bring it in within the 60 s deadline)
/// gets 408 after the first 5 s, instead of holding its 8 MB share of the body
/// budget for the whole minute.
#[tokio::test]
async fn a_body_too_slow_to_arrive_in_time_gets_408_early() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start();
    let addr = server.http_addr.clone().expect("http port");
    let sock = http_send(
        &addr,
        b"POST /write?db=pace HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n",
    )
    .await;
    let (mut read, mut write) = sock.into_split();
    let piece = "m v=1 1\n".repeat(512);
    let sender = tokio::spawn(async move {
        for _ in 0..60 {
            if write.write_all(piece.as_bytes()).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let head = http_head(&mut read).await;
    sender.abort();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

/// A chunked body (no Content-Length) first takes 1 MiB of the body budget and more
/// as it arrives: one of 3 MiB is written whole, and while a slow chunked body is
/// still coming in another writer finds room.
#[tokio::test]
async fn a_chunked_body_takes_its_share_as_it_arrives() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start_with_args(&["--http-max-inflight-bytes", "4MiB"], &[]);
    let addr = server.http_addr.clone().expect("http port");
    let mut sock = http_send(
        &addr,
        b"POST /write?db=chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await;
    let mut n = 0i64;
    for _ in 0..100 {
        let lines: String = (0..2048)
            .map(|i| {
                n += 1;
                format!("m v={i} {n}000000000\n")
            })
            .collect();
        sock.write_all(format!("{:x}\r\n{lines}\r\n", lines.len()).as_bytes())
            .await
            .expect("a chunk");
    }
    sock.write_all(b"0\r\n\r\n").await.expect("last chunk");
    let head = http_head(&mut sock).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    let c = server.connect("chunks").await;
    let rows: i64 = c
        .query_one("SELECT count(*) FROM m", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, n);

    // A slow chunked body holds 1 MiB of the 4 MiB budget, not the 32 MiB body
    // limit (before: all of it, and every other writer waited for a 503).
    let mut slow = http_send(&addr, b"POST /write?db=chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nm v=1 1\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = reqwest::Client::new()
        .post(server.http_url("/write?db=chunks"))
        .body("m v=2 2")
        .send()
        .await
        .expect("an answer");
    assert_eq!(resp.status().as_u16(), 204);
    slow.write_all(b"0\r\n\r\n").await.expect("last chunk");
    let head = http_head(&mut slow).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
}

/// Whether a line-protocol write to `db` gets 204 within 100 tries 100 ms apart.
async fn write_accepted_soon(server: &TestServer, db: &str) -> bool {
    for _ in 0..100 {
        let r = reqwest::Client::new()
            .post(server.http_url(&format!("/write?db={db}")))
            .body("m v=1 1")
            .send()
            .await;
        if let Ok(r) = r
            && r.status().as_u16() == 204
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A client that sends its request headers a few bytes at a time (slowloris) is cut
/// off, well inside the idle timeout it keeps resetting, so its slot comes back.
#[tokio::test]
async fn http_headers_sent_a_byte_at_a_time_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start_with_args(
        &["--lp-max-connections", "1", "--lp-idle-timeout", "60s"],
        &[],
    );
    let addr = server.http_addr.clone().expect("http port");
    let mut slow = http_send(&addr, b"POST /write?db=slow HTTP/1.1\r\nHost: x\r\n").await;
    // Trickle a header a byte every 200 ms until the server closes the connection
    // (a hang guard of 150 bytes, 30 s, far past the server's header deadline).
    let mut cut = false;
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if slow.write_all(b"a").await.is_err() {
            cut = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(1), slow.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut = true;
                break;
            }
            Ok(Ok(_)) => {
                // an error answer (408) before the close
                cut = true;
                break;
            }
            Err(_) => {}
        }
    }
    assert!(cut, "a header trickled for 30 s kept its connection");
    assert!(
        write_accepted_soon(&server, "slow").await,
        "a write is accepted once the slow client is cut off"
    );
}

/// A client that goes away while its query computes takes the query with it: the
/// statement is canceled, so its connection (here the only one allowed) is freed
/// instead of waiting minutes for a result nobody reads.
#[tokio::test]
async fn a_query_stops_when_its_client_disconnects() {
    let server = TestServer::start_with_args(&["--max-connections", "1"], &[]);
    {
        let (client, conn) = tokio_postgres::connect(&server.conn_str("sundial"), NoTls)
            .await
            .expect("connect");
        let conn = tokio::spawn(conn);
        let long =
            "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";
        let running = tokio::spawn(async move { client.simple_query(long).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        // drop the client and its socket mid-query
        running.abort();
        conn.abort();
        let _ = running.await;
        let _ = conn.await;
    }
    let c = connect_when_free(&server, "the abandoned query gave its connection slot back").await;
    assert_eq!(cells(text_rows(&c, "SELECT 7").await), vec![vec!["7"]]);
}

/// The extended protocol streams a result: the first rows of a two-billion-row
/// series arrive without the server gathering the rest first (it used to collect the
/// whole result before sending a row), and closing the connection stops the query.
#[tokio::test]
async fn extended_protocol_streams_a_huge_result() {
    use futures::StreamExt;
    let server = TestServer::start();
    {
        let client = server.connect("sundial").await;
        let rows = client
            .query_raw(
                "SELECT g FROM generate_series(1, 2000000000) g",
                std::iter::empty::<i64>(),
            )
            .await
            .expect("extended-protocol query");
        futures::pin_mut!(rows);
        let mut first = vec![];
        while first.len() < 3 {
            let r = tokio::time::timeout(Duration::from_secs(60), rows.next())
                .await
                .expect("rows arrive within the safety timeout")
                .expect("a row")
                .expect("row ok");
            first.push(r.get::<_, i64>(0));
        }
        assert_eq!(first, vec![1, 2, 3]);
    }
    alive(&server).await;
}

/// A raw connection to the line-protocol port that has sent `bytes` (a request's
/// head, perhaps a first piece of its body).
async fn http_send(addr: &str, bytes: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    sock.write_all(bytes).await.expect("send");
    sock
}

/// Read one HTTP response's status line and headers from a raw socket.
async fn http_head(sock: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        // A hang guard far below the 60 s body deadline; a reset reads as the end.
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf))
            .await
            .expect("an answer within the safety timeout")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).to_string()
}

/// A body declared larger than the limit is refused with 413 before it is sent, and
/// the bytes all requests hold at once are bounded (`--http-max-inflight-bytes`): a
/// request that finds no room waits, then gets 503 with Retry-After, while the
/// request holding the room completes normally.
#[tokio::test]
async fn request_bodies_are_bounded_per_request_and_in_total() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start_with_args(
        &[
            "--http-max-body-size",
            "1MiB",
            "--http-max-inflight-bytes",
            "64KiB",
        ],
        &[],
    );
    let addr = server.http_addr.clone().expect("http port");
    let mut big = http_send(
        &addr,
        b"POST /write?db=b HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n",
    )
    .await;
    let head = http_head(&mut big).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // A request that declares no length holds the whole (smaller) budget while its
    // body comes in slowly (3,000 bytes every 2 s: never a pause long enough to be
    // cut off, and above the pace that fills its 64 KiB share within the 60 s
    // deadline, 1.2 KB a second).
    let mut slow = http_send(&addr, b"POST /write?db=b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nm v=1 1\n\r\n").await;
    let piece = format!("bb8\r\n{}\r\n", "m v=1 1\n".repeat(375));
    let trickle = tokio::spawn(async move {
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            slow.write_all(piece.as_bytes()).await.unwrap();
        }
        slow
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = reqwest::Client::new()
        .post(server.http_url("/write?db=b"))
        .body("m v=2 2")
        .send()
        .await
        .expect("an answer");
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let mut slow = trickle.await.expect("trickle");
    slow.write_all(b"0\r\n\r\n").await.unwrap();
    let head = http_head(&mut slow).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
}

/// Database names from the network are data: one with `/`, one called `..` and one
/// that is a prefix of the other each keep their files in a directory of their own
/// under `data/`, and dropping one leaves the others' rows.
#[tokio::test]
async fn database_names_never_become_paths() {
    let server = TestServer::start();
    let admin = server.connect("sundial").await;
    let names = ["a", "a/b", "..", "x\u{1}y"];
    for (i, name) in names.iter().enumerate() {
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        admin
            .batch_execute(&format!("CREATE DATABASE {quoted}"))
            .await
            .expect("create database");
        let c = server.connect(name).await;
        c.batch_execute(&format!(
            "CREATE TABLE t (time timestamptz NOT NULL, v int) WITH (tsdb.hypertable, tsdb.partition_column = 'time');
             INSERT INTO t VALUES ('2024-01-01', {i}), ('2024-01-02', {i});
             SELECT sundial_flush();"
        ))
        .await
        .expect("write and flush");
    }
    let data = server.data_dir.join("data");
    let mut dirs: Vec<String> = std::fs::read_dir(&data)
        .expect("data dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    for name in ["..", "a/b", "x\u{1}y"] {
        assert!(
            !dirs.iter().any(|d| d == name),
            "{name:?} used as a path: {dirs:?}"
        );
    }
    assert!(dirs.contains(&"a".to_string()), "{dirs:?}");
    assert!(dirs.contains(&"a%2Fb".to_string()), "{dirs:?}");
    assert!(dirs.contains(&"%2E%2E".to_string()), "{dirs:?}");
    // Nothing was written beside data/.
    assert!(!server.data_dir.join("t").exists());
    admin
        .batch_execute("DROP DATABASE a")
        .await
        .expect("drop a");
    for (i, name) in names.iter().enumerate().skip(1) {
        let c = server.connect(name).await;
        let rows = text_rows(&c, "SELECT count(*), min(v) FROM t").await;
        assert_eq!(
            cells(rows),
            vec![vec!["2".to_string(), i.to_string()]],
            "{name:?}"
        );
    }
}

/// Functions whose result a client sizes with a number or a pattern are checked
/// before they build it: a value over 1 GB is PostgreSQL's 54000, a batch of values
/// the statement's memory budget cannot hold is 53200 (a 2 GB `replace` took 7.7 GB
/// of RSS, and a batch of a hundred 40 MB `repeat`s panicked a string builder, which
/// the client saw as "0 rows"). Results that fit are still computed exactly.
#[tokio::test]
async fn functions_that_multiply_their_input_are_bounded() {
    let server = TestServer::start_with_args(&["--query-memory-limit", "512MiB"], &[]);
    let client = server.connect("sundial").await;
    for (sql, want) in [
        (
            "SELECT length(replace(repeat('x', 100000), 'x', repeat('y', 20000)))",
            "54000",
        ),
        (
            "SELECT length(regexp_replace(repeat('x', 100000), '', repeat('y', 20000), 'g'))",
            "54000",
        ),
        ("SELECT cardinality(range(1, 300000000))", "54000"),
        ("SELECT cardinality(array_repeat(1, 300000000))", "54000"),
        (
            "SELECT count(*) FROM (SELECT generate_series(1, 300000000) AS x) s",
            "54000",
        ),
        (
            "SELECT sum(length(repeat(x::text, 20000000))) FROM generate_series(1, 100) x",
            "53200",
        ),
        (
            "SELECT sum(length(replace(repeat('x', 100000), 'x', repeat(x::text, 2000)))) \
             FROM generate_series(1, 100) x",
            "53200",
        ),
    ] {
        let e = client.simple_query(sql).await.err();
        assert_eq!(e.as_ref().and_then(code), Some(want), "{sql}: {e:?}");
    }
    // A string over 2 GB panics arrow's string builder inside string_agg; the panic
    // must reach the client as an error (it used to end the rows: "0 rows", success).
    let e = client
        .simple_query(
            "SELECT length(string_agg(repeat('x', 10000000), '')) FROM generate_series(1, 300)",
        )
        .await
        .err();
    assert!(
        matches!(e.as_ref().and_then(code), Some("XX000" | "54000" | "53200")),
        "{e:?}"
    );
    // Bounds that are only upper bounds are measured before refusing.
    let rows = cells(
        text_rows(
            &client,
            "SELECT length(replace(repeat('ab', 1000000), 'a', 'xyz')), \
             length(regexp_replace(repeat('ab', 500000), 'b', 'cc', 'g')), \
             length(replace('abc', '', 'X')), \
             (SELECT count(*) FROM (SELECT generate_series('2020-01-01'::timestamp, \
              '2020-02-01'::timestamp, interval '1 hour')) s)",
        )
        .await,
    );
    assert_eq!(rows, vec![vec!["4000000", "1500000", "3", "745"]]);
    alive(&server).await;
}
