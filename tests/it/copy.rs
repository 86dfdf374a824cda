//! COPY over the wire: tokio-postgres `copy_in` / `copy_out` (extended protocol) and
//! psql's `\copy` (simple protocol), text and CSV, and the all-or-nothing rule for
//! malformed or aborted input.

use std::process::Command;

use bytes::Bytes;
use futures::{SinkExt, TryStreamExt};

use crate::harness::{TestServer, text_rows};

const CREATE: &str = "CREATE TABLE c (time timestamptz NOT NULL, dev text, v double precision, n bigint, ok boolean, note text) WITH (tsdb.hypertable, tsdb.chunk_interval='1 day')";

async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in::<_, Bytes>(sql).await?;
    futures::pin_mut!(sink);
    // Several messages, split mid-line, as real clients do.
    for part in data.as_bytes().chunks(7) {
        sink.send(Bytes::copy_from_slice(part)).await?;
    }
    sink.finish().await
}

async fn copy_out(client: &tokio_postgres::Client, sql: &str) -> String {
    let stream = client.copy_out(sql).await.expect("copy out");
    let parts: Vec<Bytes> = stream.try_collect().await.expect("copy data");
    String::from_utf8(parts.concat()).expect("utf8")
}

#[tokio::test]
async fn csv_in_and_out_round_trip() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client.batch_execute(CREATE).await.expect("create");
    let mut csv = String::from("time,dev,v,n,ok,note\n");
    for i in 0..5000 {
        csv.push_str(&format!(
            "2024-01-0{} {:02}:{:02}:00+00,d{},{}.5,{},{},\"q,\"\"{}\"\"\"\n",
            1 + i % 3,
            (i / 60) % 24,
            i % 60,
            i % 7,
            i,
            i * 3,
            if i % 2 == 0 { "t" } else { "f" },
            i
        ));
    }
    csv.push_str("2024-01-04 00:00:00+00,,,,,\n");
    let n = copy_in(
        &client,
        "COPY c FROM STDIN WITH (FORMAT csv, HEADER true)",
        &csv,
    )
    .await
    .expect("copy in");
    assert_eq!(n, 5001);
    let rows = text_rows(
        &client,
        "SELECT count(*), sum(n), count(v), count(note), sum(CASE WHEN ok THEN 1 ELSE 0 END) FROM c",
    )
    .await;
    let expect_n: i64 = (0..5000).map(|i| i * 3).sum();
    assert_eq!(
        rows[0],
        vec![
            Some("5001".into()),
            Some(expect_n.to_string()),
            Some("5000".into()),
            Some("5000".into()),
            Some("2500".into())
        ]
    );
    let note = text_rows(&client, "SELECT note FROM c WHERE n = 9").await;
    assert_eq!(note[0][0].as_deref(), Some("q,\"3\""));

    let out = copy_out(
        &client,
        "COPY (SELECT dev, v, ok, note FROM c WHERE n IN (0, 3) OR dev IS NULL ORDER BY time) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await;
    assert_eq!(
        out,
        "dev,v,ok,note\nd0,0.5,t,\"q,\"\"0\"\"\"\nd1,1.5,f,\"q,\"\"1\"\"\"\n,,,\n"
    );
    let text = copy_out(
        &client,
        "COPY (SELECT dev, v, note FROM c WHERE dev IS NULL) TO STDOUT",
    )
    .await;
    assert_eq!(text, "\\N\t\\N\t\\N\n");
}

#[tokio::test]
async fn text_format_escapes_and_column_lists() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client.batch_execute(CREATE).await.expect("create");
    let data = "2024-01-01 10:00:00+00\ttab\\there\t\\N\n2024-01-01 11:00:00+00\tback\\\\slash\tline\\nbreak\n\\.\n";
    let n = copy_in(&client, "COPY c (time, dev, note) FROM STDIN", data)
        .await
        .expect("copy in");
    assert_eq!(n, 2);
    let rows = text_rows(&client, "SELECT dev, note, v FROM c ORDER BY time").await;
    assert_eq!(
        rows,
        vec![
            vec![Some("tab\there".into()), None, None],
            vec![Some("back\\slash".into()), Some("line\nbreak".into()), None],
        ]
    );
    let out = copy_out(&client, "COPY c (dev, note) TO STDOUT").await;
    assert_eq!(out, "tab\\there\t\\N\nback\\\\slash\tline\\nbreak\n");
}

#[tokio::test]
async fn malformed_rows_write_nothing_and_name_the_line() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client.batch_execute(CREATE).await.expect("create");
    let cases = [
        (
            "2024-01-01 10:00:00+00,a,1,1,t,x\n2024-01-01 11:00:00+00,b,oops,2,t,y\n",
            "line 2",
        ),
        (
            "2024-01-01 10:00:00+00,a,1,1,t,x\n2024-01-01 11:00:00+00,b\n",
            "line 2",
        ),
        ("2024-01-01 10:00:00+00,a,1,1,t,x,extra\n", "line 1"),
        (
            "2024-01-01 10:00:00+00,a,1,1,t,\"unterminated\n",
            "unterminated",
        ),
    ];
    for (data, want) in cases {
        let err = copy_in(&client, "COPY c FROM STDIN (FORMAT csv)", data)
            .await
            .expect_err("malformed COPY must fail");
        let db = err.as_db_error().expect("server error");
        assert!(
            db.message().contains(want),
            "message {:?} should contain {want:?}",
            db.message()
        );
        assert!(
            db.code().code().starts_with("22"),
            "code {}",
            db.code().code()
        );
    }
    let rows = text_rows(&client, "SELECT count(*) FROM c").await;
    assert_eq!(rows[0][0].as_deref(), Some("0"), "a failed COPY wrote rows");
    // The connection is still usable.
    assert_eq!(
        text_rows(&client, "SELECT 1").await[0][0].as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn aborted_copy_writes_nothing() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client.batch_execute(CREATE).await.expect("create");
    {
        let sink = client
            .copy_in::<_, Bytes>("COPY c FROM STDIN (FORMAT csv)")
            .await
            .expect("copy in");
        futures::pin_mut!(sink);
        sink.send(Bytes::from_static(b"2024-01-01 10:00:00+00,a,1,1,t,x\n"))
            .await
            .expect("send");
        // Dropped without finish(): the client sends CopyFail.
    }
    let rows = text_rows(&client, "SELECT count(*) FROM c").await;
    assert_eq!(rows[0][0].as_deref(), Some("0"));

    // A client that disconnects mid-COPY.
    let other = srv.connect("sundial").await;
    let sink = other
        .copy_in::<_, Bytes>("COPY c FROM STDIN (FORMAT csv)")
        .await
        .expect("copy in");
    futures::pin_mut!(sink);
    sink.send(Bytes::from_static(b"2024-01-01 10:00:00+00,a,1,1,t,x\n"))
        .await
        .expect("send");
    drop(other);
    let rows = text_rows(&client, "SELECT count(*) FROM c").await;
    assert_eq!(rows[0][0].as_deref(), Some("0"));
}

#[tokio::test]
async fn psql_backslash_copy_both_ways() {
    let srv = TestServer::start();
    let client = srv.connect("sundial").await;
    client.batch_execute(CREATE).await.expect("create");
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("in.csv");
    std::fs::write(
        &input,
        "time,dev,v,n,ok,note\n2024-01-01 10:00:00+00,a,1.5,1,t,x\n2024-01-02 10:00:00+00,b,,2,f,\n",
    )
    .expect("write csv");
    let output = dir.path().join("out.csv");
    let (host, port) = srv.pg_addr.rsplit_once(':').expect("addr");
    let script = format!(
        "\\copy c from '{}' with (format csv, header)\n\\copy (select dev, v, n, ok from c order by time) to '{}' with (format csv)\n",
        input.display(),
        output.display()
    );
    let out = Command::new("psql")
        .args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            host,
            "-p",
            port,
            "-U",
            "sundial",
            "-d",
            "sundial",
        ])
        .arg("-c")
        .arg(script.lines().next().unwrap_or_default())
        .arg("-c")
        .arg(script.lines().nth(1).unwrap_or_default())
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("COPY 2"));
    let written = std::fs::read_to_string(&output).expect("read output");
    assert_eq!(written, "a,1.5,1,t\nb,,2,f\n");
}

/// Columns a COPY leaves out take their defaults, as PostgreSQL fills them: a
/// serial's next values (one per row, going on after INSERTs), constants; a NOT
/// NULL column without a default is refused with 23502 and nothing is written.
#[tokio::test]
async fn copy_fills_defaults_of_the_columns_it_leaves_out() {
    let server = TestServer::start();
    let client = server.connect("sundial").await;
    client
        .batch_execute(
            "CREATE TABLE cd (id bigserial PRIMARY KEY, name text NOT NULL, kind text DEFAULT 'meter', n int NOT NULL DEFAULT 0)",
        )
        .await
        .expect("create");
    client
        .batch_execute("INSERT INTO cd (name) VALUES ('first')")
        .await
        .expect("insert");
    let n = copy_in(&client, "COPY cd (name) FROM STDIN", "a\nb\nc\n")
        .await
        .expect("copy");
    assert_eq!(n, 3);
    let rows = text_rows(&client, "SELECT id, name, kind, n FROM cd ORDER BY id").await;
    let want: Vec<Vec<Option<String>>> = [
        ["1", "first", "meter", "0"],
        ["2", "a", "meter", "0"],
        ["3", "b", "meter", "0"],
        ["4", "c", "meter", "0"],
    ]
    .iter()
    .map(|r| r.iter().map(|s| Some(s.to_string())).collect())
    .collect();
    assert_eq!(rows, want);
    client
        .batch_execute("CREATE TABLE cd2 (id int, name text NOT NULL)")
        .await
        .expect("create");
    let err = copy_in(&client, "COPY cd2 (id) FROM STDIN", "1\n")
        .await
        .expect_err("NOT NULL without a default");
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("23502"),
        "{err:?}"
    );
    let rows = text_rows(&client, "SELECT count(*) FROM cd2").await;
    assert_eq!(rows, vec![vec![Some("0".to_string())]]);
}
